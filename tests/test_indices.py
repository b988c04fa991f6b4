"""No wrong result from an index: negative and boundary indices mean what PyTorch and ONNX say
(tiletune.model.passes.indices), and a build whose library differs from the original is never written
(tiletune.model.build.check / export_checked)."""
import json
import os

import numpy as np
import pytest

from tiletune.errors import TiletuneError

DECODER = '''
import torch, torch.nn as nn, torch.nn.functional as F

class RMSNorm(nn.Module):
    def __init__(s, d):
        super().__init__(); s.w = nn.Parameter(torch.rand(d) + 0.5)
    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * s.w

class Decoder(nn.Module):
    """A LLaMA-style decoder layer (RMSNorm, causal attention, SwiGLU) ending in the last token's logits."""
    def __init__(s, last, vocab=50, d=32, heads=2):
        super().__init__()
        s.last, s.h = last, heads
        s.emb = nn.Embedding(vocab, d)
        s.n1, s.n2, s.norm = RMSNorm(d), RMSNorm(d), RMSNorm(d)
        s.qkv, s.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        s.g, s.u, s.dn = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False), nn.Linear(2 * d, d, bias=False)
        s.head = nn.Linear(d, vocab, bias=False)
    def forward(s, ids):
        x = s.emb(ids)
        B, T, D = x.shape
        q, k, v = (t.view(B, T, s.h, D // s.h).transpose(1, 2) for t in s.qkv(s.n1(x)).split(D, -1))
        x = x + s.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D))
        y = s.n2(x)
        x = x + s.dn(F.silu(s.g(y)) * s.u(y))
        if s.last == "index":
            x = x[:, -1]
        elif s.last == "slice":
            x = x[:, -1:]
        elif s.last == "narrow":
            x = x.narrow(1, -1, 1)
        else:
            x = torch.roll(x, 1, 1)[:, 0]
        return s.head(s.norm(x))

def make(last):
    torch.manual_seed(0)
    return Decoder(last).eval(), (torch.randint(0, 50, (1, 12)),)

def index(): return make("index")
def slice(): return make("slice")
def narrow(): return make("narrow")
def roll(): return make("roll")
'''


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("decoder") / "decoder.py"
    path.write_text(DECODER)
    return str(path)


