"""Elementwise operators moved before the reshapes around them, so that they fuse into the matmul before.

PyTorch's ``nn.Linear`` on a 3-D input imports as ``reshape -> matmul -> add -> reshape``; an activation after
it then reads the reshaped result: ``matmul -> add -> reshape -> gelu -> reshape -> matmul``. A reshape is an
injective operator, and FuseOps fuses only elementwise and broadcast operators into a matmul's epilogue, so
GELU becomes a kernel of its own that reads and writes the whole activation once more. An elementwise
operator gives the same values before or after a reshape, so ``hoist_over_reshapes`` rewrites

- ``u(reshape(y, s))`` -> ``reshape(u(y), s)`` for a unary elementwise ``u`` (``UNARY``), and for a binary one
  (``BINARY``) whose other operand is a scalar constant, or broadcasts against ``s`` the way it would against
  ``y``'s shape where ``s`` only adds leading unit dimensions to it (a residual add after ``nn.Linear``, an
  attention mask added to the scores): that operand is reshaped instead (a view);
- ``reshape(reshape(y, s1), s2)`` -> ``reshape(y, s2)``, and that to ``y`` when ``y`` already has shape ``s2``;

after which the activation joins the matmul's epilogue and the reshapes in between cancel or become views.
"""
from __future__ import annotations

from .layout import rewrite_functions

UNARY = {"relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.relu", "relax.nn.silu", "relax.sigmoid", "relax.tanh",
         "relax.exp", "relax.erf", "relax.negative", "relax.sqrt", "relax.rsqrt", "relax.square", "relax.abs"}
BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
          "relax.power"}


#: passes at most (each pass rewrites what the previous one exposed; gpt2 needs two)
MAX_PASSES = 8


def hoist_over_reshapes(mod):
    """``mod`` with elementwise operators moved before reshapes (see the module docstring), the rewrite repeated
    until nothing changes: a pass emits new reshapes (an operator moved before one is followed by it) that meet
    the next reshape only in the pass after (gpt2's tanh-GELU: 284 reshapes after one pass, 198 after two)."""
    import tvm_ffi

    for _ in range(MAX_PASSES):
        out = _hoist_once(mod)
        if tvm_ffi.structural_equal(out, mod):
            break
        mod = out
    return mod


def _hoist_once(mod):
    import tvm
    import tvm_ffi
    from tvm import relax

    def op_name(call) -> str:
        return getattr(getattr(call, "op", None), "name", "")

    def static(e):
        """The static shape of ``e`` (a tensor expression) as a tuple of ints, or None."""
        shape = getattr(getattr(e, "ty", None), "shape", None)
        try:
            return tuple(int(v) for v in shape) if shape is not None else None
        except TypeError:  # a symbolic dimension
            return None

    def is_scalar_const(e) -> bool:
        return isinstance(e, tvm.ir.expr.Constant) and getattr(e.ty, "ndim", -1) == 0

    @relax.expr_functor.mutator
    class Hoist(relax.PyExprMutator):
        def producer(self, e):
            """The reshape call that binds ``e``, or None."""
            if isinstance(e, relax.Var):
                bound = self.lookup_binding(e)
                if isinstance(bound, relax.Call) and op_name(bound) == "relax.reshape":
                    return bound
            return None

        def in_shape_of(self, other, r):
            """``other`` reshaped to broadcast against the reshape ``r``'s input as it broadcast against its
            output, where ``r`` only adds (or removes) leading unit dimensions and ``other`` has the output's
            rank with units there; else None."""
            y_shape, out_shape, o_shape = static(r.args[0]), static(r), static(other)
            if y_shape is None or out_shape is None or o_shape is None or len(o_shape) != len(out_shape):
                return None
            k = len(out_shape) - len(y_shape)
            if k < 0 or out_shape[:k] != (1,) * k or out_shape[k:] != y_shape or o_shape[:k] != (1,) * k:
                return None
            if k == 0:
                return other
            return self.builder_.emit(relax.op.reshape(other, o_shape[k:]))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = op_name(call)
            if name in UNARY and len(call.args) == 1:
                r = self.producer(call.args[0])
                if r is not None:
                    inner = self.builder_.emit(relax.Call(call.op, [r.args[0]], call.attrs))
                    return relax.op.reshape(inner, r.args[1])
            if name in BINARY and len(call.args) == 2:
                for i in (0, 1):
                    r, other = self.producer(call.args[i]), call.args[1 - i]
                    if r is None:
                        continue
                    moved = other if is_scalar_const(other) else self.in_shape_of(other, r)
                    if moved is not None:
                        args = [r.args[0], moved] if i == 0 else [moved, r.args[0]]
                        inner = self.builder_.emit(relax.Call(call.op, args, call.attrs))
                        return relax.op.reshape(inner, r.args[1])
            if name == "relax.reshape":
                r = self.producer(call.args[0])
                if r is not None:
                    y = r.args[0]
                    shape = getattr(getattr(y, "ty", None), "shape", None)
                    if shape is not None and tvm_ffi.structural_equal(shape, call.args[1]):
                        return y
                    return relax.op.reshape(y, call.args[1])
            return call

    return tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                     relax.transform.DeadCodeElimination()])(rewrite_functions(mod, Hoist))
