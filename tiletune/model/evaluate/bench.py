"""End-to-end benchmark of one model: our tuned build against PyTorch eager, torch.compile, ONNX Runtime,
TVM's default build and (optionally) MetaSchedule, each timed in its own process, one after another
(``tiletune.model.evaluate.baselines``), so that no method shares the cores or a thread pool with another. Run it
on an idle machine: under load a PyTorch timing swung 8.5 -> 140 ms here.

``DIR/results.jsonl`` gets one line per (model, method) as each finishes; a second run with the same
settings skips what is there (so a benchmark of many models can be run piece by piece), and a method that
failed or was missing is tried again. ``DIR/<model>.md`` (the report: median latency, spread = min..max of
the samples, speed-up of our build over each method, output check, preparation time, failures in one line
each) and ``DIR/<model>.png`` (bars of the median latency with the min..max range) are rewritten after
every method.

``bench_model_shapes`` (``model bench --shapes``, a model with symbolic dimensions): every method at every
binding, each method still in its own process that builds it once and times it at each shape
(``tiletune.model.evaluate.baselines.run_shapes``). Our build is the one dispatching library of ``model build --shapes``,
tuned at the shapes the records hold for this model (``tiletune.model.dynamic.shapes.recorded_shapes``: found from the
records, no option names them); a listed shape that was not tuned runs through the library's rule for untuned
shapes (what a deployed library does). With ``--construct`` and no records, every listed shape is constructed by
that method (Gensor's Fig. 11 on a GPU: ``benchmarks/device/run_fig11.sh``). On a CUDA target every method runs
on the GPU, in ``--dtype`` (ONNX Runtime is refused: CPU only). ``results.jsonl`` gets one line per (model,
method, shape), and a second run runs a method only at the shapes it has no result for; ``DIR/<model>.md`` is a table with one row per shape: the
median ms of every method, our speed-up over each, whether the shape was tuned.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ...bench.machine import machine_info
from ...bench.plots import agg_pyplot
from ...bench.results import read_jsonl
from ...errors import TiletuneError
from ...measure.base import MeasureSettings
from ...records import load as load_records
from ...target import is_cuda
from .baselines import CPU_ONLY, LABELS, METHODS, shapes_refusal
from ..frontend.dims import label
from ..passes.layout import DEFAULT_LAYOUT
from ..dynamic.shapes import recorded_shapes
from ..frontend.source import ModelSource, short_name

DEFAULT_METHODS = ("tiletune", "torch", "torch-compile", "onnxruntime", "tvm-default")


def parse_methods(text: str | None, ms_trials: int, target: dict | None = None) -> list[str]:
    if not text:
        if is_cuda(target):
            return [m for m in DEFAULT_METHODS if m not in CPU_ONLY]
        return list(DEFAULT_METHODS) + (["metaschedule"] if ms_trials > 0 else [])
    out = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in out if m not in METHODS]
    if bad:
        raise TiletuneError(f"unknown method(s) {', '.join(bad)}; accepted: {', '.join(METHODS)}")
    if "metaschedule" in out and ms_trials < 1:
        raise TiletuneError("metaschedule needs --metaschedule-trials N (>= 1), e.g. the trials of the records")
    return out


def _settings_key(settings: MeasureSettings, records: str | None, ms_trials: int, target: dict, layout: str,
                  dtype: str = "float32", construct: str | None = None, cuda_graph: bool = False) -> dict:
    key = {"repeat": settings.repeat, "min_repeat_ms": settings.min_repeat_ms, "target": target,
           "records": os.path.abspath(records) if records else None, "ms_trials": ms_trials, "layout": layout}
    if dtype != "float32" or construct:  # the keys of earlier results stay as they were
        key.update(dtype=dtype, construct=construct)
    if cuda_graph:
        key.update(cuda_graph=True)
    return key


def bench_model(spec: str, *, out: str, target: dict, methods: list[str], records: str | None,
                settings: MeasureSettings, ms_trials: int = 0, timeout: float = 3600.0, layout: str = DEFAULT_LAYOUT,
                dtype: str = "float32", construct: str | None = None, cuda_graph: bool = False,
                note: Callable[[str], None] = print) -> list[dict]:
    """Time every method on model ``spec`` (see the module docstring); returns this model's results.
    ``layout``: of our build's convolutions (``tiletune.model.passes.layout``; the records must be of that layout);
    the other methods take the model as imported. ``dtype``: the model's compute dtype (a CUDA target);
    ``construct``: our build gives the tasks without records that construction (``model build --construct``);
    ``cuda_graph``: our build with CUDA graphs (``model build --cuda-graph``), torch.compile in its
    ``reduce-overhead`` mode (CUDA graphs too)."""
    if "tiletune" in methods and records is not None and not Path(records).exists():
        raise TiletuneError(f"records file {records!r} does not exist")
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    res_path = d / "results.jsonl"
    key = _settings_key(settings, records, ms_trials, target, layout, dtype, construct, cuda_graph)
    for m in methods:
        done = [r for r in read_jsonl(res_path) if r.get("model") == spec and r.get("method") == m
                and r.get("settings") == key and not r.get("error")]
        if done:
            note(f"{spec} {m}: done before ({done[-1]['median_s'] * 1e3:.3f} ms), kept")
            continue
        note(f"{spec} {m}: running ...")
        r = _run_child(spec, m, target, settings, records, ms_trials, timeout, layout, dtype, construct,
                       {"cuda_graph": cuda_graph})
        r["settings"] = key
        r["finished"] = time.time()
        with open(res_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(r) + "\n")
        if r.get("error"):
            note(f"{spec} {m}: {'not run' if r['error'] == 'missing' else 'failed'}: {r.get('message', '')}")
        else:
            note(f"{spec} {m}: {r['median_s'] * 1e3:.3f} ms (output error {r['check_error']:.2g}, "
                 f"prepared in {r['prepare_s']:.1f} s)")
        write_report(spec, d, target)
    write_report(spec, d, target)
    return latest(read_jsonl(res_path), spec)


def _graphs_note(row: dict) -> list[str]:
    """The report's note for a result of ``--cuda-graph`` (ours and torch.compile replay CUDA graphs): [] or one."""
    if not row.get("settings", {}).get("cuda_graph") or row["method"] not in ("tiletune", "torch-compile"):
        return []
    return ["CUDA graphs" + (" (mode='reduce-overhead')" if row["method"] == "torch-compile" else "")]


