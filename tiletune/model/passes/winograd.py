"""Winograd's minimal filtering for a CNN's 3x3 convolutions on a CPU: F(2x2, 3x3) and F(4x4, 3x3).

Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016): a stride-1 3x3 convolution
computes each m x m tile of its output from the alpha x alpha tile of its input around it (alpha = m + 2) with
alpha^2 multiplications per pair of input and output channels instead of 9 m^2. With the tile's input ``d`` and
the weight ``g`` (3x3)

    V = B^T d B,   U = G g G^T,   M = sum over the input channels of U * V (elementwise),   Y = A^T M A,

so that for the alpha^2 positions (eps, nu) of a tile the sums over the input channels are one batched matrix
product: ``M[e] = V[e] @ U[e]`` with ``V[e]`` P tiles x C input channels and ``U[e]`` C x K: 2.25x fewer
multiply-accumulates than the convolution for m = 2 (16 products), 4x for m = 4 (36). The transforms are sums
with small constant coefficients (``B``, ``A``: +-1 for m = 2) and the weight's is done once when the model is
built (``G``, numpy in float64, rounded once to the weight's dtype). The matrices: Lavin and Gray's, points 0,
+-1 (and +-2 for m = 4).

``rewrite`` (CPU targets, after ``fold_weights`` and before the operators are lowered:
``tiletune.model.kernels.tasks.fuse``) replaces every ``conv2d`` that

- is NHWC with an HWIO weight that is a constant of the model, 3x3, stride 1, dilation 1, one group, float32,
  with no padding of its own (the layout conversion put it into a ``pad`` before: ``tiletune.model.passes.layout``),
- has at least ``MIN_CHANNELS`` input and output channels (a stem's 3 input channels would make 16 products of
  a 3-long reduction),

by three calls: ``winograd_input`` (``V`` as [alpha^2, P, C], eps * alpha + nu first; it reads the padded input,
whose pad ``tiletune.model.kernels.pad_fusion`` takes into the kernel before where it can), ``matmul(V, U)`` with ``U`` a
constant [alpha^2, C, K] (a batched matmul task that the CPU template tunes and whose weight it packs once, like
every model weight), and ``winograd_output`` (``Y`` in the convolution's NHWC shape; bias, ReLU, SiLU and residual
after the convolution fuse into its kernel, as into a convolution's). An output size that is no multiple of m gets
partial tiles: zeros read beyond the input, nothing written beyond the
output. The two transforms are not tuned: ``schedule`` gives them a schedule of their own (their alpha^2 tile
positions unrolled, so that each output is a sum of the few inputs with a constant coefficient, the channels
vectorized, parallel over the tiles), which ``tiletune.model.kernels.default_schedule.checked`` checks against the
unscheduled build as it does every default schedule. ``WINOGRAD`` switches it all off.

The tile (``tile_for``): m = 4 where the output divides into 4x4 tiles and F(4x4)'s transformed weight (4x the
filter's size) is at most ``F4_MAX_BYTES``, else m = 2 (16/9 the filter's size). In a model every weight comes
from DRAM (docs/decisions/measure-cold-weights.md): ResNet-50's 56x56 and 28x28 stages (0.6 and 2.4 MB) take
F(4x4), its 14x14 and 7x7 stages (9.4 and 38 MB in F(4x4)) F(2x2). Rounding: the model's outputs stay within
1e-6 of torch's on ResNet-50, F(4x4)'s coefficients (up to 8) included. The measurements: docs/decisions/winograd.md.
"""
from __future__ import annotations

import numpy as np

WINOGRAD = True  # docs/decisions/winograd.md
MIN_CHANNELS = 16
F4_MAX_BYTES = 4 << 20  # F(4x4, 3x3) where its transformed weight is at most this: docs/decisions/winograd.md
INPUT, OUTPUT = "winograd_input", "winograd_output"  # the transforms' block names, + "_m2" / "_m4"
#: the transforms fuse as a convolution does (TVM's kOutEWiseFusable, kept by AnnotateTIROpPattern): elementwise
#: consumers join the output transform's kernel, nothing joins the input transform's, so that one's output transform
#: and the next one's input transform (an elementwise SiLU between) never become one kernel of inlined transforms
_FUSE_AS_CONV = {"op_pattern": 4}

# Lavin and Gray's F(m, 3) for m = 2 and 4 (interpolation points 0, +-1, +-2): Y = A^T [(G g G^T) * (B^T d B)] A
MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]])),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])),
}


