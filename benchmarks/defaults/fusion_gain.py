"""What moving elementwise operators before reshapes gains end to end (tiletune.model.passes.reshape_hoist).

    python benchmarks/defaults/fusion_gain.py --model bert-small --out benchmarks/out/fusion-gain [--per-task 4] [--rounds 5]

Builds MODEL twice, with the hoist (GELU fused into the FFN matmul) and without it (GELU a kernel of its own),
each with its tasks constructed by Gensor (``--per-task`` trials per task; kernels shared by both builds are
measured once: one records file), then times the two libraries alternately, each call in its own process
(``--rounds`` pairs; warm calls, then the median of ``--repeat`` samples). Prints and writes OUT/report.md:
kernels and tasks per build, each round's milliseconds, and the median ratio plain / hoisted (> 1: the hoist
is faster). Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # gzjsonl
from gzjsonl import unpack  # noqa: E402  (benchmarks/common/gzjsonl.py)

from tiletune.measure.base import MeasureSettings
from tiletune.model.build import best_configs, compile_module, export, scheduled_module
from tiletune.model.passes.pipeline import prepare
from tiletune.model.passes.layout import convert
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import extract, fuse
from tiletune.model.tuning.tuner import tune_model
from tiletune.target import parse_target

TIMER = r"""
import json, sys, time
import numpy as np
from tiletune.api import load_model

from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import time_callable
from tiletune.model.frontend.source import load
path, spec, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = load_model(path)
inputs = load(spec).random_inputs(0)
samples = time_callable(lambda: model(*inputs), MeasureSettings(repeat=repeat, min_repeat_ms=200))
print(json.dumps({"median_s": float(np.median(samples))}))
"""


def build(spec: str, hoist: bool, libs: str, records: str, per_task: int, target: dict) -> dict:
    source = load(spec)
    converted = prepare(source, layout="NHWC", hoist=hoist)
    tasks = extract(fuse(converted.mod, target), target, "NHWC")
    t0 = time.monotonic()
    tune_model(tasks, strategy="gensor", trials=per_task * len(tasks.tasks), records=records, round_trials=per_task,
               batch_size=per_task, settings=MeasureSettings())
    tune_s = time.monotonic() - t0
    mod, _ = scheduled_module(tasks, best_configs(tasks, records))
    path = os.path.join(libs, f"{'hoisted' if hoist else 'plain'}.so")
    export(compile_module(mod, target), path, {"model": spec, "target": target, "layout": "NHWC",
                                              "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype}
                                                         for i in source.inputs]})
    return {"path": path, "kernels": len(tasks.kernels), "tasks": len(tasks.tasks), "tune_s": round(tune_s, 1),
            "default_kernels": [k.name for k in tasks.kernels if not k.tunable]}


def time_once(path: str, spec: str, repeat: int) -> float:
    out = subprocess.run([sys.executable, "-c", TIMER, path, spec, str(repeat)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-small", help="a model spec (tiletune model --help)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--per-task", type=int, default=4, help="Gensor's constructions measured per task")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing pairs")
    ap.add_argument("--repeat", type=int, default=10, help="samples per timing")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    target = parse_target(None)
    records = os.path.join(args.out, "records.jsonl")
    unpack(Path(records))  # a committed run's .jsonl.gz: its kernels are recalled, not measured again
    times = {"hoisted": [], "plain": []}
    with tempfile.TemporaryDirectory() as libs:  # the libraries hold the weights: not kept in OUT
        builds = {name: build(args.model, hoist, libs, records, args.per_task, target)
                  for name, hoist in (("hoisted", True), ("plain", False))}
        for r in range(args.rounds):
            for name in (("hoisted", "plain") if r % 2 == 0 else ("plain", "hoisted")):
                times[name].append(time_once(builds[name]["path"], args.model, args.repeat))
            print(f"round {r + 1}: hoisted {times['hoisted'][-1] * 1e3:.3f} ms, "
                  f"plain {times['plain'][-1] * 1e3:.3f} ms", file=sys.stderr, flush=True)
    ratios = [p / h for p, h in zip(times["plain"], times["hoisted"])]
    lines = [f"# Fusion gain: {args.model}", "",
             f"`python benchmarks/defaults/fusion_gain.py --model {args.model} --out {args.out} --per-task {args.per_task} "
             f"--rounds {args.rounds} --repeat {args.repeat}`", "",
             "| build | kernels | tasks | tuning s | median ms | rounds (ms) |", "|---|---:|---:|---:|---:|---|"]
    for name, b in builds.items():
        lines.append(f"| {name} | {b['kernels']} | {b['tasks']} | {b['tune_s']} | "
                     f"{statistics.median(times[name]) * 1e3:.3f} | "
                     f"{', '.join(f'{t * 1e3:.3f}' for t in times[name])} |")
    lines += ["", f"plain / hoisted, per round: {', '.join(f'{x:.3f}' for x in ratios)}; median "
                  f"{statistics.median(ratios):.3f} (> 1: the hoist is faster)"]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"builds": builds, "times_s": times, "ratios": ratios}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
