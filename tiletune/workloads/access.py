"""Which loop axes index which tensor: the data-movement description of each operator, in one place.

``tensor_accesses(workload)`` returns, for every input and output tensor, one ``IndexExpr`` per tensor
dimension: a sum of (axis, coefficient) terms plus the dimension's size. Examples:

- gemm: A[m, k], B[k, n], C[m, n]; batch_matmul adds b in front; gemv: A[m, k], x[k], y[m]
- conv2d: data[n, c, p*stride + r*dilation, q*stride + s*dilation], weight[k, c, r, s], out[n, k, p, q]
  (the padded input: its dimension sizes are H + 2 pad and W + 2 pad)
- depthwise_conv2d: data[n, c, p*st + r*dl, q*st + s*dl], weight[c, 0, r, s], out[n, c, p, q]
- layout=NHWC: conv2d data[n, p*st + r*dl, q*st + s*dl, c], weight[r, s, c, k] (HWIO), out[n, p, q, k];
  depthwise data[n, p*st + r*dl, q*st + s*dl, c], weight[r, s, c] (HWC), out[n, p, q, c]
- avgpool2d: data[n, c, p*st + r, q*st + s], out[n, c, p, q]

From it, the generic data-movement model used by the constructive strategies (Gensor, Roller) and by the
analytical features:

- tile extent of one tensor dimension for per-axis tile sizes t: sum_i coef_i (t_i - 1) + 1 (a sliding
  window for strided/dilated convolutions), capped by the dimension's size; axes not named have tile 1;
- footprint F(t) = sum over tensors of prod(dimension tile extents) x element bytes;
- traffic Q(t) (bytes moved into the memory that holds one tile, over the whole computation, Roller's
  rTile model with no reuse between tiles): an input is loaded once per tile of the whole iteration space,
  ``F_in(t) x prod_all axes ceil(E/t)``; an output is accumulated in place across the reduction and written
  once per spatial tile, ``F_out(t) x prod_spatial axes ceil(E/t)``;
- optionally counted in transfer units (``unit`` elements: a vector for registers, a cache line for caches):
  the innermost, contiguous dimension of each tensor tile is rounded up to whole units, since memory moves
  whole lines and a register holds whole vectors.

Operators this module does not know (or a space without a workload) get ``generic_accesses(axes)``, a
documented guess: a contraction whose output is indexed by all spatial axes and whose two inputs share all
reduction axes and split the spatial axes (first half / second half), like gemm; with no reduction axis a
single input indexed like the output. A Workload subclass may instead define ``tensor_accesses()``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .base import Axis, Workload

DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "uint8": 1, "int8": 1, "int32": 4}


@dataclass(frozen=True)
class IndexExpr:
    """One tensor dimension indexed by sum(coef x axis); ``size`` is the dimension's length."""

    terms: tuple[tuple[str, int], ...]
    size: int

    def tile_extent(self, tiles: Mapping[str, int]) -> int:
        if not self.terms:
            return 1
        return min(self.size, sum(c * (tiles.get(a, 1) - 1) for a, c in self.terms) + 1)

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self.terms)


