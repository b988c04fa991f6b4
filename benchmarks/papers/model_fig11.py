"""Gensor's Fig. 11 on this CPU: Bert-small over sequence lengths and batch sizes, one library per method for all
the shapes, against PyTorch eager and torch.compile(dynamic=True).

Model: ``benchmarks/common/dyn_models.py:bert_small`` (Bert-small's encoder: 4 layers, hidden 512, 8 heads, intermediate
2048; batch in 1..4 and seq in 16..384 symbolic). Shapes: every ``--batches`` x ``--seqs``. Methods:

- ``gensor`` / ``roller``: ``tiletune model build --shapes ... --construct gensor|roller`` (every task of every
  shape constructed, nothing measured): its wall time is the method's tuning time;
- ``gensor-top`` / ``roller-top``: each construction's top ``--measured-per-task`` configurations (default 4)
  measured per task and the fastest kept (``model tune -s gensor|roller -O k=K -O after_topk=stop --round K``: the
  task scheduler gives every task one round of K first, so every task gets exactly its top K), then ``model
  build``: tuning time = both. Roller's own implementation measures its top constructions on the device (10 by
  default), and the paper's Gensor spent 75 minutes optimizing Fig. 11's model, so both constructions with a few
  measurements each is the comparison at equal budgets beside the constructions alone;
- ``search``: ``tiletune model tune --shapes ... --no-shape-transfer`` at ``--trials-per-task`` trials per task
  (xgb, each shape's tasks searched on their own, one budget), then ``model build``: tuning time = both;
- ``shared``: ``model tune --shapes ... --shared-search`` (the DietCode-like search: one search per kernel for all
  its shapes, ``tiletune.model.dynamic.shared_search``) at **half** the search's trials, then ``model build``: the goal is
  >= 0.95x the per-shape search's latency with at most half its measurements. (Transfer across shapes needs
  shapes tuned before: ``benchmarks/defaults/shape_transfer.py`` measures it.)
- ``torch`` (eager) and ``torch-compile`` (``dynamic=True``: one compilation for the shapes; the first call of
  each shape is timed apart), each in its own process without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE.

Our libraries are timed in a child process per round (``--rounds``), every library at every shape, interleaved
(``benchmarks/common/dyn_bench.py``). Everything is appended to ``OUT/results.jsonl`` / ``OUT/steps.jsonl`` as it comes,
and a re-run skips what is there (a run with another ``--clock`` times again, reusing the libraries);
``OUT/summary-CLOCK.md`` is the table, ``OUT/fig11-CLOCK.png`` the figure. Libraries go to
``--work`` (large).

    python benchmarks/papers/model_fig11.py --out benchmarks/out/fig11                    # the figure's scale
    python benchmarks/papers/model_fig11.py --out DIR --seqs 32,64,128 --trials-per-task 8  # a reduced one

``--target cuda --dtype float16`` on the machine's NVIDIA GPU (as ``model_fig12.py``): the libraries are built for
it (``model build --target cuda:sm_XX --dtype``), PyTorch runs the module in the dtype on the GPU, and a call of
either takes the host's input and returns the host's output. ``--rounds 0 --methods gensor`` builds Gensor's
library only (a later run with the same ``--out`` and ``--work`` skips it and times): the prepared GPU run
(``benchmarks/device/run_gpu_claims.sh``) builds both libraries while the GPU runs other steps.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from tiletune.bench.plots import agg_pyplot
from tiletune.bench.results import read_jsonl
from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks
from tiletune.model.frontend.source import load
from tiletune.target import host_target, is_cuda, parse_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # cli_run, dyn_bench, gzjsonl
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)
from dyn_bench import run, steps

HERE = Path(__file__).resolve().parent
MODEL = f"{HERE.parent / 'common' / 'dyn_models.py'}:bert_small"
OURS = ("gensor", "roller", "gensor-top", "roller-top", "search", "shared")
#: the constructions with their top K measured: method -> the strategy that constructs them
MEASURED = {"gensor-top": "gensor", "roller-top": "roller"}
#: the searches of Fig. 11: ``model tune``'s options and the share of the per-shape search's trials they get
SEARCHES = {"search": (("--no-shape-transfer",), 1.0), "shared": (("--shared-search",), 0.5)}
LABELS = {"gensor": "Gensor-constructed", "roller": "Roller-constructed",
          "gensor-top": "Gensor, top K measured", "roller-top": "Roller, top K measured", "search": "searched per shape (xgb)",
          "shared": "shared search (half the trials)",
          "torch": "PyTorch eager", "torch-compile": "torch.compile(dynamic=True)"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/tiletune-fig11", help="where the libraries go (not OUT: they are large)")
    p.add_argument("--model", default=MODEL)
    p.add_argument("--seqs", default="16,32,64,128,256,384")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--methods", default="gensor,roller,search,shared,torch,torch-compile")
    p.add_argument("--trials-per-task", type=int, default=20, help="search: trials per task")
    p.add_argument("--measured-per-task", type=int, default=4,
                   help="gensor-top / roller-top: constructions measured per task (their top K)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: every method on one thread, timed by its CPU time (benchmarks/common/dyn_bench.py; for a "
                   "machine others load)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="the seed of Gensor's walks (model build --seed)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=100)
    p.add_argument("--target", default="host", help="host (this CPU) or cuda[:sm_XX] (the machine's GPU)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                   help="the model's compute dtype on a CUDA target (PyTorch runs in it too)")
    a = p.parse_args()
    target = parse_target(None if a.target == "host" else a.target)
    gpu = is_cuda(target)
    if gpu and a.clock == "cpu":
        p.error("--clock cpu times one CPU thread; a CUDA target takes --clock wall")
    if not gpu and a.dtype != "float32":
        p.error("--dtype is for a CUDA target; on the CPU the model runs in float32")
    where = ["--target", f"cuda:{target['arch']}", "--dtype", a.dtype] if gpu else []
    on = {"device": "cuda", "dtype": a.dtype} if gpu else {}
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    methods = [m for m in a.methods.split(",") if m]
    shapes_args = ["--shapes", f"batch={a.batches}", "--shapes", f"seq={a.seqs}"]
    source = load(a.model)
    bindings = parse_shapes(shapes_args[1::2], source)
    steps_path, results = out / "steps.jsonl", out / "results.jsonl"
    scale = {"seqs": a.seqs, "batches": a.batches, "trials_per_task": a.trials_per_task,
             "measured_per_task": a.measured_per_task, "clock": a.clock}
    if gpu:
        scale.update(target=f"cuda:{target['arch']}", dtype=a.dtype)
    step = steps(steps_path, **scale)

    n_tasks = len(shape_tasks(source, target if gpu else host_target(), "NHWC", bindings, dtype=a.dtype).merged.tasks)
    for m in ("gensor", "roller"):
        if m in methods:
            step(f"build {m}", lambda m=m: tiletune("model", "build", a.model, *shapes_args, *where, "--construct", m,
                                                    "--seed", str(a.seed), "-o", str(work / f"{m}.so"),
                                                    "--no-check") or {"tasks": n_tasks})
    k = a.measured_per_task
    tunes = {m: (("-s", s, "-O", f"k={k}", "-O", "after_topk=stop", "--round", str(k)), n_tasks * k)
             for m, s in MEASURED.items()}
    tunes.update({m: (options, int(n_tasks * a.trials_per_task * share)) for m, (options, share) in SEARCHES.items()})
    for m, (options, trials) in tunes.items():
        if m not in methods:
            continue
        rec = out / f"{m}.jsonl"
        step(f"tune {m}", lambda rec=rec, trials=trials, options=options: tiletune(
            "model", "tune", a.model, *shapes_args, *where, "--trials", str(trials), "-r", str(rec), "-q", *options)
            or {"tasks": n_tasks, "trials": trials})
        step(f"build {m}", lambda m=m, rec=rec: tiletune("model", "build", a.model, *shapes_args, *where, "-r",
                                                         str(rec), "-o", str(work / f"{m}.so"), "--no-check"))
    for m in ("torch", "torch-compile"):
        if m in methods and not any(r["method"] == m and r.get("clock", "wall") == a.clock
                                    for r in read_jsonl(results)):
            run("torch", {"model": a.model, "repeat": a.repeat, "min_repeat_ms": a.min_repeat_ms, "clock": a.clock,
                          **on, "items": [{"method": m, "binding": b, **scale} for b in bindings]}, results)
    ours = [m for m in OURS if m in methods]
    rounds = len({r["round"] for r in read_jsonl(results) if r["method"] in OURS and r.get("clock", "wall") == a.clock})
    for r in range(rounds, a.rounds if ours else 0):
        order = ours if r % 2 == 0 else ours[::-1]  # the methods' order alternates from round to round
        items = [{"method": m, "lib": str(work / f"{m}.so"), "binding": b, "round": r, **scale}
                 for b in bindings for m in order]
        run("ours", {"model": a.model, "repeat": a.repeat, "min_repeat_ms": a.min_repeat_ms, "clock": a.clock,
                     **on, "items": items}, results)
    summarize(out, bindings, a.clock)
    return 0


def summarize(out: Path, bindings: list[dict], clock: str) -> None:
    """``OUT/summary-CLOCK.md`` and ``OUT/fig11-CLOCK.png`` from the results timed with ``clock``."""
    rows = [r for r in read_jsonl(out / "results.jsonl") if r.get("clock", "wall") == clock]
    steps = {r["step"]: r for r in read_jsonl(out / "steps.jsonl")}
    lat: dict = {}
    for r in rows:
        lat.setdefault((r["method"], r["binding"]["batch"], r["binding"]["seq"]), []).append(r["median_s"])
    methods = [m for m in (*OURS, "torch", "torch-compile") if any(k[0] == m for k in lat)]
    # Gensor's speed against each method (its latency / Gensor's), and the half-budget searches' speed against
    # the per-shape search (the search's latency / its: >= 0.95 is the goal)
    against = [k for k in ("roller", "torch", "search") if k in methods]
    halves = [k for k in ("shared",) if k in methods and "search" in methods]
    # the constructions with their top K measured: Gensor's against Roller's at the same budget
    pairs = ["roller-top"] if {"gensor-top", "roller-top"} <= set(methods) else []
    head = {"roller": "Gensor / Roller", "torch": "Gensor / torch", "search": "Gensor / searched",
            "shared": "shared / searched", "roller-top": "Gensor / Roller, top K measured"}
    lines = ["| batch | seq | " + " | ".join(LABELS[m] + " ms" for m in methods) + " | "
             + " | ".join(head[k] for k in against + halves + pairs) + " |",
             "|---:|---:|" + "---:|" * (len(methods) + len(against) + len(halves) + len(pairs))]
    ratios: dict[str, list] = {k: [] for k in against + halves + pairs}
    table: dict = {}
    for b in bindings:
        ms = {m: float(np.median(lat[(m, b["batch"], b["seq"])])) * 1e3 for m in methods
              if (m, b["batch"], b["seq"]) in lat}
        table[(b["batch"], b["seq"])] = ms
        rs = {k: ms[k] / ms["gensor"] for k in against if k in ms and "gensor" in ms}
        rs.update({k: ms["search"] / ms[k] for k in halves if k in ms and "search" in ms})
        rs.update({k: ms[k] / ms["gensor-top"] for k in pairs if k in ms and "gensor-top" in ms})
        for k, v in rs.items():
            ratios[k].append(v)
        lines.append(f"| {b['batch']} | {b['seq']} | " + " | ".join(f"{ms[m]:.2f}" if m in ms else "-" for m in methods)
                     + " | " + " | ".join(f"{rs[k]:.2f}x" if k in rs else "-" for k in ratios) + " |")
    lines.append("| mean | | " + " | " * len(methods) + " | ".join(
        f"{np.mean(ratios[k]):.2f}x" if ratios[k] else "-" for k in ratios) + " |")
    tuning = []
    for m, names in (("gensor", ["build gensor"]), ("roller", ["build roller"]),
                     *((m, [f"tune {m}", f"build {m}"]) for m in (*MEASURED, *SEARCHES))):
        got = [steps[n] for n in names if n in steps]
        if got:
            extra = f", {got[0]['trials']} trials" if "trials" in got[0] else ""
            parts = " + ".join("%.0f s %s" % (s["wall_s"], s["step"].split()[0]) for s in got)
            tuning.append(f"- {LABELS[m]}: {sum(s['wall_s'] for s in got):.0f} s ({parts}{extra}; "
                          f"{got[0].get('tasks', '?')} tasks)")
    comp = [r for r in rows if r["method"] == "torch-compile"]
    if comp:
        tuning.append(f"- torch.compile: first call {comp[0]['first_s']:.1f} s at the first shape, then "
                      + ", ".join(f"{r['first_s']:.1f}" for r in comp[1:]) + " s at the next ones")
    kernel = next((r.get("kernel") for r in rows if r.get("kernel")), None)
    errs = max((r["error"] for r in rows), default=float("nan"))
    n_rounds = len({r["round"] for r in rows if "round" in r})
    scale = steps.get("build gensor", steps.get("tune search", steps.get("tune gensor-top", {})))
    text = (f"Latency (ms; ours: median of {n_rounds} rounds, each the median of its samples). Ratios: the other "
            f"method's latency / Gensor's (> 1: Gensor faster); Gensor / Roller, top K measured: Roller's / Gensor's "
            f"with K = {scale.get('measured_per_task', '-')} per task measured. Largest output error against torch: {errs:.1e}. "
            f"torch: {kernel}. Scale: seqs {scale.get('seqs')}, batches {scale.get('batches')}, search "
            f"{scale.get('trials_per_task')} trials per task; clock: {clock} (cpu: one thread, its CPU time; wall: "
            "every core, the wall clock).\n\n" + "\n".join(lines)
            + "\n\nTuning time (this machine):\n\n" + "\n".join(tuning) + "\n")
    (out / f"summary-{clock}.md").write_text(text)
    print(text)
    if "torch" not in methods:
        return
    plt = agg_pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(table), 3.6))
    keys = list(table)
    w = 0.8 / len(methods)
    for j, m in enumerate(methods):
        ys = [table[k]["torch"] / table[k][m] if m in table[k] else np.nan for k in keys]
        ax.bar(np.arange(len(keys)) + j * w, ys, w, label=LABELS[m])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(keys)) + w * (len(methods) - 1) / 2, [f"b{b} s{s}" for b, s in keys], fontsize=7)
    ax.set_ylabel("speed-up over PyTorch eager")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"fig11-{clock}.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
