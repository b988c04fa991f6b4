"""The CUDA template: space sizes, limits, loop structure and CUDA codegen for every workload (no GPU needed);
running on a GPU is tested only where this machine has one."""
import math

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.schedules import cuda, make_space
from tiletune.schedules.cpu import InvalidConfig
from tiletune.space import SplitKnob
from tiletune.workloads import parse

pytestmark = pytest.mark.tvm

SM90 = {"kind": "cuda", "arch": "sm_90"}

WORKLOADS = [
    "gemm:M=64,N=48,K=32",
    "batch_matmul:B=2,M=16,N=32,K=16",
    "gemv:M=128,K=64",
    "conv2d:N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1",
    "conv2d:N=1,C=4,H=9,W=9,K=8,R=3,S=3,stride=2,dilation=1",
    "depthwise_conv2d:N=1,C=8,H=12,W=12,R=3,S=3,pad=1",
    "avgpool2d:N=1,C=8,H=12,W=12,kernel=3,stride=2,pad=1",
]


def factor_product(space):
    return math.prod(len(k) for k in space.knobs if isinstance(k, SplitKnob))


@pytest.mark.parametrize("n,size", [(512, 484_000), (1024, 899_756), (2048, 1_589_952)])
def test_gemm_space_sizes_match_the_paper(n, size):
    wl = parse(f"gemm:M={n},N={n},K={n}")
    space = make_space(wl, (4, 2), SM90)
    assert factor_product(space) == size
    assert space.size == size * len(cuda.UNROLL_CHOICES)
    assert [k.name for k in space.knobs] == ["tile_m", "tile_n", "tile_k", "unroll"]


def test_space_needs_a_thread_level():
    with pytest.raises(TiletuneError, match="at least 2 levels"):
        cuda.make_space(parse("gemm:M=8,N=8,K=8"), (1, 2))


def test_limits_from_presets():
    h100 = cuda.limits_for(SM90)
    assert (h100.max_threads, h100.max_smem, h100.max_regs) == (1024, 48 * 1024, 255)
    assert "H100" in h100.source
    # an explicit preset opts into its larger (dynamic) shared-memory limit
    assert cuda.limits_for({"kind": "cuda", "arch": "sm_90", "hardware": "h100"}).max_smem == 227 * 1024
    assert cuda.limits_for({"kind": "cuda", "arch": "sm_61"}).max_smem == 48 * 1024  # Titan Xp
    unknown = cuda.limits_for({"kind": "cuda", "arch": "sm_75"})
    assert unknown.max_smem == 48 * 1024 and unknown.source.startswith("default")


def _cfg(space, **kw):
    d = {"unroll": 0}
    d.update(kw)
    return space.from_dict(d)


def test_invalid_configurations_are_rejected_before_building():
    wl = parse("gemm:M=1024,N=1024,K=1024")
    sp = cuda.make_space(wl)
    ok = _cfg(sp, tile_m=[16, 2, 8, 4], tile_n=[16, 1, 16, 4], tile_k=[128, 8])
    info = cuda.check(wl, sp, ok, SM90)
    assert info.threads == 128 and info.vthreads == 2 and info.accumulators == 32
    assert info.smem_bytes == (64 * 8 + 8 * 64) * 4
    assert info.fetch_vectors == {"A": 4, "B": 4}
    cases = {
        "threads per block": _cfg(sp, tile_m=[16, 1, 64, 1], tile_n=[16, 1, 32, 2], tile_k=[128, 8]),
        "shared memory": _cfg(sp, tile_m=[4, 1, 16, 16], tile_n=[64, 1, 16, 1], tile_k=[2, 512]),
        "registers": _cfg(sp, tile_m=[8, 2, 4, 16], tile_n=[32, 1, 4, 8], tile_k=[256, 4]),
        "virtual threads": _cfg(sp, tile_m=[16, 16, 4, 1], tile_n=[64, 1, 16, 1], tile_k=[128, 8]),
    }
    for what, c in cases.items():
        with pytest.raises(cuda.InvalidGPUConfig, match=what.split()[0]):
            cuda.schedule(wl, sp, c, SM90)
    assert issubclass(cuda.InvalidGPUConfig, InvalidConfig)  # the measurers record these as "invalid"


def test_a_large_block_shares_the_register_file():
    """A thread of a 1024-thread block holds at most 64 registers (65536 per SM; the kernels carry
    __launch_bounds__): a 16 x 8 accumulator tile (about 169 registers) is refused there and at 512 threads
    (128 each), allowed at 256. With nvcc on an H100 preset the refused ones spilled 2132 and 124 bytes."""
    from tiletune.hardware import thread_registers

    assert [thread_registers(255, 65536, t) for t in (128, 256, 512, 1024)] == [255, 255, 128, 64]
    wl = parse("gemm:M=1024,N=1024,K=1024")
    sp = cuda.make_space(wl)
    tiles = {1024: ([4, 1, 32, 8], [2, 1, 32, 16]), 512: ([8, 1, 16, 8], [2, 1, 32, 16]),
             256: ([8, 1, 16, 8], [4, 1, 16, 16])}
    for threads, (tm, tn) in tiles.items():
        c = _cfg(sp, tile_m=tm, tile_n=tn, tile_k=[128, 8])
        info = cuda.tile_info(wl, sp, c)
        assert info.threads == threads and info.accumulators == 128 and 128 < info.registers <= 255
        if threads == 256:
            cuda.check(wl, sp, c, SM90)
        else:
            with pytest.raises(cuda.InvalidGPUConfig, match=f"registers.*{threads} threads"):
                cuda.check(wl, sp, c, SM90)