def _build(source, tmp_path, name, layout="NHWC"):
    from tiletune.model.build import compile_module, export_checked, scheduled_module
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.target import parse_target

    target = parse_target("llvm")
    tasks = model_tasks(source, target, layout)
    mod, _ = scheduled_module(tasks, {})
    path = str(tmp_path / f"{name}.so")
    meta = {"model": source.spec, "target": target, "layout": layout, "dtype": "float32",
            "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in source.inputs]}
    export_checked(compile_module(mod, target), path, meta, source)
    return path


def _relative_error(lib, torch_source, seeds=(0, 1, 2)):
    from tiletune.api import load_model

    model, worst = load_model(lib), 0.0
    for seed in seeds:
        inputs = torch_source.random_inputs(seed)
        got, want = model(*inputs), torch_source.reference(inputs)
        worst = max(worst, max(float(np.max(np.abs(g - w)) / np.max(np.abs(w))) for g, w in zip(got, want)))
    return worst


@pytest.mark.tvm
@pytest.mark.parametrize("last", ["index", "slice", "narrow", "roll"])
def test_a_decoder_ending_in_the_last_token_matches_torch_in_both_import_paths(decoder, tmp_path, last):
    from tiletune.model.frontend.source import export_onnx, load

    torch_source = load(f"{decoder}:{last}")
    onnx_path = str(tmp_path / f"{last}.onnx")
    export_onnx(torch_source, onnx_path)
    for path, source in (("torch", torch_source), ("onnx", load(onnx_path))):
        for layout in ("NHWC", "NCHW"):
            err = _relative_error(_build(source, tmp_path, f"{last}-{path}-{layout}", layout), torch_source)
            assert err <= 1e-5, (path, layout, err)


@pytest.mark.tvm
def test_model_build_checks_the_written_library_and_says_so(decoder, tmp_path, capsys):
    from tiletune.cli import main

    lib = str(tmp_path / "m.so")
    assert main(["model", "build", f"{decoder}:index", "-o", lib]) == 0
    out = capsys.readouterr().out
    assert "the written library, loaded as load_model() loads it, matches the original on 4 input sets" in out
    assert json.loads(open(lib + ".json").read())["check_error"] <= 1e-3


@pytest.mark.tvm
def test_without_the_index_rule_the_build_is_refused_and_nothing_is_written(decoder, tmp_path, monkeypatch, capsys):
    """The decoder's take(x, -1) left as TVM imports it: TVM's fast-mode warning is raised as our error (what the
    memory before the tensor holds varies, and may even equal the right row: no output check alone can be sure of
    catching a read outside a tensor). A wrong index that stays inside the tensor is refused by the check of the
    written library. Either way no library is written."""
    import tiletune.model.passes.pipeline as pipeline
    from tiletune.cli import main

    lib = str(tmp_path / "bad.so")
    monkeypatch.setattr(pipeline, "normalize_indices", lambda mod, where="": mod)
    assert main(["model", "build", f"{decoder}:index", "-o", lib]) == 2
    assert "reads its indices without a bounds rule" in capsys.readouterr().err

    from tiletune.model.passes import indices

    def first_row(mod, where=""):  # every constant index read as 0: a wrong row, inside the tensor
        from tvm import relax
        from tvm.ir.expr import Constant

        @relax.expr_functor.mutator
        class Zero(relax.PyExprMutator):
            def visit_call_(self, call):
                call = super().visit_call_(call)
                if getattr(call.op, "name", "") == "relax.take" and isinstance(call.args[1], Constant):
                    v = call.args[1].value.numpy()
                    return relax.op.take(call.args[0], relax.const(np.zeros_like(v), str(v.dtype)),
                                         axis=call.attrs.axis, mode="clip")
                return call

        for gv, f in list(mod.functions.items()):
            if isinstance(f, relax.Function):
                mod[gv] = Zero().visit_expr(f)
        return indices.normalize_indices(mod, where)

    monkeypatch.setattr(pipeline, "normalize_indices", first_row)
    assert main(["model", "build", f"{decoder}:index", "-o", lib]) == 2
    err = capsys.readouterr().err
    assert "output differs from the original's on the example inputs: max error" in err, err
    assert not [p for p in os.listdir(tmp_path) if "bad" in p]


def _take_module(index, shape=(3, 5), mode="fast", gather=False):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(shape), "float32"))
    params = [x] + ([] if not isinstance(index, str) else [relax.Var("i", relax.TensorType([2, 2], "int64"))])
    idx = params[1] if isinstance(index, str) else relax.const(np.array(index, dtype="int64"), "int64")
    with bb.function("main", params):
        with bb.dataflow():
            op = relax.op.gather_elements(x, idx, axis=1) if gather else relax.op.take(x, idx, axis=1, mode=mode)
            out = bb.emit_output(op)
        bb.emit_func_output(out)
    return bb.get()


def _run(mod, *args):
    import tvm
    from tvm import relax

    ex = tvm.compile(relax.transform.LegalizeOps()(mod), "llvm")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(a) for a in args])
    return out.numpy()


@pytest.mark.tvm
def test_constant_indices_are_normalized_and_run_time_ones_wrapped():
    from tiletune.model.passes.indices import normalize_indices

    x = np.arange(15, dtype="float32").reshape(3, 5)
    fixed = normalize_indices(_take_module([-1, 0, -5]))
    assert "fast" not in fixed.script()
    np.testing.assert_array_equal(_run(fixed, x), x[:, [-1, 0, -5]])
    ids = np.array([[-1, 4], [-5, 2]])
    wrapped = normalize_indices(_take_module("runtime"))
    assert 'mode="wrap"' in wrapped.script()
    np.testing.assert_array_equal(_run(wrapped, x, ids), np.take(x, ids, axis=1))
    gathered = normalize_indices(_take_module("runtime", shape=(2, 5), gather=True))
    np.testing.assert_array_equal(_run(gathered, x[:2], ids), np.take_along_axis(x[:2], ids % 5, axis=1))


