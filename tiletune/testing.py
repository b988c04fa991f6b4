"""Fault injection for tests: builders and runners that crash, hang or compute the wrong answer.

Used by the test suite through LocalMeasurer(builder=..., runner=...). The fault is chosen by the
configuration's unroll value so that a test can mix good and bad configurations in one run:
unroll == 16 -> the build worker segfaults; unroll == 64 -> the build hangs;
unroll == 512 -> the kernel is built from a different compute (2 * A @ B) and gives a wrong answer.
The runner variant segfaults at run time for unroll == 16 and hangs for unroll == 64.
"""
from __future__ import annotations

import ctypes
import time

from .measure.local import build_kernel, run_kernel


def _unroll(space, config):
    return space.to_dict(config).get("unroll", 0)


def faulty_build(workload, space, config, target, out_path):
    u = _unroll(space, config)
    if u == 16:
        ctypes.string_at(0)  # segfault
    if u == 64:
        time.sleep(3600)
    if u == 512:
        import tvm
        from tvm import te

        ins = [te.placeholder(t.shape, t.dtype, name=t.op.name) for t in workload.te()[:-1]]
        A, B = ins
        k = te.reduce_axis((0, int(A.shape[1])), name="k")
        C = te.compute((int(A.shape[0]), int(B.shape[1])), lambda i, j: te.sum(2 * A[i, k] * B[k, j], axis=k))
        f = te.create_prim_func([A, B, C])
        tvm.compile(tvm.IRModule({"main": f}), target=tvm.target.Target(target)).export_library(out_path)
        return
    build_kernel(workload, space, config, target, out_path)


_RUN_FAULT: dict[str, int] = {}


def faulty_build_marking(workload, space, config, target, out_path):
    """Builds normally and leaves a marker naming the run-time fault next to the library."""
    build_kernel(workload, space, config, target, out_path)
    with open(out_path + ".fault", "w") as f:
        f.write(str(_unroll(space, config)))


def faulty_run(workload, path, settings):
    try:
        u = int(open(path + ".fault").read())
    except OSError:
        u = 0
    if u == 16:
        ctypes.string_at(0)
    if u == 64:
        time.sleep(3600)
    return run_kernel(workload, path, settings)
