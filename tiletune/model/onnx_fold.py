"""Constant folding of an ONNX graph before TVM imports it.

PyTorch's TorchScript exporter computes some operator attributes at run time from constants: a ``Pad``'s pads
as ``Constant -> ... -> Concat -> Cast``, a ``Reshape``'s shape through ``Shape``-free arithmetic. TVM 0.27's
ONNX frontend needs them as constants ("Dynamic pads are not supported yet"). ``fold_constants`` evaluates,
in graph order, every node whose inputs are all known (initializers, ``Constant`` outputs, results folded
before it) with ONNX's own reference implementation (``onnx.reference``) and replaces it by initializers.
Kept as they are: nodes with subgraphs (If, Loop, Scan), random generators, nodes whose evaluation fails,
and results larger than ``MAX_ELEMENTS`` (folding must not blow up the model; weights stay initializers).
"""
from __future__ import annotations

import numpy as np

#: a folded result larger than this many elements keeps its node
MAX_ELEMENTS = 1 << 20
_KEEP = {"If", "Loop", "Scan", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
         "Multinomial", "Bernoulli", "SequenceConstruct", "SequenceInsert", "SequenceAt"}


def fold_constants(model):
    """A copy of the ONNX ``model`` with its constant subexpressions folded (see the module docstring)."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    known: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    folded: dict[str, np.ndarray] = {}
    kept = []
    for node in graph.node:
        inputs = [i for i in node.input if i]
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
    if not folded:
        return model
    used = {i for n in kept for i in n.input} | {o.name for o in graph.output} | {i.name for i in graph.input}
    del graph.node[:]
    graph.node.extend(kept)
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items() if name in used)
    return model
