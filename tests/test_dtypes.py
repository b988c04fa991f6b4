"""float16 / bfloat16 workloads: float32 accumulation, the output dtype in the spec, the reference on the rounded
inputs, the tolerance table, and the templates' handling (CPU builds them; CUDA sends the tensor-core families
to cuda_mma and refuses the rest in one line)."""
import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.workloads import parse
from tiletune.workloads.base import OUTPUT_RTOL, np_dtype


def test_keys_and_defaults():
    wl = parse("gemm:M=8,N=8,K=8,dtype=bfloat16")
    assert (wl.dtype, wl.out_dtype, wl.acc_dtype, wl.has_cast) == ("bfloat16", "bfloat16", "float32", True)
    assert wl.key == "gemm:M=8,N=8,K=8,dtype=bfloat16"
    f32 = parse("gemm:M=8,N=8,K=8,dtype=float16,out_dtype=float32")
    assert f32.key.endswith(",dtype=float16,out_dtype=float32") and not f32.has_cast
    assert parse(f32.key) == f32 and parse("gemm:M=8,N=8,K=8,dtype=float16,out_dtype=float16").key == parse(
        "gemm:M=8,N=8,K=8,dtype=float16").key
    assert parse("gemm:M=8,N=8,K=8").key == "gemm:M=8,N=8,K=8"  # float32 keys unchanged


@pytest.mark.parametrize("spec,msg", [
    ("gemm:M=8,N=8,K=8,dtype=float32,out_dtype=float16", "out_dtype=float16 with dtype=float32"),
    ("gemm:M=8,N=8,K=8,dtype=bfloat16,out_dtype=float16", "accepted: bfloat16, float32"),
    ("avgpool2d:C=4,H=8,W=8,R=2,dtype=bfloat16", "does not take dtype=bfloat16"),
    ("gemm:M=8,N=8,K=8,dtype=int8", "unknown dtype"),
])
def test_bad_dtypes_are_one_line_errors(spec, msg):
    with pytest.raises(TiletuneError, match=msg) as e:
        parse(spec)
    assert "\n" not in str(e.value).split("accepted:")[0]


@pytest.mark.parametrize("spec", [
    "gemm:M=24,N=40,K=64,dtype=bfloat16", "gemm:M=24,N=40,K=64,dtype=float16,out_dtype=float32",
    "batch_matmul:B=2,M=8,N=12,K=32,dtype=float16",
    "conv2d:C=8,H=6,W=6,K=16,R=3,S=3,pad=1,layout=NHWC,dtype=bfloat16",
])
def test_reference_is_float32_on_rounded_inputs(spec):
    wl = parse(spec)
    ins = wl.make_inputs()
    assert all(x.dtype == np_dtype(wl.dtype) for x in ins)
    ref = wl.reference(*ins)
    assert ref.dtype == np_dtype(wl.out_dtype) and ref.shape == wl.output_shape()
    exact = parse(spec.split(",dtype=")[0]).reference(*[x.astype(np.float64) for x in ins])  # same rounded inputs
    rtol, atol = wl.tolerance()
    assert rtol == max(1e-4, OUTPUT_RTOL[wl.out_dtype])
    assert np.allclose(ref.astype(np.float64), exact, rtol=rtol, atol=atol)
    # an input rounded differently (float32 instead of the half type) is caught at bfloat16's tolerance
    if wl.dtype == "bfloat16":
        drift = parse(spec.split(",dtype=")[0]).reference(*[x.astype(np.float32) * 1.01 for x in ins])
        assert not np.allclose(ref.astype(np.float64), drift, rtol=rtol, atol=atol)


def test_te_accumulates_in_float32_and_casts_once():
    wl = parse("gemm:M=8,N=8,K=8,dtype=bfloat16")
    A, B, out = wl.te()
    assert (A.dtype, out.dtype, wl.anchor_tensor().dtype) == ("bfloat16", "bfloat16", "float32")
    assert wl.anchor_name() == "C" and wl.epilogue_blocks() == ("C_cast",)
    assert [a.name for a in wl.axes()] == ["m", "n", "k"]


@pytest.mark.parametrize("spec", ["gemm:M=32,N=20,K=48,dtype=bfloat16", "gemm:M=32,N=20,K=48,dtype=float16",
                                  "conv2d:C=8,H=6,W=6,K=16,R=3,S=3,pad=1,layout=NHWC,dtype=bfloat16,out_dtype=float32"])
def test_cpu_template_builds_and_matches(spec):
    tvm = pytest.importorskip("tvm")
    from tiletune.measure.local import check_output
    from tiletune.schedules import build, make_space

    wl = parse(spec)
    target = {"kind": "llvm", "num-cores": 1}
    space = make_space(wl, target=target)
    rng = np.random.default_rng(1)
    ins = wl.make_inputs()
    ref = wl.reference(*ins)
    for _ in range(2):
        lib = build(wl, space, space.sample(rng), target).mod
        out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype))
        lib["main"](*[tvm.runtime.tensor(x) for x in ins], out)
        check_output(wl, out.numpy(), ref)


def test_cuda_refuses_half_families_without_tensor_cores():
    from tiletune.schedules import make_space

    with pytest.raises(TiletuneError, match="tensor cores for gemm, batch_matmul and conv2d"):
        make_space(parse("gemv:M=64,K=64,dtype=float16"), target={"kind": "cuda", "arch": "sm_90"})
    with pytest.raises(TiletuneError, match="NCHW"):
        make_space(parse("conv2d:C=8,H=6,W=6,K=16,R=3,S=3,dtype=float16"), target={"kind": "cuda", "arch": "sm_90"})
