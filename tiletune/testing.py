"""Fault injection for tests: builders and runners that crash, hang or compute the wrong answer.

Used by the test suite through LocalMeasurer(builder=..., runner=...). The fault is chosen by the
configuration's unroll value so that a test can mix good and bad configurations in one run:
unroll == 16 -> the build segfaults; unroll == 64 -> the build hangs; unroll == 512 -> the kernel is
built from a different compute (2 * A @ B) and gives a wrong answer. With ``faulty_build_marking`` +
``faulty_run`` the same unroll values make the *run* segfault (16) or hang (64) instead.
"""
from __future__ import annotations

import ctypes
import time

from .measure.factory import build_kernel, run_kernel

_RUN_FAULT: dict[int, int] = {}  # id(runtime module) -> unroll value, inside a worker


def _unroll(space, config):
    return space.to_dict(config).get("unroll", 0)


def faulty_build(workload, space, config, target):
    u = _unroll(space, config)
    if u == 16:
        ctypes.string_at(0)  # segfault
    if u == 64:
        time.sleep(3600)
    if u == 512:
        import tvm
        from tvm import te

        A, B = (te.placeholder(t.shape, t.dtype, name=t.op.name) for t in workload.te()[:-1])
        k = te.reduce_axis((0, int(A.shape[1])), name="k")
        C = te.compute((int(A.shape[0]), int(B.shape[1])), lambda i, j: te.sum(2 * A[i, k] * B[k, j], axis=k))
        f = te.create_prim_func([A, B, C])
        return tvm.compile(tvm.IRModule({"main": f}), target=tvm.target.Target(target)).mod
    return build_kernel(workload, space, config, target)


def faulty_build_marking(workload, space, config, target):
    """Builds normally and remembers which run-time fault the kernel should have."""
    lib = build_kernel(workload, space, config, target)
    _RUN_FAULT[id(lib)] = _unroll(space, config)
    return lib


def faulty_run(workload, lib, settings, **kw):
    u = _RUN_FAULT.pop(id(lib), 0)
    if u == 16:
        ctypes.string_at(0)
    if u == 64:
        time.sleep(3600)
    return run_kernel(workload, lib, settings, **kw)