def test_the_space_keeps_to_the_limits():
    """The limits are the space's constraint (LimitRule): the configurations ``check`` rejects are not in
    the space (its size is unchanged), samples and constructions are within them, and a local search started
    from Roller's constructions proposes only launchable kernels (before the rule, G-BFS, N-A2C and DGD
    proposed none on an H200: benchmarks/out/gpu-h200/before-limit-rule)."""
    from tiletune.construct import constructions
    from tiletune.measure.synthetic import FunctionMeasurer
    from tiletune.session import RunSpec, run

    wl = parse("gemm:M=1024,N=1024,K=1024")
    sp = make_space(wl, None, SM90)
    assert isinstance(sp.constraint, cuda.LimitRule) and "1024 threads" in sp.constraint.describe()
    assert sp.size == 899_756 * len(cuda.UNROLL_CHOICES)
    bad = _cfg(sp, tile_m=[8, 2, 4, 16], tile_n=[32, 1, 4, 8], tile_k=[256, 4])
    good = _cfg(sp, tile_m=[16, 2, 8, 4], tile_n=[16, 1, 16, 4], tile_k=[128, 8])
    assert bad not in sp and good in sp
    rng = np.random.default_rng(0)
    for _ in range(50):
        cuda.check(wl, sp, sp.sample(rng), SM90)
    for how in ("roller", "gensor"):
        built = constructions(how, sp, workload=wl, target=SM90, k=4, rng=np.random.default_rng(0))
        assert built
        for c in built:
            cuda.check(wl, sp, c, SM90)

    def cost(c):
        info = cuda.check(wl, sp, c, SM90)  # raises on a configuration outside the limits
        return 1e-4 * (1 + abs(math.log2(info.threads / 256)) + abs(math.log2(info.accumulators / 64)))

    for strategy in ("gbfs", "na2c", "dgd-af"):
        m = FunctionMeasurer(cost)
        res = run(RunSpec(workload=wl, strategy=strategy, trials=16, seed=0, target=SM90), measurer=m)
        assert res.trials == 16 and res.errors == 0 and len(m.calls) == 16


def _lower(mod):
    import tvm
    import tvm.s_tir.transform as S
    import tvm.tirx.transform as X

    return tvm.transform.Sequential([S.LowerInitBlock(), S.PlanAndUpdateBufferAllocationLocation(),
                                     S.ConvertBlocksToOpaque(), S.CompactBufferAllocation(), S.LowerMatchBuffer(),
                                     S.LowerOpaqueBlock(), X.FlattenBuffer()])(mod)


def test_estimates_agree_with_tvm():
    """Our shared-memory bytes are exactly what TVM allocates (verify_gpu_code on the lowered function), our
    thread count is the kernel's launch bound."""
    import re

    from tvm.s_tir.analysis import verify_gpu_code

    rng = np.random.default_rng(3)
    for spec in ("gemm:M=64,N=64,K=64", "conv2d:N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1"):
        wl = parse(spec)
        sp = cuda.make_space(wl)
        checked = 0
        while checked < 3:
            c = sp.sample(rng)
            try:
                info = cuda.check(wl, sp, c, SM90)
            except InvalidConfig:
                continue
            sch = cuda.schedule(wl, sp, c, SM90)
            f = _lower(sch.mod)["main"]
            assert verify_gpu_code(f, {"max_shared_memory_per_block": info.smem_bytes})
            assert not verify_gpu_code(f, {"max_shared_memory_per_block": info.smem_bytes - 1})
            src = cuda.cuda_source(cuda.build(wl, sp, c, SM90))
            bound = re.search(r"__launch_bounds__\((\d+)\)", src)  # absent for a 1-thread block
            assert (int(bound.group(1)) if bound else 1) == info.threads
            checked += 1


def test_loop_structure_and_scopes():
    wl = parse("gemm:M=64,N=64,K=64")
    sp = cuda.make_space(wl)
    c = _cfg(sp, tile_m=[2, 2, 4, 4], tile_n=[2, 1, 8, 4], tile_k=[8, 8], unroll=64)
    text = cuda.schedule(wl, sp, c, SM90).mod.script()
    for s in ('thread="blockIdx.x"', 'thread="vthread.x"', 'thread="threadIdx.x"', 'scope="shared"',
              'scope="local"', '"pragma_auto_unroll_max_step": 64', "T.vectorized(4)", 'T.sblock("C_init")'):
        assert s in text, s
    # order S0 S1 S2 R0 R1 S3: the k0 loop is inside the thread loop and outside the per-thread loops
    assert text.index('thread="threadIdx.x"') < text.index("for k_0 in range(8)") < text.index("k_1")


