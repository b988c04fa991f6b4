"""The Hopper template (schedules/cuda_wgmma.py): its dispatch and space without nvcc; with nvcc, for float16 and
bfloat16 GEMMs (square, BERT's 512 x 2304 x 768, N = 1000 not a multiple of 16), a batch_matmul with a float32
output and a persistent configuration, the TIRx kernel compiles for sm_90a into a cubin whose SASS holds HGMMA
(wgmma) and UTMALDG (TMA loads) instructions, with no local memory (ptxas: no stack frame, no spills). The nvcc
checks skip where nvcc is missing; the SASS counts also need cuobjdump and nvdisasm (on PATH, or the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels). ``-k gpu``: the kernels against numpy, on a GPU of compute
capability 9.0 only (the device script benchmarks/device/run_hopper.sh runs it)."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tiletune.analytic.wgmma import WgmmaModel, wgmma_features
from tiletune.cli import main
from tiletune.construct import constructions
from tiletune.errors import TiletuneError
from tiletune.features.analytical import analytical_features
from tiletune.hardware import preset
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.schedules import build, cuda_mma, cuda_wgmma, make_space
from tiletune.schedules.cuda import cuda_source
from tiletune.session import RunSpec, run
from tiletune.target import has_gpu
from tiletune.workloads import parse

from .test_cuda_mma import _cuda_bin

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def compile_sm90a(src: str, tmp: Path) -> dict:
    """nvcc for sm_90a (the -gencode form: wgmma and setmaxnreg exist only there) with ptxas -v; SASS counts
    where cuobjdump is found, and ptxas's performance remarks (C75xx)."""
    cu, cubin = tmp / "k.cu", tmp / "k.cubin"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v", "-o",
                        str(cubin), str(cu)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    out = {"registers": int(re.search(r"Used (\d+) registers", r.stderr).group(1)),
           "stack": int(m.group(1)), "spill_stores": int(m.group(2)), "spill_loads": int(m.group(3)),
           "remarks": sorted(set(re.findall(r"\((C75\d\d)\)", r.stderr)))}
    objdump, disasm = _cuda_bin("cuobjdump"), _cuda_bin("nvdisasm")
    if objdump and disasm:
        env = {**os.environ, "PATH": f"{Path(disasm).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        sass = subprocess.run([objdump, "-sass", str(cubin)], capture_output=True, text=True, env=env,
                              timeout=120).stdout
        out.update({op: len(re.findall(rf"\b{op}\b", sass)) for op in ("HGMMA", "UTMALDG", "HMMA", "LDL", "STL")})
    return out


# ---- dispatch and space (no nvcc needed) ------------------------------------------------------------
def test_dispatch_and_space():
    wl = parse("gemm:M=512,N=1000,K=768,dtype=float16")
    space = make_space(wl, target=SM90A)
    assert cuda_wgmma.owns(space) and set(space.names) == set(cuda_wgmma.KNOBS)
    # sm_90 (no "a") and sm_80 keep the mma.sync template
    assert cuda_mma.owns(make_space(wl, target={"kind": "cuda", "arch": "sm_90"}))
    assert cuda_mma.owns(make_space(wl, target={"kind": "cuda", "arch": "sm_80"}))
    # rows that are no whole 16-byte unit (the TMA's strides): mma.sync on sm_90a too
    assert cuda_mma.owns(make_space(parse("gemm:M=64,N=50257,K=64,dtype=float16"), target=SM90A))
    rng = np.random.default_rng(0)
    allowed = [c for c in (space.get(int(i)) for i in rng.integers(space.size, size=400)) if space.allows(c)]
    assert 0 < len(allowed) < 400
    for c in allowed[:60]:
        d, info = space.to_dict(c), cuda_wgmma.check(wl, space, c, SM90A)
        assert d["block_m"] % (64 * d["consumers"]) == 0 and d["block_n"] % d["wgmma_n"] == 0
        assert info.smem_bytes + cuda_wgmma.BARRIER_BYTES <= 227 * 1024 and info.acc_regs <= cuda_wgmma.ACC_REGS
        assert info.threads == 128 * (d["consumers"] + 1)
    assert space.allows(cuda_wgmma.default_config(wl, space, SM90A))


