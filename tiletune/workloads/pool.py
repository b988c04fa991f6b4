"""avgpool2d NCHW: out[n,c,p,q] = sum_{r,s} pad(data)[n, c, p*stride + r, q*stride + s] / (kernel^2).

Choice (written down): padding counts in the divisor (count_include_pad=True, as torch's default), so
the whole operator is one reduction stage and the division folds into the summand. FLOPs: one add per
window element and one multiply by 1/kernel^2 per window element (2 per element), matching how the
stage computes it.
"""
from __future__ import annotations

from ..errors import TiletuneError
from .base import Axis, Param, Workload, register
from .conv import pad_nchw, pad_stage, input_windows, out_size


@register
class AvgPool2d(Workload):
    op = "avgpool2d"
    params = (
        Param("N", "batch", default=1),
        Param("C", "channels"),
        Param("H", "input height"),
        Param("W", "input width"),
        Param("kernel", "window size (both dimensions)"),
        Param("stride", "stride (both dimensions)", default=1),
        Param("pad", "zero padding on each side", default=0, minimum=0),
    )

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        return {**super().buffer_shapes(), "padded input": (self.N, self.C, self.H + 2 * self.pad,
                                                            self.W + 2 * self.pad)}

    def reference_scratch_elements(self) -> int:  # the padded input and its windows
        k = self.kernel
        return self.N * self.C * ((self.H + 2 * self.pad) * (self.W + 2 * self.pad) + k * k * self.P * self.Q)

    @property
    def P(self):
        return out_size(self.H, self.kernel, self.stride, self.pad, 1)

    @property
    def Q(self):
        return out_size(self.W, self.kernel, self.stride, self.pad, 1)

    def _validate(self):
        if self.P < 1 or self.Q < 1:
            raise TiletuneError(
                f"avgpool2d: kernel={self.kernel} does not fit the padded input "
                f"(H={self.H}, W={self.W}, pad={self.pad}): output would be {self.P}x{self.Q}"
            )
        if self.pad >= self.kernel:
            raise TiletuneError(f"avgpool2d: pad={self.pad} must be smaller than kernel={self.kernel}")

    def input_shapes(self):
        return [(self.N, self.C, self.H, self.W)]

    def output_shape(self):
        return (self.N, self.C, self.P, self.Q)

    def _compute(self):
        from tvm import te

        data = te.placeholder((self.N, self.C, self.H, self.W), self.dtype, name="data")
        padded = pad_stage(data, self.pad)
        r = te.reduce_axis((0, self.kernel), name="r")
        s = te.reduce_axis((0, self.kernel), name="s")
        st = self.stride
        inv = 1.0 / (self.kernel * self.kernel)
        out = te.compute(
            (self.N, self.C, self.P, self.Q),
            lambda n, c, p, q: te.sum(
                padded[n, c, p * st + r, q * st + s] * te.const(inv, self.dtype), axis=[r, s]
            ),
            name="pool",
        )
        return [data, out]

    def axes_no_tvm(self):
        return [
            Axis("n", self.N, "S"), Axis("c", self.C, "S"), Axis("p", self.P, "S"), Axis("q", self.Q, "S"),
            Axis("r", self.kernel, "R"), Axis("s", self.kernel, "R"),
        ]

    def reference(self, data):
        k = self.kernel
        win = input_windows(pad_nchw(data, self.pad), k, k, self.P, self.Q, self.stride, 1)
        return (win.sum(axis=(2, 3)) / (k * k)).astype(data.dtype)

    @property
    def flops(self):
        return 2 * self.N * self.C * self.P * self.Q * self.kernel * self.kernel
