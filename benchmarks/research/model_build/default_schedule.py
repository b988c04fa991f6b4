"""A tuned model built twice from the same records: its untuned kernels (pads, transposes, reshapes, pooling)
default-scheduled by the earlier rule (every spatial loop fused into the parallel one, vectors wherever the
innermost extent divides) and by the current one (parallel over the leading loops only, no vector that gathers;
docs/decisions/default-schedule.md). Tuned kernels are the same in both.

    TVM_NUM_THREADS=2 python benchmarks/research/model_build/default_schedule.py --model mobilenetv2 -r RECORDS [--calls 40]

Both builds run alternately in this process on the same inputs, every kernel call timed by the VM's
instrument (host clock around each call); prints, per kernel that differs by more than 5 us, the median over
the calls of each build, and the sum of the medians of all kernels of each build.
"""
from __future__ import annotations

import argparse
import collections
import time

import numpy as np
import tvm
from tvm import relax

from tiletune.model.kernels import default_schedule as ds
from tiletune.model.build import best_configs, compile_module, scheduled_module
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.target import host_target


def build(tasks, chosen, earlier: bool):
    saved = ds.PARALLEL_CHUNKS, ds._gathers
    if earlier:
        ds.PARALLEL_CHUNKS, ds._gathers = 10 ** 18, (lambda *a: False)
    ds._CHECKED.clear()
    try:
        return compile_module(scheduled_module(tasks, chosen)[0], tasks.target)
    finally:
        ds.PARALLEL_CHUNKS, ds._gathers = saved
        ds._CHECKED.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--calls", type=int, default=40, help="calls of each build, alternating")
    a = ap.parse_args()
    source = load(a.model)
    tasks = model_tasks(source, host_target(), "NHWC", "float32")
    chosen = best_configs(tasks, a.records)
    dev = tvm.cpu()
    x = [tvm.runtime.tensor(v, dev) for v in source.random_inputs(0)]
    state = {"t": 0.0, "acc": collections.defaultdict(float)}

    def instrument(func, name, before, ret, *args):
        if before:
            state["t"] = time.perf_counter()
        else:
            state["acc"][str(name)] += time.perf_counter() - state["t"]
        return 0

    vms, outs = {}, {}
    for label, earlier in (("earlier", True), ("current", False)):
        vms[label] = relax.VirtualMachine(build(tasks, chosen, earlier), dev)
        vms[label].set_instrument(instrument)
        for _ in range(3):
            out = vms[label]["main"](*x)
        outs[label] = (out[0] if not hasattr(out, "numpy") else out).numpy()
    print(f"largest difference between the builds' outputs: {float(np.max(np.abs(outs['earlier'] - outs['current']))):.2g}")
    per = {k: collections.defaultdict(list) for k in vms}
    for i in range(a.calls):
        for label in (("earlier", "current") if i % 2 == 0 else ("current", "earlier")):
            state["acc"] = collections.defaultdict(float)
            vms[label]["main"](*x)
            for name, s in state["acc"].items():
                per[label][name].append(s)
    med = {k: {n: float(np.median(v)) * 1e6 for n, v in per[k].items()} for k in per}
    names = sorted(set(med["earlier"]) | set(med["current"]), key=lambda n: -med["earlier"].get(n, 0.0))
    print(f"{a.model}: {a.calls} calls of each build, alternating; per-call medians (us)")
    print("| kernel | earlier rule | current rule |\n|---|---:|---:|")
    for n in names:
        e, c = med["earlier"].get(n, 0.0), med["current"].get(n, 0.0)
        if abs(e - c) > 5:
            print(f"| {n} | {e:.1f} | {c:.1f} |")
    se, sc = sum(med["earlier"].values()) / 1e3, sum(med["current"].values()) / 1e3
    print(f"| sum of all kernels' medians (ms) | {se:.3f} | {sc:.3f} |")
    print(f"earlier / current: {se / sc:.3f}")


if __name__ == "__main__":
    main()
