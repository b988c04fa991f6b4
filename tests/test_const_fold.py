"""The weights' arithmetic folded with numpy before lowering (tiletune.model.passes.const_fold)."""
import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from tiletune.model.passes.const_fold import fold_weights  # noqa: E402


def _calls(mod) -> list[str]:
    out = []

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            out.append(call.op.name)
            for a in call.args:
                self.visit_expr(a)

    Calls().visit_expr(mod["main"])
    return out


def _constants(mod) -> list[np.ndarray]:
    out = []

    @relax.expr_functor.visitor
    class Consts(relax.PyExprVisitor):
        def visit_call_(self, call):
            out.extend(a.value.numpy() for a in call.args if isinstance(a, tvm.ir.expr.Constant))
            for a in call.args:
                self.visit_expr(a)

    Consts().visit_expr(mod["main"])
    return out


def _module(build, shape=(1, 5, 7, 3), dtype="float32"):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def _run(mod, *args):
    with tvm.target.Target("llvm"):
        ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def test_a_chain_of_layout_changes_on_a_weight_becomes_one_constant_of_the_same_values():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 7, 1, 1), dtype=np.float32)  # a bias of odd width, stored as PyTorch keeps it
    scale = rng.standard_normal((3,), dtype=np.float32) + 2

    def build(bb, x):
        t = bb.emit(relax.op.permute_dims(relax.const(w), [2, 3, 1, 0]))  # (1, 1, 7, 3)
        s = bb.emit(relax.op.reshape(relax.const(scale), (1, 1, 1, 3)))
        d = bb.emit(relax.op.divide(t, relax.op.sqrt(s)))
        return relax.op.add(x, d)

    mod = _module(build)
    folded = fold_weights(mod)
    assert _calls(folded) == ["relax.add"]
    (c,) = _constants(folded)
    np.testing.assert_allclose(c, np.transpose(w, (2, 3, 1, 0)) / np.sqrt(scale.reshape(1, 1, 1, 3)), rtol=1e-6)
    x = rng.standard_normal((1, 5, 7, 3), dtype=np.float32)
    np.testing.assert_allclose(_run(folded, x), _run(mod, x), rtol=1e-6)


def test_operators_with_a_tensor_operand_or_outside_the_folded_set_are_kept():
    w = np.arange(12, dtype=np.float32).reshape(4, 3)

    def build(bb, x):
        t = bb.emit(relax.op.permute_dims(relax.const(w), [1, 0]))  # folded: (3, 4)
        p = bb.emit(relax.op.power(t, relax.const(np.float32(2.0))))  # not in FOLDED: left to FoldConstant
        return relax.op.matmul(x, relax.op.permute_dims(p, [1, 0]))  # its operand p is not a constant

    folded = fold_weights(_module(build, shape=(2, 4)))
    assert sorted(_calls(folded)) == ["relax.matmul", "relax.permute_dims", "relax.power"]
    assert any(np.array_equal(c, w.T) for c in _constants(folded))


def test_integer_arithmetic_is_left_to_tvm():
    idx = np.array([3, 1, 2], dtype=np.int64)

    def build(bb, x):
        i = bb.emit(relax.op.divide(relax.const(idx), relax.const(np.array(2, dtype=np.int64))))
        return relax.op.take(x, i, axis=1)

    folded = fold_weights(_module(build, shape=(2, 5)))
    assert "relax.divide" in _calls(folded)


def test_a_weight_cast_to_float16_folds_rounded_as_tvm_rounds():
    w = np.array([[1.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 65519.0]], dtype=np.float32)  # ties, overflow edge

    def build(bb, x):
        return relax.op.add(x, bb.emit(relax.op.astype(relax.const(w), "float16")))

    mod = _module(build, shape=(1, 4), dtype="float16")
    folded = fold_weights(mod)
    assert _calls(folded) == ["relax.add"]
    (c,) = _constants(folded)
    assert c.dtype == np.float16
    x = np.zeros((1, 4), dtype=np.float16)
    np.testing.assert_array_equal(_run(folded, x), _run(mod, x))
