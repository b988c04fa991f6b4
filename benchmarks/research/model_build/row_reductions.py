"""A model's row reductions (softmax, layer norm, ...) before and after tuning (docs/decisions/row-reductions.md).

    python benchmarks/research/model_build/row_reductions.py --model bert-small --trials 16 [--strategy xgb] [--rounds 5]

Extracts the model's row-reduction tasks (``tiletune.workloads.rows``) and tunes them alone, ``--trials`` trials
each (the local searches start from the template's starts, ``tiletune.schedules.rows.starts``), into
``--records`` (resumed when it exists). Then, in ``--rounds`` alternating rounds, times every kernel as TVM builds
it unscheduled, with the default schedule (``tiletune.model.kernels.default_schedule``), at each of the template's starts
and at the tuned best (each time the median of 3 samples of >= 50 ms), and prints the medians in microseconds and
GB/s (the kernel's parameters, each read or written once, per second). The machine's copy bandwidth comes first
and last: numpy copying a 256 MiB array (DRAM) and a 1 MiB one (cache), one thread, read + write counted.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import tvm

from tiletune.measure.base import MeasureSettings
from tiletune.model.build import best_configs
from tiletune.model.kernels.default_schedule import checked
from tiletune.model.kernels.tasks import ModelTasks, load_model_tasks
from tiletune.model.tuning.tuner import tune_model
from tiletune.schedules import make_space, schedule, starts
from tiletune.target import parse_target
from tiletune.workloads.rows import RowWorkload


def copy_bandwidth(nbytes: int, reps: int) -> float:
    """GB/s of numpy copying ``nbytes`` (read + write), the best of ``reps``."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best / 1e9


def bandwidth_line() -> str:
    return (f"numpy copy, one thread: {copy_bandwidth(256 << 20, 10):.1f} GB/s (256 MiB), "
            f"{copy_bandwidth(1 << 20, 2000):.1f} GB/s (1 MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-small")
    ap.add_argument("--trials", type=int, default=16, help="per row task")
    ap.add_argument("--strategy", default="xgb")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", default=None, help="default: rows-MODEL.jsonl in the working directory")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    target = parse_target(None)
    print(f"load average {os.getloadavg()[0]:.2f}; {bandwidth_line()}")
    _, tasks = load_model_tasks(args.model, target)
    rows = [k for k in tasks.tasks if isinstance(k.workload, RowWorkload)]
    sub = ModelTasks(tasks.fused, tasks.target, rows)
    records = args.records or f"rows-{args.model}.jsonl"
    t0 = time.monotonic()
    tune_model(sub, strategy=args.strategy, trials=args.trials * len(rows), records=records,
               round_trials=args.trials, settings=MeasureSettings())
    print(f"tuned {len(rows)} row tasks, {args.trials} trials each ({args.strategy}) in {time.monotonic() - t0:.0f} s")
    chosen = best_configs(sub, records)
    tgt = tvm.target.Target(target)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    table = []
    for k in rows:
        wl = k.workload
        space = make_space(wl, None, target)
        variants = {"unscheduled": k.func, "default": checked(k.func, target)[0]}
        for i, c in enumerate(starts(wl, space, target)):
            variants[f"start {i + 1} {space.to_dict(c)}"] = schedule(wl, space, c, target).mod["main"]
        if k.hash in chosen:
            c = chosen[k.hash].config
            variants[f"tuned {space.to_dict(c)}"] = schedule(wl, space, c, target).mod["main"]
        libs = {n: tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target=tgt).mod
                for n, f in variants.items()}
        arrays = [(rng.standard_normal(s) if dt.startswith("float") else rng.integers(0, 2, size=s)).astype(dt)
                  for s, dt in ((tuple(int(x) for x in p.shape), str(p.dtype)) for p in k.func.params)]
        times = {n: [] for n in libs}
        for _ in range(args.rounds):
            for n, lib in libs.items():
                tv = [tvm.runtime.tensor(a, dev) for a in arrays]
                times[n].append(lib.time_evaluator("main", dev, number=5, repeat=3, min_repeat_ms=50)(*tv).median)
        table.append((k, {n: float(np.median(v)) for n, v in times.items()}))
    print(f"load average {os.getloadavg()[0]:.2f}; {bandwidth_line()}")
    for k, med in table:
        mb = k.workload.bytes_moved
        print(f"\n{k.name} x{k.calls}  rows {k.workload.rows} x {k.workload.widths}  {mb / 1e6:.2f} MB moved")
        for n, s in med.items():
            print(f"  {s * 1e6:9.1f} us  {mb / s / 1e9:6.1f} GB/s  {n}")


if __name__ == "__main__":
    main()
