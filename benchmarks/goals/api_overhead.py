"""What tiletune.api costs over calling the compiled module on TVM tensors, GEMM 512^3 by default.

    python benchmarks/goals/api_overhead.py [--records R.jsonl | --lib K.so] [--size 512] [--rounds 30] [--trials 24]

Times, alternately in rounds (one sample each per round: ``--number`` back-to-back calls, seconds per call):
- ``tvm``: the module's ``main`` on TVM tensors allocated once (no API at all);
- ``tvm empty``: the module's ``main`` on the 64-byte-aligned numpy arrays of ``tiletune.api.empty`` (inputs
  and output), by DLPack (no API: numpy's memory instead of TVM's);
- ``tvm numpy``: the same on the plain numpy arrays and a plain numpy output (no API: what their placement
  costs the kernel; only for a library that declares an alignment numpy meets);
- ``api``: ``kernel(a, b)`` on 64-byte-aligned numpy arrays (``tiletune.api.empty``): inputs passed by DLPack,
  the output a numpy view of a pooled TVM tensor;
- ``api out=``: ``kernel(a, b, out=c)`` with an aligned ``c``;
- ``api numpy``: ``kernel(a, b)`` on plain numpy arrays (numpy aligns to 16 bytes: passed by DLPack when the
  library declares 16, the default since it says so; copied into staging buffers for older libraries);
- ``api staged``: ``kernel(a, b)`` on arrays 4 bytes past numpy's alignment (less aligned than any kernel
  declares: both inputs copied into staging buffers);
- ``copying``: what the API did first (``tvm.runtime.tensor`` copies of the inputs, a zeroed output,
  ``.numpy()``).
Prints where each array lies (address mod 64), the median seconds per call and GFLOPS of each method, and each
one's median time over ``tvm``'s (1.00 = free). Every method's output is checked against numpy first.

The kernel: ``--lib`` (exported by ``tiletune build``), or the best of ``--records`` exported here, or, with
neither, GEMM size^3 tuned here (dgd, ``--trials`` trials, records in a temporary directory). Not a test: the
machine is shared and noisy, so compare within one run. ``--clock cpu`` times the calling thread's CPU time
instead of the wall clock, leaving out the time other processes hold the core; it counts the kernel's work only
when the kernel runs in that thread, i.e. with ``TVM_NUM_THREADS=1``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="a kernel library written by 'tiletune build'")
    p.add_argument("--records", help="records of a GEMM tuning; its best kernel is exported here")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--trials", type=int, default=24, help="tuning trials when neither --lib nor --records is given")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--number", type=int, default=0, help="calls per sample (0: enough for about 20 ms)")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: time.perf_counter; cpu: this thread's CPU time (with TVM_NUM_THREADS=1 only)")
    a = p.parse_args()
    if a.clock == "cpu" and os.environ.get("TVM_NUM_THREADS") != "1":
        p.error("--clock cpu counts the calling thread only: run it with TVM_NUM_THREADS=1")
    clock = time.thread_time if a.clock == "cpu" else time.perf_counter

    from tiletune.api import empty, export_best, load_kernel, set_threads

    set_threads()  # before TVM's thread pool starts (tiletune.api.set_threads)
    import tvm
    import tvm_ffi

    from tiletune.workloads import parse

    wl = parse(f"gemm:M={a.size},N={a.size},K={a.size}")
    with tempfile.TemporaryDirectory(prefix="tiletune-api-") as tmp:
        lib = a.lib
        if lib is None:
            records = a.records
            if records is None:
                from tiletune.session import RunSpec, run

                records = os.path.join(tmp, "r.jsonl")
                res = run(RunSpec(workload=wl.key, strategy="dgd", trials=a.trials, seed=0, records=records))
                print(f"tuned {wl.key}: {res.trials} trials, best {res.best_gflops:.1f} GFLOPS while tuning")
            lib = os.path.join(tmp, "k.so")
            export_best(records, lib, workload=wl.key)
        k = load_kernel(lib)
        wl = k.workload
        print(f"kernel {lib}: {wl.key}, {k.meta['gflops']:.1f} GFLOPS when tuned, target {k.meta['target']}, "
              f"declares {k.alignment}-byte-aligned arrays")
        dev = tvm.cpu()
        a_np, b_np = wl.make_inputs(seed=0)
        ref = a_np @ b_np
        c_np = np.empty_like(ref)
        a_al, b_al, c_al = empty(a_np.shape), empty(b_np.shape), empty(ref.shape)
        a_al[...], b_al[...] = a_np, b_np
        a_mis, b_mis = (_past_alignment(x, 4) for x in (a_np, b_np))
        print("address mod 64: plain numpy a, b, out: "
              + ", ".join(str(x.ctypes.data % 64) for x in (a_np, b_np, c_np))
              + f"; staged a, b: {a_mis.ctypes.data % 64}, {b_mis.ctypes.data % 64}")
        ta, tb = tvm.runtime.tensor(a_np, dev), tvm.runtime.tensor(b_np, dev)
        tc = tvm.runtime.empty(ref.shape, "float32", dev)
        f = k._lib["main"]

        def copying():
            ins = [tvm.runtime.tensor(np.ascontiguousarray(x, dtype="float32"), dev) for x in (a_np, b_np)]
            out = tvm.runtime.tensor(np.zeros(ref.shape, "float32"), dev)
            f(*ins, out)
            return out.numpy()

        def direct():
            f(ta, tb, tc)
            return tc

        ea, eb, ec = (tvm_ffi.from_dlpack(x, require_alignment=64) for x in (a_al, b_al, c_al))

        def direct_empty():
            f(ea, eb, ec)
            return ec

        methods = {"tvm": direct, "tvm empty": direct_empty}
        if all(x.ctypes.data % k.alignment == 0 for x in (a_np, b_np, c_np)):
            na, nb, nc = (tvm_ffi.from_dlpack(x, require_alignment=k.alignment) for x in (a_np, b_np, c_np))

            def direct_numpy():
                f(na, nb, nc)
                return nc

            methods["tvm numpy"] = direct_numpy
        methods.update({
            "api": lambda: k(a_al, b_al),
            "api out=": lambda: k(a_al, b_al, out=c_al),
            "api numpy": lambda: k(a_np, b_np),
            "api staged": lambda: k(a_mis, b_mis),
            "copying": copying,
        })
        rtol, atol = wl.tolerance()
        for name, fn in methods.items():
            out = fn()
            got = out.numpy() if name.startswith("tvm") else out
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=name)
        for fn in methods.values():  # warm-up
            for _ in range(3):
                fn()
        number = a.number
        if not number:
            t0 = time.perf_counter()
            for _ in range(10):
                direct()
            number = max(1, int(0.02 / ((time.perf_counter() - t0) / 10)))
        times: dict[str, list[float]] = {m: [] for m in methods}
        for r in range(a.rounds):
            order = list(methods) if r % 2 == 0 else list(reversed(methods))
            for name in order:
                fn = methods[name]
                t0 = clock()
                for _ in range(number):
                    fn()
                times[name].append((clock() - t0) / number)
    base = statistics.median(times["tvm"])
    print(f"{a.rounds} rounds, {number} calls per sample, {a.clock} clock, methods alternated (order reversed every "
          "other round)")
    print(f"{'method':<15} {'median ms':>10} {'GFLOPS':>8} {'x tvm':>7}  per-round ratio median [min, max]")
    for name, ts in times.items():
        med = statistics.median(ts)
        per = [t / b for t, b in zip(ts, times["tvm"])]
        print(f"{name:<15} {med * 1e3:10.4f} {wl.flops / med / 1e9:8.1f} {med / base:7.3f}  "
              f"{statistics.median(per):.3f} [{min(per):.3f}, {max(per):.3f}]")


def _past_alignment(x: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``x`` whose data lies ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(x.nbytes + 128, np.uint8)
    start = -buf.ctypes.data % 64 + offset
    y = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


if __name__ == "__main__":
    main()