def test_a_constant_index_outside_its_axis_is_refused_in_one_line():
    pytest.importorskip("tvm")
    from tiletune.model.passes.indices import normalize_indices

    with pytest.raises(TiletuneError, match=r"^m: take along axis 1: index -6 is outside the axis of size 5$"):
        normalize_indices(_take_module([0, -6]), "m")


@pytest.mark.tvm
def test_scatter_elements_wraps_negative_indices_itself():
    """Why tiletune.model.passes.indices leaves scatter_elements as TVM makes it."""
    from tvm import relax

    x, ids, upd = np.zeros((2, 5), "float32"), np.array([[-1, 0], [4, -5]]), np.ones((2, 2), "float32")
    bb = relax.BlockBuilder()
    vs = [relax.Var(n, relax.TensorType(list(a.shape), str(a.dtype))) for n, a in zip("xiu", (x, ids, upd))]
    with bb.function("main", vs):
        with bb.dataflow():
            out = bb.emit_output(relax.op.scatter_elements(*vs, axis=1))
        bb.emit_func_output(out)
    want = x.copy()
    np.put_along_axis(want, ids % 5, upd, axis=1)
    np.testing.assert_array_equal(_run(bb.get(), x, ids, upd), want)


class _Source:
    """A stand-in ModelSource: one float input, the original doubles it."""
    kind, spec, example, inputs = "onnx", "m", (), []

    def example_binding(self):
        return {}

    def random_inputs(self, seed, binding=None):
        return [np.random.default_rng(seed).standard_normal((2, 3)).astype("float32")]

    def reference(self, inputs):
        return [inputs[0] * 2]


def test_check_names_the_input_set_and_the_first_output_that_differs():
    from tiletune.model.build import check

    assert check(_Source(), lambda x: [x * 2]) == 0.0
    with pytest.raises(TiletuneError, match=r"on random inputs \(seed 0\): max error .*; output 0 at \[0, 0\]"):
        check(_Source(), lambda x: [x * 2 + np.eye(2, 3, dtype="float32")])


def test_check_refuses_outputs_that_change_from_call_to_call():
    from tiletune.model.build import check

    calls = []

    def flaky(x):  # right on the first call of each input set, a little off on the second
        calls.append(1)
        return [x * 2 + (len(calls) % 2 == 0) * 5e-4]

    with pytest.raises(TiletuneError, match="changes from one call to the next"):
        check(_Source(), flaky)


def test_integer_inputs_get_a_set_that_differs_position_by_position():
    from tiletune.model.frontend.source import InputSpec, ModelSource

    src = ModelSource("m", "m", "onnx", [InputSpec("ids", (2, 6), "int64", high=5, low=-5)])
    ids = src.distinct_inputs()[0]
    assert ids.min() >= -5 and ids.max() < 5
    assert len(set(ids.ravel().tolist())) == 10  # every value of the range, none twice in a row
    assert all(a != b for a, b in zip(ids.ravel(), ids.ravel()[1:]))
    assert src.random_inputs(0)[0].min() >= -5


ADVANCED = {  # PyTorch's advanced indexing with several index tensors, negative ones among them
    "adjacent": lambda y: y[:, torch_arange(6), torch_tensor([-1, -2, -3, 0, 1, 2])],
    "apart": lambda y: y[torch_tensor([0, -1]), :, torch_tensor([[1], [-2]])],
    "leading": lambda y: y[torch_tensor([1, 0]), torch_tensor([-1, 3])],
}


def torch_arange(n):
    import torch

    return torch.arange(n)


def torch_tensor(v):
    import torch

    return torch.tensor(v)


@pytest.mark.tvm
@pytest.mark.parametrize("case", list(ADVANCED))
def test_advanced_indexing_with_several_index_tensors_matches_torch(tmp_path, case):
    import torch

    from tiletune.model.frontend.source import from_torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return ADVANCED[case](self.lin(x))

    torch.manual_seed(0)
    src = from_torch(case, case, M(), (torch.randn(2, 6, 8),))
    assert _relative_error(_build(src, tmp_path, case), src) <= 1e-5