@pytest.mark.parametrize("spec", WORKLOADS)
def test_cuda_codegen_for_every_workload(spec):
    wl = parse(spec)
    sp = make_space(wl, None, SM90)
    rng = np.random.default_rng(0)
    built = 0
    while built < 2:
        c = sp.sample(rng)
        try:
            info = cuda.check(wl, sp, c, SM90)
        except InvalidConfig:
            continue
        ex = cuda.build(wl, sp, c, SM90)
        src = cuda.cuda_source(ex)
        assert "__global__ void" in src  # blockIdx.x / threadIdx.x are omitted for a 1-block grid / 1 thread
        assert ("threadIdx.x" in src) == (info.threads > 1)
        assert "__shared__" in src and "__syncthreads()" in src
        built += 1


def test_padding_is_inlined_into_the_shared_fetch():
    wl = parse("conv2d:N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1")
    sp = cuda.make_space(wl)
    c = _cfg(sp, tile_n=[1, 1, 1, 1], tile_k=[2, 2, 4, 1], tile_p=[5, 1, 2, 1], tile_q=[2, 1, 1, 5],
             tile_c=[4, 2], tile_r=[3, 1], tile_s=[1, 3])
    text = cuda.schedule(wl, sp, c, SM90).mod.script()
    assert 'T.sblock("pad_shared")' in text and 'T.sblock("pad")' not in text
    fetch = text[text.index('T.sblock("pad_shared")'):]
    assert "T.if_then_else" in fetch[:1500]  # the zero border is made while staging


def test_other_level_counts_build():
    wl = parse("gemm:M=32,N=32,K=16")
    for levels in ((2, 1), (3, 2), (5, 3)):
        sp = cuda.make_space(wl, levels)
        rng = np.random.default_rng(1)
        while True:
            c = sp.sample(rng)
            try:
                cuda.check(wl, sp, c, SM90)
            except InvalidConfig:
                continue
            break
        assert "__global__" in cuda.cuda_source(cuda.build(wl, sp, c, SM90))


def test_schedule_dispatch_by_target_kind():
    from tiletune import schedules

    wl = parse("gemm:M=32,N=32,K=16")
    sp = make_space(wl, None, SM90)
    c = _cfg(sp, tile_m=[2, 2, 4, 2], tile_n=[2, 1, 8, 2], tile_k=[4, 4])
    assert "threadIdx.x" in schedules.schedule(wl, sp, c, SM90).mod.script()


def test_runs_on_a_gpu_through_rpc_when_there_is_one():
    """On a machine whose TVM sees a GPU: a tracker and a server on 127.0.0.1, the kernel measured through
    them (the path a remote GPU takes)."""
    import tvm

    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.factory import make_measurer

    from .rpc_farm import start

    pytest.importorskip("tornado", reason="the RPC tracker needs tornado (pip install -e '.[rpc]')")
    if not tvm.cuda(0).exist:
        pytest.skip("no CUDA device visible to TVM on this machine (the GPU path is tested on a GPU machine)")
    wl = parse("gemm:M=128,N=128,K=64")
    sp = make_space(wl, None, SM90)
    c = _cfg(sp, tile_m=[4, 2, 4, 4], tile_n=[4, 1, 8, 4], tile_k=[8, 8], unroll=16)
    farm = start(1)
    try:
        with make_measurer(wl, sp, SM90, settings=MeasureSettings(repeat=2), rpc=farm.rpc) as m:
            (r,) = m.measure([c])
    finally:
        farm.stop()
    assert r.ok, r.message


@pytest.mark.parametrize("spec,cfg", [
    ("gemm:M=64,N=64,K=64", {"tile_m": [2, 2, 4, 4], "tile_n": [2, 1, 8, 4], "tile_k": [8, 8], "unroll": 512}),
    ("conv2d:N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1",
     {"tile_n": [1, 1, 1, 1], "tile_k": [2, 2, 4, 1], "tile_p": [5, 1, 2, 1], "tile_q": [2, 1, 1, 5],
      "tile_c": [4, 2], "tile_r": [3, 1], "tile_s": [1, 3], "unroll": 64}),
])
def test_generated_cuda_compiles_with_nvcc(spec, cfg):
    """The exported library carries the CUDA source (compiled where it is loaded); check here that nvcc
    accepts it for sm_90 (vector loads, shared memory, padding conditions)."""
    import shutil

    import tvm

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed on this machine")
    from tvm.support import nvcc

    wl = parse(spec)
    sp = cuda.make_space(wl)
    src = cuda.cuda_source(cuda.build(wl, sp, sp.from_dict(cfg), SM90))
    with tvm.target.Target(SM90):
        cubin = nvcc.compile_cuda(src, target_format="cubin", arch="sm_90", compiler="nvcc")
    assert bytes(cubin[:4]) == b"\x7fELF"
