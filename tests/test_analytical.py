"""The seven TVM-AF-DS analytical features: count, finiteness, reactions, exact hand examples, CPU and GPU."""
import math
from dataclasses import replace

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.features.analytical import (FEATURE_NAMES, AnalyticalExtractor, analytical_features,
                                          bank_conflict_degree, split_levels, wave_efficiency)
from tiletune.hardware import detect_cpu, preset
from tiletune.space import Config, Space
from tiletune.workloads import parse
from tiletune.workloads.access import tensor_accesses

CPU = detect_cpu(measure_bandwidth=False, cache=False)
GPU = preset("h100")
IDX = {n: i for i, n in enumerate(FEATURE_NAMES)}


def gemm(M=64, N=64, K=64):
    wl = parse(f"gemm:M={M},N={N},K={K}")
    return wl, Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16), "pack": (0, 1)})


def feats(wl, space, m, n, k, unroll=0, pack=0, hw=CPU, target=None):
    return analytical_features(wl, space, Config((m, n, k, unroll, pack)), hw, target)


@pytest.mark.parametrize("spec", ["gemm:M=64,N=32,K=16", "batch_matmul:B=2,M=16,N=16,K=8", "gemv:M=64,K=32",
                                  "conv2d:N=1,C=4,H=8,W=8,K=8,R=3,S=3,stride=1,pad=1",
                                  "depthwise_conv2d:N=1,C=8,H=8,W=8,R=3,S=3,stride=2,pad=1",
                                  "avgpool2d:N=1,C=4,H=8,W=8,kernel=2,stride=2"])
@pytest.mark.parametrize("hw,target", [(CPU, {"kind": "llvm"}), (GPU, {"kind": "cuda", "arch": "sm_90"})])
def test_seven_finite_features(spec, hw, target):
    wl = parse(spec)
    space = Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16)})
    rng = np.random.default_rng(0)
    for _ in range(20):
        f = analytical_features(wl, space, space.sample(rng), hw, target)
        assert f.shape == (7,) and np.isfinite(f).all() and (f >= 0).all()
    ex = AnalyticalExtractor(space, wl, hw, target)
    X = ex.extract([space.sample(rng) for _ in range(5)])
    assert X.shape == (5, 7) and X.dtype == np.float32 and ex.dim == 7 and len(FEATURE_NAMES) == 7


def test_levels_read_by_role():
    wl, space = gemm()
    lv = split_levels(space, Config(((2, 4, 2, 4), (1, 2, 4, 8), (8, 8), 0, 1)), wl.axes_no_tvm())
    assert lv.s0 == {"m": 2, "n": 1} and lv.s1 == {"m": 4, "n": 2} and lv.s2 == {"m": 2, "n": 4}
    assert lv.s3 == {"m": 4, "n": 8} and lv.r0 == {"k": 8} and lv.r1 == {"k": 8} and lv.choices["pack"] == 1


def test_wave_efficiency_formula_exact():
    assert wave_efficiency(8, 4) == 1.0
    assert wave_efficiency(10, 4) == pytest.approx((10 / 4) / 3)
    assert wave_efficiency(1, 2) == 0.5
    assert wave_efficiency(133, 132) == pytest.approx((133 / 132) / 2)
    wl, space = gemm()
    two = replace(CPU, cores=2)
    # S0 = 3? 64 has no factor 3: use m0 * n0 = 1 * 1 (one task on 2 cores) and 2 * 2 (4 tasks)
    f1 = feats(wl, space, (1, 4, 2, 8), (1, 2, 4, 8), (8, 8), hw=two)
    f4 = feats(wl, space, (2, 2, 2, 8), (2, 1, 4, 8), (8, 8), hw=two)
    assert f1[IDX["Wave_Efficiency"]] == 0.5 and f4[IDX["Wave_Efficiency"]] == 1.0
    three = replace(CPU, cores=3)
    f = feats(wl, space, (2, 4, 1, 8), (2, 1, 4, 8), (8, 8), hw=three)  # 4 tasks on 3 cores
    assert f[IDX["Wave_Efficiency"]] == pytest.approx((4 / 3) / 2)
    # GPU: m = 16 x 16 = 256 blocks on 132 SMs
    g = feats(wl, space, (16, 1, 4, 1), (16, 1, 4, 1), (8, 8), hw=GPU, target={"kind": "cuda"})
    assert g[IDX["Wave_Efficiency"]] == pytest.approx((256 / 132) / 2)


