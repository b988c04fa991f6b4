"""Built model libraries timed alternately in one process (docs/decisions/measure-cold-weights.md).

    TVM_NUM_THREADS=2 python benchmarks/research/in_model/builds_alternate.py bert-small A.so B.so [C.so ...] [--rounds 5]

Every round times each library once (median of 5 samples of >= 200 ms) on the same random inputs, in the order
given; prints each round and, per library, the minimum and the median over the rounds (on a shared machine whose
speed drifts between minutes the minimum is the figure least disturbed by the other tenants).
"""
from __future__ import annotations

import argparse
import statistics

import tvm
from tvm import relax

from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import time_callable
from tiletune.model.frontend.source import load

SETTINGS = MeasureSettings(repeat=5, min_repeat_ms=200)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    source = load(args.model)
    dev = tvm.cpu()
    xs = [tvm.runtime.tensor(x, dev) for x in source.random_inputs(0)]
    runs = {}
    for path in args.libs:
        vm = relax.VirtualMachine(tvm.runtime.load_module(path), dev)
        runs[path] = (lambda f: (lambda: f(*xs)))(vm["main"])
    per = {p: [] for p in args.libs}
    for r in range(args.rounds):
        for p, run in runs.items():
            per[p].append(statistics.median(time_callable(run, SETTINGS)) * 1e3)
        print(f"round {r}: " + ", ".join(f"{p} {per[p][-1]:.2f} ms" for p in args.libs))
    for p in args.libs:
        print(f"{p}: min {min(per[p]):.2f} ms, median {statistics.median(per[p]):.2f} ms over {args.rounds} rounds")


if __name__ == "__main__":
    main()
