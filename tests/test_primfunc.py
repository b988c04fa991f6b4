"""PrimFunc workloads (tiletune.workloads.primfunc): fused kernels as TVMScript, tuned by the CPU template."""
import pickle
import re

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.measure import MeasureSettings
from tiletune.measure.local import LocalMeasurer, WorkerPool, check_output
from tiletune.schedules import make_space, schedule
from tiletune.session import RunSpec, run
from tiletune.target import host_target
from tiletune.workloads import PrimFuncWorkload, parse

pytestmark = pytest.mark.tvm

# conv2d 3x3 pad 1 + bias + residual add + ReLU, as Relax's FuseTIR emits it (int64 extents)
CONV = '''# from tvm.script import ir as I
# from tvm.script import tirx as T
# from tvm.tirx.layout import Axis

@I.ir_module
class Module:
    @T.prim_func(private=True, s_tir=True)
    def fused_conv2d_add_add_relu(lv3: T.Buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)), "float32"), param_0: T.Buffer((T.int64(8), T.int64(8), T.int64(3), T.int64(3)), "float32"), param_1: T.Buffer((T.int64(1), T.int64(8), T.int64(1), T.int64(1)), "float32"), compute_intermediate: T.Buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)), "float32")):
        T.func_attr({"tirx.noalias": True})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(10), T.int64(10)))
        conv2d_nchw_intermediate = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)))
        T_add_intermediate = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)))
        T_add_intermediate_1 = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(8), T.int64(8)))
        for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(8), T.int64(10), T.int64(10)):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(lv3[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)])
                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(T.int64(1) <= v_i2 and v_i2 < T.int64(9) and T.int64(1) <= v_i3 and v_i3 < T.int64(9), lv3[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)], T.float32(0.0))
        for nn, ff, yy, xx, rc, ry, rx in T.grid(T.int64(1), T.int64(8), T.int64(8), T.int64(8), T.int64(8), T.int64(3), T.int64(3)):
            with T.sblock("conv2d_nchw"):
                v_nn, v_ff, v_yy, v_xx, v_rc, v_ry, v_rx = T.axis.remap("SSSSRRR", [nn, ff, yy, xx, rc, ry, rx])
                T.reads(pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], param_0[v_ff, v_rc, v_ry, v_rx])
                T.writes(conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx])
                with T.init():
                    conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] = conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * param_0[v_ff, v_rc, v_ry, v_rx]
        for ax0, ax1, ax2, ax3 in T.grid(T.int64(1), T.int64(8), T.int64(8), T.int64(8)):
            with T.sblock("T_add"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(conv2d_nchw_intermediate[v_ax0, v_ax1, v_ax2, v_ax3], param_1[v_ax0, v_ax1, T.int64(0), T.int64(0)])
                T.writes(T_add_intermediate[v_ax0, v_ax1, v_ax2, v_ax3])
                T_add_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] = conv2d_nchw_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] + param_1[v_ax0, v_ax1, T.int64(0), T.int64(0)]
        for ax0, ax1, ax2, ax3 in T.grid(T.int64(1), T.int64(8), T.int64(8), T.int64(8)):
            with T.sblock("T_add1"):
                v_ax0, v_ax1, v_ax2, v_ax3 = T.axis.remap("SSSS", [ax0, ax1, ax2, ax3])
                T.reads(T_add_intermediate[v_ax0, v_ax1, v_ax2, v_ax3], lv3[v_ax0, v_ax1, v_ax2, v_ax3])
                T.writes(T_add_intermediate_1[v_ax0, v_ax1, v_ax2, v_ax3])
                T_add_intermediate_1[v_ax0, v_ax1, v_ax2, v_ax3] = T_add_intermediate[v_ax0, v_ax1, v_ax2, v_ax3] + lv3[v_ax0, v_ax1, v_ax2, v_ax3]
        for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(8), T.int64(8), T.int64(8)):
            with T.sblock("compute"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                T.reads(T_add_intermediate_1[v_i0, v_i1, v_i2, v_i3])
                T.writes(compute_intermediate[v_i0, v_i1, v_i2, v_i3])
                compute_intermediate[v_i0, v_i1, v_i2, v_i3] = T.max(T_add_intermediate_1[v_i0, v_i1, v_i2, v_i3], T.float32(0.0))
'''