def test_limits_and_refusals():
    wl = parse("gemm:M=4096,N=4096,K=4096,dtype=bfloat16")
    space = make_space(wl, target=SM90A)
    base = {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 4, "consumers": 2, "wgmma_n": 256,
            "group_m": 8, "persistent": 0, "stage_c": 1}
    info = cuda_wgmma.check(wl, space, space.from_dict(base), SM90A)
    assert (info.smem_bytes, info.acc_regs, info.threads, info.consumer_regs) == (196608, 128, 384, 232)
    with pytest.raises(cuda_wgmma.InvalidWgmmaConfig, match="shared memory"):
        cuda_wgmma.check(wl, space, space.from_dict({**base, "stages": 5}), SM90A)
    with pytest.raises(cuda_wgmma.InvalidWgmmaConfig, match="accumulator registers"):
        cuda_wgmma.check(wl, space, space.from_dict({**base, "consumers": 1, "stages": 3}), SM90A)
    with pytest.raises(cuda_wgmma.InvalidWgmmaConfig, match="does not divide"):
        cuda_wgmma.check(wl, space, space.from_dict({**base, "wgmma_n": 192}), SM90A)
    # a convolution's block tile: the rectangle of output pixels that wastes the fewest slots, the wider on ties
    conv = cuda_wgmma.problem(parse("conv2d:N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1,layout=NHWC,dtype=float16"))
    assert conv.windowed and conv.pixel_tile(64) == (8, 8) and conv.m_tiles(64) == 1 and conv.k_tiles(64) == 72
    s2 = cuda_wgmma.problem(parse("conv2d:N=1,C=128,H=56,W=56,K=128,R=3,S=3,stride=2,pad=1,layout=NHWC,"
                                  "dtype=float16"))
    assert s2.pixel_tile(128) == (4, 32) and s2.m_tiles(128) == 7
    assert not cuda_wgmma.problem(parse("conv2d:N=1,C=64,H=7,W=7,K=64,R=1,S=1,layout=NHWC,dtype=float16")).windowed
    assert not cuda_wgmma.supports(parse("conv2d:N=1,C=3,H=7,W=7,K=64,R=3,S=3,layout=NHWC,dtype=float16"))
    with pytest.raises(cuda_wgmma.InvalidWgmmaConfig, match="refills"):  # stage_c reuses the stages
        cuda_wgmma.check(wl, space, space.from_dict({**base, "persistent": 1}), SM90A)
    with pytest.raises(cuda_wgmma.InvalidWgmmaConfig, match="larger than the stages"):
        cuda_wgmma.check(wl, space, space.from_dict({**base, "stages": 2, "block_m": 256, "block_n": 256,
                                                     "wgmma_n": 128}), SM90A)
    persistent = cuda_wgmma.check(wl, space, space.from_dict({**base, "persistent": 1, "stage_c": 0}), SM90A)
    assert (persistent.tiles, persistent.grid) == (512, 132)  # one block per SM of the H100 preset
    with pytest.raises(TiletuneError, match="sm_90a"):
        cuda_wgmma.make_space(wl, target={"kind": "cuda", "arch": "sm_90"})
    with pytest.raises(TiletuneError, match="no tiling levels"):
        make_space(wl, levels=(4, 2), target=SM90A)


# ---- where the tiles lie (no nvcc needed) -------------------------------------------------------------
TILING = [
    ("gemm:M=200,N=1000,K=72,dtype=float16", {"block_m": 64, "block_n": 128, "group_m": 8}),
    ("batch_matmul:B=3,M=130,N=72,K=64,dtype=bfloat16", {"block_m": 128, "block_n": 64, "group_m": 1}),
    ("conv2d:N=2,C=24,H=15,W=13,K=72,R=3,S=3,stride=2,pad=1,layout=NHWC,dtype=float16", {"block_m": 64}),
    ("conv2d:N=1,C=64,H=9,W=9,K=64,R=3,S=3,pad=2,dilation=2,layout=NHWC,dtype=float16", {"block_m": 128}),
    ("conv2d:N=2,C=64,H=7,W=7,K=64,R=1,S=1,layout=NHWC,dtype=float16", {"block_m": 64}),
]