def _run_child(spec, method, target, settings, records, ms_trials, timeout, layout, dtype="float32",
               construct=None, extra: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="tiletune-e2e-job-") as tmp:
        job = {"model": spec, "method": method, "target": target,
               "settings": {"repeat": settings.repeat, "min_repeat_ms": settings.min_repeat_ms},
               "records": records, "trials": ms_trials, "layout": layout, "dtype": dtype, "construct": construct,
               "result": os.path.join(tmp, "result.json"), **(extra or {})}
        path = os.path.join(tmp, "job.json")
        Path(path).write_text(json.dumps(job))
        env = dict(os.environ)
        cores = str(target.get("num-cores") or os.cpu_count() or 1)
        env["TVM_NUM_THREADS"] = cores
        env.setdefault("OMP_NUM_THREADS", cores)
        log = os.path.join(tmp, "log.txt")
        try:
            with open(log, "w") as f:
                proc = subprocess.run([sys.executable, "-m", "tiletune.model.evaluate.baselines", path], stdout=f,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": spec, "method": method, "label": LABELS[method], "error": "timeout",
                    "message": f"did not finish within {timeout:.0f} s"}
        try:
            return json.loads(Path(job["result"]).read_text())
        except (OSError, json.JSONDecodeError):
            tail = [s for s in Path(log).read_text(errors="replace").splitlines() if s.strip()][-1:] or [""]
            return {"model": spec, "method": method, "label": LABELS[method], "error": "crash",
                    "message": f"exited with code {proc.returncode} without a result: {tail[0][:200]}"}


