"""Converters for PyTorch's scatter reductions, which TVM 0.27's PyTorch frontend lacks (``scatter_add``,
``scatter_reduce``, the ``reduce=`` forms of ``scatter``) or misreads (``scatter`` of a scalar value), onto
Relax's ``scatter_elements`` (ONNX's ScatterElements: ``add``, ``mul``, ``max``, ``min``; the frontend's ONNX path
imports torch's export of the same models onto the same operator).

Choices:

- A ``src`` larger than ``index`` is sliced to ``index``'s shape first: torch reads only that corner of it,
  ``scatter_elements`` needs both of one shape.
- ``include_self=True`` (torch's default) is ``scatter_elements`` with the reduction on the input itself.
  ``include_self=False``: a sum or a product reduces into a tensor of its identity (0, 1) and takes the input
  where no index points (a second scatter marks the positions that are written); a max or a min first writes
  one of the values that meet at each position over the input (``update``), then reduces onto that, so that no
  identity value (an infinity, which TVM's ``full`` does not legalize) is needed and untouched positions keep
  the input.
- ``mean`` is a sum divided by a count, both scattered with ``add`` (the count starts at 1 on the input with
  ``include_self``); positions no index points keep the input. ``scatter_elements``' own ``mean`` is not used:
  torch's is the mean of all values that meet at a position, which one sum and one count give exactly. An
  integer mean (torch rounds it down) is refused in one line, as is any other ``reduce``.
"""
from __future__ import annotations

from ..errors import TiletuneError

#: torch's reduce names -> scatter_elements' reductions
REDUCTIONS = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


def scatter(bb, x, dim: int, index, src, reduce: str | None = None, include_self: bool = True):
    """``x.scatter_reduce(dim, index, src, reduce, include_self)`` (``reduce=None``: plain ``scatter``) emitted on
    the block builder ``bb``; ``src`` a Relax tensor or a Python number."""
    from tvm import relax

    shape = [int(s) for s in x.ty.shape]
    dtype = str(x.ty.dtype)
    nd = len(shape)
    dim = int(dim) % nd
    ishape = [int(s) for s in index.ty.shape]
    if not isinstance(src, relax.Expr):
        src = relax.op.full(ishape, relax.const(src, dtype), dtype)
    elif [int(s) for s in src.ty.shape] != ishape:  # torch reads the corner of src that index covers
        src = relax.op.strided_slice(src, axes=list(range(nd)), begin=[0] * nd, end=ishape)
    src = bb.normalize(src)

    def emit(e):
        return bb.emit(e)

    if reduce is None:
        return emit(relax.op.scatter_elements(x, index, src, dim, "update"))
    if reduce == "mean":
        if "float" not in dtype:
            raise TiletuneError(f"scatter_reduce with reduce='mean' on {dtype}: only floating-point means are "
                                "supported (torch rounds an integer mean down)")
        zeros = relax.op.zeros(shape, dtype)
        total = emit(relax.op.scatter_elements(x if include_self else zeros, index, src, dim, "add"))
        start = relax.op.ones(shape, dtype) if include_self else zeros
        count = emit(relax.op.scatter_elements(start, index, relax.op.ones(ishape, dtype), dim, "add"))
        one = relax.const(1.0, dtype)
        mean = emit(relax.op.divide(total, relax.op.maximum(count, one)))
        return mean if include_self else emit(relax.op.where(relax.op.greater(count, relax.const(0.0, dtype)),
                                                             mean, x))
    if reduce not in REDUCTIONS:
        raise TiletuneError(f"scatter_reduce with reduce={reduce!r}: only sum, prod, mean, amax and amin are supported")
    how = REDUCTIONS[reduce]
    if include_self:
        return emit(relax.op.scatter_elements(x, index, src, dim, how))
    if how in ("max", "min"):  # one of the values of each written position first, then the reduction onto it
        first = emit(relax.op.scatter_elements(x, index, src, dim, "update"))
        return emit(relax.op.scatter_elements(first, index, src, dim, how))
    base = relax.op.full(shape, relax.const(0 if how == "add" else 1, dtype), dtype)
    reduced = emit(relax.op.scatter_elements(base, index, src, dim, how))
    marks = emit(relax.op.scatter_elements(relax.op.zeros(shape, "int8"), index, relax.op.ones(ishape, "int8"),
                                           dim, "update"))
    return emit(relax.op.where(relax.op.greater(marks, relax.const(0, "int8")), reduced, x))


def scatter_converters() -> dict:
    """ATen scatter operators -> converters for ``from_exported_program``'s ``custom_convert_map``."""

    def arg(node, imp, args, i, name, default=None):
        """Argument ``i`` (positional) or ``name`` (keyword; a tensor's fx node read from the importer's values)."""
        if len(node.args) > i:
            return args[i]
        value = node.kwargs.get(name, default)
        return imp.env[value] if value is not None and type(value).__name__ == "Node" else value

    def scatter_add(node, imp):
        args = imp.retrieve_args(node)
        return scatter(imp.block_builder, args[0], arg(node, imp, args, 1, "dim"), arg(node, imp, args, 2, "index"),
                       arg(node, imp, args, 3, "src"), "sum")

    def scatter_reduce(node, imp):
        args = imp.retrieve_args(node)
        return scatter(imp.block_builder, args[0], arg(node, imp, args, 1, "dim"), arg(node, imp, args, 2, "index"),
                       arg(node, imp, args, 3, "src"), str(arg(node, imp, args, 4, "reduce")),
                       bool(node.kwargs.get("include_self", True)))

    def scatter_value(node, imp):  # scatter(x, dim, index, value[, reduce=])
        args = imp.retrieve_args(node)
        reduce = arg(node, imp, args, 4, "reduce")
        return scatter(imp.block_builder, args[0], arg(node, imp, args, 1, "dim"), arg(node, imp, args, 2, "index"),
                       arg(node, imp, args, 3, "value", arg(node, imp, args, 3, "src")),
                       None if reduce is None else str(reduce))

    return {"scatter_add.default": scatter_add, "scatter_reduce.two": scatter_reduce,
            "scatter.value": scatter_value, "scatter.reduce": scatter_value, "scatter.value_reduce": scatter_value}