@pytest.mark.parametrize("spec,over", TILING)
def test_tiles_cover_the_output_once_and_boxes_match_the_pixels(spec, over):
    """Walking every tile as the kernel does (``Tiling`` with Python ints): each element of C is written by
    exactly one (tile, row, column); a convolution's A box for k-tile (r, s, c0) starts at the input pixel of the
    tile's first output pixel, and its row m (BP x BQ pixels, the stride apart) is the window of the output pixel
    that ``out`` stores row m to. The TMA descriptors' operands: rank dims, rank - 1 strides, rank box extents,
    rank element strides and 4 modes."""
    wl = parse(spec)
    space = make_space(wl, target=SM90A)
    d = {**space.to_dict(cuda_wgmma.default_config(wl, space, SM90A)), **over, "consumers": 1,
         "wgmma_n": 64, "persistent": 0}
    p = cuda_wgmma.problem(wl)
    tl = cuda_wgmma.Tiling(p, d)
    count = np.zeros(wl.output_shape(), dtype=np.int64)
    for tile in range(tl.tiles):
        b, tm, n0 = tl.coords(tile)
        for m in range(d["block_m"]):
            for col in range(n0, n0 + d["block_n"], 2):
                index, inside = tl.out(b, tm, m, col)
                if inside:
                    count[index] += 1
                    count[index[:-1] + (col + 1,)] += 1
        if p.windowed and tile % 3 == 0:
            cv = p.conv
            bp, bq = p.pixel_tile(d["block_m"])
            for kt in range(tl.p.k_tiles(d["block_k"])):
                c0, x0, y0, img = tl.a_coord(kt, 0, tm, b)
                r, s = kt // tl.CT // cv.S, kt // tl.CT % cv.S
                assert c0 == kt % tl.CT * d["block_k"] and tl.b_coord(kt, 0, n0, b) == [n0, c0, r * cv.S + s]
                for m in range(0, d["block_m"], 7):
                    (n_, pp, qq, _), _ = tl.out(b, tm, m, 0)
                    assert (img, y0 + m // bq * cv.stride, x0 + m % bq * cv.stride) == (
                        n_, pp * cv.stride - cv.pad + r * cv.dilation, qq * cv.stride - cv.pad + s * cv.dilation)
    assert count.min() == count.max() == 1
    _, (a_rank, a_args), (b_rank, b_args) = cuda_wgmma.tensor_maps(p, d)
    for rank, args in ((a_rank, a_args), (b_rank, b_args)):
        assert len(args) == 4 * rank - 1 + 4 and args[-4:] == [0, 3, 2, 0]
    if p.windowed:  # the strided windows: element strides (1, stride, stride, 1), boxes of BQ x BP strided pixels
        bp, bq = p.pixel_tile(d["block_m"])
        st = p.conv.stride
        assert a_args[7:15] == [64, bq * st, bp * st, 1, 1, st, st, 1]


