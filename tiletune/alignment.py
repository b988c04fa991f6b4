"""The data alignment that compiled CPU kernels declare for their array parameters, so that plain numpy arrays
reach them without a copy (docs/decisions/api-zero-copy.md).

TVM declares every buffer 64-byte aligned by default and LLVM then emits aligned vector moves, which fault on
less-aligned data; numpy's allocations are aligned to 16 bytes. ``with_param_alignment`` lowers what a module's
kernels declare for their parameters; a caller must then still refuse (or copy) data less aligned than that."""
from __future__ import annotations

import json

#: bytes: what numpy's allocations guarantee on x86-64 and aarch64 (glibc malloc), and what the kernels that
#: ``tiletune build`` and ``tiletune model build`` export for the CPU declare for their parameters
PARAM_ALIGNMENT = 16

#: bytes: what TVM assumes without ``with_param_alignment`` (its ``kAllocAlignment``), i.e. for libraries
#: whose description names no alignment
TVM_ALIGNMENT = 64


def with_param_alignment(mod, alignment: int = PARAM_ALIGNMENT):
    """``mod`` (an IRModule) with every buffer parameter of its TIR functions declared at most ``alignment``
    bytes aligned, and the buffers that blocks match onto regions (``match_buffer``: TVM refuses a sub-buffer
    more aligned than its source); its other functions, the kernels' loops and their internal buffers are
    unchanged.

    TVM 0.27 has no Python rewriter for a buffer's type (``PrimFunc.specialize`` refuses a different
    alignment), so each function goes through TVM's JSON form, where a buffer variable is one node shared by
    every use of it: editing its ``BufferType`` re-declares the buffer everywhere at once."""
    import tvm

    out = mod.clone()
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            new = _realigned(func, alignment)
            if not new.same_as(func):
                out.update_func(gv, new)
    return out


def _realigned(func, alignment: int):
    import tvm

    graph = json.loads(tvm.ir.save_json(func))
    nodes = graph["nodes"]
    buffers = []  # node indices of the buffer variables to re-declare
    for node in nodes:
        kind = node.get("type")
        if kind == "tirx.PrimFunc":
            buffers += nodes[node["data"]["params"]]["data"]
        elif kind is not None and kind.endswith("MatchBufferRegion"):
            buffers.append(node["data"]["buffer"])
    changed = False
    for i in buffers:
        ty = nodes[nodes[i]["data"]["ty"]]
        if ty.get("type") == "tirx.BufferType" and ty["data"]["data_alignment"] > alignment:
            ty["data"]["data_alignment"] = alignment
            changed = True
    return tvm.ir.load_json(json.dumps(graph)) if changed else func
