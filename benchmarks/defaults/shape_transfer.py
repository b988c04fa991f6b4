"""Transfer across shapes: a new shape tuned with half the trials, learning from the records of the
same kernels at the shapes tuned before, against tuning it alone with the full budget.

Reads ``benchmarks/defaults/shape_rule.py``'s output (``--base``): ``tuned.jsonl`` (the model tuned at the ``--tuned``
shapes, the neighbours) and ``ref.jsonl`` (each ``--test`` shape tuned alone at ``--trials-per-task``: the
reference). Per test shape it tunes, with ``--trials-per-task // 2`` trials per task:

- ``transfer``: into a copy of ``tuned.jsonl``, ``model tune --shapes DIM=V --shape-transfer``
  (``tiletune.model.dynamic.shape_transfer``: neighbours' records as the cost model's transfer data, their best
  configurations adapted and measured first);
- ``half``: alone (``--no-shape-transfer``), the control at the same budget;

then builds each at that shape (and the reference from ``ref.jsonl``) and times the three in a child process per
round, interleaved (``shape_rule.py``'s timing). ``OUT/summary.md``: latency ratio to the reference and the
measurements spent. Resumable like shape_rule.py.

    python benchmarks/defaults/shape_transfer.py --base benchmarks/out/shape-rule --out benchmarks/out/shape-transfer
"""
from __future__ import annotations

import argparse
import os
import shutil
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
from shape_rule import MODEL, shapes_arg

HERE = Path(__file__).resolve().parent


def kernel_sum(records: Path, dyn) -> tuple[float, int]:
    """(sum over the tasks of the best record's seconds x calls, records of these tasks)."""
    keys = {k.workload.key: k for k in dyn.merged.tasks}
    best: dict[str, float] = {}
    n = 0
    for r in load_records(str(records), target=target_key(dyn.target), warn=False):
        if r.workload in keys:
            n += 1
            if r.ok:
                best[r.workload] = min(best.get(r.workload, float("inf")), r.median_s)
    return sum(best.get(k, float("nan")) * t.calls for k, t in keys.items()), n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="shape_rule.py's output folder")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--dim", default="seq")
    p.add_argument("--test", default="48,96,192")
    p.add_argument("--trials-per-task", type=int, default=24, help="the reference's (ref.jsonl); half for the others")
    p.add_argument("--work", default=None,
                   help="where the libraries go (default: /tmp/tiletune-shape-transfer; not OUT: they are large)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:OPTION,...",
                   help="also tune with transfer and these strategy options (-O), e.g. k2:start_k=2")
    p.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                   help="cpu: one thread, its CPU time (benchmarks/common/dyn_bench.py; for a machine others load)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=100)
    a = p.parse_args()
    base, out = Path(a.base), Path(a.out)
    lib = Path(a.work or "/tmp/tiletune-shape-transfer") / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    source = load(a.model)
    target = host_target()
    test = [int(v) for v in a.test.split(",")]
    half = a.trials_per_task // 2
    log = out / "steps.jsonl"
    step = steps(log)

    for v in test:
        dyn = shape_tasks(source, target, "NHWC", parse_shapes([shapes_arg(a.dim, [v])], source))
        n = len(dyn.merged.tasks)
        rec_t = out / f"transfer{v}.jsonl"

        def transfer(v=v, n=n, rec_t=rec_t):
            shutil.copy(base / "tuned.jsonl", rec_t)
            tiletune("model", "tune", a.model, "--shapes", shapes_arg(a.dim, [v]), "--trials", str(n * half),
                     "-r", str(rec_t), "-q", "--shape-transfer")
            return {"trials": n * half}

        step(f"tune transfer {v}", transfer)
        for var in a.variant:
            name, _, opts = var.partition(":")

            def variant(v=v, n=n, name=name, opts=opts):
                rec = out / f"transfer-{name}{v}.jsonl"
                shutil.copy(base / "tuned.jsonl", rec)
                tiletune("model", "tune", a.model, "--shapes", shapes_arg(a.dim, [v]), "--trials", str(n * half),
                         "-r", str(rec), "-q", "--shape-transfer", *[x for o in opts.split(",") if o for x in ("-O", o)])
                return {"trials": n * half, "options": opts}

            step(f"tune transfer-{name} {v}", variant)
        step(f"tune half {v}", lambda v=v, n=n: tiletune(
            "model", "tune", a.model, "--shapes", shapes_arg(a.dim, [v]), "--trials", str(n * half), "-r",
            str(out / "half.jsonl"), "-q", "--no-shape-transfer"))
        recs = [("transfer", rec_t), ("half", out / "half.jsonl"), ("alone", base / "ref.jsonl")]
        recs += [(f"transfer-{v_.partition(':')[0]}", out / f"transfer-{v_.partition(':')[0]}{v}.jsonl")
                 for v_ in a.variant]
        for name, rec in recs:
            step(f"build {name} {v}", lambda v=v, name=name, rec=rec: tiletune(
                "model", "build", a.model, "--shapes", shapes_arg(a.dim, [v]), "-r", str(rec), "-o",
                str(lib / f"{name}{v}.so"), "--no-check"))
            step(f"kernels {name} {v}", lambda rec=rec, dyn=dyn: dict(zip(("kernel_sum_s", "records"),
                                                                           kernel_sum(rec, dyn))))
    results = out / "results.jsonl"
    names = ["alone", "transfer", "half"] + [f"transfer-{v_.partition(':')[0]}" for v_ in a.variant]
    timing_rounds(results, a.rounds, {"model": a.model, "repeat": a.repeat, "min_repeat_ms": a.min_repeat_ms,
                                      "clock": a.clock},
                  lambda r: [{"method": m, "lib": str(lib / f"{m}{v}.so"), "binding": {a.dim: v}, "round": r}
                             for v in test for m in names])
    summarize(out, test, a.dim, a.trials_per_task)
    return 0


