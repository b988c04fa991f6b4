"""Shared search across shapes (DietCode-like): one search per kernel for all the tuned shapes of a dynamic
model, with half the measurements, against tuning each shape alone.

The model (default ``benchmarks/common/dyn_models.py:bert_mini``) at the ``--shapes`` values of ``--dim`` (default seq
32, 64, 128):

- ``alone``: each shape tuned alone (``model tune --shapes DIM=V``, the default search) at ``--trials-per-task``
  trials per task, all into ``alone.jsonl`` (a kernel that does not change with the shape is measured at the first
  shape and recalled at the others);
- ``shared``: all shapes at once with ``--shared-search`` (``tiletune.model.dynamic.shared_search``) and half of alone's
  trial budget, into ``shared.jsonl``;
- ``half``: each shape alone at half the trials per task, the control at shared's budget, into ``half.jsonl``.

Each records file is built into one library for all the shapes (``model build --shapes``, ``--no-check``) and the
libraries are timed at every shape in a child process per round, methods interleaved, on one thread by its CPU time
(``benchmarks/common/dyn_bench.py``, ``--clock cpu``: for a machine others load). ``OUT/summary.md``: latency per shape,
the ratio alone / method, the same ratio for the sum of the tasks' best kernels x calls from the records, and the
measurements each method made. Resumable: ``OUT/steps.jsonl`` and ``OUT/results.jsonl`` hold what is done (records
compressed with ``gzip -9n`` are written back plain first).

    python benchmarks/defaults/shared_search.py --out benchmarks/out/shared-search
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from tiletune.bench.results import read_jsonl
from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks
from tiletune.model.frontend.source import load
from tiletune.records import load as load_records
from tiletune.target import host_target, target_key

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # cli_run, dyn_bench, gzjsonl
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)
from dyn_bench import latencies, steps, timing_rounds
from gzjsonl import unpack
from shape_rule import MODEL, shapes_arg

METHODS = ("alone", "shared", "half")


def kernel_sums(records: Path, dyn) -> dict[int, float]:
    """Per shape (its value of the one dimension): the sum over its tasks of the best record's seconds x calls."""
    best: dict[str, float] = {}
    for r in load_records(str(records), target=target_key(dyn.target), warn=False):
        if r.ok:
            best[r.workload] = min(best.get(r.workload, float("inf")), r.median_s)
    out = {}
    for st in dyn.shapes:
        (v,) = st.binding.values()
        out[v] = sum(best.get(k.workload.key, float("nan")) * k.calls for k in st.tasks.tasks)
    return out


