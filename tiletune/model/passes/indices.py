"""Indices as the source framework defines them: a negative index counts from the end, and no kernel reads outside
its tensor.

PyTorch and ONNX accept an index ``i`` in ``[-n, n)`` along an axis of size ``n`` (``x[:, -1]``, ``narrow(1, -1,
1)``, ``index_select`` with ``tensor([-1, 0])``, ONNX ``Gather`` / ``GatherElements`` / ``GatherND`` with negative
indices); TVM's ``take`` in its default ``fast`` mode, ``gather_elements`` and ``gather_nd`` read ``base + i``
as they are, so a negative index reads the memory before the tensor and the model returns a plausible wrong
answer that changes from call to call. ``normalize_indices(mod)`` rewrites every such operator of an imported
module, before anything else sees it:

- constant indices (``x[:, -1]`` imports as ``take`` of the constant ``-1``) are normalized at import to
  ``i mod n`` (a ``take`` of them in ``clip`` mode, which changes no index in range); a constant outside
  ``[-n, n)`` along a static axis is refused in one line (PyTorch and ONNX Runtime reject it too);
- run-time indices (an input, or computed) are wrapped where they are read: ``take`` in TVM's ``wrap`` mode,
  ``gather_elements`` / ``gather_nd`` on ``floor_mod(i, n)`` (``gather_nd`` column by column, each by its axis'
  size as a scalar). An index in ``[-n, n)`` gets the framework's
  element; one outside it, which the framework rejects at run time, reads an element of the tensor instead of
  memory outside it (no kernel here can raise). ``clip`` and ``nan`` modes the importer chose are kept.

No ``take`` is left in ``fast`` mode, so TVM's warning for it means a wrong result (``tiletune.quiet.WRONG``).
``tiletune.model.passes.pipeline.prepare`` runs the pass right after the import; none of the later rewrites makes a
gather.

``scatter_elements`` is left as TVM makes it: its kernel wraps negative indices itself (checked by
``tests/test_indices.py``).
"""
from __future__ import annotations

import numpy as np

from ...errors import TiletuneError


def _static(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _shape(expr) -> list | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    return None if shape is None else list(shape)


def normalize_indices(mod, where: str = "the model"):
    """``mod`` with every indexing operator's indices in range (the module docstring); a TiletuneError names a
    constant index outside its axis. ``where`` names the model in that message."""
    from tvm import relax
    from tvm.ir.expr import Constant

    refused: list[str] = []  # raised after the walk: an exception inside TVM's visitor comes out as TVM's own

    @relax.expr_functor.mutator
    class Indices(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", "")
            rewrite = {"relax.take": self._take, "relax.gather_elements": self._gather_elements,
                       "relax.gather_nd": self._gather_nd}.get(name)
            try:
                return rewrite(call) if rewrite else call
            except TiletuneError as e:
                refused.append(str(e))
                return call

        def _take(self, call):
            x, idx = call.args
            shape = _shape(x)
            axis = call.attrs.axis
            if shape is None:
                return call
            axis = 0 if axis is None else int(axis)
            axis = axis + len(shape) if axis < 0 else axis
            n = _static(shape[axis])
            folded = _fold(idx, n, f"{where}: take along axis {axis}")
            if folded is not None:  # in range: clip changes nothing, and no take is left in fast mode
                return relax.op.take(x, folded, axis=axis, mode="clip" if call.attrs.mode == "fast" else call.attrs.mode)
            if call.attrs.mode == "fast":
                return relax.op.take(x, idx, axis=axis, mode="wrap")
            return call

        def _gather_elements(self, call):
            x, idx = call.args
            shape = _shape(x)
            if shape is None:
                return call
            axis = int(call.attrs.axis)
            axis = axis + len(shape) if axis < 0 else axis
            n = _static(shape[axis])
            folded = _fold(idx, n, f"{where}: gather along axis {axis}")
            if folded is not None:
                return relax.op.gather_elements(x, folded, axis=axis)
            if n is None:
                raise TiletuneError(f"{where}: a gather with run-time indices along axis {axis} of symbolic size "
                                    f"({shape[axis]}) is not supported (its negative indices cannot be wrapped)")
            return relax.op.gather_elements(x, _wrapped(idx, np.int64(n)), axis=axis)

        def _gather_nd(self, call):
            x, idx = call.args
            shape, ishape = _shape(x), _shape(idx)
            if shape is None or ishape is None or _static(ishape[-1]) is None:
                return call
            batch = int(call.attrs.batch_dims)
            k = _static(ishape[-1])
            sizes = [_static(s) for s in shape[batch:batch + k]]
            if any(s is None for s in sizes):
                raise TiletuneError(f"{where}: a gather_nd over axes of symbolic size is not supported (its negative "
                                    "indices cannot be wrapped)")
            if isinstance(idx, Constant):
                v = idx.value.numpy()
                sz = np.array(sizes, dtype=v.dtype)
                if np.any(v < -sz) or np.any(v >= sz):
                    raise TiletuneError(f"{where}: gather_nd has an index outside its tensor ({v.tolist()} for axes "
                                        f"of sizes {sizes})")
                return relax.op.gather_nd(x, relax.const(np.mod(v, sz), str(v.dtype)), batch_dims=batch)
            cols = [_wrapped(relax.op.strided_slice(idx, [len(ishape) - 1], [j], [j + 1]), n, str(idx.ty.dtype))
                    for j, n in enumerate(sizes)]  # one scalar each: a constant vector would be a kernel's argument
            return relax.op.gather_nd(x, relax.op.concat(cols, axis=-1), batch_dims=batch)

    def _wrapped(idx, n, dtype=None):
        dtype = dtype or str(idx.ty.dtype)
        return relax.op.floor_mod(idx, relax.const(np.asarray(n).astype(dtype), dtype))

    def _fold(idx, n, what):
        """The normalized constant of ``idx`` (None: not a constant, or the axis is symbolic)."""
        if not isinstance(idx, Constant) or n is None:
            return None
        v = idx.value.numpy()
        if np.any(v < -n) or np.any(v >= n):
            bad = int(v[(v < -n) | (v >= n)].flat[0])
            raise TiletuneError(f"{what}: index {bad} is outside the axis of size {n}")
        return relax.const(np.mod(v, n).astype(v.dtype), str(v.dtype))

    for gv, f in list(mod.functions.items()):
        if isinstance(f, relax.Function):
            mod[gv] = Indices().visit_expr(f)
            if refused:
                raise TiletuneError(refused[0])
    return mod