def test_bigger_register_tile_raises_ilp_and_reuse_cpu():
    wl, space = gemm()
    small = feats(wl, space, (2, 8, 4, 1), (2, 1, 4, 8), (8, 8))  # register tile 1 x 8
    big = feats(wl, space, (2, 2, 4, 4), (2, 1, 4, 8), (8, 8))  # register tile 4 x 8
    assert big[IDX["ILP"]] > small[IDX["ILP"]]
    assert big[IDX["Reg_Reuse_Factor"]] > small[IDX["Reg_Reuse_Factor"]]
    assert big[IDX["OI_Shared_Mem"]] > small[IDX["OI_Shared_Mem"]]
    # exact: 4 x 8 tile with 8 lanes -> 4 accumulator vectors; 1 x 8 -> 1
    if CPU.simd_lanes == 8:
        assert small[IDX["ILP"]] == 1 and big[IDX["ILP"]] == 4
    # a tile larger than the vector register file spills: ILP falls again
    huge = feats(wl, space, (1, 1, 1, 64), (2, 1, 1, 32), (8, 8))
    assert huge[IDX["ILP"]] < (64 * math.ceil(32 / CPU.simd_lanes))


def test_bigger_register_tile_raises_ilp_and_reuse_gpu():
    wl, space = gemm(256, 256, 64)
    t = {"kind": "cuda"}
    small = feats(wl, space, (16, 1, 16, 1), (16, 1, 16, 1), (8, 8), hw=GPU, target=t)
    big = feats(wl, space, (4, 1, 16, 4), (4, 1, 16, 4), (8, 8), hw=GPU, target=t)
    assert big[IDX["ILP"]] == 16 and small[IDX["ILP"]] == 1
    assert big[IDX["Reg_Reuse_Factor"]] == pytest.approx(2 * 16 / 8)  # 2ab / (a + b) with a = b = 4
    assert small[IDX["Reg_Reuse_Factor"]] == pytest.approx(1.0)
    assert big[IDX["OI_Global_Mem"]] > small[IDX["OI_Global_Mem"]]  # 64x64 block tile vs 16x16


def test_gpu_occupancy_hand_example():
    wl, space = gemm(256, 256, 64)
    # 16 x 16 = 256 threads (8 warps), 1 accumulator, regs = 1 + 2 + 10 -> 16 allocated;
    # smem = (16 x 8 + 8 x 16) x 4 B = 1 KiB; blocks/SM = min(32, 2048/256 = 8, 65536/(16*256) = 16, ...) = 8
    f = feats(wl, space, (16, 1, 16, 1), (16, 1, 16, 1), (8, 8), hw=GPU, target={"kind": "cuda"})
    assert f[IDX["WLP"]] == 64
    # grid: 256 blocks on 132 SMs -> at most ceil(256/132) = 2 blocks per SM are there to run
    assert f[IDX["Estimated_Occupancy"]] == pytest.approx(2 * 8 / 64)
    # not launchable (2048 threads per block): no warps
    g = feats(wl, space, (4, 1, 64, 1), (8, 1, 32, 1), (8, 8), hw=GPU, target={"kind": "cuda"})
    assert g[IDX["WLP"]] == 0 and g[IDX["Estimated_Occupancy"]] == 0