@dataclass(frozen=True)
class TensorAccess:
    name: str
    role: str  # "input" | "output"
    dims: tuple[IndexExpr, ...]
    dtype_bytes: int = 4

    @property
    def axes(self) -> frozenset[str]:
        return frozenset(a for d in self.dims for a in d.axes)

    def tile_elements(self, tiles: Mapping[str, int], unit: int = 1) -> int:
        """Elements of the tile; with ``unit`` > 1 the innermost (contiguous) dimension is rounded up to
        whole transfer units of that many elements (vectors, cache lines)."""
        ext = [d.tile_extent(tiles) for d in self.dims]
        if unit > 1 and ext:
            ext[-1] = -(-ext[-1] // unit) * unit
        return math.prod(ext)

    def tile_bytes(self, tiles: Mapping[str, int], unit: int = 1) -> int:
        return self.tile_elements(tiles, unit) * self.dtype_bytes

    @property
    def total_bytes(self) -> int:
        return math.prod(d.size for d in self.dims) * self.dtype_bytes


def _ix(size: int, *terms: tuple[str, int]) -> IndexExpr:
    return IndexExpr(tuple(terms), size)


def _v(axis: str, size: int) -> IndexExpr:
    return IndexExpr(((axis, 1),), size)


def _const(size: int = 1) -> IndexExpr:
    return IndexExpr((), size)


def tensor_accesses(workload: Workload | None, axes: Sequence[Axis] | None = None) -> list[TensorAccess]:
    """The access description of ``workload`` (inputs first, then the output)."""
    if workload is None:
        if axes is None:
            raise ValueError("tensor_accesses needs a workload or its axes")
        return generic_accesses(axes)
    own = getattr(workload, "tensor_accesses", None)
    if callable(own):
        return list(own())
    b = DTYPE_BYTES.get(workload.dtype, 4)
    op, w = workload.op, workload
    if getattr(workload, "out_dtype", workload.dtype) != workload.dtype:  # float32 output of half inputs
        return [t if t.role == "input" else TensorAccess(t.name, t.role, t.dims, DTYPE_BYTES[workload.out_dtype])
                for t in _family_accesses(workload, b)]
    return _family_accesses(workload, b)


def _family_accesses(workload: Workload, b: int) -> list[TensorAccess]:
    op, w = workload.op, workload
    if op == "gemm":
        return [TensorAccess("A", "input", (_v("m", w.M), _v("k", w.K)), b),
                TensorAccess("B", "input", (_v("k", w.K), _v("n", w.N)), b),
                TensorAccess("C", "output", (_v("m", w.M), _v("n", w.N)), b)]
    if op == "batch_matmul":
        return [TensorAccess("A", "input", (_v("b", w.B), _v("m", w.M), _v("k", w.K)), b),
                TensorAccess("B", "input", (_v("b", w.B), _v("k", w.K), _v("n", w.N)), b),
                TensorAccess("C", "output", (_v("b", w.B), _v("m", w.M), _v("n", w.N)), b)]
    if op == "gemv":
        return [TensorAccess("A", "input", (_v("m", w.M), _v("k", w.K)), b),
                TensorAccess("x", "input", (_v("k", w.K),), b),
                TensorAccess("y", "output", (_v("m", w.M),), b)]
    if op in ("conv2d", "depthwise_conv2d") and w.layout == "NHWC":
        st, dl, pad = w.stride, w.dilation, w.pad
        data = TensorAccess("data", "input", (
            _v("n", w.N), _ix(w.H + 2 * pad, ("p", st), ("r", dl)), _ix(w.W + 2 * pad, ("q", st), ("s", dl)),
            _v("c", w.C)), b)
        if op == "conv2d":
            weight = TensorAccess("weight", "input", (_v("r", w.R), _v("s", w.S), _v("c", w.C), _v("k", w.K)), b)
            out = TensorAccess("conv", "output", (_v("n", w.N), _v("p", w.P), _v("q", w.Q), _v("k", w.K)), b)
        else:
            weight = TensorAccess("weight", "input", (_v("r", w.R), _v("s", w.S), _v("c", w.C)), b)
            out = TensorAccess("dwconv", "output", (_v("n", w.N), _v("p", w.P), _v("q", w.Q), _v("c", w.C)), b)
        return [data, weight, out]
    if op in ("conv2d", "depthwise_conv2d"):
        st, dl, pad = w.stride, w.dilation, w.pad
        ch = "c"
        data = TensorAccess("data", "input", (
            _v("n", w.N), _v(ch, w.C),
            _ix(w.H + 2 * pad, ("p", st), ("r", dl)), _ix(w.W + 2 * pad, ("q", st), ("s", dl))), b)
        if op == "conv2d":
            weight = TensorAccess("weight", "input", (_v("k", w.K), _v("c", w.C), _v("r", w.R), _v("s", w.S)), b)
            out = TensorAccess("conv", "output", (_v("n", w.N), _v("k", w.K), _v("p", w.P), _v("q", w.Q)), b)
        else:
            weight = TensorAccess("weight", "input", (_v("c", w.C), _const(1), _v("r", w.R), _v("s", w.S)), b)
            out = TensorAccess("dwconv", "output", (_v("n", w.N), _v("c", w.C), _v("p", w.P), _v("q", w.Q)), b)
        return [data, weight, out]
    if op == "avgpool2d":
        st, pad = w.stride, w.pad
        data = TensorAccess("data", "input", (
            _v("n", w.N), _v("c", w.C),
            _ix(w.H + 2 * pad, ("p", st), ("r", 1)), _ix(w.W + 2 * pad, ("q", st), ("s", 1))), b)
        out = TensorAccess("pool", "output", (_v("n", w.N), _v("c", w.C), _v("p", w.P), _v("q", w.Q)), b)
        return [data, out]
    return generic_accesses(workload.axes_no_tvm(), b)


def generic_accesses(axes: Sequence[Axis], dtype_bytes: int = 4) -> list[TensorAccess]:
    """The documented guess for an unknown operator (see the module docstring)."""
    sp = [a for a in axes if a.kind == "S"]
    rd = [a for a in axes if a.kind == "R"]
    out = TensorAccess("out", "output", tuple(_v(a.name, a.extent) for a in sp), dtype_bytes)
    if not rd:
        return [TensorAccess("in0", "input", out.dims, dtype_bytes), out]
    half = (len(sp) + 1) // 2
    ins = [
        TensorAccess("in0", "input", tuple(_v(a.name, a.extent) for a in sp[:half] + rd), dtype_bytes),
        TensorAccess("in1", "input", tuple(_v(a.name, a.extent) for a in rd + sp[half:]), dtype_bytes),
    ]
    return ins + [out]


# ---- the data-movement model -----------------------------------------------------------------------
def footprint_bytes(accesses: Sequence[TensorAccess], tiles: Mapping[str, int], unit: int = 1) -> int:
    """F(t): bytes of all tensors' tiles for per-axis tile sizes ``tiles`` (``unit``: see tile_elements)."""
    return sum(t.tile_bytes(tiles, unit) for t in accesses)


def tile_counts(axes: Sequence[Axis], tiles: Mapping[str, int]) -> tuple[int, int]:
    """(number of tiles of the whole iteration space, number of spatial tiles)."""
    allt = sp = 1
    for a in axes:
        n = -(-a.extent // max(1, tiles.get(a.name, 1)))
        allt *= n
        if a.kind == "S":
            sp *= n
    return allt, sp


def traffic_bytes(accesses: Sequence[TensorAccess], axes: Sequence[Axis], tiles: Mapping[str, int],
                  unit: int = 1, output_trips: int = 1) -> int:
    """Q(t): bytes moved into the memory holding one tile over the whole computation (see module doc).
    ``output_trips``: times each output tile is moved (1: accumulated in place across the whole reduction;
    more where a schedule moves its accumulators out and back in during the reduction)."""
    allt, sp = tile_counts(axes, tiles)
    return sum(t.tile_bytes(tiles, unit) * (allt if t.role == "input" else sp * output_trips) for t in accesses)


def compulsory_bytes(accesses: Sequence[TensorAccess]) -> int:
    """Q_min: every tensor moved exactly once (the traffic with an unbounded memory)."""
    return sum(t.total_bytes for t in accesses)
