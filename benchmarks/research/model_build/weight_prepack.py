"""A tuned model built twice from the same records: the weights packed once at build time (the default), and the
packing left inside each kernel, run every call (docs/decisions/weight-prepack.md).

    TVM_NUM_THREADS=2 python benchmarks/research/model_build/weight_prepack.py --model bert-small -r RECORDS [--rounds 7]

Both builds use the same kernels (the records' best); only ``SplitLayoutRewritePreproc`` + ``FoldConstant`` is
left out of the second. They are timed alternately in this process (median of 5 samples of >= 200 ms per round)
on the same inputs; prints each round's pair, the medians and the ratio, and how many kernels pack a weight.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
import tvm
from tvm import relax

from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import time_callable
from tiletune.model.build import ModelRunner, best_configs, compare, compile_module, scheduled_module
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.schedules import cpu
from tiletune.target import host_target

SETTINGS = MeasureSettings(repeat=5, min_repeat_ms=200)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-small")
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    target = host_target()
    source, tasks = load_model_tasks(args.model, target)
    chosen = best_configs(tasks, args.records)
    mod, _ = scheduled_module(tasks, chosen)
    packing = sum(1 for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc) and cpu.PREPACK in f.script())
    once = ModelRunner(compile_module(mod, target))
    keep = relax.transform.SplitLayoutRewritePreproc
    relax.transform.SplitLayoutRewritePreproc = lambda: tvm.transform.Sequential([])  # the packing stays inside
    try:
        every = ModelRunner(compile_module(mod, target))
    finally:
        relax.transform.SplitLayoutRewritePreproc = keep
    x = source.random_inputs(0)
    ref = source.reference(x)
    assert compare(once(*x), ref) < 1e-3 and compare(every(*x), ref) < 1e-3
    rows = []
    for r in range(args.rounds):
        a = statistics.median(time_callable(lambda: once(*x), SETTINGS))
        b = statistics.median(time_callable(lambda: every(*x), SETTINGS))
        rows.append((a, b))
        print(f"round {r}: packed once {a * 1e3:.3f} ms, packed every call {b * 1e3:.3f} ms, ratio {b / a:.3f}")
    a, b = (statistics.median(col) for col in zip(*rows))
    ratios = [y / x_ for x_, y in rows]
    print(f"{args.model}: {packing} of {len(chosen)} tuned kernels pack a weight; medians {a * 1e3:.3f} ms (once) "
          f"vs {b * 1e3:.3f} ms (every call): {statistics.median(ratios):.3f}x "
          f"(rounds {min(ratios):.3f}..{max(ratios):.3f})")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