def latest(results: list[dict], spec: str) -> list[dict]:
    """The last result of each method for ``spec``, in METHODS order (the results at several shapes left out)."""
    by: dict[str, dict] = {}
    for r in results:
        if r.get("model") == spec and "binding" not in r:
            by[r["method"]] = r
    return [by[m] for m in METHODS if m in by]


def write_report(spec: str, d: Path, target: dict) -> None:
    rows = latest(read_jsonl(d / "results.jsonl"), spec)
    name = short_name(spec)
    ours = next((r for r in rows if r["method"] == "tiletune" and not r.get("error")), None)
    info = machine_info(target)
    gpu = next((r["device"] for r in rows if r.get("device")), None)
    dtypes = sorted({r.get("dtype", "float32") for r in rows})
    where = f"GPU {gpu} ({', '.join(dtypes)}); host " if gpu else ""
    lines = [f"# {spec}: end-to-end latency (batch 1)", "",
             f"Machine: {where}{info['cpu']}, {info['cores']} cores; TVM {info['tvm']}, torch {info['torch']}. "
             "Each method in its own process, one after another; median of the samples, spread = min..max.", "",
             "| method | median ms | spread ms | our speed-up | output error | prepare s | notes |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | - | - | - | - | - | {r['error']}: {r.get('message', '')[:150]} |")
            continue
        s = np.array(r["samples"]) * 1e3
        speed = f"{r['median_s'] / ours['median_s']:.2f}x" if ours else "-"
        notes = []
        if r["method"] == "tiletune":
            notes.append(f"{r.get('tuned_tasks', 0)} of {r.get('tasks', 0)} tasks tuned, {r.get('layout', 'NCHW')}")
            if r.get("constructed"):
                notes.append(f"{r['constructed']} constructed by {r.get('construct')}")
        if r["method"] == "metaschedule":
            notes.append(f"{r.get('trials')} trials, tuning included in prepare")
        if r.get("precision"):  # OpenVINO's: the precision its CPU plugin ran in
            notes.append(f"inference precision {r['precision']}")
        if r.get("load_before", 0) > 0.5 * (target.get("num-cores") or 1):
            notes.append(f"machine busy (load {r['load_before']:.1f})")
        notes += _graphs_note(r)
        lines.append(f"| {r['label']} | {r['median_s'] * 1e3:.3f} | {s.min():.3f}..{s.max():.3f} | {speed} | "
                     f"{r['check_error']:.1e} | {r['prepare_s']:.1f} | {'; '.join(notes)} |")
    (d / f"{name}.md").write_text("\n".join(lines) + "\n")
    ok = [r for r in rows if not r.get("error")]
    if not ok:
        return
    try:
        plt = agg_pyplot()
    except ImportError:  # matplotlib is optional (a lent GPU machine has none): the table is the report
        return
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(ok)))
    med = [r["median_s"] * 1e3 for r in ok]
    lo = [m - min(r["samples"]) * 1e3 for m, r in zip(med, ok)]
    hi = [max(r["samples"]) * 1e3 - m for m, r in zip(med, ok)]
    colors = ["tab:red" if r["method"] == "tiletune" else "tab:gray" for r in ok]
    ax.barh([r["label"] for r in ok], med, xerr=[lo, hi], color=colors, capsize=3)
    ax.invert_yaxis()
    ax.set_xlabel("latency (ms, median; bars: min..max)")
    ax.set_title(f"{spec}, batch 1")
    fig.tight_layout()
    fig.savefig(d / f"{name}.png", dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ --shapes


def bench_model_shapes(source: ModelSource, bindings: list[dict[str, int]], *, out: str, target: dict,
                       methods: list[str], records: str | None, settings: MeasureSettings, timeout: float = 3600.0,
                       layout: str = DEFAULT_LAYOUT, construct: str | None = None, dtype: str = "float32",
                       cuda_graph: bool = False, note: Callable[[str], None] = print) -> list[dict]:
    """Time every method of ``methods`` on the model of ``source`` (with symbolic dimensions) at each of
    ``bindings`` (see the module docstring); returns the latest row of every (method, shape) of ``bindings``.
    ``dtype``: the model's compute dtype on a CUDA target."""
    spec = source.spec
    if "tiletune" in methods:
        if records is None and not construct:
            raise TiletuneError("model bench --shapes: our build needs -r RECORDS (the model tuned at some of its "
                                "shapes: tiletune model tune MODEL --shapes ...) or --construct METHOD")
        if records is not None and not Path(records).exists():
            raise TiletuneError(f"records file {records!r} does not exist")
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    res_path = d / "results.jsonl"
    key = dict(_settings_key(settings, records, 0, target, layout, dtype, construct, cuda_graph), shapes=True)
    labels = [label(b) for b in bindings]
    todo: dict[str, list[dict[str, int]]] = {}
    for m in methods:
        done = {r.get("shape") for r in read_jsonl(res_path) if r.get("model") == spec and r.get("method") == m
                and r.get("settings") == key and "binding" in r and not r.get("error")}
        todo[m] = [b for b, lb in zip(bindings, labels) if lb not in done]
        if not todo[m]:
            note(f"{spec} {m}: done before at {', '.join(labels)}, kept")
    tuned = None
    if todo.get("tiletune") and records is None:  # --construct alone: every shape of --shapes constructed
        tuned = [dict(b) for b in bindings]
        note(f"{spec}: our build is constructed ({construct}) at {'; '.join(labels)}")
    elif todo.get("tiletune"):  # before any child: records without a shape of this model are one line
        tuned = recorded_shapes(source, target, layout, load_records(records, warn=False), dtype)
        if not tuned:
            raise TiletuneError(f"records file {records} holds no tuned shape of {spec} (tune it first: tiletune model "
                                f"tune {spec} --shapes ... -r {records}; and the same --layout, this is {layout})")
        note(f"{spec}: our build is tuned at {'; '.join(label(b) for b in tuned)} (the shapes the records hold)")
    for m in methods:
        if not todo[m]:
            continue
        why = shapes_refusal(m, source)
        if why:
            res = {"model": spec, "method": m, "label": LABELS[m], "error": "error", "message": why}
        else:
            note(f"{spec} {m}: running at {len(todo[m])} shape(s) ...")
            extra = {"shapes": todo[m], "tuned": tuned if m == "tiletune" else None, "cuda_graph": cuda_graph}
            res = _run_child(spec, m, target, settings, records, 0, timeout, layout, dtype, construct, extra)
        rows = res["rows"] if "rows" in res else [dict(res, binding=b, shape=label(b)) for b in todo[m]]
        with open(res_path, "a", encoding="utf-8") as f:
            for r in rows:
                if m == "tiletune":
                    r["tuned"] = r["binding"] in tuned
                r["settings"] = key
                r["finished"] = time.time()
                f.write(json.dumps(r) + "\n")
        if "rows" not in res:  # the method as a whole: one line
            note(f"{spec} {m}: {'not run' if res['error'] == 'missing' else 'failed'}: {res.get('message', '')}")
        for r in rows if "rows" in res else ():
            if r.get("error"):
                note(f"{spec} {m} {r['shape']}: failed: {r.get('message', '')}")
            else:
                note(f"{spec} {m} {r['shape']}: {r['median_s'] * 1e3:.3f} ms (output error {r['check_error']:.2g}, "
                     f"first call {r['first_s']:.2f} s)")
        write_shapes_report(spec, d, target, labels)
    write_shapes_report(spec, d, target, labels)
    return latest_shapes(read_jsonl(res_path), spec, labels)


def latest_shapes(results: list[dict], spec: str, labels: list[str]) -> list[dict]:
    """The last result of each (method, shape) for ``spec`` at the shapes ``labels``, by shape then METHODS order."""
    by: dict[tuple[str, str], dict] = {}
    for r in results:
        if r.get("model") == spec and "binding" in r and r.get("shape") in labels:
            by[(r["shape"], r["method"])] = r
    return [by[(lb, m)] for lb in labels for m in METHODS if (lb, m) in by]


def write_shapes_report(spec: str, d: Path, target: dict, labels: list[str]) -> None:
    """``DIR/<model>.md`` of ``bench_model_shapes``: one row per shape, a column per method (median ms), our
    speed-up over each, whether the shape was tuned; then what the table leaves out, one line each."""
    rows = latest_shapes(read_jsonl(d / "results.jsonl"), spec, labels)
    ran = [m for m in METHODS if any(r["method"] == m for r in rows)]
    methods = [m for m in ran if any(r["method"] == m and not r.get("error") for r in rows)]  # the table's columns
    others = [m for m in methods if m != "tiletune"]
    at = {(r["shape"], r["method"]): r for r in rows}
    info = machine_info(target)
    dims = sorted({k for r in rows for k in r["binding"]})
    lines = [f"# {spec}: end-to-end latency at {len(labels)} shape(s) of {', '.join(dims)}", "",
             f"Machine: {info['cpu']}, {info['cores']} cores; TVM {info['tvm']}, torch {info['torch']}. Each method in "
             "its own process, one after another, built once and timed at every shape; median of the samples in ms; "
             "speed-up: the method's median over ours. Tuned: a shape our build was tuned at (the others run "
             "through the library's rule for untuned shapes).", ""]
    head = ["shape", "tuned"] + [f"{LABELS[m]} ms" for m in methods]
    head += [f"vs {LABELS[m]}" for m in others] if "tiletune" in methods else []
    head.append("max output error")
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]

    def ok(lb, m):
        r = at.get((lb, m))
        return r if r is not None and not r.get("error") else None

    for lb in labels:
        ours = ok(lb, "tiletune")
        t = at.get((lb, "tiletune"), {}).get("tuned")
        cells = [lb, "-" if t is None else ("yes" if t else "no")]
        cells += [f"{ok(lb, m)['median_s'] * 1e3:.3f}" if ok(lb, m) else "-" for m in methods]
        if "tiletune" in methods:
            cells += [f"{ok(lb, m)['median_s'] / ours['median_s']:.2f}x" if ours and ok(lb, m) else "-" for m in others]
        errs = [ok(lb, m)["check_error"] for m in methods if ok(lb, m)]
        cells.append(f"{max(errs):.1e}" if errs else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for m in ran:
        mine = [r for r in rows if r["method"] == m]
        good = [r for r in mine if not r.get("error")]
        notes = []
        if good:
            notes.append(f"prepared in {good[-1].get('prepare_s', 0.0):.1f} s")
        if m == "tiletune" and good:
            r = good[-1]
            notes.append(f"tuned at {'; '.join(r.get('tuned_shapes', []))}, {r.get('tuned_tasks', 0)} of "
                         f"{r.get('tasks', 0)} tasks tuned, {r.get('layout', 'NCHW')}")
            if r.get("constructed"):
                notes.append(f"{r['constructed']} constructed by {r.get('construct')}")
        if m == "torch-compile" and good:
            notes.append("first call (compilation) " + ", ".join(f"{r['shape']} {r['first_s']:.2f} s" for r in good))
        notes += _graphs_note(good[-1]) if good else []
        busy = [r["shape"] for r in good if r.get("load_before", 0) > 0.5 * (target.get("num-cores") or 1)]
        if busy:
            notes.append(f"machine busy at {', '.join(busy)}")
        failed: dict[str, list[str]] = {}
        for r in mine:
            if r.get("error"):
                failed.setdefault(f"{r['error']}: {r.get('message', '')[:150]}", []).append(r["shape"])
        for msg, where in failed.items():
            notes.append(msg if len(where) == len(labels) else f"at {', '.join(where)}: {msg}")
        if notes:
            lines.append(f"- {LABELS[m]}: {'; '.join(notes)}")
    (d / f"{short_name(spec)}.md").write_text("\n".join(lines) + "\n")