# ---- the analytic model, the constructions and the searches on the space (no nvcc needed) -----------
def test_model_and_constructions():
    """Gensor's and Roller's constructions are allowed configurations; on GEMM 4096^3 the model ranks the big
    two-consumer tiles above the smallest tile, and Gensor's first construction is the model's best (the space is
    small enough to rank whole); the seven features are finite."""
    wl = parse("gemm:M=4096,N=4096,K=4096,dtype=float16")
    space = make_space(wl, target=SM90A)
    model = WgmmaModel(space, wl, target=SM90A)
    times = {c: model.config_time(c) for c in (space.get(i) for i in range(space.size)) if space.allows(c)}
    best = min(times.values())
    small = model.time(model.initial())
    big = space.from_dict({"block_m": 128, "block_n": 256, "block_k": 64, "stages": 4, "consumers": 2,
                           "wgmma_n": 256, "group_m": 8, "persistent": 0, "stage_c": 1})
    assert times[big] < small / 2
    for method in ("gensor", "roller"):
        built = constructions(method, space, workload=wl, target=SM90A, k=3, rng=np.random.default_rng(0))
        assert built and all(space.allows(c) for c in built)
        if method == "gensor":
            assert times[built[0]] == pytest.approx(best)
    f = wgmma_features(model, big)
    assert f.shape == (7,) and np.all(np.isfinite(f)) and f[-1] == pytest.approx((512 / 132) / 4)
    assert np.allclose(analytical_features(wl, space, big, preset("h100"), SM90A), f)


@pytest.mark.parametrize("strategy", ["gensor", "roller", "xgb", "evo"])
def test_searches_run_on_the_space(strategy):
    wl = parse("gemm:M=512,N=768,K=768,dtype=float16")
    space = make_space(wl, target=SM90A)
    model = WgmmaModel(space, wl, target=SM90A)
    m = FunctionMeasurer(model.config_time)
    res = run(RunSpec(workload=wl, strategy=strategy, trials=12, seed=0, target=SM90A), measurer=m)
    assert res.errors == 0 and 0 < res.trials <= 12
    assert all(space.allows(c) for c in m.calls)


# ---- TIRx -> CUDA C -> cubin -> SASS ------------------------------------------------------------------
CASES = [
    ("gemm:M=1024,N=1024,K=1024,dtype=float16", {}),
    ("gemm:M=512,N=2304,K=768,dtype=float16", {}),  # BERT's QKV projection at M = 512
    ("gemm:M=200,N=1000,K=72,dtype=bfloat16", {}),  # N not a multiple of 16, K not of the k-tile
    ("batch_matmul:B=2,M=128,N=64,K=64,dtype=bfloat16,out_dtype=float32", {}),
    ("gemm:M=2048,N=2048,K=512,dtype=float16", {"persistent": 1, "consumers": 1, "block_m": 128,
                                                "block_n": 128, "wgmma_n": 64, "group_m": 1, "stage_c": 0}),
    # NHWC convolutions: 4-d boxes of strided, padded pixel windows (C = 32 < 64: channels zero filled), and a
    # pointwise one as a GEMM over the pixels
    ("conv2d:N=2,C=32,H=15,W=15,K=48,R=3,S=3,stride=2,pad=1,dilation=1,layout=NHWC,dtype=bfloat16", {}),
    ("conv2d:N=1,C=64,H=14,W=14,K=64,R=3,S=3,stride=1,pad=2,dilation=2,layout=NHWC,dtype=float16", {}),
    ("conv2d:N=2,C=64,H=7,W=7,K=64,R=1,S=1,layout=NHWC,dtype=float16", {}),
]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.parametrize("spec,over", CASES)
def test_nvcc_compiles_wgmma_kernels(spec, over, tmp_path):
    wl = parse(spec)
    space = make_space(wl, target=SM90A)
    config = cuda_wgmma.default_config(wl, space, SM90A)
    if over:
        config = space.from_dict({**space.to_dict(config), **over})
    d, info = space.to_dict(config), cuda_wgmma.check(wl, space, config, SM90A)
    src = cuda_source(build(wl, space, config, SM90A))
    assert "wgmma.mma_async.sync.aligned.m64n" in src and "cp.async.bulk.tensor" in src
    assert "__grid_constant__ CUtensorMap" in src
    if wl.op == "conv2d" and wl.R > 1:
        assert "bulk_tensor_4d" in src  # the data's windows
    assert (".bf16.bf16" in src) == (wl.dtype == "bfloat16")
    assert ("setmaxnreg" in src) == (d["consumers"] > 1)
    assert ("tiletune_copy16(" in src) == bool(d["stage_c"])
    r = compile_sm90a(src, tmp_path)
    assert r["stack"] == r["spill_stores"] == r["spill_loads"] == 0, (d, r)
    assert not r["remarks"], r  # C7508: setmaxnreg ignored; C7514: wgmmas serialized
    if "HGMMA" in r:
        # one HGMMA per (16-step, m64 row, wgmma_n column) of a k-tile, nvcc unrolling the k-tiles at most fully
        per_tile = d["block_k"] // 16 * info.m_atoms * info.n_atoms
        assert r["HGMMA"] >= per_tile and r["HGMMA"] % per_tile == 0, (d, r)
        assert r["UTMALDG"] > 0 and r["HMMA"] == 0 and r["LDL"] == r["STL"] == 0, r


