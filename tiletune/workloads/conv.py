"""Convolutions in NCHW: conv2d (data [N,C,H,W], weight [K,C,R,S]) and depthwise_conv2d
(data [N,C,H,W], weight [C,1,R,S], one filter per channel).

The zero padding is a separate TE stage named ``pad`` that the schedules inline into the convolution.
Output size: P = (H + 2 pad - dilation (R - 1) - 1) // stride + 1, likewise Q from W and S.
"""
from __future__ import annotations

import numpy as np

from ..errors import TiletuneError
from .base import Axis, Param, Workload, register

_WINDOW = (
    Param("stride", "stride (both dimensions)", default=1),
    Param("pad", "zero padding on each side", default=0, minimum=0),
    Param("dilation", "dilation (both dimensions)", default=1),
)


def out_size(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _pad_stage(data, pad: int):
    from tvm import te

    if pad == 0:
        return data
    n, c, h, w = (int(x) for x in data.shape)

    def f(b, ch, y, x):
        inside = te.all(y >= pad, y < h + pad, x >= pad, x < w + pad)
        return te.if_then_else(inside, data[b, ch, y - pad, x - pad], te.const(0, data.dtype))

    return te.compute((n, c, h + 2 * pad, w + 2 * pad), f, name="pad")


def _np_pad(x: np.ndarray, pad: int) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else x


def _windows(xp: np.ndarray, R: int, S: int, P: int, Q: int, stride: int, dil: int) -> np.ndarray:
    """[N, C, R, S, P, Q] view of the input windows."""
    N, C = xp.shape[:2]
    out = np.empty((N, C, R, S, P, Q), dtype=xp.dtype)
    for r in range(R):
        for s in range(S):
            out[:, :, r, s] = xp[:, :, r * dil : r * dil + stride * (P - 1) + 1 : stride,
                                 s * dil : s * dil + stride * (Q - 1) + 1 : stride]
    return out


class _Conv(Workload):
    def _validate(self):
        if self.P < 1 or self.Q < 1:
            raise TiletuneError(
                f"{self.op}: the window (R={self.R}, S={self.S}, dilation={self.dilation}) does not fit the "
                f"padded input (H={self.H}, W={self.W}, pad={self.pad}): output would be {self.P}x{self.Q}"
            )

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        return {**super().buffer_shapes(), "padded input": (self.N, self.C, self.H + 2 * self.pad,
                                                            self.W + 2 * self.pad)}

    def reference_scratch_elements(self) -> int:  # the padded input and its windows (see _windows)
        return self.N * self.C * ((self.H + 2 * self.pad) * (self.W + 2 * self.pad) + self.R * self.S * self.P * self.Q)

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
        return [(self.N, self.C, self.H, self.W), (self.K, self.C, self.R, self.S)]

    def output_shape(self):
        return (self.N, self.K, self.P, self.Q)

    def _compute(self):
        from tvm import te

        data = te.placeholder((self.N, self.C, self.H, self.W), self.dtype, name="data")
        weight = te.placeholder((self.K, self.C, self.R, self.S), self.dtype, name="weight")
        padded = _pad_stage(data, self.pad)
        c = te.reduce_axis((0, self.C), name="c")
        r = te.reduce_axis((0, self.R), name="r")
        s = te.reduce_axis((0, self.S), name="s")
        st, dl = self.stride, self.dilation
        out = te.compute(
            (self.N, self.K, self.P, self.Q),
            lambda n, k, p, q: te.sum(
                padded[n, c, p * st + r * dl, q * st + s * dl] * weight[k, c, r, s], axis=[c, r, s]
            ),
            name="conv",
        )
        return [data, weight, out]

    def axes_no_tvm(self):
        return [
            Axis("n", self.N, "S"), Axis("k", self.K, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"),
            Axis("c", self.C, "R"), Axis("r", self.R, "R"), Axis("s", self.S, "R"),
        ]

    def reference(self, data, weight):
        win = _windows(_np_pad(data, self.pad), self.R, self.S, self.P, self.Q, self.stride, self.dilation)
        return np.einsum("ncrspq,kcrs->nkpq", win, weight, optimize=True).astype(data.dtype)

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
        return [(self.N, self.C, self.H, self.W), (self.C, 1, self.R, self.S)]

    def output_shape(self):
        return (self.N, self.C, self.P, self.Q)

    def _compute(self):
        from tvm import te

        data = te.placeholder((self.N, self.C, self.H, self.W), self.dtype, name="data")
        weight = te.placeholder((self.C, 1, self.R, self.S), self.dtype, name="weight")
        padded = _pad_stage(data, self.pad)
        r = te.reduce_axis((0, self.R), name="r")
        s = te.reduce_axis((0, self.S), name="s")
        st, dl = self.stride, self.dilation
        out = te.compute(
            (self.N, self.C, self.P, self.Q),
            lambda n, c, p, q: te.sum(
                padded[n, c, p * st + r * dl, q * st + s * dl] * weight[c, 0, r, s], axis=[r, s]
            ),
            name="dwconv",
        )
        return [data, weight, out]

    def axes_no_tvm(self):
        return [
            Axis("n", self.N, "S"), Axis("c", self.C, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"),
            Axis("r", self.R, "R"), Axis("s", self.S, "R"),
        ]

    def reference(self, data, weight):
        win = _windows(_np_pad(data, self.pad), self.R, self.S, self.P, self.Q, self.stride, self.dilation)
        return np.einsum("ncrspq,crs->ncpq", win, weight[:, 0], optimize=True).astype(data.dtype)

    @property
    def flops(self):
        return 2 * self.N * self.C * self.P * self.Q * self.R * self.S
