"""Fault-injecting builders for the RPC tests (named "module:function" like any builder; they run in the
build workers)."""
from __future__ import annotations

from tiletune.measure.local import build_kernel

CRASH_UNROLL = 512  # the configurations with this unroll value crash the process that runs them


def crash_unroll(workload, space, config, target):
    """The real kernel, except for configurations with ``unroll == CRASH_UNROLL``: a kernel of the same
    signature that calls abort() (it kills the RPC server's session process that runs it)."""
    if space.to_dict(config).get("unroll") != CRASH_UNROLL:
        return build_kernel(workload, space, config, target)
    import tvm
    from tvm import te

    args = [te.placeholder(s, workload.dtype, name=f"in{i}") for i, s in enumerate(workload.input_shapes())]
    first = args[0]
    out = te.compute(workload.output_shape(),
                     lambda *i: first[(0,) * len(first.shape)]
                     + tvm.tirx.call_extern("int32", "abort").astype(workload.dtype), name="out")
    mod = tvm.compile(tvm.IRModule({"main": te.create_prim_func([*args, out])}), target=tvm.target.Target(target)).mod
    mod["main"]
    return mod
