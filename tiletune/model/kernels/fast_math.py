"""Fast math for a model's Relax module: the transcendental functions as TVM's polynomial forms, which LLVM
vectorizes, where the exact forms call libm once per element (docs/decisions/fast-math.md).

TVM's own ``FastMathTransform`` rewrites ``exp``, ``erf``, ``tanh`` and ``softmax`` calls. The activations that
legalize to those functions are composite operators, so their ``erf``/``exp``/``tanh`` only appear inside TIR
after legalization and keep the exact forms; this pass also rewrites them, with the expressions of TVM's own
legalization and the fast function in place of the exact one:

- ``nn.gelu``: ``x * (0.5 + 0.5 * fast_erf(x / sqrt 2))`` (float16 computes the erf in float32, as TVM does);
- ``nn.gelu_tanh``: ``0.5 * x * (1 + fast_tanh(sqrt(2 / pi) * x * (1 + 0.044715 x^2)))``;
- ``sigmoid``: ``1 / (1 + fast_exp(-x))``; ``nn.silu``: ``x * sigmoid(x)``;
- ``power(x, c)`` with a scalar constant ``c`` of 2 or 3 (gpt2's spelt-out GELU has ``x ** 3``): ``x * x``,
  ``x * x * x``, which is exact where ``pow`` calls libm per element.

``fast_exp`` clamps its argument to +-88.38, so sigmoid stays finite: ``1 / (1 + 2.4e38)`` for ``x <= -88.38``.
TVM's fast forms exist for float32 (``fast_exp``) and float32/float16 (``fast_erf``, ``fast_tanh``); for any
other dtype the call is left to the exact form.
"""
from __future__ import annotations

import math


def _fast(dtype: str, name: str) -> bool:
    return dtype == "float32" or (dtype == "float16" and name in ("erf", "tanh"))


def _gelu(x):
    from tvm import tirx, topi

    dtype = x.dtype
    arg = topi.multiply(x, tirx.const(0.5 ** 0.5, dtype))
    erf = topi.cast(topi.fast_erf(topi.cast(arg, "float32")), dtype) if dtype == "float16" else topi.fast_erf(arg)
    return topi.multiply(x, topi.add(tirx.const(0.5, dtype), topi.multiply(erf, tirx.const(0.5, dtype))))


def _gelu_tanh(x):
    from tvm import tirx, topi

    dtype = x.dtype
    inner = topi.multiply(topi.multiply(x, tirx.const(math.sqrt(2.0 / math.pi), dtype)),
                          topi.add(tirx.const(1.0, dtype), topi.multiply(topi.multiply(x, x),
                                                                         tirx.const(0.044715, dtype))))
    return topi.multiply(topi.multiply(x, tirx.const(0.5, dtype)),
                         topi.add(tirx.const(1.0, dtype), topi.fast_tanh(inner)))


def _sigmoid(x):
    from tvm import tirx, topi

    one = tirx.const(1.0, x.dtype)
    return topi.divide(one, topi.add(one, topi.fast_exp(topi.negative(x))))


def _silu(x):
    from tvm import topi

    return topi.multiply(x, _sigmoid(x))


# Relax operator -> (the fast function it needs, its TE form)
_COMPOSITES = {
    "relax.nn.gelu": ("erf", _gelu),
    "relax.nn.gelu_tanh": ("tanh", _gelu_tanh),
    "relax.sigmoid": ("exp", _sigmoid),
    "relax.nn.silu": ("exp", _silu),
}


def _small_power(call) -> int | None:
    """The exponent of ``power(x, c)`` when ``c`` is a scalar constant 2 or 3, else None."""
    import numpy as np
    import tvm

    if getattr(call.op, "name", None) != "relax.power" or not isinstance(call.args[1], tvm.ir.expr.Constant):
        return None
    value = np.asarray(call.args[1].value.numpy())
    if value.size != 1 or float(value.reshape(())) not in (2.0, 3.0):
        return None
    return int(float(value.reshape(())))


def _power(n: int):
    from tvm import topi

    def te_power(x):
        y = topi.multiply(x, x)
        return topi.multiply(y, x) if n == 3 else y

    return te_power


def fast_math():
    """The module pass: TVM's ``FastMathTransform`` plus the composite activations above."""
    import tvm
    from tvm import relax
    from tvm.relax import expr_functor
    from tvm.relax.transform.fast_math import FastMathCodeGenerator

    @expr_functor.mutator
    class _Mutator(FastMathCodeGenerator._cls):
        def visit_call_(self, call):
            n = _small_power(call)
            if n is not None and str(call.args[0].ty.dtype).startswith("float"):
                return self.builder_.call_te(_power(n), self.visit_expr(call.args[0]), primfunc_name_hint="power")
            entry = _COMPOSITES.get(getattr(call.op, "name", None))
            if entry is not None:
                dtype = str(call.args[0].ty.dtype)
                if _fast(dtype, entry[0]):
                    return self.builder_.call_te(entry[1], self.visit_expr(call.args[0]),
                                                 primfunc_name_hint=call.op.name.split(".")[-1])
            return super().visit_call_(call)

    @tvm.transform.module_pass(opt_level=0, name="TiletuneFastMath")
    def _pass(mod, _ctx):
        mutator = _Mutator(mod)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gv, mutator.visit_expr(func))
        return mutator.builder_.get()

    return _pass
