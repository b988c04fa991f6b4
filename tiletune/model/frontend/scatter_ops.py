"""Converters for PyTorch's scatters onto Relax's ``scatter_elements`` (ONNX's ScatterElements: ``update``, ``add``,
``mul``, ``max``, ``min``), for what TVM 0.27's PyTorch frontend lacks (``scatter_add``, ``scatter_reduce``, the
``reduce=`` forms of ``scatter``) or gets wrong: ``scatter`` of a tensor or a scalar (through ``elements``,
below), and ``index_put`` with one index tensor among full slices (``x[:, idx] = v`` / ``+= v``, and
``index_add``, which torch.export writes as ``index_put(x, [None, idx], v, accumulate=True)``: TVM's converter
builds index shapes that do not broadcast when two axes are full slices). The ONNX path reaches ``elements``
through ``tiletune.model.frontend.onnx_ops``' ScatterElements.

Choices:

- ``elements``: TVM's ``scatter_elements`` kernel walks the index's positions off the scatter axis as if the index
  had the data's extents there, so an index shorter than the data on another axis (``index`` 1x6x3 into 2x6x8 along
  axis 0) wrote to the wrong places. Such an index (and its updates) is padded to the data's extents on those
  axes; a padded position points at position 0 of its line with a value that changes nothing there (0 for
  ``add``, 1 for ``mul``, the value already there otherwise), and a padded line is a line no real index reaches.
- ``index_put`` with one one-dimensional index tensor (negative entries counted from the end) is a scatter along
  its axis, the index spread over the other axes, the values broadcast to the indexed shape; ``accumulate`` sums.
  Any other ``index_put`` (every axis indexed, several index tensors) stays with TVM's converter.
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

from ...errors import TiletuneError

#: torch's reduce names -> scatter_elements' reductions
REDUCTIONS = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


def elements(bb, x, index, src, dim: int, how: str):
    """``scatter_elements(x, index, src, dim, how)`` emitted on ``bb``, with ``index`` and ``src`` first padded to
    ``x``'s extent on every axis but ``dim`` where they are shorter (see the module docstring): TVM's kernel walks
    the index's positions off ``dim`` as if they had ``x``'s extents, and writes elsewhere when they do not. The
    padding points at position 0 of its line with a value that changes nothing there (0 for ``add``, 1 for
    ``mul``, the value already there otherwise); a padded line is a line of ``x`` no real index reaches."""
    from tvm import relax

    x, index, src = (bb.normalize(e) for e in (x, index, src))
    shape = [int(v) for v in x.ty.shape]
    ishape = [int(v) for v in index.ty.shape]
    short = [(0, 0) if a == dim else (0, n - i) for a, (n, i) in enumerate(zip(shape, ishape))]
    if not any(after for _, after in short):
        return bb.emit(relax.op.scatter_elements(x, index, src, dim, how))
    widths = [w for pair in short for w in pair]
    full = bb.emit(relax.op.nn.pad(index, widths, pad_value=0))
    if how in ("add", "mul"):
        src = relax.op.nn.pad(src, widths, pad_value=0.0 if how == "add" else 1.0)
    else:
        real = relax.op.nn.pad(relax.op.ones(ishape, "int8"), widths, pad_value=0)
        src = relax.op.where(relax.op.greater(real, relax.const(0, "int8")), relax.op.nn.pad(src, widths),
                             relax.op.gather_elements(x, full, dim))
    return bb.emit(relax.op.scatter_elements(x, full, bb.emit(src), dim, how))


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
        return elements(bb, x, index, src, dim, "update")
    if reduce == "mean":
        if "float" not in dtype:
            raise TiletuneError(f"scatter_reduce with reduce='mean' on {dtype}: only floating-point means are "
                                "supported (torch rounds an integer mean down)")
        zeros = relax.op.zeros(shape, dtype)
        total = elements(bb, x if include_self else zeros, index, src, dim, "add")
        start = relax.op.ones(shape, dtype) if include_self else zeros
        count = elements(bb, start, index, relax.op.ones(ishape, dtype), dim, "add")
        one = relax.const(1.0, dtype)
        mean = emit(relax.op.divide(total, relax.op.maximum(count, one)))
        return mean if include_self else emit(relax.op.where(relax.op.greater(count, relax.const(0.0, dtype)),
                                                             mean, x))
    if reduce not in REDUCTIONS:
        raise TiletuneError(f"scatter_reduce with reduce={reduce!r}: only sum, prod, mean, amax and amin are supported")
    how = REDUCTIONS[reduce]
    if include_self:
        return elements(bb, x, index, src, dim, how)
    if how in ("max", "min"):  # one of the values of each written position first, then the reduction onto it
        first = elements(bb, x, index, src, dim, "update")
        return elements(bb, first, index, src, dim, how)
    base = relax.op.full(shape, relax.const(0 if how == "add" else 1, dtype), dtype)
    reduced = elements(bb, base, index, src, dim, how)
    marks = elements(bb, relax.op.zeros(shape, "int8"), index, relax.op.ones(ishape, "int8"), dim, "update")
    return emit(relax.op.where(relax.op.greater(marks, relax.const(0, "int8")), reduced, x))


def _one_dim_ints(t) -> bool:
    ty = getattr(t, "ty", None)
    return getattr(ty, "ndim", None) == 1 and "int" in str(getattr(ty, "dtype", "")) and ty.shape is not None


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

    def index_put(node, imp):  # index_put(x, indices, values, accumulate=False): x[indices] = values (+=)
        from tvm import relax

        args = imp.retrieve_args(node)
        x, indices, values = args[0], arg(node, imp, args, 1, "indices"), arg(node, imp, args, 2, "values")
        accumulate = bool(arg(node, imp, args, 3, "accumulate", False))
        given = [(d, t) for d, t in enumerate(indices or ()) if t is not None]
        if len(given) != 1 or not _one_dim_ints(given[0][1]) or not isinstance(values, relax.Expr):
            return imp._index_put(node)  # TVM's own: every axis indexed, or several index tensors
        d, index = given[0]
        bb = imp.block_builder
        shape = [int(v) for v in x.ty.shape]
        size = shape[d]
        shape[d] = int(index.ty.shape[0])
        along = [1] * len(shape)
        along[d] = shape[d]
        index = relax.op.where(relax.op.less(index, relax.const(0, str(index.ty.dtype))),
                               relax.op.add(index, relax.const(size, str(index.ty.dtype))), index)
        spread = bb.emit(relax.op.broadcast_to(relax.op.reshape(index, along), shape))  # every row its index
        values = bb.emit(relax.op.broadcast_to(values, shape))
        return scatter(bb, x, d, spread, values, "sum" if accumulate else None)

    return {"index_put.default": index_put, "index_put_.default": index_put,
            "scatter_add.default": scatter_add, "scatter_reduce.two": scatter_reduce,
            "scatter.src": scatter_value, "scatter.value": scatter_value, "scatter.reduce": scatter_value,
            "scatter.value_reduce": scatter_value}
