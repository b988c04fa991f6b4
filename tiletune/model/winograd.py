"""Winograd's minimal filtering for a CNN's 3x3 convolutions on a CPU: F(2x2, 3x3).

Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016): a stride-1 3x3 convolution
computes each 2x2 tile of its output from the 4x4 tile of its input around it with 16 multiplications per pair
of input and output channels instead of 36. With the tile's input ``d`` (4x4) and the weight ``g`` (3x3)

    V = B^T d B,   U = G g G^T,   M = sum over the input channels of U * V (elementwise),   Y = A^T M A,

so that for the 16 positions (eps, nu) of a tile the sums over the input channels are one batched matrix
product: ``M[e] = V[e] @ U[e]`` with ``V[e]`` P tiles x C input channels and ``U[e]`` C x K, 16 products of 2.25x
fewer multiply-accumulates in all than the convolution. The transforms are additions only (``B``, ``A``) and the
weight's is done once when the model is built (``G``, numpy in float64, rounded once to the weight's dtype).

``rewrite`` (CPU targets, after ``fold_weights`` and before the operators are lowered:
``tiletune.model.tasks.fuse``) replaces every ``conv2d`` that

- is NHWC with an HWIO weight that is a constant of the model, 3x3, stride 1, dilation 1, one group, float32,
  with no padding of its own (the layout conversion put it into a ``pad`` before: ``tiletune.model.layout``),
- has an even output height and width (whole tiles; ResNet-50's 7x7 stage keeps its direct convolution),
- has at least ``MIN_CHANNELS`` input and output channels (a stem's 3 input channels would make 16 products of
  a 3-long reduction),

by three calls: ``winograd_input`` (``V`` as [16, P, C], eps * 4 + nu first; the pad before it is taken into
the same kernel by FuseOps), ``matmul(V, U)`` with ``U`` a constant [16, C, K] (a batched matmul task that the CPU
template tunes and whose weight it packs once, like every model weight), and ``winograd_output`` (``Y`` in the
convolution's NHWC shape; bias, ReLU and residual after the convolution fuse into its kernel). The two
transforms are not tuned: ``schedule`` gives them a schedule of their own (their 16 tile positions unrolled, so
that each output is a sum of the few inputs with a coefficient of +-1 and no multiplication, the channels
vectorized, parallel over the tiles), which ``tiletune.model.default_schedule.checked`` checks against the
unscheduled build as it does every default schedule. ``WINOGRAD`` switches it off; the measurement that made
it the default: docs/decisions/winograd.md.

The tile: F(2x2, 3x3), not F(4x4, 3x3) (36 products, 4x fewer multiplications): its transformed weight is 16/9
the weight's size, F(4x4)'s 4x, and in a model every weight comes from DRAM (docs/decisions/measure-cold-weights.md);
its rounding error stays within fp32's few ulps of the direct sum.
"""
from __future__ import annotations

import numpy as np

WINOGRAD = True  # docs/decisions/winograd.md
MIN_CHANNELS = 16
TILE = 2  # m: a tile's output is TILE x TILE
ALPHA = 4  # TILE + 3 - 1: a tile's input is ALPHA x ALPHA
INPUT, OUTPUT = "winograd_input", "winograd_output"  # the transforms' block names (schedule finds them by these)

# Lavin and Gray's F(2, 3): Y = A^T [(G g G^T) * (B^T d B)] A
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def weight_transform(w: np.ndarray) -> np.ndarray:
    """``U`` [16, C, K] of an HWIO weight [3, 3, C, K]: ``U[eps * 4 + nu] = sum_rs G[eps, r] G[nu, s] w[r, s]``,
    in float64, returned in ``w``'s dtype."""
    u = np.einsum("er,ns,rsck->enck", G, G, w.astype(np.float64))
    return np.ascontiguousarray(u.reshape(ALPHA * ALPHA, *w.shape[2:])).astype(w.dtype)


def _combine(rows: np.ndarray, cols: np.ndarray, value):
    """``sum_ab rows[a] cols[b] value(a, b)`` with the coefficients' zeros left out and +-1 as additions."""
    out = None
    for a, ra in enumerate(rows):
        for b, cb in enumerate(cols):
            coef = ra * cb
            if coef == 0:
                continue
            term = value(a, b)
            if out is None:
                out = term if coef == 1 else -term
            else:
                out = out + term if coef == 1 else out - term
    return out


def input_transform(x, out_h: int, out_w: int):
    """TE: ``V`` [16, P, C] of the padded NHWC input ``x`` (the convolution's input, read without bounds
    checks: ``x`` is ``out_h + 2`` x ``out_w + 2``); P = N * out_h/2 * out_w/2 tiles, row-major."""
    from tvm import te, tirx

    n_, _, _, c_ = (int(v) for v in x.shape)
    nh, nw = out_h // TILE, out_w // TILE

    def body(e, p, c):
        n, th, tw = p // (nh * nw), p // nw % nh, p % nw
        exprs = [_combine(BT[eps], BT[nu], lambda a, b: x[n, th * TILE + a, tw * TILE + b, c])
                 for eps in range(ALPHA) for nu in range(ALPHA)]
        out = exprs[-1]
        for i in range(len(exprs) - 2, -1, -1):
            out = tirx.Select(e == i, exprs[i], out)
        return out

    return te.compute((ALPHA * ALPHA, n_ * nh * nw, c_), body, name=INPUT)


