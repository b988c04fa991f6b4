"""A resumable fuzzing campaign: many generated models, one JSON line each, a summary table, reproducers.

``campaign(out, models, seed)`` runs the models of seeds ``seed .. seed + models - 1`` (every ``tune_every``-th
also tuned for ``tune_trials`` trials per task) in ``jobs`` worker processes (``tiletune.fuzz.worker``),
appending each model's row to ``OUT/results.jsonl`` as soon as it is done, so that a crash of the campaign
loses nothing and a rerun runs only the seeds the file lacks. Then every ``mismatch`` and ``crash`` is reduced
(``tiletune.fuzz.reduce``) to ``OUT/repro/seed-S-PATH.py`` (recorded in ``OUT/reduced.jsonl``, also resumable),
and ``OUT/summary.md`` is written (the exported ONNX files, records and worker logs live in a temporary
directory): models tried and, per path, matched, refused by reason, mismatches,
crashes, skipped, seconds per model, and every failure with its reproducer.
"""
from __future__ import annotations

import json
import os
import queue
import statistics
import tempfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .generate import Spec, build, generate
from .reduce import reduce_spec, still_fails, write_reproducer
from .run import PATHS, reason_key
from .worker import Worker

FAILURES = ("mismatch", "crash")


def read_rows(path: Path) -> list[dict]:
    """The rows of a JSON-lines file; a torn last line (the campaign was killed while writing it) is ignored."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _append(path: Path, row: dict, lock: threading.Lock) -> None:
    with lock, open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def campaign(out: str, models: int, seed: int = 0, *, jobs: int = 1, timeout: float = 180.0, tune_every: int = 5,
             tune_trials: int = 2, paths=PATHS, reduce: bool = True, log=print) -> list[dict]:
    """Run the campaign (see the module docstring); returns the rows of all its seeds."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    results = d / "results.jsonl"
    wanted = range(seed, seed + models)
    done = {r["seed"] for r in read_rows(results)}
    todo = [s for s in wanted if s not in done]
    lock = threading.Lock()
    tmp = tempfile.TemporaryDirectory(prefix="tiletune-fuzz-")  # exported ONNX files, records, worker logs
    work = tmp.name
    workers: queue.Queue = queue.Queue()
    for _ in range(max(1, jobs)):
        workers.put(Worker(work, timeout))

    def one(s: int) -> None:
        w = workers.get()
        try:
            tune = tune_trials if tune_every and (s - seed) % tune_every == tune_every - 1 else 0
            row = w.run(generate(s).spec, paths=paths, tune=tune)
        finally:
            workers.put(w)
        _append(results, row, lock)
        log(line(row))

    if todo:
        log(f"{len(todo)} models to run ({len(done & set(wanted))} already in {results})")
        with ThreadPoolExecutor(max(1, jobs)) as ex:
            list(ex.map(one, todo))
    rows = [r for r in read_rows(results) if r["seed"] in set(wanted)]
    if reduce:
        w = workers.get()
        reduce_all(d, rows, w, log)
        workers.put(w)
    while not workers.empty():
        workers.get().close()
    tmp.cleanup()
    (d / "summary.md").write_text(summary(rows, read_rows(d / "reduced.jsonl"), seed))
    return rows


def line(row: dict) -> str:
    """One model's row in one line, for the campaign's log."""
    parts = [f"{p}={r['outcome']}{':' + r['reason'] if r['reason'] and r['outcome'] != 'match' else ''}"
             for p, r in row.get("paths", {}).items()]
    return f"seed {row['seed']}: {' '.join(parts) or row.get('error', '')}  [{row.get('description', '')[:90]}]"


