"""A model's floating-point compute in float16 or bfloat16 (``--dtype``), its inputs and outputs as the user gives
them (float32 stays float32 at the boundary; integer inputs such as token ids stay integers).

``cast(mod, dtype)`` runs Relax's automatic mixed precision, ``ToMixedPrecision(out_dtype="float32")``: the
operators it always runs in half precision (convolutions, matmuls) take half inputs and accumulate in
float32 (the ``out_dtype`` of the op; the tensor-core template's accumulators), the operators that follow run
in the half type when their inputs are, and those it never runs in half (the reductions of softmax and layer
norm, exp, log) stay in float32; the weights are cast once (``FoldConstant`` folds the casts of constants).
Two steps around it, each a choice the pass leaves open:

- ``clip`` with scalar bounds (ReLU6, Hardtanh: ``R.clip(x, 0, 6)``) holds its bounds as PrimValues, which
  the pass cannot type ("Expected TensorType, but got T.int64"): it becomes ``minimum(maximum(x, lo), hi)``
  with tensor constants first (``tiletune.model.passes.layout.clip_as_min_max``, which the layout conversion uses for
  the same reason);
- the pass knows float16 only: for bfloat16 every cast to float16 it inserted is made a cast to bfloat16, and
  the module's types inferred again (the same operators, the same float32 accumulation); the normalizations
  TVM's operator library has no bfloat16 kernel for (``FLOAT32_NORMS``) run in float32 between casts.
"""
from __future__ import annotations

from ...errors import TiletuneError, one_line
from .layout import clip_as_min_max, rewrite_functions

DTYPES = ("float32", "float16", "bfloat16")
#: normalizations TVM's operator library computes in float32 or float16 only: in a bfloat16 model they run in
#: float32 between casts
FLOAT32_NORMS = {"relax.nn.layer_norm", "relax.nn.group_norm", "relax.nn.rms_norm", "relax.nn.instance_norm"}


def check_dtype(dtype: str | None) -> str:
    """``dtype`` (default float32), or a TiletuneError naming the accepted ones."""
    dtype = dtype or "float32"
    if dtype not in DTYPES:
        raise TiletuneError(f"--dtype {dtype!r}: the model's compute dtype is one of {', '.join(DTYPES)}")
    return dtype


def cast(mod, dtype: str):
    """``mod`` computing in ``dtype`` (see the module docstring); float32 returns ``mod`` unchanged."""
    import tvm
    from tvm import relax

    dtype = check_dtype(dtype)
    if dtype == "float32":
        return mod
    try:
        mod = clip_as_min_max(mod)
        mod = relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
        if dtype == "bfloat16":
            mod = _half_casts_to(mod, "bfloat16")
        return tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                         relax.transform.DeadCodeElimination()])(mod)
    except Exception as e:  # noqa: BLE001  (TVM's errors: one line, not its stack)
        raise TiletuneError(f"casting the model to {dtype} failed ({one_line(str(e), 300)})") from None


def _half_casts_to(mod, dtype: str):
    from tvm import relax

    def dtype_of(e) -> str:
        return str(getattr(getattr(e, "ty", None), "dtype", ""))

    @relax.expr_functor.mutator
    class Retype(relax.PyExprMutator):
        def visit_call_(self, call):
            name = getattr(call.op, "name", "")
            if name in FLOAT32_NORMS:  # before the call is re-typed: its type check refuses bfloat16
                args = [self.visit_expr(a) for a in call.args]
                if not any(dtype_of(a) == dtype for a in args):
                    return relax.Call(call.op, args, call.attrs, call.ty_args)
                args = [self.builder_.emit(relax.op.astype(a, "float32")) if dtype_of(a) == dtype else a
                        for a in args]
                return relax.op.astype(self.builder_.emit(relax.Call(call.op, args, call.attrs)), dtype)
            call = super().visit_call_(call)
            if name == "relax.astype" and str(call.attrs.dtype) == "float16":
                return relax.op.astype(call.args[0], dtype)
            return call

    return rewrite_functions(mod, Retype)