def tile_for(out_h: int, out_w: int, c: int, k: int) -> int:
    """The output tile m of a convolution: 4 where the output divides into 4x4 tiles and F(4x4, 3x3)'s weight
    (36 C K floats) is at most ``F4_MAX_BYTES``, else 2."""
    return 4 if out_h % 4 == 0 and out_w % 4 == 0 and 36 * c * k * 4 <= F4_MAX_BYTES else 2


def weight_transform(w: np.ndarray, m: int = 2) -> np.ndarray:
    """``U`` [alpha^2, C, K] (alpha = m + 2) of an HWIO weight [3, 3, C, K]:
    ``U[eps * alpha + nu] = sum_rs G[eps, r] G[nu, s] w[r, s]``, in float64, returned in ``w``'s dtype."""
    g = MATRICES[m][1]
    u = np.einsum("er,ns,rsck->enck", g, g, w.astype(np.float64))
    return np.ascontiguousarray(u.reshape(len(g) ** 2, *w.shape[2:])).astype(w.dtype)


def _combine(rows: np.ndarray, cols: np.ndarray, value):
    """``sum_ab rows[a] cols[b] value(a, b)`` with the coefficients' zeros left out, +-1 as additions."""
    out = None
    for a, ra in enumerate(rows):
        for b, cb in enumerate(cols):
            coef = float(ra * cb)
            if coef == 0:
                continue
            term = value(a, b)
            if abs(coef) != 1:
                term = term * abs(coef)
            if out is None:
                out = term if coef > 0 else -term
            else:
                out = out + term if coef > 0 else out - term
    return out


def input_transform(x, out_h: int, out_w: int, m: int = 2):
    """TE: ``V`` [alpha^2, P, C] of the padded NHWC input ``x`` (the convolution's input: ``x`` is ``out_h + 2``
    x ``out_w + 2``); P = N * ceil(out_h / m) * ceil(out_w / m) tiles, row-major. Where the output's size is no
    multiple of m, the last tile row (column) reads beyond ``x``: zeros, behind a bounds check on those reads
    alone."""
    from tvm import te, tirx

    bt = MATRICES[m][0]
    alpha = len(bt)
    n_, hp, wp, c_ = (int(v) for v in x.shape)
    nh, nw = _tiles(out_h, m), _tiles(out_w, m)

    def body(e, p, c):
        n, th, tw = p // (nh * nw), p // nw % nh, p % nw

        def load(a, b):
            row, col = th * m + a, tw * m + b
            checks = ([row < hp] if (nh - 1) * m + a >= hp else []) + ([col < wp] if (nw - 1) * m + b >= wp else [])
            value = x[n, row, col, c]
            return tirx.if_then_else(tirx.all(*checks), value, tirx.const(0, x.dtype)) if checks else value

        exprs = [_combine(bt[eps], bt[nu], load) for eps in range(alpha) for nu in range(alpha)]
        out = exprs[-1]
        for i in range(len(exprs) - 2, -1, -1):
            out = tirx.Select(e == i, exprs[i], out)
        return out

    return te.compute((alpha * alpha, n_ * nh * nw, c_), body, name=f"{INPUT}_m{m}")


def output_transform(prod, batch: int, out_h: int, out_w: int, m: int = 2):
    """TE: the convolution's output [N, out_h, out_w, K] of the products ``prod`` [alpha^2, P, K] (where the
    output's size is no multiple of m, the last tiles' outer rows or columns are not written)."""
    from tvm import te, tirx

    at = MATRICES[m][2]
    alpha = at.shape[1]
    k_ = int(prod.shape[2])
    nh, nw = _tiles(out_h, m), _tiles(out_w, m)

    def body(n, h, w, k):
        p = n * nh * nw + h // m * nw + w // m
        y = [[_combine(at[vh], at[vw], lambda a, b: prod[a * alpha + b, p, k]) for vw in range(m)]
             for vh in range(m)]
        out = None
        for vh in reversed(range(m)):
            row = None
            for vw in reversed(range(m)):
                row = y[vh][vw] if row is None else tirx.Select(w % m == vw, y[vh][vw], row)
            out = row if out is None else tirx.Select(h % m == vh, row, out)
        return out

    return te.compute((batch, out_h, out_w, k_), body, name=f"{OUTPUT}_m{m}")


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
    return xs[1] > 2 and xs[2] > 2 and ws[2] >= MIN_CHANNELS and ws[3] >= MIN_CHANNELS


