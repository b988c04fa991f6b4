"""Construct, then refine on whole models: which start should `tiletune model tune` give every
task? Per model, tuned with a small budget per task (``--per-task``, default 10) once per start of
``--starts`` (default: roller, the single-workload default, and construct, Gensor's and Roller's tops
alternating), against the constructed models themselves (``-s gensor`` / ``-s roller`` at
``--constructive-per-task`` trials per task, default 4, Fig. 9's setting). The issue's goal: a model tuned
with 10 trials per task is already at least as fast as the Gensor-constructed model.

Every build is timed end to end by ``tiletune model bench --methods tiletune`` in its own process, one after
another in this run (so the ratios are of one machine state); tuning wall times go to ``OUT/tuning.jsonl``,
latencies to ``OUT/<model>-<setting>/results.jsonl``, the table to ``OUT/summary.md``. Resumable: a finished
tuning run is skipped; a timing made in an earlier invocation is kept unless ``--retime N`` asks for the
N-th timing (a new directory per N). Run on an idle machine.

Confirmation (``tiletune model tune --confirm K``, ``tiletune.model.tuning.confirm``; off by default): ``--confirm 3,0``
runs every setting with the top 3 confirmed and again without (``-confirm0``); with ``--records-from DIR`` both
start from the records of an earlier run, so their tuning is recalled, not measured again, and the two builds
choose among the same measured kernels.

    python benchmarks/defaults/model_start.py --out benchmarks/out/model-start
    python benchmarks/defaults/model_start.py --out /tmp/ms-quick --models tiny --per-task 3     # minutes: a check
    python benchmarks/defaults/model_start.py --out benchmarks/out/model-sweep --per-task 20 \
        --starts construct,construct/start_sweep=0 --constructive gensor   # the choice-knob sweep on models
    python benchmarks/defaults/model_start.py --out benchmarks/out/model-confirm --records-from benchmarks/out/model-start-2 \
        --starts construct --constructive gensor --confirm 3,0
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tiletune.bench.results import read_jsonl
from tiletune.model.evaluate.bench import latest
from tiletune.model.frontend.source import short_name
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.target import host_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # cli_run, dyn_bench, gzjsonl
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)
from gzjsonl import existing, plain_copy, unpack  # benchmarks/common/gzjsonl.py: records committed as .jsonl.gz



def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="mobilenetv2,resnet50")
    p.add_argument("--strategy", default="xgb", help="the search of the tuned settings")
    p.add_argument("--starts", default="roller,construct",
                   help="start values of the tuned settings, each optionally with more strategy options after "
                        "'/' (construct/start_sweep=0: the setting xgb-construct-start_sweep0)")
    p.add_argument("--per-task", type=int, default=10)
    p.add_argument("--constructive", default="gensor,roller", help="constructive strategies to compare with")
    p.add_argument("--constructive-per-task", type=int, default=4)
    p.add_argument("--confirm", default="0", help="--confirm values of 'model tune' (comma-separated; every "
                   "setting once per value; a value other than the first adds '-confirmK' to the setting's name)")
    p.add_argument("--records-from", default=None, metavar="DIR",
                   help="start from the records of an earlier run of this script (copied where this one has none): "
                   "its tuning is recalled, not measured again")
    p.add_argument("--retime", type=int, default=1, help="which timing this is (a new directory per value)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--min-repeat-ms", type=int, default=200)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    models = [m for m in a.models.split(",") if m]
    base = [(f"{a.strategy}-{s.replace('/', '-').replace('=', '')}", a.strategy, start_options(s), a.per_task)
            for s in a.starts.split(",") if s]
    base += [(c, c, [], a.constructive_per_task) for c in a.constructive.split(",") if c]
    confirms = [int(v) for v in a.confirm.split(",") if v]
    settings = [(label if i == 0 else f"{label}-confirm{k}", strategy, opts + ["--confirm", str(k)], per_task, label)
                for i, k in enumerate(confirms) for label, strategy, opts, per_task in base]
    for model in models:
        _, tasks = load_model_tasks(model, host_target())
        n = len(tasks.tasks)
        name = short_name(model)
        for label, strategy, opts, per_task, origin in settings:
            rec = out / f"{name}-{label}.jsonl"
            src = existing(Path(a.records_from) / f"{name}-{origin}.jsonl") if a.records_from else None
            if src is not None and existing(rec) is None:
                plain_copy(src, rec)
            done = [r for r in read_jsonl(out / "tuning.jsonl") if r["model"] == model and r["setting"] == label
                    and r["trials"] == n * per_task]
            if not done:
                unpack(rec)  # a compressed records file resumes as the plain one
                t0 = time.time()
                tiletune("model", "tune", model, "-s", strategy, *opts, "--trials", str(n * per_task),
                         "-r", str(rec), "-q")
                with open(out / "tuning.jsonl", "a") as f:
                    f.write(json.dumps({"model": model, "setting": label, "trials": n * per_task, "tasks": n,
                                        "wall_s": time.time() - t0}) + "\n")
        for label, *_ in settings:  # timings after all tuning, one after another
            rec = out / f"{name}-{label}.jsonl"
            tiletune("model", "bench", model, "-r", str(existing(rec) or rec), "--methods", "tiletune",
                     "--out", str(out / f"{name}-{label}" / f"timing{a.retime}"),
                     "--repeat", str(a.repeat), "--min-repeat-ms", str(a.min_repeat_ms))
    summarize(out, models, [s[0] for s in settings])
    print((out / "summary.md").read_text())
    return 0


def start_options(entry: str) -> list[str]:
    """'construct/start_sweep=0' -> ['-O', 'start=construct', '-O', 'start_sweep=0']."""
    start, *more = entry.split("/")
    out = ["-O", f"start={start}"]
    for opt in more:
        if "=" not in opt:
            raise SystemExit(f"error: --starts: {opt!r} in {entry!r} is not OPTION=VALUE")
        out += ["-O", opt]
    return out


def summarize(out: Path, models: list[str], labels: list[str]) -> None:
    tuning = read_jsonl(out / "tuning.jsonl")
    lines = ["# Whole models tuned at a small budget per task, by start (ms per inference, median of each timing)",
             "", "| model | setting | trials | tuning s | timings (ms) |", "|---|---|---:|---:|---|"]
    for model in models:
        name = short_name(model)
        for label in labels:
            t = [r for r in tuning if r["model"] == model and r["setting"] == label]
            ms = []
            for d in sorted((out / f"{name}-{label}").glob("timing*")):
                ms += [r["median_s"] * 1e3 for r in latest(read_jsonl(d / "results.jsonl"), model)
                       if not r.get("error")]
            trials, wall = (str(t[-1]["trials"]), f"{t[-1]['wall_s']:.0f}") if t else ("-", "-")
            lines.append(f"| {model} | {label} | {trials} | {wall} | {', '.join(f'{v:.2f}' for v in ms) or '-'} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