def test_bank_conflict_degree_from_strides():
    wl, space = gemm(256, 256, 64)
    acc = {t.name: t for t in tensor_accesses(wl)}
    axes = wl.axes_no_tvm()

    def degree(name, m, n):
        lv = split_levels(space, Config((m, n, (8, 8), 0, 0)), axes)
        block = {"m": m[1] * m[2] * m[3], "n": n[1] * n[2] * n[3], "k": 8}
        return bank_conflict_degree(acc[name], axes, lv, block)

    # 32 threads along n, one column each: B[k, n] read at consecutive words -> no conflict
    assert degree("B", (256, 1, 1, 1), (8, 1, 32, 1)) == 1
    # each thread owns 2 columns: stride 2 words -> 2-way conflict; 4 columns -> 4-way
    assert degree("B", (256, 1, 1, 1), (4, 1, 32, 2)) == 2
    assert degree("B", (256, 1, 1, 1), (2, 1, 32, 4)) == 4
    # A[m, k] does not depend on n: the warp reads one word (broadcast)
    assert degree("A", (256, 1, 1, 1), (8, 1, 32, 1)) == 1
    # threads along m read A rows k-contiguous with row stride 8 words: 4 rows share a bank -> 8-way
    assert degree("A", (8, 1, 32, 1), (256, 1, 1, 1)) == 8


def test_cpu_gather_and_pack():
    wl, space = gemm()
    base = feats(wl, space, (2, 2, 4, 4), (2, 1, 4, 8), (8, 8), pack=0)
    packed = feats(wl, space, (2, 2, 4, 4), (2, 1, 4, 8), (8, 8), pack=1)
    assert packed[IDX["OI_Global_Mem"]] >= base[IDX["OI_Global_Mem"]]
    # vectorizing along n with B[k, n] contiguous vs a layout that is strided (the transpose workload)
    wl2 = parse("gemv:M=64,K=64")
    sp2 = Space.from_axes(wl2.axes_no_tvm(), levels=(4, 2))
    f = analytical_features(wl2, sp2, Config(((2, 1, 4, 8), (8, 8))), CPU)
    # y[m] += A[m, k] x[k] vectorized along m: A is strided along m (stride K) -> one load per element
    # (a gather), while GEMM's B[k, n] is contiguous along the vectorized n: one load per vector. So
    # transactions per element (Reg_Reuse / OI_Shared) are higher for the gather.
    g = feats(wl, space, (2, 1, 4, 8), (2, 1, 4, 8), (8, 8))
    ratio = lambda v: v[IDX["Reg_Reuse_Factor"]] / v[IDX["OI_Shared_Mem"]]
    assert ratio(f) > ratio(g)
    if CPU.simd_lanes == 8:  # gemv: A 8 gathers + x 1 broadcast per k step, acc load+store per tile
        # 512 register tiles, 64 {S3 x R1} tiles
        assert f[IDX["OI_Shared_Mem"]] == pytest.approx(2 * 64 * 64 / (512 * 9 + 2 * 64))


def test_l1_capacity_changes_global_traffic():
    wl, space = gemm(256, 256, 256)
    small_l1 = replace(CPU, memory=tuple(replace(m, size_bytes=4096) if m.name == "L1" else m for m in CPU.memory))
    cfg = ((4, 2, 4, 8), (4, 2, 2, 16), (16, 16))
    assert feats(wl, space, *cfg, hw=small_l1)[0] < feats(wl, space, *cfg)[0]


def test_target_and_hardware_kinds():
    wl, space = gemm()
    cfg = Config(((2, 2, 4, 4), (2, 1, 4, 8), (8, 8), 0, 0))
    with pytest.raises(TiletuneError):
        analytical_features(wl, space, cfg, CPU, {"kind": "cuda"})
    with pytest.raises(TiletuneError):
        analytical_features(wl, space, cfg, GPU, {"kind": "llvm"})
    cpu = analytical_features(wl, space, cfg, CPU, {"kind": "llvm"})
    gpu = analytical_features(wl, space, cfg, GPU, {"kind": "cuda"})
    assert not np.allclose(cpu, gpu)
    with pytest.raises(TiletuneError):
        AnalyticalExtractor(space, None, CPU)
    ex = AnalyticalExtractor(space, wl, None, {"kind": "cuda", "arch": "sm_80"})
    assert ex.hardware.name.startswith("NVIDIA A100")
    ex.extract([cfg, cfg])
    assert ex.stats["computed"] == 1 and ex.stats["cache_hits"] == 1
