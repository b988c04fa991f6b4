"""Quantized matrix products recognised in an imported model and rewritten for the int8 kernels.

ONNX Runtime's quantizer writes a dynamically quantized ``MatMul`` as ``DynamicQuantizeLinear`` (the activation to
uint8, its scale and zero point), ``MatMulInteger(x_q, W_q, x_zp, W_zp)``, a cast to float and a multiply by the
two scales. TVM's ONNX frontend imports ``MatMulInteger`` as an int32 matmul of the operands after their zero points
are subtracted,

    matmul(astype(x_q, int32) - astype(x_zp, int32), astype(W_q, int32) - astype(W_zp, int32), out_dtype=int32)

which no int8 instruction computes: its operands are int32. ``rewrite_quantized`` turns each such matmul whose
right operand is a constant (a weight) into

    matmul(x_q, W8, out_dtype=int32) - astype(x_zp, int32) * wsum        (wsum[n] = sum_k W8[k, n], a constant)

with ``W8 = W_q - W_zp`` as int8 (exact: the weight's zero point is subtracted once, at import, and refused when a
value leaves int8's range), so that the matmul multiplies uint8 by int8 and accumulates in int32, the form the VNNI
kernel (``tiletune.schedules.x86_int8``) tensorizes, and the zero-point term, the cast and the scales after it fuse
into the same kernel as its epilogue. The product is exactly the imported one: sum_k (x - zx) W8 = sum_k x W8 -
zx wsum. The scalar weight scales multiplied into the activation's scale become 1-element tensors
(``ScaleParams``), so that the kernels of the layers of one shape are one tuning task. A matmul whose right operand is an activation (attention's uint8 x uint8 products), or whose left operand
is not uint8, is left as imported, and ``Rewritten.skipped`` says why.

A static QDQ model (``quantize_static(..., quant_format=QDQ)``) imports as ``matmul(dequantize(q, sx, zx), W)``: TVM's
importer folds the weight's ``DequantizeLinear`` into a float constant. When that constant is exactly an int8 grid
of the symmetric scale (``int8_grid``: every value ``w8 x sw`` with ``sw = max |w| / 127``, per tensor or per column,
as ONNX Runtime quantizes ``QInt8`` weights), the matmul becomes ``float32(matmul(q, w8) - zx wsum) x (sx sw)``, and
the bias, ReLU and the next ``quantize`` (the requantization) fuse after it. An int8 activation (the quantizer's
default ``QInt8``) is made again as uint8 by its ``quantize`` with the zero point plus 128 (the same integers
shifted), since ``vpdpbusd`` multiplies unsigned by signed bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .layout import rewrite_functions


@dataclass
class Rewritten:
    """The rewritten module, how many matmuls became int8 ones, and why the others did not."""
    mod: object
    count: int = 0
    skipped: list[str] = field(default_factory=list)


def _op(call) -> str:
    return getattr(getattr(call, "op", None), "name", "")


#: ONNX operators that make a model a quantized one (its original runs them: ONNX Runtime's int8)
QUANTIZED_OPS = frozenset({"MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear", "QLinearMatMul",
                           "QLinearConv", "ConvInteger"})


def is_quantized(source) -> bool:
    """Whether ``source`` is an ONNX file holding quantized operators (``QUANTIZED_OPS``): its build is checked
    against ONNX Runtime's int8 with the int8 tolerance (``tiletune.model.build.RTOL``)."""
    if getattr(source, "kind", None) != "onnx":
        return False
    return _onnx_ops(str(source.spec)) & QUANTIZED_OPS != frozenset()


@lru_cache(maxsize=16)
def _onnx_ops(path: str) -> frozenset[str]:
    import onnx

    try:
        return frozenset(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)
    except Exception:  # noqa: BLE001  (not a readable ONNX file: not quantized as far as the check goes)
        return frozenset()