# matmul + bias, from TE (te.create_prim_func: int32 extents)
MATMUL = '''# from tvm.script import ir as I
# from tvm.script import tirx as T

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def fused_matmul_add(A: T.Buffer((12, 20), "float32"), B: T.Buffer((20, 24), "float32"), bias: T.Buffer((24,), "float32"), T_add: T.Buffer((12, 24), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        matmul = T.sblock_alloc_buffer((12, 24))
        for i, j, k in T.grid(12, 24, 20):
            with T.sblock("matmul"):
                v_i, v_j, v_k = T.axis.remap("SSR", [i, j, k])
                T.reads(A[v_i, v_k], B[v_k, v_j])
                T.writes(matmul[v_i, v_j])
                with T.init():
                    matmul[v_i, v_j] = T.float32(0.0)
                matmul[v_i, v_j] = matmul[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]
        for i, j in T.grid(12, 24):
            with T.sblock("T_add"):
                v_i, v_j = T.axis.remap("SS", [i, j])
                T.reads(matmul[v_i, v_j], bias[v_j])
                T.writes(T_add[v_i, v_j])
                T_add[v_i, v_j] = matmul[v_i, v_j] + bias[v_j]
'''


def _func(body: str, params: str) -> str:
    return f"""# from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def main({params}):
{body}"""


_MM_BLOCK = """    C = T.sblock_alloc_buffer((8, 8))
    for i, j, k in T.grid(8, 8, 4):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""
_AB = 'A: T.Buffer((8, 4), "float32"), B: T.Buffer((4, 8), "float32")'

UNTUNABLE = {
    "no reduction block": _func("""    for i in range(8):
        with T.sblock("D"):
            vi = T.axis.spatial(8, i)
            D[vi] = A[vi] * T.float32(2.0)
