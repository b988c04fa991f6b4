import math

import pytest

from tiletune.construct import constructions
from tiletune.errors import TiletuneError
from tiletune.measure import FunctionMeasurer
from tiletune.schedules import make_space
from tiletune.space import Space
from tiletune.strategies import TuneContext, create, registry
from tiletune.strategies.roller import Roller
from tiletune.tune import tune
from tiletune.workloads import parse

from .test_gensor import SHAPES, cpu


def make(spec, **opts):
    wl = parse(spec)
    sp = Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    return wl, sp, Roller(sp, seed=0, context=TuneContext(workload=wl, hardware=cpu()), **opts)


def test_registered_constructive():
    for name in ("roller", "gensor"):
        assert registry()[name].constructive


@pytest.mark.parametrize("spec", SHAPES)
def test_constructed_configs_are_legal_and_ranked(spec):
    wl, sp, r = make(spec)
    ranked = r.construct()
    assert ranked and all(sp.is_legal(c) for _, c in ranked)
    assert [t for t, _ in ranked] == sorted(t for t, _ in ranked)
    assert len({c for _, c in ranked}) == len(ranked)


def test_aligned_register_tile_and_capacity():
    wl, sp, r = make("gemm:M=64,N=48,K=32")
    m = r.model
    e = r.tree.initial()
    assert e.tiles[m.inner][0] == 8  # one AVX2 vector along n
    leaf = r.tree.greedy(e)
    assert m.fits(leaf, 0)
    assert not r.tree.enlargements(leaf)  # greedy stops only when nothing fits or reuses
    # scores are ordered and positive
    scores = [s for s, _ in r.tree.enlargements(e)]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    t, best = r.construct()[0]
    d = sp.to_dict(best)
    assert d["tile_n"][-1] % 8 == 0  # vectorised axis aligned to the SIMD width


def test_prime_extents_fall_back_to_unaligned_divisors():
    wl, sp, r = make("gemm:M=97,N=89,K=101")
    assert r.tree.initial().tiles[r.model.inner][0] == 1
    assert all(sp.is_legal(c) for _, c in r.construct())


def test_topk_and_stop():
    wl, sp, r = make("gemm:M=64,N=48,K=32", k=1, after_topk="stop", branch=3)
    first = r.ask(8)
    assert len(first) == 1 and first[0] == r.construct()[0][1]
    assert r.ask(8) == []
    with pytest.raises(TiletuneError):
        make("gemm:M=8,N=8,K=8", branch=0)


def test_tune_loop_runs_to_exhaustion_within_budget():
    wl, sp, _ = make("conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=2,pad=1")
    strat = create("roller", sp, context=TuneContext(workload=wl, hardware=cpu()), options={"branch": "3"})
    m = FunctionMeasurer(lambda c: 1e-3)
    run = tune(space=sp, strategy=strat, measurer=m, workload=wl.key, flops=wl.flops, trials=40, batch_size=4)
    assert run.trials == len(m.calls) == len(strat.construct()) <= 40
    assert run.stopped in ("exhausted", "trials")


def test_on_a_gpu_roller_follows_the_papers_parallelism_and_warp_rules():
    """On a GPU target: scalar thread tiles, at least as many thread blocks as SMs, a warp of threads per SM
    and blocks of whole warps where the extents allow them (GEMM 1024^3 on an H100's 132 SMs took 32 blocks of
    256 threads with 32-wide thread tiles before, from the CPU's vector alignment)."""
    from tiletune.schedules.cuda import tile_info

    target = {"kind": "cuda", "arch": "sm_90"}
    for spec, whole_warps in (("gemm:M=1024,N=1024,K=1024", True),
                              ("conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1", False)):
        wl = parse(spec)
        space = make_space(wl, None, target)
        tops = constructions("roller", space, workload=wl, target=target, k=3)
        assert tops
        for c in tops:
            d = space.to_dict(c)
            blocks = math.prod(d[k.name][0] for k in space.knobs if k.name.startswith("tile_") and k.kind == "S")
            info = tile_info(wl, space, c)
            assert blocks >= 132 and info.threads * blocks >= 132 * 32
            assert info.threads % 32 == 0 or not whole_warps
