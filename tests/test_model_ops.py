"""Everyday operators at the end of a model (a Linear, then the operator): cumsum, sort (values and indices, both
orders), argsort, topk (values and indices, largest and smallest), scatter, scatter_add, scatter_reduce, argmax and
argmin, imported through torch.export and through ONNX, fused, default-scheduled, compiled with TVM and compared
with torch. And what a failure says: the operator and the cause in one line, never TVM's check text."""
import contextlib
import io

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.target import parse_target

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from torch import nn  # noqa: E402

TARGET = parse_target("llvm")
SHAPE = (2, 6, 8)


class Tail(nn.Module):
    """A Linear, then ``fn`` of its output (and the model's other inputs, and a fixed index)."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.lin = fn, nn.Linear(SHAPE[-1], SHAPE[-1])
        perm = torch.stack([torch.randperm(SHAPE[-1])[:3] for _ in range(SHAPE[0] * SHAPE[1])])
        self.register_buffer("perm", perm.reshape(SHAPE[0], SHAPE[1], 3))  # no position twice: plain scatter

    def forward(self, x, *rest):
        return self.fn(self, self.lin(x), *rest)


def _setitem(y, where, value):
    z = y.clone()
    z[where] = value
    return z


def _index():
    return torch.randint(0, SHAPE[-1], (SHAPE[0], SHAPE[1], 3))  # repeats a position: the reductions meet


CASES = {
    "cumsum": (lambda m, y: torch.cumsum(y, -1), False),
    "cumsum_axis1": (lambda m, y: torch.cumsum(y, 1), False),
    "sort": (lambda m, y: torch.sort(y, -1), False),
    "sort_values_descending": (lambda m, y: torch.sort(y, -1, descending=True)[0], False),
    "argsort": (lambda m, y: torch.argsort(y, -1), False),
    "topk": (lambda m, y: torch.topk(y, 3, -1), False),
    "topk_smallest": (lambda m, y: torch.topk(y, 3, -1, largest=False), False),
    "topk_values": (lambda m, y: torch.topk(y, 3, -1)[0], False),
    "topk_indices_after_op": (lambda m, y: torch.topk(y, 2, 1)[1] + 1, False),
    "scatter_add": (lambda m, y, i: torch.zeros(SHAPE).scatter_add(2, i, y[..., :3]), True),
    "scatter_add_larger_src": (lambda m, y, i: torch.ones(SHAPE).scatter_add(2, i, y), True),
    "scatter": (lambda m, y: torch.zeros(SHAPE).scatter(2, m.perm, y[..., :3]), False),
    "scatter_value": (lambda m, y: y.scatter(2, m.perm, 1.5), False),
    "scatter_reduce_sum": (lambda m, y, i: y.scatter_reduce(2, i, y[..., :3], "sum"), True),
    "scatter_reduce_prod": (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "prod"), True),
    "scatter_reduce_amax": (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "amax"), True),
    "scatter_reduce_amin": (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "amin"), True),
    "scatter_add_short_index_axis0": (lambda m, y, i: torch.zeros(SHAPE).scatter_add(0, i[:1] % 2, y[:1, :, :3]), True),
    "scatter_short_index_axis0": (lambda m, y, i: y.scatter(0, i[:1, :4] % 2, y[1:, :4, 5:]), True),
    "scatter_reduce_amax_short_index_axis1":
        (lambda m, y, i: y.scatter_reduce(1, i[:, :3, :2] % 6, y[:, :3, 6:], "amax"), True),
    "setitem_constant_columns": (lambda m, y: _setitem(y, (slice(None), slice(None), torch.tensor([1, -2])), 7.0),
                                 False),
    "argmax": (lambda m, y: torch.argmax(y, -1), False),
    "argmin": (lambda m, y: torch.argmin(y, 1, keepdim=True), False),
}
#: forms torch's ONNX exporter refuses ("ONNX does not support ... for scatter_reduce"): torch.export only
TORCH_ONLY = {
    "scatter_reduce_sum_without_self":
        (lambda m, y, i: y.scatter_reduce(2, i, y[..., :3], "sum", include_self=False), True),
    "scatter_reduce_amax_without_self":
        (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "amax", include_self=False), True),
    "scatter_reduce_prod_without_self":
        (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "prod", include_self=False), True),
    "scatter_reduce_mean": (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "mean"), True),
    # torch's exporter writes index_add as a ScatterElements update plus an Add: repeated indices count once
    "index_add_repeated": (lambda m, y, i: y.index_add(1, torch.tensor([0, 3, 3, 5]), y[:, :4], alpha=0.5), True),
    "setitem_add_runtime_index": (lambda m, y, i: _setitem(y, (slice(None), slice(None), i[0, 0]),
                                                           y[:, :, i[0, 0]] + 1.0), True),
    "scatter_reduce_mean_without_self":
        (lambda m, y, i: y.scatter_reduce(2, i, y[..., 3:6], "mean", include_self=False), True),
}


def _source(name, fn, with_index, path, tmp_path):
    from tiletune.model.frontend.source import from_torch, export_onnx, load

    torch.manual_seed(0)
    example = (torch.randn(SHAPE),) + ((_index(),) if with_index else ())
    src = from_torch(name, name, Tail(fn).eval(), example)
    if path == "torch":
        return src, src
    onnx_path = str(tmp_path / f"{name}.onnx")
    export_onnx(src, onnx_path)
    return src, load(onnx_path)


def _build(source):
    from tiletune.model.build import ModelRunner, compile_module, scheduled_module
    from tiletune.model.kernels.tasks import model_tasks

    tasks = model_tasks(source, TARGET, "NHWC")
    mod, _ = scheduled_module(tasks, {})
    return ModelRunner(compile_module(mod, TARGET))


def _assert_matches(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w)  # indices exactly (the inputs have no ties)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _check(name, fn, with_index, path, tmp_path):
    torch_src, src = _source(name, fn, with_index, path, tmp_path)
    run = _build(src)
    for seed in (0, 1):
        inputs = torch_src.random_inputs(seed)
        _assert_matches(run(*inputs), torch_src.reference(inputs))


@pytest.mark.parametrize("path", ["torch", "onnx"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_builds_and_matches_torch(name, path, tmp_path):
    fn, with_index = CASES[name]
    _check(name, fn, with_index, path, tmp_path)


@pytest.mark.parametrize("name", sorted(TORCH_ONLY))
def test_scatter_reduce_forms_onnx_cannot_express_build_from_torch(name, tmp_path):
    fn, with_index = TORCH_ONLY[name]
    _check(name, fn, with_index, "torch", tmp_path)


@pytest.mark.parametrize("descending", [False, True])
def test_a_stable_sort_keeps_ties_in_order(descending, tmp_path):
    """``sort(stable=True)`` (ATen's ``sort.stable``; torch's ONNX exporter refuses it) on integers with ties:
    the indices of equal values in their input order, as torch gives them."""
    from tiletune.model.frontend.source import from_torch

    class Ties(nn.Module):
        def forward(self, m):
            return torch.sort(m * 3, dim=-1, descending=descending, stable=True)

    src = from_torch("ties", "ties", Ties().eval(), (torch.randint(0, 3, (2, 10)),))
    run = _build(src)
    inputs = src.random_inputs(0)
    assert len(np.unique(inputs[0])) < inputs[0].size  # ties
    _assert_matches(run(*inputs), src.reference(inputs))


def test_an_unsupported_scatter_reduction_is_refused_in_one_line(tmp_path):
    from tiletune.model.frontend.importer import to_relax

    fn = lambda m, y: torch.zeros(SHAPE, dtype=torch.int64).scatter_reduce(  # noqa: E731
        2, m.perm, y[..., :3].long(), "mean")
    src, _ = _source("int_mean", fn, False, "torch", tmp_path)
    with pytest.raises(TiletuneError) as e:
        to_relax(src)
    msg = str(e.value)
    assert "scatter_reduce with reduce='mean' on int64" in msg and "\n" not in msg


def test_library_kernels_get_a_root_block_the_prepacking_accepts():
    """TVM's cumsum kernel is one opaque block with loops and no compute block: the weight prepacking
    (SplitLayoutRewritePreproc) refused it; with a root block around it, it passes, and the kernel computes the
    same."""
    import tvm
    from tvm import relax

    from tiletune.model.kernels.library_kernels import needs_root, with_root_blocks

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.cumsum(x, axis=1))
        bb.emit_func_output(out)
    target = tvm.target.Target(TARGET)
    with target:
        mod = tvm.transform.Sequential([relax.backend.DispatchSortScan(), relax.transform.LegalizeOps()])(bb.get())
    kernels = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any(needs_root(f) for f in kernels)
    with pytest.raises(Exception, match="compute block"):
        relax.transform.SplitLayoutRewritePreproc()(mod)
    fixed = with_root_blocks(mod)
    assert not any(needs_root(f) for f in fixed.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    relax.transform.SplitLayoutRewritePreproc()(fixed)
    vm = relax.VirtualMachine(tvm.compile(fixed, target=target), tvm.cpu())
    a = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(a)).numpy(), np.cumsum(a, 1), rtol=1e-5, atol=1e-5)


def test_kernel_operators_are_read_from_the_kernel_name():
    from tiletune.model.kernels.library_kernels import describe, kernel_operators, reason

    assert kernel_operators("fused_matmul_add_tanh1_multiply2") == ["matmul", "add", "tanh", "multiply"]
    assert kernel_operators("scatter_elements1") == ["scatter_elements"]
    assert describe("cumsum") == "kernel cumsum (operator cumsum)"
    msg = ("Traceback (most recent call last):\n  File x\ntvm.error.InternalError: Check failed: (current_subtree_ == "
           "-1) is false: There should be a compute block if there is only one subtree under the root.")
    assert reason(msg) == "There should be a compute block if there is only one subtree under the root."


def test_a_fusion_failure_names_the_operator_without_tvm_check_text(monkeypatch, tmp_path):
    """A legalization that fails (here: made to fail with a TVM-like check message) is named by its operator."""
    from tiletune.model.passes import nchwc
    from tiletune.model.passes.pipeline import prepare
    from tiletune.model.kernels.tasks import fuse

    def broken(bb, call):
        raise ValueError("Check failed: (n > 0) is false: the index tensor is empty")

    monkeypatch.setattr(nchwc, "LEGALIZE", {**nchwc.LEGALIZE, "relax.scatter_elements": broken})
    fn, with_index = CASES["scatter_add"]
    src, _ = _source("scatter_add", fn, with_index, "torch", tmp_path)
    with pytest.raises(TiletuneError) as e:
        fuse(prepare(src).mod, TARGET)
    msg = str(e.value)
    assert msg == ("fusing the model's operators failed at operator scatter_elements (the index tensor is empty)")


def test_a_compile_failure_names_the_kernel_and_its_operators_without_tvm_check_text(tmp_path):
    """A kernel TVM's CPU build refuses (a GPU thread binding, here) is named with its operators in one line."""
    import tvm
    from tvm import s_tir

    from tiletune.model.build import compile_module, scheduled_module
    from tiletune.model.kernels.tasks import model_tasks

    src, _ = _source("relu", lambda m, y: torch.relu(y) * 2.0, False, "torch", tmp_path)
    tasks = model_tasks(src, TARGET, "NHWC")
    mod, _ = scheduled_module(tasks, {})
    gv = next(g for g, f in mod.functions.items()
              if isinstance(f, tvm.tirx.PrimFunc) and g.name_hint.startswith("fused_matmul"))
    sch = s_tir.Schedule(tvm.IRModule({"main": tasks.fused[gv]}))
    block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    sch.bind(sch.get_loops(block)[0], "threadIdx.x")
    bad = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    bad[gv] = sch.mod["main"].without_attr("global_symbol")
    with pytest.raises(TiletuneError) as e:
        compile_module(bad, TARGET)
    msg = str(e.value)
    assert msg.startswith(f"compiling the model failed (kernel {gv.name_hint} (operators matmul, add")
    assert "Check failed" not in msg and "\n" not in msg


