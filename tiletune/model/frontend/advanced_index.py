"""PyTorch's advanced indexing with several index tensors (``x[:, rows, cols]``, ``aten.index.Tensor``), as PyTorch
defines it.

TVM 0.27's converter takes the index tensors one after the other when each is one-dimensional, which gives their
outer product (``x[:, arange(6), cols]`` of a 2x6x8 tensor came out 2x6x6 instead of 2x6), and uses
``relax.op.index_tensor`` otherwise, which reads negative indices outside the tensor. ``index_tensor`` converts it
so: the index tensors broadcast together (shape ``B``) and are applied jointly; the indexed axes are moved to the
front, the indices stacked on a last axis and read by ``gather_nd`` (whose negative indices
``tiletune.model.passes.indices`` wraps); when the indexed axes are adjacent, the ``B`` axes then take their place, else
they stay in front (NumPy's and PyTorch's rule). One index tensor stays TVM's ``take`` along its axis, and
symbolic shapes go to TVM's converter; a boolean mask (``x[mask]``), whose result has a shape that depends on the
data, is refused in one line.
"""
from __future__ import annotations

import numpy as np

from ...errors import TiletuneError


def _ints(shape) -> list[int] | None:
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):
        return None


def index_tensor(node, imp):
    """The converter of ``index.Tensor`` (see the module docstring)."""
    from tvm import relax

    args = imp.retrieve_args(node)
    x, indices = args[0], list(args[1])
    picked = [(axis, idx) for axis, idx in enumerate(indices) if idx is not None]
    shape = _ints(x.ty.shape)
    shapes = [_ints(idx.ty.shape) for _, idx in picked]
    if any(str(idx.ty.dtype) == "bool" for _, idx in picked):
        raise TiletuneError("indexing with a boolean mask (x[mask]) gives a tensor whose shape depends on the data; "
                            "only static shapes are supported (torch.where(mask, x, 0) keeps the shape)")
    if len(picked) < 2 or shape is None or any(s is None for s in shapes):
        return imp._index_tensor(node)
    bb = imp.block_builder
    axes = [axis for axis, _ in picked]
    rest = [d for d in range(len(shape)) if d not in axes]
    common = list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    cols = [bb.emit(relax.op.broadcast_to(relax.op.astype(idx, "int64"), common)) for _, idx in picked]
    moved = bb.emit(relax.op.permute_dims(x, axes + rest)) if axes + rest != list(range(len(shape))) else x
    out = bb.emit(relax.op.gather_nd(moved, bb.emit(relax.op.stack(cols, axis=len(common)))))
    first = axes[0]
    if axes == list(range(first, first + len(axes))) and first > 0:  # adjacent: the broadcast axes in their place
        nb = len(common)
        order = [nb + j for j in range(first)] + list(range(nb)) + [nb + j for j in range(first, len(rest))]
        out = bb.emit(relax.op.permute_dims(out, order))
    return out