def output_transform(m, batch: int, out_h: int, out_w: int):
    """TE: the convolution's output [N, out_h, out_w, K] of the products ``m`` [16, P, K]."""
    from tvm import te, tirx

    k_ = int(m.shape[2])
    nh, nw = out_h // TILE, out_w // TILE

    def body(n, h, w, k):
        p = n * nh * nw + h // TILE * nw + w // TILE
        y = [[_combine(AT[vh], AT[vw], lambda a, b: m[a * ALPHA + b, p, k]) for vw in range(TILE)]
             for vh in range(TILE)]
        even_w = w % TILE == 0
        return tirx.Select(h % TILE == 0, tirx.Select(even_w, y[0][0], y[0][1]),
                           tirx.Select(even_w, y[1][0], y[1][1]))

    return te.compute((batch, out_h, out_w, k_), body, name=OUTPUT)


def eligible(call) -> bool:
    """Whether ``rewrite`` takes the Relax call ``call`` (see the module docstring)."""
    import tvm

    if getattr(call.op, "name", "") != "relax.nn.conv2d":
        return False
    a = call.attrs
    if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout)) != ("NHWC", "HWIO", "NHWC"):
        return False
    if (any(int(v) != 1 for v in a.strides) or any(int(v) != 1 for v in a.dilation) or int(a.groups) != 1
            or any(int(v) != 0 for v in a.padding)):
        return False
    x, w = call.args
    if not isinstance(w, tvm.ir.expr.Constant):
        return False
    try:
        xs = [int(v) for v in x.ty.shape]
        ws = [int(v) for v in w.ty.shape]
    except (TypeError, AttributeError):  # a symbolic dimension
        return False
    dtypes = {str(x.ty.dtype), str(w.ty.dtype), str(call.ty.dtype)}
    if dtypes != {"float32"} or ws[:2] != [3, 3]:
        return False
    out_h, out_w = xs[1] - 2, xs[2] - 2
    return (out_h > 0 and out_w > 0 and out_h % TILE == 0 and out_w % TILE == 0
            and ws[2] >= MIN_CHANNELS and ws[3] >= MIN_CHANNELS)


def rewrite(mod):
    """``mod`` with every ``eligible`` convolution computed by Winograd's F(2x2, 3x3) (the module docstring);
    ``mod`` itself is left as it is. Returns ``mod`` unchanged when ``WINOGRAD`` is off."""
    import tvm
    from tvm import relax

    if not WINOGRAD:
        return mod

    @relax.expr_functor.mutator
    class Winograd(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not isinstance(call, relax.Call) or not eligible(call):
                return call
            x, w = call.args
            n_, hp, wp, _ = (int(v) for v in x.ty.shape)
            out_h, out_w = hp - 2, wp - 2
            u = relax.const(weight_transform(w.value.numpy()), "float32")
            v = self.builder_.emit_te(input_transform, x, out_h, out_w, primfunc_name_hint=INPUT)
            m = self.builder_.emit(relax.op.matmul(v, u))
            return self.builder_.call_te(output_transform, m, n_, out_h, out_w, primfunc_name_hint=OUTPUT)

    mutator = Winograd(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    out = mutator.builder_.get()
    return tvm.transform.Sequential([relax.transform.DeadCodeElimination()])(out)


def schedule(func):
    """``func`` (a fused kernel) scheduled as a Winograd transform, or None when it has no transform block or
    TVM refuses a step. The input transform: its tile positions (eps, nu) unrolled inside, the channels
    vectorized innermost, parallel over the tiles; the output transform with its epilogue: the 2x2 positions
    of a tile unrolled around the vectorized channels, parallel over the tile rows. Blocks before the transform
    (the pad) are inlined into it."""
    import tvm
    from tvm import s_tir

    from .default_schedule import VECTOR

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        root = sch.get_sblock("root")
        blocks = sch.get_child_blocks(root)
        names = [sch.get(b).name_hint for b in blocks]
        if INPUT in names:
            for b in blocks[:names.index(INPUT)]:
                sch.compute_inline(b)
            block = sch.get_sblock(INPUT)
            e, p, c = sch.get_loops(block)
            eps, nu = sch.split(e, [ALPHA, ALPHA])
            lanes = _lanes(sch.get(c).extent, VECTOR)
            co, ci = sch.split(c, [None, lanes])
            sch.reorder(p, co, eps, nu, ci)
            sch.parallel(p)
        elif OUTPUT in names:
            for b in sch.get_child_blocks(root)[:-1]:
                sch.compute_inline(b)
            block = sch.get_child_blocks(root)[-1]
            n, h, w, k = sch.get_loops(block)
            th, eps = sch.split(h, [None, TILE])
            tw, nu = sch.split(w, [None, TILE])
            lanes = _lanes(sch.get(k).extent, VECTOR)
            co, ci = sch.split(k, [None, lanes])
            sch.reorder(n, th, tw, co, eps, nu, ci)
            sch.parallel(sch.fuse(n, th))
        else:
            return None
        sch.unroll(eps)
        sch.unroll(nu)
        if lanes > 1:
            sch.vectorize(ci)
    except Exception:  # noqa: BLE001  (a kernel shaped otherwise: the default schedule takes it)
        return None
    return sch.mod["main"]


def _lanes(extent, widest: int) -> int:
    e = int(extent)
    return next((v for v in (widest, 8, 4, 2) if v <= widest and e % v == 0), 1)