def test_onnx_frontend_errors_name_the_operator_and_print_nothing():
    """TVM's ONNX frontend prints "Error converting operator ..." (with its inputs' IR) before it re-raises; under
    ``onnx_converters`` nothing reaches stdout and the error names the operator."""
    from onnx import TensorProto, helper
    from tvm.relax.frontend.onnx import from_onnx

    from tiletune.model.frontend.onnx_ops import onnx_converters

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [1])
    outs = [helper.make_tensor_value_info(n, t, [2, 3])
            for n, t in (("y", TensorProto.FLOAT), ("i", TensorProto.INT64))]
    graph = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)], "g", [x, k], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(ValueError) as e:
        with onnx_converters():
            from_onnx(model, shape_dict={"x": [2, 8], "k": [1]}, keep_params_in_input=False)
    assert out.getvalue() == ""
    assert str(e.value).startswith("ONNX operator TopK: ")


def test_onnx_fold_takes_static_shapes_and_known_branches():
    """Shape/Size of a statically shaped tensor become constants (a sort's TopK k), and an If whose condition is
    known is replaced by its branch; a shape with a named dimension is left to run, its numbered dimensions
    gathered from it fold."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from tiletune.model.frontend.onnx_fold import fold_constants

    def model(dim):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 8])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 8])
        axis = numpy_helper.from_array(np.array(1, dtype=np.int64), "axis")
        zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")
        then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                                 [helper.make_tensor_value_info("t", TensorProto.FLOAT, [dim, 8])])
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", TensorProto.FLOAT, [dim, 8])])
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "axis"], ["k0"]),
                 helper.make_node("Unsqueeze", ["k0", "zero"], ["k"]),
                 helper.make_node("Size", ["s"], ["n"]), helper.make_node("Equal", ["n", "zero"], ["c"]),
                 helper.make_node("If", ["c"], ["v"], then_branch=then, else_branch=other),
                 helper.make_node("TopK", ["v", "k"], ["y", "i"], axis=-1, largest=0)]
        g = helper.make_graph(nodes, "g", [x], [y], initializer=[axis, zero])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    folded = fold_constants(model(2))
    ops = [n.op_type for n in folded.graph.node]
    assert "Shape" not in ops and "If" not in ops and "TopK" in ops
    k = next(n.input[1] for n in folded.graph.node if n.op_type == "TopK")
    assert k in {t.name for t in folded.graph.initializer}
    onnx.checker.check_model(folded)
    a = np.random.default_rng(0).standard_normal((2, 8)).astype("float32")
    np.testing.assert_array_equal(ReferenceEvaluator(folded).run(None, {"x": a})[0], np.sort(a, -1))
    dynamic = fold_constants(model("batch"))  # the batch is a name: its Shape stays, the sorted axis' length folds
    assert "Shape" in [n.op_type for n in dynamic.graph.node]
    k = next(n.input[1] for n in dynamic.graph.node if n.op_type == "TopK")
    assert numpy_helper.to_array(next(t for t in dynamic.graph.initializer if t.name == k)).tolist() == [8]
