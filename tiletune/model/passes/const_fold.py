"""Constant folding of a Relax model's weight arithmetic with numpy, before its operators are lowered.

Importing a model and converting its convolutions to NHWC leaves operators whose operands are all constants:
the weights' ``permute_dims`` to the new layout, the biases' ``reshape`` to broadcast, and where a frontend
keeps them, the arithmetic of a folded normalization. TVM's ``FoldConstant`` folds them after ``LegalizeOps``
by compiling each one to a kernel with LLVM and running it, a cost every build pays and a dynamic model pays again
at every shape change (Gensor's Fig. 12; the figures: docs/models.md, "Tasks and the rest"). ``fold_weights``
computes the operators of ``FOLDED`` on constant operands with numpy instead (the same values: each is a
data movement or one correctly rounded IEEE operation per element), in graph order, so that chains (a reshape of
a transposed weight) fold too; a use of a folded binding gets the constant itself (``call_tir``'s constant operands are
how ``tiletune.model.kernels.tasks.weight_params`` finds a kernel's weights), and the bindings left unused go.
The casts of the weights to a half dtype (``tiletune.model.passes.precision``) fold
here too where numpy has the dtype (float16, rounded to nearest even as LLVM's conversion). Anything else with
constant operands (an operator not in ``FOLDED``, a dtype numpy lacks such as bfloat16, integer arithmetic) is
left to ``FoldConstant``.
"""
from __future__ import annotations

import numpy as np

from ..frontend.dims import static_shape
from .layout import rewrite_functions

_UNARY = {"relax.negative": np.negative, "relax.sqrt": np.sqrt}  # not exp: the model computes TVM's fast_exp
_BINARY = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
           "relax.divide": np.divide}
#: the operators folded here (the data movements of a layout change, elementwise float arithmetic)
FOLDED = frozenset({"relax.permute_dims", "relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.astype"}
                   | set(_UNARY) | set(_BINARY))
_FLOATS = {"float16", "float32", "float64"}


def fold_weights(mod):
    """``mod`` with the operators of ``FOLDED`` on constant operands computed with numpy (see the module
    docstring); ``mod`` itself is left as it is."""
    import tvm
    from tvm import relax

    def value(e):
        return e.value.numpy() if isinstance(e, tvm.ir.expr.Constant) else None

    def compute(call) -> np.ndarray | None:
        name = call.op.name
        attrs = call.attrs
        x = value(call.args[0])
        if x is None:
            return None
        if name == "relax.permute_dims":
            axes = None if attrs.axes is None else [int(a) for a in attrs.axes]
            return np.ascontiguousarray(np.transpose(x, axes))
        if name == "relax.reshape":
            shape = static_shape(call.args[1].values) if isinstance(call.args[1], relax.ShapeExpr) else None
            return None if shape is None else x.reshape(shape)
        if name == "relax.expand_dims":
            return np.expand_dims(x, tuple(int(a) for a in attrs.axis))
        if name == "relax.squeeze":
            axis = None if attrs.axis is None else tuple(int(a) for a in attrs.axis)
            return np.squeeze(x, axis)
        if str(x.dtype) not in _FLOATS:
            return None
        if name == "relax.astype":  # a float weight cast to another float dtype numpy has (float16: round to even)
            to = str(attrs.dtype)
            return x.astype(to) if to in _FLOATS else None
        if name in _UNARY:
            return _UNARY[name](x)
        y = value(call.args[1])
        if y is None or y.dtype != x.dtype:
            return None
        return _BINARY[name](x, y)

    @relax.expr_functor.mutator
    class Fold(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not isinstance(call, relax.Call):
                return call
            dtype = str(getattr(call.ty, "dtype", ""))
            args = [self.constant(a) for a in call.args]
            if any(not a.same_as(b) for a, b in zip(args, call.args)):
                call = relax.Call(call.op, args, call.attrs, call.ty_args)
            if getattr(call.op, "name", "") not in FOLDED:
                return call
            out = compute(call)
            if out is None or str(out.dtype) != dtype:
                return call
            return relax.const(out, dtype)

        def constant(self, e):
            """``e``, or the constant a binding of ``e`` (a variable) was folded to."""
            if isinstance(e, relax.Var):
                bound = self.lookup_binding(e)
                if isinstance(bound, tvm.ir.expr.Constant):
                    return bound
            return e

    return tvm.transform.Sequential([relax.transform.DeadCodeElimination()])(rewrite_functions(mod, Fold))
