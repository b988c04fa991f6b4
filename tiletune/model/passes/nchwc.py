"""2-D convolutions in the blocked layout NCHW16c: their legalization to a TIR kernel.

In NCHW16c the activations are [N, C/16, H, W, 16] (16 channels, one AVX-512 register of fp32, innermost) and
the weights OIHW16i16o, [K/16, C/16, KH, KW, 16 (in), 16 (out)] (oneDNN's and ONNX Runtime's NCHWc layout).
The point is the broadcast operand of the CPU template's register tile (P output pixels x V weight vectors,
``tiletune.schedules.cpu``): in NHWC its P pixels are P rows C floats apart, which at C >= 1024 all map to
one L1 set (4 KiB apart), so a 14-pixel tile misses the L1 on every broadcast; in NCHW16c neighbouring pixels
of one channel block are 64 bytes apart, one cache line each. docs/decisions/model-layout.md measures it.

TVM 0.27's Relax legalization refuses conv2d in a layout with a channel block (``_nn_conv2d``: "Conv2D where
data layout or kernel layout have channel chunk cannot be legalized"), and TOPI's ``conv2d_NCHWc`` reduces
over one input-channel axis split by ``//`` and ``%``, which the template's access model (plain axis indices)
cannot tile. ``legalize_conv2d`` makes the kernel with the reduction as two plain axes, the channel block
``icc`` outermost and the 16 channels ``icb`` innermost, with (kh, kw) between:

    out[n, oc, oh, ow, ob] += data[n, icc, oh*sh + kh*dh, ow*sw + kw*dw, icb] * weight[oc, icc, kh, kw, icb, ob]

so the template's innermost spatial axis is the output block ``ob`` (16 lanes, vectorized), and its
innermost reduction ``icb`` walks the 16 channels of one cache line of the input. Grouped convolutions and
those whose channels are not multiples of 16 are not blocked (``tiletune.model.passes.layout`` leaves them NHWC);
padding is an ``nn.pad`` of its own before the convolution, as for NHWC.
"""
from __future__ import annotations

BLOCK = 16  # channels per block: one AVX-512 fp32 register (two AVX2 ones)
DATA = f"NCHW{BLOCK}c"
KERNEL = f"OIHW{BLOCK}i{BLOCK}o"


def conv2d_nchwc(data, weight, strides, padding, dilation, out_dtype):
    """The TE compute of the module docstring (``padding`` = (top, left, bottom, right); non-zero padding is
    applied here by ``topi.nn.pad``, though the model's conversion moves it out before)."""
    from tvm import te, topi

    n, icc, ih, iw, icb = (int(v) for v in data.shape)
    occ, wicc, kh, kw, wicb, ob = (int(v) for v in weight.shape)
    if (wicc, wicb) != (icc, icb):
        raise ValueError(f"conv2d_nchwc: weight {tuple(weight.shape)} does not match data {tuple(data.shape)}")
    sh, sw = (int(v) for v in strides)
    dh, dw = (int(v) for v in dilation)
    top, left, bottom, right = (int(v) for v in padding)
    if top or left or bottom or right:
        data = topi.nn.pad(data, (0, 0, top, left, 0), (0, 0, bottom, right, 0), name="pad")
    oh = (ih + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (iw + left + right - (kw - 1) * dw - 1) // sw + 1
    rc = te.reduce_axis((0, icc), "rc")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")
    rb = te.reduce_axis((0, icb), "rb")
    dtype = out_dtype or data.dtype
    return te.compute(
        (n, occ, oh, ow, ob),
        lambda b, o, y, x, k: te.sum(data[b, rc, y * sh + ry * dh, x * sw + rx * dw, rb].astype(dtype)
                                     * weight[o, rc, ry, rx, rb, k].astype(dtype), axis=[rc, ry, rx, rb]),
        name="conv2d_nchwc")


def legalize_conv2d(bb, call):
    """LegalizeOps' rule for ``relax.nn.conv2d``: blocked layouts (``DATA``/``KERNEL``, groups 1) become
    ``conv2d_nchwc``; every other conv2d goes to TVM's own rule (which refuses other blocked layouts itself)."""
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    a = call.attrs
    if str(a.data_layout) != DATA:
        return _nn_conv2d(bb, call)
    if (str(a.kernel_layout), str(a.out_layout)) != (KERNEL, DATA) or int(a.groups) != 1:
        return call  # left unlegalized: tiletune.model.passes.layout never converts such a call
    out_dtype = str(a.out_dtype) if str(a.out_dtype) not in ("", "void") else None
    return bb.call_te(conv2d_nchwc, call.args[0], call.args[1], [int(v) for v in a.strides],
                      [int(v) for v in a.padding], [int(v) for v in a.dilation], out_dtype,
                      primfunc_name_hint="conv2d")


#: LegalizeOps' customized rules (``relax.transform.LegalizeOps(LEGALIZE)``)
LEGALIZE = {"relax.nn.conv2d": legalize_conv2d}