""", 'A: T.Buffer((8,), "float32"), D: T.Buffer((8,), "float32")'),
    "several reduction blocks": _func(_MM_BLOCK + """    for i, j in T.grid(8, 8):
        with T.sblock("S"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                D[vi] = T.float32(0.0)
            D[vi] = D[vi] + C[vi, vj]
""", _AB + ', D: T.Buffer((8,), "float32")'),
    "cannot be fused into its write-back": _func(_MM_BLOCK + """    for i, j in T.grid(8, 8):
        with T.sblock("E"):
            vi, vj = T.axis.remap("SS", [i, j])
            D[vi, vj] = C[vi, vj] + C[vi, 0]
""", _AB + ', D: T.Buffer((8, 8), "float32")'),
    "has dtype int32": _func("""    for i, j, k in T.grid(8, 8, 4):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                D[vi, vj] = 0
            D[vi, vj] = D[vi, vj] + A[vi, vk] * B[vk, vj]
""", 'A: T.Buffer((8, 4), "int32"), B: T.Buffer((4, 8), "int32"), D: T.Buffer((8, 8), "int32")'),
    "not valid TVMScript": "def main(:\n",
}

SETTINGS = MeasureSettings(repeat=1, min_repeat_ms=0)


@pytest.fixture(scope="module")
def pool(home):
    p = WorkerPool(2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def files(home):
    d = home / "kernels"
    d.mkdir()
    (d / "conv.tir.py").write_text(CONV)
    (d / "mm.tir.py").write_text(MATMUL)
    return {"conv": str(d / "conv.tir.py"), "matmul": str(d / "mm.tir.py")}


def _numpy_conv(x, w, bias):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 8, 8, 8), np.float64)
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 8, s:s + 8], w[:, :, r, s])
    return np.maximum(out + bias + x, 0)


def test_conv_workload_axes_key_flops_and_reference(files, home):
    wl = parse(files["conv"])
    assert isinstance(wl, PrimFuncWorkload)
    assert re.fullmatch(r"fused_conv2d_add_add_relu\[1x8x8x8,8x8x3x3\]@[0-9a-f]{16}", wl.key), wl.key
    assert [(a.name, a.extent, a.kind) for a in wl.axes()] == [
        ("nn", 1, "S"), ("ff", 8, "S"), ("yy", 8, "S"), ("xx", 8, "S"), ("rc", 8, "R"), ("ry", 3, "R"),
        ("rx", 3, "R")]
    assert all(type(a.extent) is int for a in wl.axes())
    assert wl.flops == 2 * 8 * 8 * 8 * 8 * 3 * 3
    assert wl.producer_blocks() == ("pad_temp",) and wl.epilogue_blocks() == ("T_add", "T_add1", "compute")
    assert wl.input_shapes() == [(1, 8, 8, 8), (8, 8, 3, 3), (1, 8, 1, 1)] and wl.output_shape() == (1, 8, 8, 8)
    # stable: a second parse of the file, of the text, of the key, in a pickle, and from the cache file
    assert parse(files["conv"]).key == wl.key
    assert PrimFuncWorkload.from_text(CONV).key == wl.key
    assert parse(wl.key) == wl and pickle.loads(pickle.dumps(wl)).key == wl.key
    cached = home / ".cache" / "tiletune" / "primfuncs" / f"{wl.key.rsplit('@', 1)[1]}.py"
    assert PrimFuncWorkload.from_text(cached.read_text()).key == wl.key
    x, w, bias = wl.make_inputs(seed=0)
    np.testing.assert_allclose(wl.reference(x, w, bias), _numpy_conv(x, w, bias), rtol=1e-4, atol=1e-4)


def test_matmul_workload_int32_extents_and_reference(files):
    wl = parse(files["matmul"])
    assert re.fullmatch(r"fused_matmul_add\[12x20,20x24\]@[0-9a-f]{16}", wl.key), wl.key
    assert [(a.name, a.extent, a.kind) for a in wl.axes()] == [("i", 12, "S"), ("j", 24, "S"), ("k", 20, "R")]
    assert wl.flops == 2 * 12 * 24 * 20
    a, b, bias = wl.make_inputs(seed=3)
    np.testing.assert_allclose(wl.reference(a, b, bias), a @ b + bias, rtol=1e-5, atol=1e-5)
    # the access model comes from the anchor block: A[i, k], B[k, j] -> matmul[i, j]
    acc = {t.name: (t.role, [d.terms for d in t.dims]) for t in wl.tensor_accesses()}
    assert acc == {"A": ("input", [(("i", 1),), (("k", 1),)]), "B": ("input", [(("k", 1),), (("j", 1),)]),
                   "matmul": ("output", [(("i", 1),), (("j", 1),)])}
    # B[k, j] is read across the reduction along its contiguous dimension: the pack knob applies
    assert "pack" in {k.name for k in make_space(wl).knobs}


def test_conv_access_model_has_the_sliding_window(files):
    acc = {t.name: t for t in parse(files["conv"]).tensor_accesses()}
    assert [t.role for t in acc.values()] == ["input", "input", "output"]
    pad = acc["pad_temp"]
    assert [d.size for d in pad.dims] == [1, 8, 10, 10]
    assert pad.dims[2].terms == (("yy", 1), ("ry", 1))
    assert acc["param_0"].dims[0].terms == (("ff", 1),)


@pytest.mark.parametrize("kind", ["conv", "matmul"])
def test_fused_kernels_build_with_the_epilogue_fused_and_match(kind, files, pool):
    wl = parse(files[kind])
    space = make_space(wl)
    rng = np.random.default_rng(0)
    configs = [space.untiled()] + space.sample_unique(rng, 5)
    with LocalMeasurer(wl, space, host_target(), SETTINGS, pool=pool) as m:
        results = m.measure(configs)
    for r in results:
        assert r.error in (None, "invalid"), (r.config, r.error, r.message)
    assert sum(r.ok for r in results) >= 3
    # one kernel: no epilogue block is left, the write-back computes the output
    ok = next(r.config for r in results if r.ok and space.to_dict(r.config)[space.knobs[0].name][-1] >= 1)
    sch = schedule(wl, space, ok, host_target())
    text = sch.mod.script()
    for name in wl.epilogue_blocks() + wl.producer_blocks():
        assert f'sblock("{name}")' not in text
    import tvm

    lib = tvm.compile(sch.mod, target=tvm.target.Target(host_target())).mod
    ins = wl.make_inputs(seed=5)
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), "float32"))
    lib["main"](*[tvm.runtime.tensor(x) for x in ins], out)
    check_output(wl, out.numpy(), wl.reference(*ins))


@pytest.mark.parametrize("strategy", ["random", "xgb", "gbfs", "gensor", "roller"])
@pytest.mark.parametrize("kind", ["conv", "matmul"])
def test_strategies_tune_fused_kernels(kind, strategy, files, pool, tmp_path):
    wl = parse(files[kind])
    space = make_space(wl, None, host_target())
    rec = tmp_path / "r.jsonl"
    spec = RunSpec(workload=files[kind], strategy=strategy, trials=6, batch_size=3, records=str(rec),
                   settings=SETTINGS, target=host_target(), options={"feature": "knob"} if strategy == "xgb" else {})
    with LocalMeasurer(wl, space, host_target(), SETTINGS, pool=pool) as m:
        res = run(spec, measurer=m)
    assert 1 <= len(rec.read_text().splitlines()) <= 6
    assert res.best is not None and res.best.ok
    from tiletune.records import load

    assert {r.workload for r in load(str(rec))} == {wl.key}


@pytest.mark.parametrize("reason", sorted(UNTUNABLE))
def test_what_cannot_be_tuned_is_one_clear_line(reason, home):
    with pytest.raises(TiletuneError) as e:
        PrimFuncWorkload.from_text(UNTUNABLE[reason])
    msg = str(e.value)
    assert reason in msg and "\n" not in msg, msg


def test_module_with_two_functions_and_missing_files_are_refused(home, tmp_path):
    two = MATMUL.replace("class Module:", "class Module:\n" + "    @T.prim_func(s_tir=True)\n"
                         "    def other(A: T.Buffer((4,), \"float32\")):\n        T.evaluate(0)\n\n", 1)
    with pytest.raises(TiletuneError, match="holds 2 PrimFunc"):
        PrimFuncWorkload.from_text(two)
    with pytest.raises(TiletuneError, match="does not exist"):
        parse(str(tmp_path / "nope.tir.py"))
    with pytest.raises(TiletuneError, match="not in the cache"):
        parse("fused_thing[1x2]@0123456789abcdef")
    with pytest.raises(TiletuneError, match="PATH: a file holding TVMScript"):
        parse("nonsense")


def test_cli_space_and_tune_best_on_a_file(files, tmp_path, capsys):
    from tiletune.cli import main

    assert main(["space", files["matmul"]]) == 0
    out = capsys.readouterr().out
    assert "fused_matmul_add[12x20,20x24]@" in out and f"size: {make_space(parse(files['matmul'])).size} " in out
    rec = tmp_path / "r.jsonl"
    assert main(["tune", files["matmul"], "--trials", "3", "-r", str(rec), "-q", "--repeat", "1",
                 "--min-repeat-ms", "0"]) == 0
    assert "GFLOPS" in capsys.readouterr().out
    assert main(["best", str(rec), "-w", files["matmul"]]) == 0
    assert "GFLOPS" in capsys.readouterr().out


def test_a_fused_conv_from_a_torch_model_through_relax(home, pool, tmp_path):
    torch = pytest.importorskip("torch")
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 8, 3, padding=1, stride=2)

        def forward(self, x):
            return torch.relu(self.conv(x))

    torch.manual_seed(0)
    x = torch.randn(1, 4, 9, 9)
    with torch.no_grad():
        ep = torch.export.export(Block().eval(), (x,))
    mod = from_exported_program(ep, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    with tvm.target.Target({"kind": "llvm"}):
        mod = tvm.transform.Sequential([
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
            relax.transform.FuseOps(), relax.transform.FuseTIR()])(mod)
    convs = [(gv.name_hint, f) for gv, f in mod.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in gv.name_hint]
    assert len(convs) == 1
    wl = PrimFuncWorkload.from_prim_func(convs[0][1], name=convs[0][0])
    assert wl.key.startswith(convs[0][0] + "[1x4x9x9,8x4x3x3]@"), wl.key
    assert [a.extent for a in wl.axes()] == [1, 8, 5, 5, 4, 3, 3] and wl.epilogue_blocks()
    space = make_space(wl)
    rec = tmp_path / "r.jsonl"
    spec = RunSpec(workload=wl.key, strategy="random", trials=4, records=str(rec), settings=SETTINGS,
                   target=host_target())
    with LocalMeasurer(wl, space, host_target(), SETTINGS, pool=pool) as m:
        res = run(spec, measurer=m)
    assert res.best is not None and res.best.ok


@pytest.mark.parametrize("kind", ["conv", "matmul"])
def test_cuda_template_schedules_fused_kernels_with_their_epilogue(kind, files):
    """Sampled configurations of a fused kernel compile to one CUDA kernel (no GPU needed): the padding read
    while staging, the epilogue (bias, residual, ReLU) computed by the accumulator's write-back."""
    from tiletune.schedules import build
    from tiletune.schedules.cuda import cuda_source

    target = {"kind": "cuda", "arch": "sm_90"}
    wl = parse(files[kind])
    space = make_space(wl, None, target)
    rng = np.random.default_rng(0)
    for _ in range(3):
        src = cuda_source(build(wl, space, space.sample(rng), target))
        kernels = set(re.findall(r"__global__ void .*? (\w+)\(", src))  # declaration and definition: one name
        assert len(kernels) == 1 and "__shared__" in src and "threadIdx.x" in src
        if kind == "conv":
            assert "max(" in src  # the ReLU of the epilogue, in the same kernel


def test_build_exports_a_fused_kernel_that_loads_and_runs(files, tmp_path, capsys):
    from tiletune.api import load_kernel
    from tiletune.cli import main

    rec = tmp_path / "r.jsonl"
    assert main(["tune", files["conv"], "--trials", "2", "-r", str(rec), "-q", "--repeat", "1",
                 "--min-repeat-ms", "0"]) == 0
    lib = tmp_path / "k.so"
    assert main(["build", str(rec), "-o", str(lib)]) == 0
    wl = parse(files["conv"])
    x, w, bias = wl.make_inputs(seed=7)
    np.testing.assert_allclose(load_kernel(str(lib))(x, w, bias), _numpy_conv(x, w, bias), rtol=1e-4, atol=1e-4)


NON_AFFINE = _func("""    for i, j, k in T.grid(8, 8, 4):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                D[vi, vj] = T.float32(0.0)
            D[vi, vj] = D[vi, vj] + A[vi, vk] * B[vk // 2, vj]
""", 'A: T.Buffer((8, 4), "float32"), B: T.Buffer((2, 8), "float32"), D: T.Buffer((8, 8), "float32")')


def test_without_an_access_model_random_tunes_and_gensor_says_why(home, pool, tmp_path):
    path = tmp_path / "k.tir.py"
    path.write_text(NON_AFFINE)
    wl = parse(str(path))
    assert wl.key.startswith("k[8x4,2x8]@")
    space = make_space(wl)
    assert "pack" not in {k.name for k in space.knobs}
    with pytest.raises(TiletuneError, match=r"index vk // 2 of B .* not an affine function"):
        wl.tensor_accesses()
    with pytest.raises(TiletuneError, match="not an affine function"):
        run(RunSpec(workload=str(path), strategy="gensor", trials=2, settings=SETTINGS, target=host_target()))
    with LocalMeasurer(wl, space, host_target(), SETTINGS, pool=pool) as m:
        res = run(RunSpec(workload=str(path), strategy="random", trials=3, settings=SETTINGS,
                          target=host_target()), measurer=m)
    assert res.best is not None and res.best.ok