def int8_grid(w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weight, scale per tensor [1] or per column [N]) when the float weight ``w`` [K, N] is exactly
    ``int8 x scale`` with the symmetric scale ``max |w| / 127`` (ONNX Runtime's for ``QInt8`` weights, whose
    DequantizeLinear TVM's importer folds into a float constant), per tensor or else per column; None otherwise."""
    for amax in (np.abs(w).max(keepdims=True).reshape(1), np.abs(w).max(axis=0)):
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        q = np.rint(w / scale)
        if np.abs(q).max() <= 127 and np.array_equal((q * scale).astype(np.float32), w):
            return q.astype(np.int8), scale
    return None


def rewrite_quantized(mod) -> Rewritten:
    """``mod`` with its integer matmuls in the uint8 x int8 form (module docstring)."""
    import tvm
    from tvm import relax

    done = Rewritten(mod)

    @relax.expr_functor.mutator
    class Quantized(relax.PyExprMutator):
        def bound(self, e):
            while isinstance(e, relax.Var):
                b = self.lookup_binding(e)
                if b is None:
                    return e
                e = b
            return e

        def const(self, e):
            """``e`` as a numpy array when it is a constant expression (constants, casts, +, -), else None."""
            e = self.bound(e)
            if isinstance(e, tvm.ir.expr.Constant):
                return e.value.numpy()
            if not isinstance(e, relax.Call):
                return None
            name = _op(e)
            if name == "relax.astype":
                v = self.const(e.args[0])
                return None if v is None else v.astype(str(e.attrs.dtype))
            if name == "relax.permute_dims":
                v = self.const(e.args[0])
                axes = e.attrs.axes
                return None if v is None else np.transpose(v, None if axes is None else [int(a) for a in axes])
            if name in ("relax.subtract", "relax.add"):
                a, b = self.const(e.args[0]), self.const(e.args[1])
                if a is None or b is None:
                    return None
                return a.astype(np.int64) - b.astype(np.int64) if name == "relax.subtract" else a + b
            return None

        def uint8_minus_zero(self, e):
            """(x, zero point) when ``e`` is astype(x, int32) - astype(z, int32) with x and z uint8."""
            e = self.bound(e)
            if _op(e) != "relax.subtract":
                return None
            x, z = self.bound(e.args[0]), self.bound(e.args[1])
            if _op(x) != "relax.astype" or _op(z) != "relax.astype":
                return None
            x, z = x.args[0], z.args[0]
            if str(x.ty.dtype) != "uint8" or str(z.ty.dtype) != "uint8":
                return None
            return x, z

        def qdq_activation(self, e):
            """(q as uint8, its zero point as an int, its scale) when ``e`` is dequantize(q, scale, zero point) of
            per-tensor constants; an int8 q made by a quantize of constants is made again as uint8 (zero point + 128,
            the same values shifted)."""
            e = self.bound(e)
            if _op(e) != "relax.dequantize":
                return None
            q, sx, zx = e.args[0], self.const(e.args[1]), self.const(e.args[2])
            if sx is None or zx is None or sx.size != 1 or zx.size != 1:
                return None
            zx = int(zx.reshape(()))
            dt = str(q.ty.dtype)
            if dt == "int8":
                made = self.bound(q)
                zq = self.const(made.args[2]) if _op(made) == "relax.quantize" else None
                if zq is None or zq.size != 1 or str(made.args[0].ty.dtype) != "float32":
                    return None
                q = relax.op.quantize(made.args[0], made.args[1], relax.const(np.uint8(int(zq.reshape(())) + 128)),
                                      axis=int(made.attrs.axis), out_dtype="uint8")
                zx, dt = zx + 128, "uint8"
            return (q, zx, float(sx.reshape(()))) if dt == "uint8" else None

        def qdq_matmul(self, call):
            """matmul(dequantize(q), W) with W a float weight on a symmetric int8 grid (module docstring), or None."""
            act = self.qdq_activation(call.args[0])
            w = self.const(call.args[1]) if act is not None else None
            if w is None or w.ndim != 2 or w.dtype != np.float32:
                return None
            grid = int8_grid(w)
            if grid is None:
                done.skipped.append(f"a float weight of shape {w.shape} on no symmetric int8 grid")
                return None
            w8, sw = grid
            q, zx, sx = act
            wsum = w8.astype(np.int32).sum(axis=0, dtype=np.int32)
            mm = relax.op.matmul(q, relax.const(w8, "int8"), out_dtype="int32")
            acc = relax.op.subtract(mm, relax.const((np.int32(zx) * wsum).astype(np.int32), "int32"))
            done.count += 1
            return relax.op.multiply(relax.op.astype(acc, "float32"),
                                     relax.const((np.float32(sx) * sw).astype(np.float32), "float32"))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if _op(call) == "relax.matmul" and str(call.attrs.out_dtype) in ("", "None", "void", "float32"):
                new = self.qdq_matmul(call)
                return call if new is None else new
            if _op(call) != "relax.matmul" or str(call.attrs.out_dtype) != "int32":
                return call
            lhs = self.uint8_minus_zero(call.args[0])
            if lhs is None:
                done.skipped.append("a matmul whose left operand is no uint8 activation minus its zero point")
                return call
            w = self.const(call.args[1])
            if w is None:
                done.skipped.append("a matmul of two activations (no constant weight)")
                return call
            if w.ndim != 2 or w.min() < -128 or w.max() > 127:
                done.skipped.append(f"a weight of shape {w.shape} outside int8 after its zero point")
                return call
            x, zx = lhs
            w8 = w.astype(np.int8)
            wsum = w8.astype(np.int32).sum(axis=0, dtype=np.int32)
            mm = relax.op.matmul(x, relax.const(w8, "int8"), out_dtype="int32")
            corr = relax.op.multiply(relax.op.astype(zx, "int32"), relax.const(wsum, "int32"))
            done.count += 1
            return relax.op.subtract(mm, corr)

    @relax.expr_functor.mutator
    class ScaleParams(relax.PyExprMutator):
        """``multiply(x_scale, w_scale)`` of two scalars, the second a constant, with that constant as a 1-element
        tensor: a scalar constant is inlined into the fused kernel as a literal, so every layer's kernel would be a
        task of its own; a tensor is a parameter, and the layers' kernels of one shape are one task."""

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if _op(call) != "relax.multiply" or len(call.args) != 2:
                return call
            a, b = call.args
            if (isinstance(b, tvm.ir.expr.Constant) and b.value.numpy().ndim == 0 and len(a.ty.shape) == 0
                    and str(b.ty.dtype) == "float32"):
                return relax.op.multiply(a, relax.const(b.value.numpy().reshape(1), "float32"))
            return call

    out = rewrite_functions(mod, Quantized)
    if done.count:
        out = rewrite_functions(out, ScaleParams)
    done.mod = tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                         relax.transform.DeadCodeElimination()])(out)
    return done
