"""A weight whose width has no divisor the vector registers fit, padded once at build time, its matmul's result sliced.

The CPU template splits each loop by the divisors of its extent, and the innermost tile of the weight's columns is
the register tile's vectors: a width such as GPT-2's vocabulary, 50,257 = 29 x 1,733, leaves 29 or 1,733 columns
to vectorize. ``pad_widths`` rewrites ``matmul(x, W)``, where ``W`` is a model constant [K, N] whose N is not a
multiple of the vector width (16 fp32 lanes), into ``strided_slice(matmul(x, W'), N)``: ``W'`` is ``W`` with zero
columns up to the next multiple of 64, 32 or 16 (the widest whose padding adds at most ``WASTE`` of the work;
50,257 -> 50,304, 770 -> 784), made once by numpy; FuseOps then puts the slice, and the bias or activation after it,
into the matmul's kernel as its epilogue, whose columns past N are never stored. The weight stays a constant the
model build packs; the kernel's loops divide.

Left as they are: a matmul of fewer than ``MIN_ROWS`` rows (a batch-1 classifier reads its weight once, whatever
its layout), a weight that is not a constant, a symbolic width, and a width whose padding would cost more than
``WASTE`` (a narrow one: 24 columns would need 8 more). Measured: docs/decisions/pad-widths.md.
"""
from __future__ import annotations

import math

import numpy as np

from ..frontend.dims import static_shape
from .layout import rewrite_functions

LANES = 16  # fp32 lanes of AVX-512: a width that is a multiple of them is left as it is
MULTIPLES = (64, 32, 16)  # the padded width's multiple, the widest first
WASTE = 0.02  # the most extra work a padding may add
MIN_ROWS = 16  # the fewest rows of x (all its axes but the last) for which the padding pays


def padded_width(n: int) -> int | None:
    """The width ``n`` columns pad to, or None where they stay (a multiple of ``LANES``, or too narrow to pad within
    ``WASTE``)."""
    if n % LANES == 0:
        return None
    for m in MULTIPLES:
        p = -(-n // m) * m
        if p - n <= WASTE * n:
            return p
    return None


def pad_widths(mod):
    """``mod`` with every qualifying matmul by a constant weight padded and sliced (module docstring)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Pad(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.matmul" or not isinstance(call.args[1], tvm.ir.expr.Constant):
                return call
            w_shape = tuple(int(v) for v in call.args[1].value.shape)  # the weight is copied out only to be padded
            x_shape = static_shape(getattr(getattr(call.args[0], "ty", None), "shape", None))
            if len(w_shape) != 2 or not x_shape or math.prod(x_shape[:-1]) < MIN_ROWS:
                return call
            n = w_shape[1]
            p = padded_width(n)
            if p is None:
                return call
            w = call.args[1].value.numpy()
            wide = relax.const(np.ascontiguousarray(np.pad(w, ((0, 0), (0, p - n)))), str(w.dtype))
            out = relax.op.matmul(call.args[0], wide, out_dtype=call.attrs.out_dtype)
            return relax.op.strided_slice(out, axes=[len(x_shape) - 1], begin=[0], end=[n])

    return rewrite_functions(mod, Pad)