def test_source_command_writes_the_wgmma_kernel(tmp_path):
    out = tmp_path / "k.cu"
    assert main(["source", "gemm:M=256,N=1000,K=128,dtype=float16", "-t", "cuda:sm_90a", "-o", str(out)]) == 0
    src = out.read_text()
    assert "wgmma.mma_async" in src and "cp.async.bulk.tensor.2d" in src
    config = json.dumps({"block_m": 64, "block_n": 128, "block_k": 64, "stages": 2, "consumers": 1,
                         "wgmma_n": 128, "group_m": 1, "persistent": 1, "stage_c": 0})
    assert main(["source", "gemm:M=256,N=1000,K=128,dtype=float16", "-t", "cuda:sm_90a", "--config", config,
                 "-o", str(out)]) == 0
    assert "m64n128k16" in out.read_text()
    assert main(["source", "gemm:M=256,N=1000,K=128,dtype=float16", "-t", "cuda:sm_90", "-o", str(out)]) == 0
    assert "wgmma" not in out.read_text() and "mma.sync" in out.read_text()


# ---- on a GPU: the numerics -------------------------------------------------------------------------
def _sm90() -> bool:
    if not has_gpu():
        return False
    import tvm

    return str(tvm.cuda(0).compute_version) == "9.0"


@pytest.mark.skipif(not _sm90(), reason="needs a GPU of compute capability 9.0 (H100/H200)")
@pytest.mark.parametrize("spec,over", CASES + [
    ("gemm:M=256,N=1000,K=1024,dtype=float16", {"stages": 2, "block_k": 128, "consumers": 1, "block_m": 128,
                                               "block_n": 128, "wgmma_n": 128}),
])
def test_gpu_numerics(spec, over):
    wl = parse(spec)
    space = make_space(wl, target=SM90A)
    config = cuda_wgmma.default_config(wl, space, SM90A)
    if over:
        config = space.from_dict({**space.to_dict(config), **over})
    _check_on_gpu(wl, space, config, spec)


@pytest.mark.skipif(not _sm90(), reason="needs a GPU of compute capability 9.0 (H100/H200)")
@pytest.mark.parametrize("spec", ["gemm:M=320,N=1000,K=200,dtype=float16",
                                  "conv2d:N=2,C=64,H=20,W=20,K=72,R=3,S=3,stride=2,pad=1,layout=NHWC,dtype=bfloat16"])
def test_gpu_numerics_sampled(spec):
    """Eight configurations drawn from the space (every knob's values in play), each against numpy."""
    wl = parse(spec)
    space = make_space(wl, target=SM90A)
    rng = np.random.default_rng(1)
    for config in space.sample_unique(rng, 8):
        _check_on_gpu(wl, space, config, spec)


def _check_on_gpu(wl, space, config, spec):
    import tvm

    ex = build(wl, space, config, SM90A)
    inputs = wl.make_inputs(seed=0)
    dev = tvm.cuda(0)
    out = tvm.runtime.empty(wl.output_shape(), wl.out_dtype, dev)
    ex.mod["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
    rtol, atol = wl.tolerance()
    np.testing.assert_allclose(out.numpy().astype("float32"), np.asarray(wl.reference(*inputs), dtype="float32"),
                               rtol=rtol, atol=atol, err_msg=f"{spec} {space.to_dict(config)}")
