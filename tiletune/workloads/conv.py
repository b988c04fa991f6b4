"""Convolutions: conv2d and depthwise_conv2d (one filter per channel), in two layouts (``layout=`` in the
spec; NCHW is the default and its keys carry no layout):

- NCHW: conv2d data [N,C,H,W], weight [K,C,R,S] (OIHW), output [N,K,P,Q]; depthwise data [N,C,H,W],
  weight [C,1,R,S], output [N,C,P,Q]. Axes n, k, p, q | c, r, s (depthwise n, c, p, q | r, s): the
  template's innermost, vectorized spatial axis is the output width q.
- NHWC: conv2d data [N,H,W,C], weight [R,S,C,K] (HWIO), output [N,P,Q,K]; depthwise data [N,H,W,C],
  weight [R,S,C] (HWC), output [N,P,Q,C]. Axes n, p, q, k | r, s, c (depthwise n, p, q, c | r, s): the
  output channels are the innermost spatial axis, so the template vectorizes over channels (16 lanes of
  AVX-512 on every layer, where NCHW gets 7 on a 7x7 layer), and the input channel c is the innermost
  reduction axis, so data[n, y, x, c] and the HWIO weight are both read along their contiguous dimension.
  The HWIO weight is indexed [r, s, c, k] with k last: the CPU template's ``pack`` knob applies to it
  (panels [k // k3, r, s, c, k3], as oneDNN reorders weights into OIhw16o-like blocks).

The zero padding is a separate TE stage named ``pad`` that the schedules inline into the convolution.
Output size: P = (H + 2 pad - dilation (R - 1) - 1) // stride + 1, likewise Q from W and S.
dtype=float16|bfloat16 multiplies and accumulates in float32, with the output in the input dtype (a cast
stage ``conv_cast``/``dwconv_cast``) or float32 (``out_dtype=float32``), as ``tiletune.workloads.matmul``.
"""
from __future__ import annotations

import numpy as np

from ..errors import TiletuneError
from .base import DTYPES, Axis, Param, Workload, register

_WINDOW = (
    Param("stride", "stride (both dimensions)", default=1),
    Param("pad", "zero padding on each side", default=0, minimum=0),
    Param("dilation", "dilation (both dimensions)", default=1),
)


def out_size(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


LAYOUTS = ("NCHW", "NHWC")


def pad_stage(data, pad: int, layout: str = "NCHW"):
    from tvm import te

    if pad == 0:
        return data
    if layout == "NHWC":
        n, h, w, c = (int(x) for x in data.shape)

        def f(b, y, x, ch):
            inside = te.all(y >= pad, y < h + pad, x >= pad, x < w + pad)
            return te.if_then_else(inside, data[b, y - pad, x - pad, ch], te.const(0, data.dtype))

        return te.compute((n, h + 2 * pad, w + 2 * pad, c), f, name="pad")
    n, c, h, w = (int(x) for x in data.shape)

    def g(b, ch, y, x):
        inside = te.all(y >= pad, y < h + pad, x >= pad, x < w + pad)
        return te.if_then_else(inside, data[b, ch, y - pad, x - pad], te.const(0, data.dtype))

    return te.compute((n, c, h + 2 * pad, w + 2 * pad), g, name="pad")


def pad_nchw(x: np.ndarray, pad: int) -> np.ndarray:
    """Zero padding of the two spatial dimensions of an NCHW array."""
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else x


def nhwc_to_nchw(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2)


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1)


def input_windows(xp: np.ndarray, R: int, S: int, P: int, Q: int, stride: int, dil: int) -> np.ndarray:
    """[N, C, R, S, P, Q] view of the input windows."""
    N, C = xp.shape[:2]
    out = np.empty((N, C, R, S, P, Q), dtype=xp.dtype)
    for r in range(R):
        for s in range(S):
            out[:, :, r, s] = xp[:, :, r * dil : r * dil + stride * (P - 1) + 1 : stride,
                                 s * dil : s * dil + stride * (Q - 1) + 1 : stride]
    return out


class _Conv(Workload):
    layouts = LAYOUTS
    dtypes = DTYPES
    mixed_precision = True

    @property
    def nhwc(self) -> bool:
        return self.layout == "NHWC"

    def _validate(self):
        if self.P < 1 or self.Q < 1:
            raise TiletuneError(
                f"{self.op}: the window (R={self.R}, S={self.S}, dilation={self.dilation}) does not fit the "
                f"padded input (H={self.H}, W={self.W}, pad={self.pad}): output would be {self.P}x{self.Q}"
            )

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        hp, wp = self.H + 2 * self.pad, self.W + 2 * self.pad
        padded = (self.N, hp, wp, self.C) if self.nhwc else (self.N, self.C, hp, wp)
        return {**super().buffer_shapes(), "padded input": padded}

    def reference_scratch_elements(self) -> int:  # the padded input and its windows (see input_windows)
        return self.N * self.C * ((self.H + 2 * self.pad) * (self.W + 2 * self.pad) + self.R * self.S * self.P * self.Q)

    def _data_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.H, self.W, self.C) if self.nhwc else (self.N, self.C, self.H, self.W)

    def _out_shape(self, channels: int) -> tuple[int, int, int, int]:
        return (self.N, self.P, self.Q, channels) if self.nhwc else (self.N, channels, self.P, self.Q)

    @property
    def P(self) -> int:
        return out_size(self.H, self.R, self.stride, self.pad, self.dilation)

    @property
    def Q(self) -> int:
        return out_size(self.W, self.S, self.stride, self.pad, self.dilation)


