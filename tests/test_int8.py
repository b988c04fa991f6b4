"""int8 kernels (uint8 x int8 -> int32 by vpdpbusd): exact integer results of the quantized families on small shapes,
the epilogues (zero point, dequantize per tensor and per channel, requantize), the weight packing, the one-line
refusals, and a model quantized by ONNX Runtime (dynamic: MatMulInteger) imported, built with int8 kernels and
matching ONNX Runtime's own int8 output. Skips where the CPU has no AVX512-VNNI or onnxruntime is missing."""
import numpy as np
import pytest

from tiletune import cpu_features
from tiletune.api import load_model
from tiletune.cli import main
from tiletune.errors import TiletuneError
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.model.library import build_model
from tiletune.model.frontend.calibrate import calibrated
from tiletune.schedules import build, check, make_space, prepacked_inputs, starts, x86_int8
from tiletune.schedules.cpu import InvalidConfig
from tiletune.target import host_target
from tiletune.workloads import parse

HOST = host_target()
vnni = pytest.mark.skipif(not cpu_features.has("avx512_vnni", HOST),
                          reason="this CPU or its target has no AVX512-VNNI (vpdpbusd)")


def run(wl, space, config):
    """The kernel of ``config`` on the workload's inputs, its weight packed beforehand as a model build packs it."""
    import tvm

    ex = build(wl, space, config, HOST, prepacked=True)
    packs = prepacked_inputs(wl, space, config, HOST)
    inputs = wl.make_inputs(seed=1)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype), dev)
    ex.mod["main"](*[tvm.runtime.tensor(packs[i].pack(x) if i in packs else x, dev) for i, x in enumerate(inputs)],
                   out)
    return out.numpy(), wl.reference(*inputs), ex


def test_reference_is_exact_integer_arithmetic():
    wl = parse("qgemm:M=4,N=16,K=8,out_dtype=int32")
    a, w, wsum, za = wl.make_inputs(seed=3)
    want = (a.astype(np.int64) - int(za[0])) @ w.astype(np.int64)  # (x - zx) W, as MatMulInteger defines it
    assert np.array_equal(wl.reference(a, w, wsum, za), want.astype(np.int32))
    assert wl.tolerance() == (0.0, 0.0)
    assert parse("qgemm:M=4,N=16,K=8,out_dtype=float32").tolerance()[0] > 0  # the float epilogue's rounding


@pytest.mark.parametrize("spec,msg", [
    ("qgemm:M=4,N=24,K=8", "multiple of 16"),
    ("qgemm:M=4,N=16,K=6", "multiple of 16 and K=6 of 4"),
    ("qgemm:M=4,N=16,K=8,out_dtype=float16", "accepted: uint8, int32, float32"),
    ("qgemm:M=4,N=16,K=8,dtype=float32", "does not take dtype=float32"),
    ("qgemm:M=4,N=16,K=8,per_channel=2", "per_channel must be 0 or 1"),
])
def test_bad_specs_are_one_line_errors(spec, msg):
    with pytest.raises(TiletuneError, match=msg) as e:
        parse(spec)
    assert "\n" not in str(e.value)