def reduce_all(d: Path, rows: list[dict], worker: Worker, log=print) -> None:
    """Reduce every failure of ``rows`` that ``d/reduced.jsonl`` does not hold yet."""
    done = {(r["seed"], r["path"]) for r in read_rows(d / "reduced.jsonl")}
    smaller = {r["seed"]: Spec(r["seed"], tuple(map(tuple, r["steps"]))) for r in read_rows(d / "reduced.jsonl")}
    for row in rows:
        for path, r in row.get("paths", {}).items():
            if r["outcome"] not in FAILURES or (row["seed"], path) in done:
                continue
            spec = Spec.from_json(row)
            fails = still_fails(worker, path, r["outcome"], r["reason"], row.get("tune", 0))
            other = smaller.get(row["seed"])  # the other path's reduction: the same failure, most often
            alone = True
            if other and fails(other):
                small = reduce_spec(other, fails)
            elif fails(spec):
                small = reduce_spec(spec, fails)
            else:  # after another model in the same process only (e.g. a heap that one corrupted): kept whole
                small, alone = spec, False
            smaller[row["seed"]] = small
            note = f"{r['outcome']} on the {path} path: {r['reason']}: {r['detail']}".replace("\n", " ")[:300]
            note += "" if alone else " (did not recur when run alone)"
            repro = write_reproducer(small, str(d / "repro" / f"seed-{row['seed']}-{path}.py"), note)
            rec = {"seed": row["seed"], "path": path, "outcome": r["outcome"], "reason": r["reason"],
                   "steps": [list(s) for s in small.steps], "description": _describe(small),
                   "reproducer": os.path.relpath(repro, d), "recurs": alone}
            _append(d / "reduced.jsonl", rec, threading.Lock())
            log(f"reduced seed {row['seed']} ({path}) from {len(spec.steps)} to {len(small.steps)} steps: {repro}")


def _describe(spec: Spec) -> str:

    return build(spec).description


def _reason(res: dict) -> str:
    """A result's reason key; a refusal's from its message by the current ``reason_key`` (so that the rows of an
    older run count with the new ones)."""
    return reason_key(res["detail"]) if res["outcome"] == "refused" and res.get("detail") else res["reason"]


def summary(rows: list[dict], reduced: list[dict], seed: int = 0) -> str:
    """The campaign's Markdown summary (see the module docstring)."""
    paths = sorted({p for r in rows for p in r.get("paths", {})},
                   key=lambda p: (PATHS.index(p) if p in PATHS else len(PATHS), p))
    lines = [f"# Fuzz campaign: {len(rows)} models (seeds from {seed})", "",
             f"{sum(r.get('dynamic', False) for r in rows)} with a symbolic dimension, "
             f"{sum(bool(r.get('tune')) for r in rows)} tuned.", "",
             "| path | models | match | refused | mismatch | crash | skip | s/model (median) |",
             "|---|---|---|---|---|---|---|---|"]
    for p in paths:
        rs = [r["paths"][p] for r in rows if p in r.get("paths", {})]
        c = Counter(r["outcome"] for r in rs)
        secs = [r["seconds"] for r in rs if r["outcome"] != "skip" and r["seconds"]]
        med = f"{statistics.median(secs):.2f}" if secs else "-"
        lines.append(f"| {p} | {len(rs)} | {c['match']} | {c['refused']} | {c['mismatch']} | {c['crash']} | "
                     f"{c['skip']} | {med} |")
    for title, outcome in (("Refused, by reason", "refused"),
                           ("Skipped (not tiletune's: the generator, torch or torch.onnx), by reason", "skip")):
        c = Counter((p, _reason(r["paths"][p])) for r in rows for p in r.get("paths", {})
                    if r["paths"][p]["outcome"] == outcome)
        if c:
            lines += ["", f"## {title}", "", "| path | reason | models | first seed |", "|---|---|---|---|"]
            for (p, why), k in sorted(c.items(), key=lambda x: (-x[1], x[0])):
                first = min(r["seed"] for r in rows if p in r.get("paths", {}) and r["paths"][p]["outcome"] == outcome
                            and _reason(r["paths"][p]) == why)
                lines.append(f"| {p} | {why.replace('|', '/')} | {k} | {first} |")
    repro = {(r["seed"], r["path"]): r for r in reduced}
    fails = [(r, p) for r in rows for p in r.get("paths", {}) if r["paths"][p]["outcome"] in FAILURES]
    lines += ["", "## Mismatches and crashes", ""]
    if not fails:
        lines.append("None.")
    else:
        lines += ["| seed | path | outcome | reason | detail | reduced to | reproducer |",
                  "|---|---|---|---|---|---|---|"]
        for r, p in fails:
            res, red = r["paths"][p], repro.get((r["seed"], p), {})
            alone = "" if red.get("recurs", True) else " (did not recur when run alone)"
            small = red.get("description", "-").replace("|", "/") + alone
            lines.append(f"| {r['seed']} | {p} | {res['outcome']} | {res['reason']} | "
                         f"{res['detail'][:160].replace('|', '/')} | {small} | {red.get('reproducer', '-')} |")
    broken = [r for r in rows if "error" in r]
    if broken:
        lines += ["", "## Generator errors", ""] + [f"- seed {r['seed']}: {r['error']}" for r in broken]
    return "\n".join(lines) + "\n"