@pytest.mark.tvm
def test_run_time_index_tensors_wrap_and_a_boolean_mask_is_refused(tmp_path):
    import torch

    from tiletune.model.frontend.source import from_torch

    class M(torch.nn.Module):
        def forward(self, x, i, j):
            return x[:, i, j] * 2

    src = from_torch("rt", "rt", M(), (torch.randn(2, 6, 8), torch.tensor([0, 5, -1]), torch.tensor([[7], [-8]])))
    assert src.inputs[1].low == -1 and src.inputs[2].low == -8  # the checks draw negative indices too
    assert _relative_error(_build(src, tmp_path, "rt"), src) <= 1e-6

    class Mask(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]

    with pytest.raises(TiletuneError, match=r"boolean mask \(x\[mask\]\)"):
        _build(from_torch("mask", "mask", Mask(), (torch.randn(2, 3),)), tmp_path, "mask")


def _onnx_cases():
    """(node, extra inputs {name: (shape, run-time value)}, initializers) of ONNX's indexing operators, each with
    negative and boundary indices, on a 3x5 input ``x``."""
    from onnx import helper as h

    return {
        "Gather const": (h.make_node("Gather", ["x", "i"], ["y"], axis=1), {}, {"i": np.array([-1, 0, -5, 4])}),
        "Gather": (h.make_node("Gather", ["x", "i"], ["y"], axis=1), {"i": np.array([-1, 4, -5, 0])}, {}),
        "GatherElements": (h.make_node("GatherElements", ["x", "i"], ["y"], axis=1),
                           {"i": np.array([[-1, 0], [4, -5], [2, -3]])}, {}),
        "GatherND": (h.make_node("GatherND", ["x", "i"], ["y"]), {"i": np.array([[-1, -1], [0, -5], [2, 4], [-3, 0]])},
                     {}),
        "GatherND const": (h.make_node("GatherND", ["x", "i"], ["y"]), {}, {"i": np.array([[-1, -1], [0, -5]])}),
        "ScatterND": (h.make_node("ScatterND", ["x", "i", "u"], ["y"]), {"i": np.array([[-1, -1], [0, -5]])},
                      {"u": np.ones(2, "float32")}),
        "ScatterElements": (h.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1),
                            {"i": np.array([[-1], [-5], [4]])}, {"u": np.ones((3, 1), "float32")}),
        "Slice negative step": (h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]), {},
                                {"s": np.array([-1]), "e": np.array([-100]), "a": np.array([1]), "st": np.array([-2])}),
        "Slice out of range": (h.make_node("Slice", ["x", "s", "e", "a"], ["y"]), {},
                               {"s": np.array([-100, 1]), "e": np.array([100, 1000]), "a": np.array([0, -1])}),
    }


@pytest.mark.tvm
@pytest.mark.parametrize("case", ["Gather const", "Gather", "GatherElements", "GatherND", "GatherND const", "ScatterND",
                                  "ScatterElements", "Slice negative step", "Slice out of range"])
def test_onnx_indexing_operators_match_onnx_runtime_on_negative_and_boundary_indices(tmp_path, case):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper as h, numpy_helper

    from tiletune.model.build import ModelRunner, compare, compile_module, scheduled_module
    from tiletune.model.frontend.source import load
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.target import parse_target

    node, runtime, inits = _onnx_cases()[case]
    inputs = [h.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])] + [
        h.make_tensor_value_info(k, TensorProto.INT64, list(v.shape)) for k, v in runtime.items()]
    graph = h.make_graph([node], "g", inputs, [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                         initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    source, target = load(path), parse_target("llvm")
    mod, _ = scheduled_module(model_tasks(source, target, "NHWC"), {})
    run = ModelRunner(compile_module(mod, target))
    x = [np.random.default_rng(0).standard_normal((3, 5)).astype("float32"), *runtime.values()]
    assert compare(run(*x), source.reference(x)) == 0.0


def test_an_original_that_fails_on_the_check_inputs_is_one_line():
    """A model torch.export takes but PyTorch cannot run (torch.gather of a negative index in its example)."""
    from tiletune.model.build import check

    class Failing(_Source):
        def reference(self, inputs):
            raise RuntimeError("index -1 is out of bounds for dimension 1 with size 11\nmore")

    with pytest.raises(TiletuneError, match=r"^the original model fails on random inputs \(seed 0\), so the build "
                                            r"cannot be checked: RuntimeError: index -1 is out of bounds"):
        check(Failing(), lambda x: [x * 2])