def rewrite(mod):
    """``mod`` with every ``eligible`` convolution computed by Winograd's transforms, F(m x m, 3x3) with
    ``tile_for``'s m (the module docstring); ``mod`` itself is left as it is. Returns ``mod`` unchanged when
    ``WINOGRAD`` is off."""
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
            n_, hp, wp, c_ = (int(v) for v in x.ty.shape)
            out_h, out_w = hp - 2, wp - 2
            m = tile_for(out_h, out_w, c_, int(w.ty.shape[3]))
            u = relax.const(weight_transform(w.value.numpy(), m), "float32")
            v = self.builder_.emit_te(input_transform, x, out_h, out_w, m, primfunc_name_hint=INPUT,
                                      primfunc_attrs=_FUSE_AS_CONV)
            prod = self.builder_.emit(relax.op.matmul(v, u))
            return self.builder_.call_te(output_transform, prod, n_, out_h, out_w, m, primfunc_name_hint=OUTPUT,
                                         primfunc_attrs=_FUSE_AS_CONV)

    mutator = Winograd(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    out = mutator.builder_.get()
    return tvm.transform.Sequential([relax.transform.DeadCodeElimination()])(out)


def transform(func) -> str:
    """Which Winograd transform the kernel ``func`` computes ("input" or "output" transform), or ""."""
    import tvm
    from tvm import s_tir

    try:
        found = _find(s_tir.Schedule(tvm.IRModule({"main": func})))
    except Exception:  # noqa: BLE001  (no root block)
        return ""
    return found[2] if found else ""


def _find(sch):
    """(the root's child blocks, the index of the transform's block among them, "input" or "output", the tile m
    that its name's suffix carries), or None when no block is a transform's."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for i, b in enumerate(blocks):
        name = sch.get(b).name_hint
        for kind, prefix in (("input", INPUT), ("output", OUTPUT)):
            if name.startswith(prefix):
                return blocks, i, kind, int(name.rpartition("_m")[2])
    return None


def schedule(func, vector: int):
    """``func`` (a fused kernel) scheduled as a Winograd transform, or None when it has no transform block or
    TVM refuses a step. The input transform: its tile positions (eps, nu) unrolled inside, the channels
    vectorized innermost, parallel over the tiles; the output transform with its epilogue: the m x m positions
    of a tile unrolled around the vectorized channels, parallel over the tile rows, the transform computed per
    tile and channel vector into a local buffer that the epilogue reads (nothing fuses before an input transform:
    ``_FUSE_AS_CONV``). The tile (m) is the block name's suffix; the channels go in vectors of ``vector``
    lanes (the default schedule's width), or of the widest of 8, 4 and 2 that divides them."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        found = _find(sch)
        if found is None:
            return None
        blocks, first, kind, m = found
        if kind == "input":
            e, p, c = sch.get_loops(blocks[first])
            eps, nu = sch.split(e, [m + 2, m + 2])
            lanes = _lanes(sch.get(c).extent, vector)
            co, ci = sch.split(c, [None, lanes])
            sch.reorder(p, co, eps, nu, ci)
            sch.parallel(p)
        else:
            own = blocks[first]
            for b in blocks[first + 1:-1]:  # the epilogue's intermediates, as the default schedule inlines them
                sch.compute_inline(b)
            block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
            n, h, w, k = sch.get_loops(block)
            th, eps = sch.split(h, [None, m])
            tw, nu = sch.split(w, [None, m])
            lanes = _lanes(sch.get(k).extent, vector)
            co, ci = sch.split(k, [None, lanes])
            sch.reorder(n, th, tw, co, eps, nu, ci)
            sch.parallel(sch.fuse(n, th))
            if not sch.get(block).same_as(sch.get(own)):
                # a tile's m x m x lanes outputs into a local buffer that the epilogue reads (inlined, an epilogue
                # that reads its input twice, SiLU, would compute the transform twice)
                sch.compute_at(own, co)
                sch.set_scope(own, 0, "local")
                tv, tw_, tk = sch.get_loops(own)[-3:]
                sch.unroll(tv)
                sch.unroll(tw_)
                if lanes > 1:
                    sch.vectorize(tk)
        sch.unroll(eps)
        sch.unroll(nu)
        if lanes > 1:
            sch.vectorize(ci)
    except Exception:  # noqa: BLE001  (a kernel shaped otherwise: the default schedule takes it)
        return None
    return sch.mod["main"]


def _tiles(size: int, m: int) -> int:
    return -(-size // m)


def _lanes(extent, widest: int) -> int:
    e = int(extent)
    return next((v for v in (widest, 8, 4, 2) if v <= widest and e % v == 0), 1)