def measured(records: Path) -> int:
    return sum(1 for _ in open(records)) if records.exists() else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--dim", default="seq")
    p.add_argument("--shapes", default="32,64,128")
    p.add_argument("--trials-per-task", type=int, default=24, help="alone's; half of it for shared and half")
    p.add_argument("--layout", default="NHWC")
    p.add_argument("--work", default=None,
                   help="where the libraries go (default: /tmp/tiletune-shared-search; not OUT: they are large)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=100)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    lib = Path(a.work or "/tmp/tiletune-shared-search") / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    source = load(a.model)
    target = host_target()
    vals = [int(v) for v in a.shapes.split(",")]
    log = out / "steps.jsonl"
    for m in METHODS:  # committed records are compressed (benchmarks/out/README.md): the plain file back first
        unpack(out / f"{m}.jsonl")

    step = steps(log)

    def ntasks(vs):
        return len(shape_tasks(source, target, a.layout, parse_shapes([shapes_arg(a.dim, vs)], source)).merged.tasks)

    per_shape = {v: ntasks([v]) for v in vals}
    full = sum(n * a.trials_per_task for n in per_shape.values())
    for method, per_task in (("alone", a.trials_per_task), ("half", a.trials_per_task // 2)):
        for v in vals:
            step(f"tune {method} {v}", lambda v=v, method=method, per_task=per_task: (tiletune(
                "model", "tune", a.model, "--shapes", shapes_arg(a.dim, [v]), "--trials", str(per_shape[v] * per_task),
                "-r", str(out / f"{method}.jsonl"), "-q", "--layout", a.layout), {"trials": per_shape[v] * per_task})[1])
    step("tune shared", lambda: (tiletune(
        "model", "tune", a.model, "--shapes", shapes_arg(a.dim, vals), "--trials", str(full // 2),
        "-r", str(out / "shared.jsonl"), "-q", "--layout", a.layout, "--shared-search"), {"trials": full // 2})[1])
    dyn = shape_tasks(source, target, a.layout, parse_shapes([shapes_arg(a.dim, vals)], source))
    for m in METHODS:
        step(f"build {m}", lambda m=m: tiletune("model", "build", a.model, "--shapes", shapes_arg(a.dim, vals),
                                                "--layout", a.layout, "-r", str(out / f"{m}.jsonl"),
                                                "-o", str(lib / f"{m}.so"), "--no-check"))
        step(f"kernels {m}", lambda m=m: {"kernel_sum_s": {str(k): v for k, v in kernel_sums(out / f"{m}.jsonl",
                                                                                             dyn).items()},
                                          "measured": measured(out / f"{m}.jsonl")})
    results = out / "results.jsonl"
    timing_rounds(results, a.rounds, {"model": a.model, "repeat": a.repeat, "min_repeat_ms": a.min_repeat_ms,
                                      "clock": a.clock},
                  lambda r: [{"method": m, "lib": str(lib / f"{m}.so"), "binding": {a.dim: v}, "round": r}
                             for v in vals for m in METHODS])
    summarize(out, vals, a.dim, a.trials_per_task)
    return 0


def summarize(out: Path, vals: list[int], dim: str, full: int) -> None:
    rows = read_jsonl(out / "results.jsonl")
    steps = {r["step"]: r for r in read_jsonl(out / "steps.jsonl")}
    med = latencies(rows, dim)
    ks = {m: steps.get(f"kernels {m}", {}) for m in METHODS}
    others = ("shared", "half")
    what = {"alone": f"alone ({full}/task)", "shared": f"shared (total {full // 2}/task)",
            "half": f"alone ({full // 2}/task)"}
    lines = [f"| {dim} | " + " | ".join(f"{what[m]} ms" for m in METHODS) + " | "
             + " | ".join(f"alone / {m}" for m in others) + " | "
             + " | ".join(f"kernels: alone / {m}" for m in others) + " |",
             "|---:|" + "---:|" * (len(METHODS) + 2 * len(others))]
    ratios: dict = {m: [] for m in others}
    kratios: dict = {m: [] for m in others}
    for v in vals:
        ms = {m: float(np.median(med[(m, v)])) * 1e3 for m in METHODS if (m, v) in med}
        if "alone" not in ms:
            continue
        k = {m: ks[m].get("kernel_sum_s", {}).get(str(v)) for m in METHODS}
        r = {m: ms["alone"] / ms[m] for m in others if m in ms}
        kr = {m: k["alone"] / k[m] for m in others if k.get(m) and k.get("alone")}
        for m in r:
            ratios[m].append(r[m])
        for m in kr:
            kratios[m].append(kr[m])
        lines.append(f"| {v} | " + " | ".join(f"{ms.get(m, float('nan')):.2f}" for m in METHODS) + " | "
                     + " | ".join(f"{r.get(m, float('nan')):.2f}" for m in others) + " | "
                     + " | ".join(f"{kr.get(m, float('nan')):.2f}" for m in others) + " |")
    lines.append("| mean | " + " | " * len(METHODS)
                 + " | ".join(f"{np.mean(ratios[m]):.2f}" if ratios[m] else "-" for m in others) + " | "
                 + " | ".join(f"{np.mean(kratios[m]):.2f}" if kratios[m] else "-" for m in others) + " |")
    lines.append("| measurements | " + " | ".join(str(ks[m].get("measured", "-")) for m in METHODS) + " | "
                 + " | " * (2 * len(others) - 1) + " |")
    n_rounds = len({x["round"] for x in rows})
    text = (f"Whole-model latency at each tuned shape (one library per method built for all shapes; median of "
            f"{n_rounds} rounds, clock {rows[0]['clock'] if rows else '-'}); ratio = alone's latency / the method's "
            "(>= 1: as fast as tuning each shape alone with the full budget). 'kernels': the same ratio for the sum "
            "of the shape's tasks' best kernels x calls, from the records. 'measurements': records written.\n\n"
            + "\n".join(lines) + "\n")
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
