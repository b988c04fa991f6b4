"""Constant folding of an ONNX graph before TVM imports it.

PyTorch's TorchScript exporter computes some operator attributes at run time from constants: a ``Pad``'s pads
as ``Constant -> ... -> Concat -> Cast``, a ``Reshape``'s shape through ``Shape``-free arithmetic. TVM 0.27's
ONNX frontend needs them as constants ("Dynamic pads are not supported yet"). ``fold_constants`` evaluates,
in graph order, every node whose inputs are all known (initializers, ``Constant`` outputs, results folded
before it) with ONNX's own reference implementation (``onnx.reference``) and replaces it by initializers.
Kept as they are: nodes with subgraphs (Loop, Scan, an If whose condition is not known), random generators,
nodes whose evaluation fails, and results larger than ``MAX_ELEMENTS`` (folding must not blow up the model;
weights stay initializers).

Two more things are known before the graph runs, and folded too:

- ``Shape`` and ``Size`` of a tensor whose shape ONNX's shape inference gives in full (every dimension a
  number), and a ``Gather`` of numbered dimensions from a shape known in part: torch exports ``sort`` and
  ``argsort`` as a ``TopK`` whose ``k`` is ``Gather(Shape(x), axis)``, which TVM's frontend refuses ("TopK k must
  be a constant"). A dimension that is a name (a dynamic model's) is not known, and what reads it stays.
- An ``If`` whose condition is known is replaced by the nodes of the branch it takes (each branch output
  renamed to the If's output by an ``Identity``), which are then folded like the others: torch exports
  ``scatter_reduce`` between two ``If(Size(Shape(x)) == 0)`` for a 0-d input, which TVM's frontend cannot
  import (the condition's ``Size`` of a shape, then the If itself).
"""
from __future__ import annotations

import numpy as np

#: a folded result larger than this many elements keeps its node
MAX_ELEMENTS = 1 << 20
_KEEP = {"If", "Loop", "Scan", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
         "Multinomial", "Bernoulli", "SequenceConstruct", "SequenceInsert", "SequenceAt"}


#: initializers with more elements than this go to shape inference as typed inputs, without their data
SHAPES_ONLY = 4096


def _static_shapes(model) -> dict[str, tuple[int | None, ...]]:
    """{tensor name: shape} of every tensor of the main graph whose rank ONNX's shape inference gives (None for a
    dimension it does not know as a number).
    Large initializers (weights) are given to the inference by their type alone (``SHAPES_ONLY``), so that it does
    not copy a model's weights; the small ones (shapes, axes, pads) keep their values, which inference reads."""
    import onnx
    from onnx import helper

    light = model
    if model.graph.initializer:
        light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                                functions=model.functions)
        src = model.graph
        light.graph.CopyFrom(onnx.GraphProto(name=src.name, node=src.node, input=src.input, output=src.output,
                                             value_info=src.value_info))
        inputs = {i.name for i in src.input}
        for t in src.initializer:
            if int(np.prod(t.dims, dtype=np.int64)) <= SHAPES_ONLY:
                light.graph.initializer.append(t)
            elif t.name not in inputs:  # (an old model lists its initializers among the inputs already)
                light.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    try:
        inferred = onnx.shape_inference.infer_shapes(light)
    except Exception:  # noqa: BLE001  (an operator inference does not know: no shapes, nothing folded by them)
        return {}
    out = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        out[vi.name] = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in t.shape.dim)
    return out


def _shape_of(node, shapes: dict, known: dict, partial: dict) -> np.ndarray | None:
    """The value of a ``Shape`` or ``Size`` node whose input's shape is known in full, else None; a ``Shape`` of a
    shape known in part goes to ``partial`` (its output's name -> the dimensions, None where unknown)."""
    src = node.input[0] if node.input else ""
    shape = tuple(known[src].shape) if src in known else shapes.get(src)
    if shape is None:
        return None
    if node.op_type == "Size":
        return None if None in shape else np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    dims = shape[slice(attrs.get("start", 0), attrs.get("end", len(shape)))]
    if None in dims:
        partial[node.output[0]] = dims
        return None
    return np.array(dims, dtype=np.int64)


def _gathered_dims(node, partial: dict, known: dict) -> np.ndarray | None:
    """The value of a ``Gather`` (axis 0) of known dimensions from a shape known in part (``_shape_of``): a sort's
    ``k``, the length of the sorted axis, in a model whose batch is dynamic."""
    if len(node.input) < 2 or node.input[0] not in partial or node.input[1] not in known:
        return None
    if any(a.name == "axis" and a.i != 0 for a in node.attribute):
        return None
    dims = partial[node.input[0]]
    idx = np.asarray(known[node.input[1]])
    picked = [dims[int(i)] for i in idx.reshape(-1)]
    if None in picked:
        return None
    return np.array(picked, dtype=np.int64).reshape(idx.shape)


def _branch(node, cond: np.ndarray) -> list:
    """The nodes an ``If`` with the known condition ``cond`` runs, its outputs renamed to the If's by an
    ``Identity`` each; the branch's own initializers become ``Constant`` nodes."""
    from onnx import helper

    g = next(a.g for a in node.attribute if a.name == ("then_branch" if bool(np.asarray(cond).all()) else
                                                          "else_branch"))
    nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in g.initializer]
    nodes += list(g.node)
    nodes += [helper.make_node("Identity", [o.name], [name]) for o, name in zip(g.output, node.output) if name]
    return nodes


def _names_read(nodes) -> set[str]:
    """The names ``nodes`` read, those their subgraphs (a kept If's branches, a Loop's body) read included."""
    out = set()
    for n in nodes:
        out.update(i for i in n.input if i)
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out |= _names_read(g.node)
    return out


def fold_constants(model):
    """A copy of the ONNX ``model`` with its constant subexpressions folded (see the module docstring)."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    shapes = _static_shapes(model)
    partial: dict[str, tuple[int | None, ...]] = {}  # Shape outputs known in part
    known: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    folded: dict[str, np.ndarray] = {}
    kept = []
    inlined = False
    todo = list(graph.node)[::-1]  # a stack: an If's branch runs in its place
    while todo:
        node = todo.pop()
        inputs = [i for i in node.input if i]
        if node.domain in ("", "ai.onnx") and node.op_type == "If" and inputs and inputs[0] in known:
            todo.extend(_branch(node, known[inputs[0]])[::-1])
            inlined = True
            continue
        if node.domain in ("", "ai.onnx") and node.op_type in ("Shape", "Size", "Gather"):
            value = (_gathered_dims(node, partial, known) if node.op_type == "Gather"
                     else _shape_of(node, shapes, known, partial))
            if value is not None:
                known[node.output[0]] = folded[node.output[0]] = value
                continue
        if (node.domain not in ("", "ai.onnx") or node.op_type in _KEEP
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
                or not all(i in known for i in inputs)):
            kept.append(node)
            continue
        try:
            outs = ReferenceEvaluator(node, opsets={"": opset}).run(None, {i: known[i] for i in inputs})
        except Exception:  # noqa: BLE001  (an operator the reference cannot run: leave it to TVM)
            kept.append(node)
            continue
        outs = [np.asarray(o) for o in outs]
        if any(o.size > MAX_ELEMENTS for o in outs):
            kept.append(node)
            continue
        for name, value in zip(node.output, outs):
            if name:
                known[name] = folded[name] = value
    if not folded and not inlined:
        return model
    used = _names_read(kept) | {o.name for o in graph.output} | {i.name for i in graph.input}
    del graph.node[:]
    graph.node.extend(kept)
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items() if name in used)
    return model