def summarize(out: Path, test: list[int], dim: str, full: int) -> None:
    rows = read_jsonl(out / "results.jsonl")
    steps = {r["step"]: r for r in read_jsonl(out / "steps.jsonl")}
    med = latencies(rows, dim)
    others = [m for m in ("transfer", "half") + tuple(sorted({r["method"] for r in rows} - {"alone", "transfer",
                                                                                            "half"})) if
              any(k[0] == m for k in med)]
    what = {"transfer": "transfer", "half": "alone, half"}
    lines = [f"| {dim} | alone ({full}/task) ms | " + " | ".join(f"{what.get(m, m)} ({full // 2}/task) ms" for m in others)
             + " | " + " | ".join(f"{what.get(m, m)} / alone" for m in others) + " | "
             + " | ".join(f"kernels: {what.get(m, m)} / alone" for m in others) + " |",
             "|---:|---:|" + "---:|" * (3 * len(others))]
    ratios: dict = {m: [] for m in others}
    kratios: dict = {m: [] for m in others}
    for v in test:
        if ("alone", v) not in med:
            continue
        ms = {m: float(np.median(med[(m, v)])) * 1e3 for m in ["alone", *others] if (m, v) in med}
        ks = {m: steps.get(f"kernels {m} {v}", {}).get("kernel_sum_s") for m in ["alone", *others]}
        r = {m: ms["alone"] / ms[m] for m in others if m in ms}
        kr = {m: ks["alone"] / ks[m] for m in others if ks.get(m) and ks.get("alone")}
        for m in r:
            ratios[m].append(r[m])
        for m in kr:
            kratios[m].append(kr[m])
        lines.append(f"| {v} | {ms['alone']:.2f} | " + " | ".join(f"{ms.get(m, float('nan')):.2f}" for m in others)
                     + " | " + " | ".join(f"{r.get(m, float('nan')):.2f}" for m in others) + " | "
                     + " | ".join(f"{kr.get(m, float('nan')):.2f}" for m in others) + " |")
    lines.append("| mean | | " + " | " * len(others)
                 + " | ".join(f"{np.mean(ratios[m]):.2f}" if ratios[m] else "-" for m in others) + " | "
                 + " | ".join(f"{np.mean(kratios[m]):.2f}" if kratios[m] else "-" for m in others) + " |")
    opts = {m: steps.get(f"tune {m} {test[0]}", {}).get("options") for m in others}
    text = (f"Whole-model latency (median of {len({x['round'] for x in rows})} rounds); ratio = alone's latency / "
            "the method's (>= 1: as fast as tuning the shape alone with the full budget). 'kernels': the same ratio "
            "for the sum of the tasks' best kernels x calls, from the records. Variants' options: "
            + (", ".join(f"{m}: {o}" for m, o in opts.items() if o) or "none") + ".\n\n" + "\n".join(lines) + "\n")
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
