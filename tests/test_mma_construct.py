"""Gensor, Roller and the seven analytical features on the tensor-core template's space (issue 37): constructions
without measurement that the space allows and that compile, Roller's rTile rules, the kernel model's features, and
every search strategy on such a space (their constructive starts and the analytic prior)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tiletune.construct import constructions
from tiletune.analytic.mma import MmaModel
from tiletune.construct.mma import MmaGensorWalk, MmaRollerTree
from tiletune.features.analytical import FEATURE_NAMES, AnalyticalExtractor
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.schedules import build, make_space
from tiletune.schedules.cuda import cuda_source
from tiletune.session import RunSpec, run
from tiletune.workloads import parse

SM90 = {"kind": "cuda", "arch": "sm_90"}
SHAPES = ["gemm:M=2048,N=2048,K=1024,dtype=float16",
          "gemm:M=96,N=1000,K=200,dtype=bfloat16,out_dtype=float32",       # ragged: padded to the tiles
          "batch_matmul:B=12,M=128,N=64,K=128,dtype=float16",
          "conv2d:N=1,C=64,H=30,W=30,K=96,R=3,S=3,pad=1,layout=NHWC,dtype=bfloat16"]


def _space(spec: str):
    wl = parse(spec)
    return wl, make_space(wl, None, SM90)


@pytest.mark.parametrize("spec", SHAPES)
def test_constructions_are_allowed_fast_and_rank_well(spec):
    wl, space = _space(spec)
    model = MmaModel(space, wl, None, SM90)
    t0 = time.perf_counter()
    tops = {m: constructions(m, space, workload=wl, target=SM90, k=4) for m in ("gensor", "roller", "construct")}
    assert time.perf_counter() - t0 < 10
    for method, cs in tops.items():
        assert cs and all(space.allows(c) and space.is_legal(c) for c in cs), method
    rng = np.random.default_rng(1)
    sampled = [space.sample(rng) for _ in range(80)]
    times = sorted(model.config_time(c) for c in sampled)
    assert model.config_time(tops["gensor"][0]) <= times[len(times) // 2]
    # Roller double-buffers (2 stages): against random configurations of that depth
    two = sorted(model.config_time(c) for c in sampled if space.to_dict(c)["stages"] == 2)
    assert model.config_time(tops["roller"][0]) <= two[len(two) // 2]
    assert tops["construct"][:2] == [tops["gensor"][0], tops["roller"][0]] or tops["gensor"][0] == tops["roller"][0]


def test_roller_follows_its_rtile_rules():
    wl, space = _space(SHAPES[0])
    model = MmaModel(space, wl, None, SM90)
    leaves = MmaRollerTree(space, model).construct()
    assert len(leaves) > 3
    for _, c in leaves:
        d = space.to_dict(c)
        assert d["warp_m"] % 16 == 0 and d["block_m"] % d["warp_m"] == 0 and d["block_n"] % d["warp_n"] == 0
        assert d["stages"] == 2 and d["vector"] == 8 and d["chunk_k"] == 32
        blocks = (2048 // d["block_m"]) * (2048 // d["block_n"])
        assert blocks >= model.hw.cores or (d["block_m"], d["block_n"]) == (d["warp_m"], d["warp_n"])


def test_gensor_walks_differ_by_seed_and_grow_the_tiles():
    wl, space = _space(SHAPES[0])
    model = MmaModel(space, wl, None, SM90)
    a = MmaGensorWalk(space, model, np.random.default_rng(0)).pool(2)
    b = MmaGensorWalk(space, model, np.random.default_rng(7)).pool(2)
    assert {c for _, c in a} != {c for _, c in b}
    best = space.to_dict(a[0][1])
    assert best["block_m"] * best["block_n"] > 16 * 16  # a large GEMM is not built from the smallest tiles
    assert [t for t, _ in a] == sorted(t for t, _ in a)


def test_model_sees_parallelism_latency_and_padding():
    wl, space = _space(SHAPES[0])
    m = MmaModel(space, wl, None, SM90)
    base = {"block_m": 128, "block_n": 128, "warp_m": 64, "warp_n": 64, "chunk_k": 32, "stages": 3, "vector": 8}
    assert m.time(dict(base, stages=2)) >= m.time(base)  # a shallower pipeline hides less latency
    small = parse("gemm:M=100,N=100,K=1024,dtype=float16")
    sm = MmaModel(make_space(small, None, SM90), small, None, SM90)
    # 100 x 100 in 128 x 128 tiles pads to 1.64x the work and uses one SM: smaller tiles are faster
    assert sm.time(dict(base)) > sm.time(dict(base, block_m=32, block_n=32, warp_m=32, warp_n=32))


def test_analytical_features_of_tensor_core_configs():
    wl, space = _space(SHAPES[0])
    ex = AnalyticalExtractor(space, wl, None, SM90)
    small = space.from_dict({"block_m": 32, "block_n": 32, "warp_m": 16, "warp_n": 16, "chunk_k": 32, "stages": 2,
                              "vector": 8})
    big = space.from_dict({"block_m": 128, "block_n": 128, "warp_m": 64, "warp_n": 64, "chunk_k": 32, "stages": 2,
                            "vector": 8})
    fs, fb = ex.raw(small), ex.raw(big)
    assert fs.shape == (len(FEATURE_NAMES),) and np.isfinite(fs).all() and np.isfinite(fb).all()
    names = list(FEATURE_NAMES)
    for f in ("OI_Global_Mem", "OI_Shared_Mem", "Reg_Reuse_Factor", "ILP"):
        assert fb[names.index(f)] > fs[names.index(f)], f  # larger tiles reuse more
    assert 0 < fb[names.index("Wave_Efficiency")] <= 1


@pytest.mark.parametrize("strategy", ["gensor", "roller", "evo", "xgb", "dgd", "dgd-af", "gbfs", "na2c"])
def test_strategies_search_tensor_core_spaces(strategy):
    """Each strategy on a tensor-core space, measured by the kernel's analytic model: the starts come from the
    constructions, evo's prior from the model, the learned models' features are the seven analytical ones."""
    wl, space = _space(SHAPES[1])
    model = MmaModel(space, wl, None, SM90)
    r = run(RunSpec(workload=wl, strategy=strategy, trials=10, target=SM90),
            measurer=FunctionMeasurer(lambda c: model.config_time(c)))
    assert r.trials == 10 and r.best is not None


def test_constructed_tensor_core_kernels_compile():
    wl, space = _space(SHAPES[1])
    for method in ("gensor", "roller"):
        c = constructions(method, space, workload=wl, target=SM90, k=1)[0]
        assert "mma" in cuda_source(build(wl, space, c, SM90))
