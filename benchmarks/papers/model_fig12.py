"""Gensor's Fig. 12: an edge device whose MobileNetV2 changes its width (channel count) three times; after each
change the model is optimized again, then it infers ``--frames`` frames. The total time (optimization +
inference, over the phases) of PyTorch (no optimization), a search (xgb), Roller and Gensor. On this CPU, or with
``--target cuda --dtype float16`` on the machine's NVIDIA GPU (every method builds, tunes and runs there; a frame
is a host image in and the host's logits out for ours and PyTorch alike: ``benchmarks/device/run_fig12.sh``).

Per phase (``--widths``, default 1.0 -> 0.75 -> 0.5 -> 1.4: ``benchmarks/common/dyn_models.py:mobilenetv2_100`` etc.):

- ``gensor`` / ``roller``: ``tiletune model build MODEL --construct gensor|roller`` (import, construct every task,
  compile; nothing measured), its wall time (a process of its own, start to end) is the optimization;
- ``search``: ``tiletune model tune MODEL`` at ``--trials-per-task`` trials per task (xgb), then ``model build``;
- ``torch``: PyTorch eager, no optimization (its own process, without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE).

Inference: ``--frames`` calls in a row on one input, in a process of its own per method and phase, after one
warm call (``benchmarks/common/dyn_bench.py``). ``OUT/results.jsonl`` gets a row per method and phase as it finishes (a
re-run skips those; a method optimized before, in ``OUT/optimize.jsonl``, keeps its library and its time),
``OUT/summary-CLOCK.md`` the table, ``OUT/fig12-CLOCK.png`` the cumulative time. Libraries go to ``--work``.

    python benchmarks/papers/model_fig12.py --out benchmarks/out/fig12                       # the figure's scale
    python benchmarks/papers/model_fig12.py --out DIR --frames 300 --trials-per-task 4       # a reduced one
    python benchmarks/papers/model_fig12.py --out DIR --target cuda --dtype float16            # on the GPU
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from tiletune.bench.plots import agg_pyplot
from tiletune.bench.results import read_jsonl
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.target import parse_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # cli_run, dyn_bench, gzjsonl
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)
from dyn_bench import run

HERE = Path(__file__).resolve().parent
WIDTHS = {"1.0": "mobilenetv2_100", "0.75": "mobilenetv2_075", "0.5": "mobilenetv2_050", "1.4": "mobilenetv2_140"}
METHODS = ("torch", "search", "roller", "gensor")
LABELS = {"torch": "PyTorch eager", "search": "search (xgb)", "roller": "Roller", "gensor": "Gensor"}


def spec(width: str) -> str:
    return f"{HERE.parent / 'common' / 'dyn_models.py'}:{WIDTHS[width]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/tiletune-fig12", help="where the libraries go (not OUT: they are large)")
    p.add_argument("--widths", default="1.0,0.75,0.5,1.4", help=f"the phases' widths, of {', '.join(WIDTHS)}")
    p.add_argument("--frames", type=int, default=3000, help="frames inferred per phase")
    p.add_argument("--trials-per-task", type=int, default=10, help="search: trials per task")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--target", default="host", help="host (this CPU) or cuda[:sm_XX] (the machine's GPU)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"),
                   help="the model's compute dtype on a CUDA target (PyTorch runs in it too)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="inference: cpu = one thread, the frames' CPU time (benchmarks/common/dyn_bench.py; for a machine "
                   "others load); wall = every core, the wall clock")
    a = p.parse_args()
    gpu = a.target.startswith("cuda")
    if gpu and a.clock == "cpu":
        p.error("--clock cpu times one CPU thread; a CUDA target takes --clock wall")
    if not gpu and a.dtype != "float32":
        p.error("--dtype is for a CUDA target; on the CPU the model runs in float32")
    where = ["--target", a.target, "--dtype", a.dtype]
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    widths = [w for w in a.widths.split(",") if w]
    results = out / "results.jsonl"
    scale = {"frames": a.frames, "trials_per_task": a.trials_per_task, "clock": a.clock}
    if gpu:  # the keys of CPU results stay as they were
        scale.update(target=a.target, dtype=a.dtype)
    build_key = {k: scale[k] for k in ("target", "dtype") if k in scale}  # a GPU build is another library

    def same_build(r: dict) -> bool:
        return {k: r[k] for k in ("target", "dtype") if k in r} == build_key

    optimized = {(r["method"], r["width"], r["trials_per_task"]): r for r in read_jsonl(out / "optimize.jsonl")
                 if same_build(r)}
    for phase, w in enumerate(widths):
        model = spec(w)
        for m in [m for m in a.methods.split(",") if m]:
            if any(r["method"] == m and r["phase"] == phase and r["width"] == w and r["frames"] == a.frames
                   and r.get("clock", "wall") == a.clock and same_build(r) for r in read_jsonl(results)):
                continue
            lib = work / (f"{m}-{w}.so" if not gpu else f"{m}-{w}-{a.dtype}-cuda.so")
            t0 = time.time()
            info = {}
            done = optimized.get((m, w, a.trials_per_task))
            if done is not None and lib.exists():  # optimized before (another --frames or --clock): its time
                info = {k: done[k] for k in ("tasks", "trials") if k in done}
            elif m in ("gensor", "roller"):
                tiletune("model", "build", model, *where, "--construct", m, "-o", str(lib), "--no-check")
            elif m == "search":
                n = len(load_model_tasks(model, parse_target(a.target), dtype=a.dtype)[1].tasks)
                rec = work / f"search-{w}.jsonl"
                if rec.exists():
                    rec.unlink()  # each phase is tuned from nothing, as the device would
                tiletune("model", "tune", model, *where, "--trials", str(n * a.trials_per_task), "-r", str(rec), "-q")
                tiletune("model", "build", model, *where, "-r", str(rec), "-o", str(lib), "--no-check")
                info = {"tasks": n, "trials": n * a.trials_per_task}
            optimize = 0.0 if m == "torch" else done["optimize_s"] if done is not None and lib.exists() else \
                time.time() - t0
            if m != "torch" and (done is None or not lib.exists()):
                with open(out / "optimize.jsonl", "a") as f:
                    f.write(json.dumps({"method": m, "width": w, "trials_per_task": a.trials_per_task,
                                        "optimize_s": optimize, **info, **build_key}) + "\n")
            item = {"method": m, "model": model, "frames": a.frames}
            job = {"repeat": 1, "min_repeat_ms": 0, "clock": a.clock,
                   **({"device": "cuda", "dtype": a.dtype} if gpu else {})}
            if m == "torch":
                row = run("torch", dict(job, items=[item]), out / "children.jsonl")[0]
            else:
                row = run("ours", dict(job, items=[dict(item, lib=str(lib))]), out / "children.jsonl")[0]
            with open(results, "a") as f:
                f.write(json.dumps({"method": m, "phase": phase, "width": w, "optimize_s": optimize,
                                    "infer_s": row["frames_s"], "frames": a.frames, "error": row["error"],
                                    "kernel": row.get("kernel"), "device": row.get("device"), "loadavg": row.get("loadavg"), **scale,
                                    **info}) + "\n")
    summarize(out, widths, a.frames, a.clock)
    return 0


def summarize(out: Path, widths: list[str], frames: int, clock: str) -> None:
    """``OUT/summary-CLOCK.md`` and ``OUT/fig12-CLOCK.png`` from the results at ``frames`` and ``clock``."""
    rows = [r for r in read_jsonl(out / "results.jsonl") if r["frames"] == frames and r.get("clock", "wall") == clock]
    by = {(r["method"], r["phase"]): r for r in rows}
    methods = [m for m in METHODS if any(k[0] == m for k in by)]
    head = " | ".join(f"{w}: optimize / infer s" for w in widths)
    lines = [f"| method | {head} | total s | ms per frame (mean) | total s at {10 * frames} frames per phase "
             "(computed) |", "|---|" + "---:|" * (len(widths) + 3)]
    totals, totals10 = {}, {}
    for m in methods:
        cells, total, total10, per = [], 0.0, 0.0, []
        for i, w in enumerate(widths):
            r = by.get((m, i))
            if r is None:
                cells.append("-")
                continue
            total += r["optimize_s"] + r["infer_s"]
            total10 += r["optimize_s"] + 10 * r["infer_s"]
            per.append(r["infer_s"] / frames * 1e3)
            cells.append(f"{r['optimize_s']:.0f} / {r['infer_s']:.1f}")
        if len(per) == len(widths):
            totals[m], totals10[m] = total, total10
        lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + f" | {total:.0f} | {np.mean(per):.2f} | {total10:.0f} |")
    best = min(totals, key=totals.get) if totals else None
    best10 = min(totals10, key=totals10.get) if totals10 else None
    errs = max((r["error"] for r in rows), default=float("nan"))
    kernel = next((r.get("kernel") for r in rows if r.get("kernel")), None)
    search = next((r for r in rows if r["method"] == "search"), {})
    gpu = next((r for r in rows if r.get("target")), None)
    where = (f" on the GPU ({next((r['device'] for r in rows if r.get('device')), gpu['target'])}, {gpu['dtype']}; "
             "a frame: the host's image in, the host's logits out)" if gpu else "")
    text = (f"MobileNetV2{where}, widths {' -> '.join(widths)}, {frames} frames per phase (batch 1, 224x224). "
            f"Optimize: the wall time of the method's commands; infer: {frames} calls in a row ({clock} clock: "
            + ("one thread, its CPU time" if clock == "cpu" else "every core, the wall clock") + "). Lowest total: "
            f"{LABELS.get(best, '-')}; at {10 * frames} frames per phase (computed: optimize + 10 x the measured "
            f"inference): {LABELS.get(best10, '-')}. Search: {search.get('trials_per_task', '-')} trials per task. Largest output "
            f"error against torch: {errs:.1e}. torch: {kernel}.\n\n" + "\n".join(lines) + "\n")
    (out / f"summary-{clock}.md").write_text(text)
    print(text)
    if not totals:
        return
    plt = agg_pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for m in methods:
        t, xs, ys = 0.0, [0.0], [0.0]
        for i in range(len(widths)):
            r = by[(m, i)]
            for d in (r["optimize_s"], r["infer_s"]):
                t += d
                xs.append(t)
            ys += [ys[-1], ys[-1] + frames]
        ax.plot(xs, ys, label=LABELS[m])
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("frames inferred")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"fig12-{clock}.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
