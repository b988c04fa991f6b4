"""A whole model at a small budget, NCHW against NHWC convolutions, and tuned against constructed.

Per layout of ``--layouts`` (default NCHW,NHWC), for one model (default resnet18):

1. the Roller-constructed model: ``tiletune model tune MODEL --layout L -s roller -O after_topk=stop`` with
   ``--per-task`` (default 10) trials per task, i.e. Roller's top 10 constructions of every task, measured;
2. the tuned model: ``tiletune model tune MODEL --layout L`` (default strategy xgb, starting from each task's
   top 10 Roller constructions) with ``--per-task`` trials per task, in rounds of that size, so that the
   scheduler's first round gives every task its budget;
3. each timed end to end: ``tiletune model bench MODEL --layout L -r RECORDS --methods tiletune``, and PyTorch
   eager once (``--methods torch``);
4. ``OUT/summary.md``: per layout and method, the end-to-end median, the speed-up over PyTorch eager, the
   sum of the tasks' best kernels (each timed alone, from the records) and the tuning time.

Everything is resumable: ``model tune`` resumes from its records (a finished run measures nothing again)
and ``model bench`` keeps what it timed (``OUT/<model>-<layout>-<method>/results.jsonl``). Run it on an idle
machine:

    python benchmarks/research/model_build/model_layout.py --out benchmarks/out/model-layout
    python benchmarks/research/model_build/model_layout.py --out /tmp/layout-quick --model tiny --per-task 2     # a check
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from tiletune.bench.results import read_jsonl
from tiletune.model.build import best_configs
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.target import host_target

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common"))  # benchmarks/common/: cli_run
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)

METHODS = {"roller": ("-s", "roller", "-O", "after_topk=stop"), "tuned": ()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--layouts", default="NCHW,NHWC")
    p.add_argument("--per-task", type=int, default=10, help="trials per task (tuned and constructed alike)")
    p.add_argument("--repeat", type=int, default=10, help="end-to-end timing samples")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = a.model.replace("/", "_").replace(":", "-")
    target = host_target()
    rows = []
    times = {(r["layout"], r["method"]): r["seconds"] for r in read_jsonl(out / "tuning.jsonl")}
    bench = ("--repeat", str(a.repeat))
    for layout in [x.strip().upper() for x in a.layouts.split(",") if x.strip()]:
        _, tasks = load_model_tasks(a.model, target, layout)
        n = len(tasks.tasks)
        for method, flags in METHODS.items():
            rec = out / f"{name}-{layout}-{method}.jsonl"
            t0 = time.monotonic()
            tiletune("model", "tune", a.model, "--layout", layout, *flags, "--trials", str(a.per_task * n),
                     "--round", str(a.per_task), "-r", str(rec), "-q")
            if (layout, method) not in times:  # the first (measuring) run's wall time
                times[(layout, method)] = time.monotonic() - t0
                with open(out / "tuning.jsonl", "a") as f:
                    f.write(json.dumps({"layout": layout, "method": method, "seconds": times[(layout, method)],
                                        "trials": a.per_task * n, "tasks": n}) + "\n")
            d = out / f"{name}-{layout}-{method}"
            tiletune("model", "bench", a.model, "--layout", layout, "-r", str(rec), "--methods", "tiletune",
                     "--out", str(d), *bench)
            r = next(x for x in reversed(read_jsonl(d / "results.jsonl")) if x["method"] == "tiletune")
            chosen = best_configs(tasks, str(rec))
            kernels = sum(c.median_s * c.kernel.calls for c in chosen.values())
            rows.append((layout, method, n, r.get("median_s", math.nan), kernels, times[(layout, method)]))
    tiletune("model", "bench", a.model, "--methods", "torch", "--out", str(out / f"{name}-torch"), *bench)
    torch_s = next(x for x in reversed(read_jsonl(out / f"{name}-torch" / "results.jsonl"))
                   if x["method"] == "torch").get("median_s", math.nan)
    lines = [f"# {a.model}: NCHW vs NHWC, {a.per_task} trials per task", "",
             f"PyTorch eager: {torch_s * 1e3:.2f} ms", "",
             "| layout | model | tasks | median ms | vs torch eager | tasks' best kernels ms | tuning s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for layout, method, n, med, kernels, secs in rows:
        label = "Roller-constructed (top 10)" if method == "roller" else "tuned (xgb from Roller's top 10)"
        lines.append(f"| {layout} | {label} | {n} | {med * 1e3:.2f} | {torch_s / med:.2f}x | {kernels * 1e3:.2f} | "
                     f"{secs:.0f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
