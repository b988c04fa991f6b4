"""A split read part by part, as one strided slice per part, so that each part fuses into its reader.

GPT-2's attention imports as ``qkv = matmul(x, w) + b; q, k, v = split(qkv, 3, axis=-1)`` and then reshapes and
transposes each part into heads. ``relax.split`` lowers to one kernel with three outputs, and FuseOps fuses no
consumer into a kernel of several outputs: the split is a kernel of its own that copies the whole ``qkv``
activation once, and each transpose after it copies its part again. A part ``split(x, ...)[i]`` is the strided
slice of ``x`` between the part's bounds, and a strided slice is an injective operator of one output:
``split_as_slices`` rewrites every ``TupleGetItem`` of a split into that slice, after which FuseOps puts each
slice into the kernel of the reshape and transpose that read it (one copy per part instead of two), and the
split, no longer read, is removed. A split along an axis of symbolic extent is left as it is.
"""
from __future__ import annotations

from .layout import rewrite_functions


def part_bounds(extent: int, indices_or_sections) -> list[tuple[int, int]]:
    """The ``[begin, end)`` of each part of a split of ``extent`` elements: ``indices_or_sections`` is a count of
    equal sections (as ``relax.split``: the last one shorter when the count does not divide the extent) or the
    split points."""
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        size = -(-extent // n)
        points = [min(size * i, extent) for i in range(1, n)]
    else:
        points = [int(v) for v in indices_or_sections]
    edges = [0] + points + [extent]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def split_as_slices(mod):
    """``mod`` with every part of a statically sized split read through a strided slice (module docstring)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Slices(relax.PyExprMutator):
        def split_call(self, e):
            """The split call that binds ``e``, or None."""
            bound = self.lookup_binding(e) if isinstance(e, relax.Var) else None
            if isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == "relax.split":
                return bound
            return None

        def visit_tuple_getitem_(self, op):
            op = super().visit_tuple_getitem_(op)
            split = self.split_call(op.tuple_value)
            if split is None:
                return op
            x = split.args[0]
            shape = getattr(getattr(x, "ty", None), "shape", None)
            axis = int(split.attrs.axis)
            try:
                axis = axis % len(shape)
                extent = int(shape[axis])
            except (TypeError, ValueError):  # unknown rank or a symbolic extent
                return op
            ios = split.attrs.indices_or_sections
            ios = [int(v) for v in ios] if hasattr(ios, "__len__") else int(ios)
            begin, end = part_bounds(extent, ios)[op.index]
            return relax.op.strided_slice(x, axes=[axis], begin=[begin], end=[end])

    return tvm.transform.Sequential([relax.transform.CanonicalizeBindings(),
                                     relax.transform.DeadCodeElimination()])(rewrite_functions(mod, Slices))