def test_a_target_without_vnni_is_refused_in_one_line():
    wl = parse("qgemm:M=16,N=32,K=16,out_dtype=int32")
    with pytest.raises(TiletuneError, match="avx512_vnni|VNNI") as e:
        make_space(wl, None, {"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    assert "\n" not in str(e.value)


def test_space_is_in_units_of_the_instruction_and_keeps_the_register_rule():
    wl = parse("qgemm:M=64,N=64,K=64,out_dtype=int32")
    space = make_space(wl, None, {"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    ext = {k.name: k.extent for k in space.knobs if hasattr(k, "extent")}
    assert ext == {"tile_m": 64, "tile_n": 4, "tile_k": 16}  # 64 / 16 column vectors, 64 / 4 reduction steps
    too_many = space.from_dict({"tile_m": [1, 1, 2, 32], "tile_n": [1, 1, 1, 4], "tile_k": [1, 16], "unroll": 0})
    with pytest.raises(InvalidConfig, match="registers"):
        check(wl, space, too_many, HOST)
    for c in starts(wl, space, HOST):
        assert space.is_legal(c)


def test_weight_layout_is_what_vpdpbusd_reads():
    w = np.arange(8 * 32, dtype=np.int64).reshape(8, 32).astype(np.int8)
    p = x86_int8.VnniLayout().pack(w)
    assert p.shape == (2, 2, 16, 4)
    assert p[1, 0, 3, 2] == w[2, 16 + 3] and p[0, 1, 15, 0] == w[4, 15]  # [n // 16, k // 4, n % 16, k % 4]


@vnni
@pytest.mark.parametrize("spec", [
    "qgemm:M=24,N=48,K=36,out_dtype=int32",
    "qgemm:M=16,N=32,K=64",  # requantize to uint8
    "qgemm:M=8,N=64,K=32,out_dtype=float32,per_channel=1",
    "qbatch_matmul:B=2,M=8,N=32,K=16,out_dtype=int32",
])
def test_vnni_kernels_are_exact(spec):
    wl = parse(spec)
    space = make_space(wl, None, HOST)
    rng = np.random.default_rng(0)
    configs = starts(wl, space, HOST)[:1] + [space.sample(rng) for _ in range(2)]
    for c in configs:
        got, want, ex = run(wl, space, c)
        if wl.out_dtype == "float32":
            np.testing.assert_allclose(got, want, *wl.tolerance())
        else:
            assert np.array_equal(got, want), space.to_dict(c)
    asm = ex.mod.inspect_source("asm") if not ex.mod.imports else ex.mod.imports[0].inspect_source("asm")
    assert "vpdpbusd" in asm


SPR = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}


def test_amx_kernel_is_tdpbusd_on_tiles():
    """The AMX path compiles (for a Sapphire Rapids target) to tdpbusd with one tile configuration; it is run only
    where the CPU has AMX-INT8."""
    import tvm

    wl = parse("qgemm:M=64,N=64,K=128,out_dtype=float32,per_channel=1")
    assert x86_int8.path(wl, SPR) == "amx" and x86_int8.path(wl, HOST) == ("amx" if cpu_features.has(
        "amx_int8", HOST) else "vnni")
    space = x86_int8.make_space(wl, None, SPR, kind="amx")
    assert {k.name: k.extent for k in space.knobs if hasattr(k, "extent")} == {"tile_m": 4, "tile_n": 4,
                                                                                 "tile_k": 2}
    c = space.from_dict({"tile_m": [2, 1, 1, 2], "tile_n": [1, 2, 1, 2], "tile_k": [1, 2], "unroll": 0})
    assert not space.constraint(space, space.from_dict({"tile_m": [1, 1, 1, 4], "tile_n": [1, 1, 1, 4],
                                                         "tile_k": [1, 2], "unroll": 0}))  # 16 + 8 > 8 tiles
    ex = tvm.compile(x86_int8.schedule_amx(wl, space, c).mod, target=tvm.target.Target(SPR))
    asm = (ex.mod.imports[0] if ex.mod.imports else ex.mod).inspect_source("asm")
    assert "tdpbusd" in asm and "ldtilecfg" in asm and "vpdpbusd" not in asm


@pytest.mark.skipif(cpu_features.has("amx_int8", SPR), reason="this CPU has AMX-INT8")
def test_amx_target_on_a_cpu_without_amx_is_one_line():
    with pytest.raises(TiletuneError, match="amx_int8") as e:
        make_space(parse("qgemm:M=64,N=64,K=128"), None, SPR)
    assert "\n" not in str(e.value)


@pytest.mark.skipif(not cpu_features.has("amx_int8", SPR), reason="this CPU has no AMX-INT8")
def test_amx_kernels_are_exact():
    wl = parse("qgemm:M=32,N=32,K=128,out_dtype=int32")
    space = make_space(wl, None, SPR)
    c = space.from_dict({"tile_m": [1, 1, 1, 2], "tile_n": [1, 1, 1, 2], "tile_k": [1, 2], "unroll": 0})
    import tvm

    ex = build(wl, space, c, SPR, prepacked=True)
    packs = prepacked_inputs(wl, space, c, SPR)
    inputs = wl.make_inputs(seed=1)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype), dev)
    ex.mod["main"](*[tvm.runtime.tensor(packs[i].pack(x) if i in packs else x, dev) for i, x in enumerate(inputs)],
                   out)
    assert np.array_equal(out.numpy(), wl.reference(*inputs))


def _quantized_mlp(tmp_path, kind="dynamic"):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, \
        quantize_static

    rng = np.random.default_rng(0)
    w1, b1 = rng.normal(0, 0.2, (64, 128)).astype(np.float32), rng.normal(0, 0.1, 128).astype(np.float32)
    w2, b2 = rng.normal(0, 0.2, (128, 32)).astype(np.float32), rng.normal(0, 0.1, 32).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])],
                              [numpy_helper.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2),
                                                                          ("b2", b2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    fp32, q = tmp_path / "mlp.onnx", tmp_path / "mlp_q.onnx"
    onnx.save(model, fp32)
    if kind == "dynamic":
        quantize_dynamic(str(fp32), str(q), weight_type=QuantType.QInt8)
        return fp32, q

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": np.random.default_rng(i).normal(0, 1, (8, 64)).astype(np.float32)}
                                 for i in range(8)])

        def get_next(self):
            return next(self.batches, None)

    # the quantizer's defaults: int8 activations and weights, per-channel weights
    quantize_static(str(fp32), str(q), Calibration(), quant_format=QuantFormat.QDQ, per_channel=True)
    return fp32, q