@register
class Conv2d(_Conv):
    op = "conv2d"
    params = (
        Param("N", "batch", default=1),
        Param("C", "input channels"),
        Param("H", "input height"),
        Param("W", "input width"),
        Param("K", "output channels"),
        Param("R", "kernel height"),
        Param("S", "kernel width"),
    ) + _WINDOW

    def input_shapes(self):
        if self.nhwc:
            return [self._data_shape(), (self.R, self.S, self.C, self.K)]
        return [self._data_shape(), (self.K, self.C, self.R, self.S)]

    def output_shape(self):
        return self._out_shape(self.K)

    def _compute(self):
        from tvm import te

        data = te.placeholder(self._data_shape(), self.dtype, name="data")
        weight = te.placeholder(self.input_shapes()[1], self.dtype, name="weight")
        padded = pad_stage(data, self.pad, self.layout)
        st, dl = self.stride, self.dilation
        if self.nhwc:  # reduction r, s, c: the input channel innermost (contiguous in data and weight)
            r = te.reduce_axis((0, self.R), name="r")
            s = te.reduce_axis((0, self.S), name="s")
            c = te.reduce_axis((0, self.C), name="c")
            out = te.compute(
                self.output_shape(),
                lambda n, p, q, k: te.sum(
                    self.mac(padded[n, p * st + r * dl, q * st + s * dl, c], weight[r, s, c, k]), axis=[r, s, c]
                ),
                name="conv",
            )
            return [data, weight, self.finish(out)]
        c = te.reduce_axis((0, self.C), name="c")
        r = te.reduce_axis((0, self.R), name="r")
        s = te.reduce_axis((0, self.S), name="s")
        out = te.compute(
            (self.N, self.K, self.P, self.Q),
            lambda n, k, p, q: te.sum(
                self.mac(padded[n, c, p * st + r * dl, q * st + s * dl], weight[k, c, r, s]), axis=[c, r, s]
            ),
            name="conv",
        )
        return [data, weight, self.finish(out)]

    def axes_no_tvm(self):
        if self.nhwc:
            return [
                Axis("n", self.N, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"), Axis("k", self.K, "S"),
                Axis("r", self.R, "R"), Axis("s", self.S, "R"), Axis("c", self.C, "R"),
            ]
        return [
            Axis("n", self.N, "S"), Axis("k", self.K, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"),
            Axis("c", self.C, "R"), Axis("r", self.R, "R"), Axis("s", self.S, "R"),
        ]

    def reference(self, data, weight):
        data, weight = self.to_acc(data, weight)
        if self.nhwc:  # HWIO -> OIHW, NHWC -> NCHW and back
            data, weight = nhwc_to_nchw(data), weight.transpose(3, 2, 0, 1)
        win = input_windows(pad_nchw(data, self.pad), self.R, self.S, self.P, self.Q, self.stride, self.dilation)
        out = self.to_out(np.einsum("ncrspq,kcrs->nkpq", win, weight, optimize=True))
        return np.ascontiguousarray(nchw_to_nhwc(out)) if self.nhwc else out

    @property
    def flops(self):
        return 2 * self.N * self.K * self.P * self.Q * self.C * self.R * self.S


@register
class DepthwiseConv2d(_Conv):
    op = "depthwise_conv2d"
    params = (
        Param("N", "batch", default=1),
        Param("C", "channels (one filter each)"),
        Param("H", "input height"),
        Param("W", "input width"),
        Param("R", "kernel height"),
        Param("S", "kernel width"),
    ) + _WINDOW

    def input_shapes(self):
        if self.nhwc:
            return [self._data_shape(), (self.R, self.S, self.C)]
        return [self._data_shape(), (self.C, 1, self.R, self.S)]

    def output_shape(self):
        return self._out_shape(self.C)

    def _compute(self):
        from tvm import te

        data = te.placeholder(self._data_shape(), self.dtype, name="data")
        weight = te.placeholder(self.input_shapes()[1], self.dtype, name="weight")
        padded = pad_stage(data, self.pad, self.layout)
        r = te.reduce_axis((0, self.R), name="r")
        s = te.reduce_axis((0, self.S), name="s")
        st, dl = self.stride, self.dilation
        if self.nhwc:
            out = te.compute(
                self.output_shape(),
                lambda n, p, q, c: te.sum(
                    self.mac(padded[n, p * st + r * dl, q * st + s * dl, c], weight[r, s, c]), axis=[r, s]
                ),
                name="dwconv",
            )
            return [data, weight, self.finish(out)]
        out = te.compute(
            (self.N, self.C, self.P, self.Q),
            lambda n, c, p, q: te.sum(
                self.mac(padded[n, c, p * st + r * dl, q * st + s * dl], weight[c, 0, r, s]), axis=[r, s]
            ),
            name="dwconv",
        )
        return [data, weight, self.finish(out)]

    def axes_no_tvm(self):
        if self.nhwc:
            return [
                Axis("n", self.N, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"), Axis("c", self.C, "S"),
                Axis("r", self.R, "R"), Axis("s", self.S, "R"),
            ]
        return [
            Axis("n", self.N, "S"), Axis("c", self.C, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"),
            Axis("r", self.R, "R"), Axis("s", self.S, "R"),
        ]

    def reference(self, data, weight):
        data, weight = self.to_acc(data, weight)
        if self.nhwc:  # HWC -> C1HW (as [C, R, S] here), NHWC -> NCHW and back
            data, w = nhwc_to_nchw(data), weight.transpose(2, 0, 1)
        else:
            w = weight[:, 0]
        win = input_windows(pad_nchw(data, self.pad), self.R, self.S, self.P, self.Q, self.stride, self.dilation)
        out = self.to_out(np.einsum("ncrspq,crs->ncpq", win, w, optimize=True))
        return np.ascontiguousarray(nchw_to_nhwc(out)) if self.nhwc else out

    @property
    def flops(self):
        return 2 * self.N * self.C * self.P * self.Q * self.R * self.S
