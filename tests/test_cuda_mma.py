"""The tensor-core template (schedules/cuda_mma.py) without a GPU: its space and limits, and for float16 and
bfloat16 GEMMs (N not a multiple of 16 included), a batch_matmul and an NHWC conv, the first construction and a
sampled configuration build CUDA C for sm_80 and sm_90 that nvcc compiles to a cubin whose SASS holds HMMA
(mma.sync), LDSM (ldmatrix) and LDGSTS (cp.async) instructions, with no local memory (ptxas: no stack frame, no
spills). The nvcc checks skip where nvcc is missing; the SASS check also needs cuobjdump and nvdisasm (on PATH,
or the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.schedules import build, cuda_mma, make_space
from tiletune.schedules.cuda import cuda_source
from tiletune.space import Config
from tiletune.workloads import parse

SM90 = {"kind": "cuda", "arch": "sm_90"}


def _cuda_bin(tool: str) -> str | None:
    found = shutil.which(tool)
    if found:
        return found
    try:
        import nvidia

        for base in nvidia.__path__:
            for cand in Path(base).glob(f"cu*/bin/{tool}"):
                return str(cand)
    except ImportError:
        pass
    return None


def compile_cubin(src: str, arch: str, tmp: Path) -> dict:
    """nvcc -cubin with ptxas -v: registers, stack, spills; and, where cuobjdump is found, SASS counts."""
    cu, cubin = tmp / f"k_{arch}.cu", tmp / f"k_{arch}.cubin"
    cu.write_text(src)
    r = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    out = {"registers": int(re.search(r"Used (\d+) registers", r.stderr).group(1)),
           "stack": int(m.group(1)), "spill_stores": int(m.group(2)), "spill_loads": int(m.group(3))}
    objdump, disasm = _cuda_bin("cuobjdump"), _cuda_bin("nvdisasm")
    if objdump and disasm:
        env = {**os.environ, "PATH": f"{Path(disasm).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        sass = subprocess.run([objdump, "-sass", str(cubin)], capture_output=True, text=True, env=env,
                              timeout=120).stdout
        out.update({op: len(re.findall(rf"\b{op}\b", sass)) for op in ("HMMA", "LDSM", "LDGSTS")})
    return out


# ---- the space (no nvcc needed) ------------------------------------------------------------------
def test_dispatch_and_space():
    wl = parse("gemm:M=64,N=1000,K=64,dtype=float16")
    space = make_space(wl, target=SM90)
    assert set(space.names) == set(cuda_mma.KNOBS)
    assert "constraint" in space.constraint.describe()
    rng = np.random.default_rng(0)
    raw = [space.get(int(i)) for i in rng.integers(space.size, size=300)]
    allowed = [c for c in raw if space.allows(c)]
    assert allowed and len(allowed) < 300  # the constraint filters
    for c in allowed[:50]:
        info = cuda_mma.check(wl, space, c, SM90)
        d = space.to_dict(c)
        assert d["block_m"] % d["warp_m"] == 0 and info.threads <= 1024 and info.smem_bytes <= 227 * 1024
        assert info.padded[1] % d["block_n"] == 0 and info.padded[1] >= 1000
    assert space.allows(cuda_mma.default_config(wl, space, SM90))
    # float32 stays on the SIMT template
    assert "tile_m" in make_space(parse("gemm:M=64,N=64,K=64"), target=SM90).names


def test_limits_follow_the_arch():
    wl = parse("gemm:M=4096,N=4096,K=4096,dtype=bfloat16")
    s90, s80 = make_space(wl, target=SM90), make_space(wl, target={"kind": "cuda", "arch": "sm_80"})
    big = Config(tuple({"block_m": 256, "block_n": 128, "warp_m": 64, "warp_n": 64, "chunk_k": 64, "stages": 4,
                        "vector": 8}[n] for n in s90.names))
    assert cuda_mma.tile_info(wl, s90, big).smem_bytes > 164 * 1024
    assert s90.allows(big) and not s80.allows(big)  # 227 KiB on sm_90, 163 KiB on sm_80
    spill = Config(tuple({**s90.to_dict(big), "warp_m": 128, "warp_n": 128}[n] for n in s90.names))
    with pytest.raises(cuda_mma.InvalidMmaConfig, match="registers"):
        cuda_mma.check(wl, s90, spill, SM90)
    # 16 warps of 16 x 128: about 160 registers each, over a 512-thread block's share of 128 (ptxas spilled 180 bytes)
    wide = Config(tuple({**s90.to_dict(big), "warp_m": 16, "warp_n": 128}[n] for n in s90.names))
    assert cuda_mma.tile_info(wl, s90, wide).registers <= 255
    with pytest.raises(cuda_mma.InvalidMmaConfig, match="> 128 .512 threads"):
        cuda_mma.check(wl, s90, wide, SM90)


def test_refusals():
    wl = parse("gemm:M=64,N=64,K=64,dtype=float16")
    with pytest.raises(TiletuneError, match="sm_80 or later"):
        make_space(wl, target={"kind": "cuda", "arch": "sm_75"})
    with pytest.raises(TiletuneError, match="no tiling levels"):
        make_space(wl, levels=(4, 2), target=SM90)


def test_vector_width_follows_the_contiguous_dimension():
    wl = parse("gemm:M=64,N=50257,K=64,dtype=float16")  # a vocabulary: odd N
    space = make_space(wl, target=SM90)
    info = cuda_mma.tile_info(wl, space, cuda_mma.default_config(wl, space, SM90))
    assert (info.vector_a, info.vector_b, info.vector_out) == (8, 1, 1)


# ---- CUDA C -> cubin -> SASS ---------------------------------------------------------------------------
CASES = [
    ("gemm:M=64,N=1000,K=64,dtype=float16", 0),
    ("gemm:M=48,N=40,K=96,dtype=bfloat16", 1),
    ("batch_matmul:B=2,M=32,N=24,K=32,dtype=bfloat16,out_dtype=float32", 2),
    ("conv2d:C=32,H=7,W=7,K=32,R=3,S=3,pad=1,layout=NHWC,dtype=float16", 3),
]


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_chunks_of_one_step_keep_the_fragments_per_warp(stages, tmp_path):
    """chunk_k 16 (one 16-step per chunk) over 32 chunks: each fragment buffer holds the warp's slice of a chunk
    (warp_m x 16 halves of A, 16 x warp_n of B), and where nvcc is found nothing goes to local memory. With the
    fragment pipeline annotated on the one-iteration loop, stages 3 and 4 declared 2048 halves each and an
    8 KB stack frame."""
    wl = parse("gemm:M=64,N=64,K=512,dtype=float16")
    space = make_space(wl, target=SM90)
    config = space.from_dict({"block_m": 64, "block_n": 64, "warp_m": 32, "warp_n": 16, "chunk_k": 16,
                              "stages": stages, "vector": 8})
    src = cuda_source(build(wl, space, config, SM90))
    sizes = {m: int(n) for m, n in re.findall(r"\b([AB])_reindex_shared_dyn_warp_ptr\[(\d+)\]", src)}
    assert sizes == {"A": 32 * 16, "B": 16 * 16}, sizes
    if shutil.which("nvcc"):
        r = compile_cubin(src, "sm_90", tmp_path)
        assert r["stack"] == r["spill_stores"] == r["spill_loads"] == 0, r


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.parametrize("spec,seed", CASES)
def test_nvcc_compiles_tensor_core_kernels(spec, seed, tmp_path):
    wl = parse(spec)
    for arch in ("sm_80", "sm_90"):
        target = {"kind": "cuda", "arch": arch}
        space = make_space(wl, target=target)
        rng = np.random.default_rng(seed)
        small = (space.sample(rng) for _ in range(1000))  # small tiles compile fast
        sampled = next(c for c in small if space.to_dict(c)["block_m"] * space.to_dict(c)["block_n"] <= 64 * 64)
        configs = [cuda_mma.default_config(wl, space, target)] + ([sampled] if arch == "sm_90" else [])
        for config in configs:
            src = cuda_source(build(wl, space, config, target))
            assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src
            assert (".bf16.bf16" in src) == (wl.dtype == "bfloat16")
            r = compile_cubin(src, arch, tmp_path)
            assert r["stack"] == r["spill_stores"] == r["spill_loads"] == 0, (arch, space.to_dict(config), r)
            if "HMMA" in r:
                assert r["HMMA"] > 0 and r["LDSM"] > 0, r
                if cuda_mma.tile_info(wl, space, config).vector_a > 1:
                    assert r["LDGSTS"] > 0, r