@pytest.mark.parametrize("kind", ["dynamic", "qdq"])
def test_quantized_model_is_rewritten_into_int8_tasks(tmp_path, kind):
    _, q = _quantized_mlp(tmp_path, kind)

    _, tasks = load_model_tasks(str(q), {"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    int8 = [k for k in tasks.tasks if getattr(k.workload, "dtype", "") == "uint8"]
    assert len(int8) == 2 and all(x86_int8.applies(k.workload, tasks.target) for k in int8)
    assert all(k.workload.weights for k in int8)  # the int8 weights are packed once, at build


@vnni
@pytest.mark.parametrize("kind", ["dynamic", "qdq"])
def test_quantized_model_matches_onnxruntime_int8(tmp_path, kind):
    ort = pytest.importorskip("onnxruntime")

    fp32, q = _quantized_mlp(tmp_path, kind)
    lib = str(tmp_path / "mlp_q.so")
    build_model(str(q), lib)
    x = np.random.default_rng(5).normal(0, 1, (8, 64)).astype(np.float32)
    ours = load_model(lib)(x)[0]
    ort_q = ort.InferenceSession(str(q), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ort_f = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    scale = np.abs(ort_f).max()
    # the same integer products: only the float epilogues' rounding (and the rounding ties of a quantize after it,
    # one step of the output's scale in a static model) differ
    assert np.abs(ours - ort_q).max() <= (1e-3 if kind == "dynamic" else 0.02) * scale
    # quantization's own error against the float model, the same for both int8 engines
    assert np.abs(ours - ort_f).max() <= 0.05 * scale


@pytest.mark.parametrize("content,msg", [
    (None, "no such file"), (b"not numpy", "not a .npz file"), ({"y": np.zeros((3, 8, 64), np.float32)}, "holds y"),
    ({"x": np.zeros((3, 8, 32), np.float32)}, "has shape"),
])
def test_calibrate_with_a_bad_file_is_one_line(tmp_path, content, msg):

    fp32, _ = _quantized_mlp(tmp_path)
    cal = tmp_path / "cal.npz"
    if isinstance(content, bytes):
        cal.write_bytes(content)
    elif content is not None:
        np.savez(cal, **content)
    with pytest.raises(TiletuneError, match=msg) as e:
    
        calibrated(str(fp32), str(cal))
    assert "\n" not in str(e.value)
    assert main(["model", "tasks", str(fp32), "--dtype", "int8", "--calibrate", str(cal)]) != 0


@vnni
def test_calibrated_build_is_close_to_the_float_model(tmp_path):
    ort = pytest.importorskip("onnxruntime")

    fp32, _ = _quantized_mlp(tmp_path)
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.random.default_rng(1).normal(0, 1, (16, 8, 64)).astype(np.float32))
    q = calibrated(str(fp32), str(cal))
    lib = str(tmp_path / "cal.so")
    build_model(q, lib)
    m = load_model(lib)
    ref = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
    for seed in range(100, 105):  # inputs not used in calibration
        x = np.random.default_rng(seed).normal(0, 1, (8, 64)).astype(np.float32)
        a, b = m(x)[0].ravel(), ref.run(None, {"x": x})[0].ravel()
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= 0.99
