"""Which kernels run a dynamic model at a shape it was not tuned at: the candidates measured on one
model, against a build tuned at that very shape.

The model (default ``benchmarks/common/dyn_models.py:bert_mini``) is tuned at ``--tuned`` shapes into one records file
and, as the reference, at each ``--test`` shape alone (same trials per task) into another. Per test shape, the
latency of:

- ``nearest``: the library built at the tuned shapes with rule "nearest" (``tiletune.model.dynamic.shape_rule``: the
  symbolic module, its tunable kernels scheduled with the nearest tuned shape's configurations, predicated at
  the edges);
- ``default``: the same library with rule "default" (the symbolic module, every kernel default-scheduled);
- ``gensor``: a construction at first use: the static module at that shape, every task with Gensor's top
  construction (no measurement), compiled; its construction + compile time is ``prepare_s``;
- ``tuned``: the reference, a build tuned at that shape.

Libraries are built in this process and timed in a child process each round (``--rounds``), the methods
interleaved; results (median per round) are appended to ``OUT/results.jsonl`` and a re-run skips what is there.

    python benchmarks/defaults/shape_rule.py --out benchmarks/out/shape-rule
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tiletune.bench.results import read_jsonl
from tiletune.construct import constructions
from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import time_callable
from tiletune.model.build import Chosen, compile_module, export, scheduled_module
from tiletune.model.frontend.dims import bind
from tiletune.model.dynamic.first_use import path_for, portable_spec
from tiletune.model.dynamic.shapes import (best_configs_shaped, check_bindings, dispatch_module, parse_shapes,
                                   shape_tasks)
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import extract, fuse
from tiletune.schedules import make_space
from tiletune.target import host_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # cli_run, dyn_bench, gzjsonl
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)
from dyn_bench import latencies, steps  # benchmarks/common/dyn_bench.py

HERE = Path(__file__).resolve().parent
MODEL = f"{HERE.parent / 'common' / 'dyn_models.py'}:bert_mini"


def shapes_arg(name: str, values: list[int]) -> str:
    return f"{name}={','.join(map(str, values))}"


def build_rule(spec: str, layout: str, tuned: list[int], dim: str, records: str, rule: str, path: Path) -> dict:
    source = load(spec)
    target = host_target()
    bindings = parse_shapes([shapes_arg(dim, tuned)], source)
    dyn = shape_tasks(source, target, layout, bindings)
    chosen = best_configs_shaped(dyn, records)
    check_at = [b for b in check_bindings(source, bindings) if b not in bindings]
    t0 = time.perf_counter()
    mod, how = dispatch_module(dyn, chosen, check_at, rule)
    ex = compile_module(mod, target)
    export(ex, str(path), {"model": spec, "target": target, "layout": layout,
                           "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype}
                                      for i in source.inputs],
                           "dims": {n: [d.lo, d.hi] for n, d in source.dims.items()}, "kernels": how,
                           "shapes": [st.label for st in dyn.shapes], "source": portable_spec(spec),
                           "first_use": True})
    return {"build_s": time.perf_counter() - t0, "how": how}


def build_gensor(spec: str, layout: str, binding: dict, path: Path) -> dict:
    """The static module at ``binding``, each task with Gensor's top construction: the time from the import's
    result to a compiled library (what a construction at first use costs)."""
    source = load(spec)
    target = host_target()
    dyn = shape_tasks(source, target, layout, [binding])  # the import, once (not part of first use)
    t0 = time.perf_counter()
    tasks = extract(fuse(bind(dyn.symbolic, binding), target), target, layout)
    chosen = {}
    for k in tasks.tasks:
        space = make_space(k.workload, None, target)
        cfg = constructions("gensor", space, workload=k.workload, target=target, k=1)[0]
        chosen[k.hash] = Chosen(k, cfg, space, 0.0, 0.0)
    t_construct = time.perf_counter() - t0
    ex = compile_module(scheduled_module(tasks, chosen)[0], target)
    prepare = time.perf_counter() - t0
    export(ex, str(path), {"model": spec, "target": target, "layout": layout,
                           "inputs": [{"name": i.name, "shape": list(i.resolve(binding)), "dtype": i.dtype}
                                      for i in source.inputs]})
    return {"prepare_s": prepare, "construct_s": t_construct, "tasks": len(tasks.tasks)}


def first_use(lib: Path, binding: dict) -> dict:
    """What ``load_model`` pays the first time it meets ``binding``: the construction's own process
    (``tiletune.model.dynamic.first_use``), start to end."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tiletune.model.dynamic.first_use", str(lib),
                    ",".join(f"{k}={v}" for k, v in binding.items())], check=True)
    wall = time.perf_counter() - t0
    desc = json.loads(Path(path_for(str(lib), binding) + ".json").read_text())
    return {"process_s": wall, "import_s": desc["import_s"], "construct_s": desc["construct_s"]}


def child(job: str) -> int:
    """Time every (method, library, shape) of the job in this process, interleaved; print JSON lines."""
    from tiletune.api import load_model

    j = json.loads(Path(job).read_text())
    source = load(j["model"])
    settings = MeasureSettings(repeat=j["repeat"], min_repeat_ms=j["min_repeat_ms"])
    models = {}
    for item in j["items"]:
        if item["lib"] not in models:
            models[item["lib"]] = load_model(item["lib"])
    out = []
    for item in j["items"]:
        m = models[item["lib"]]
        x = source.random_inputs(0, item["binding"])
        ref = source.reference(x)[0]
        got = m(*x)[0]
        err = float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))
        s = time_callable(lambda: m(*x), settings)
        out.append(dict(item, median_s=float(np.median(s)), error=err, load=os.getloadavg()[0]))
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--dim", default="seq")
    p.add_argument("--tuned", default="32,64,128")
    p.add_argument("--test", default="24,48,96,192")
    p.add_argument("--trials-per-task", type=int, default=24)
    p.add_argument("--layout", default="NHWC")
    p.add_argument("--work", default=None,
                   help="where the libraries go (default: /tmp/tiletune-shape-rule; not OUT: they are large)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=100)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a.child)
    out = Path(a.out)
    lib = Path(a.work or "/tmp/tiletune-shape-rule") / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    tuned = [int(v) for v in a.tuned.split(",")]
    test = [int(v) for v in a.test.split(",")]
    source = load(a.model)
    log = out / "steps.jsonl"
    step = steps(log)

    target = host_target()

    def ntasks(vals):
        dyn = shape_tasks(source, target, a.layout, parse_shapes([shapes_arg(a.dim, vals)], source))
        return len(dyn.merged.tasks)

    def tune(vals, rec):
        n = ntasks(vals)
        tiletune("model", "tune", a.model, "--shapes", shapes_arg(a.dim, vals), "--trials",
                 str(n * a.trials_per_task), "-r", str(rec), "-q", "--no-shape-transfer")
        return {"tasks": n, "trials": n * a.trials_per_task}

    step(f"tune {a.tuned}", lambda: tune(tuned, out / "tuned.jsonl"))
    for v in test:
        step(f"tune ref {v}", lambda v=v: tune([v], out / "ref.jsonl"))
    for rule in ("nearest", "default"):
        step(f"build {rule}", lambda rule=rule: build_rule(a.model, a.layout, tuned, a.dim, str(out / "tuned.jsonl"),
                                                           rule, lib / f"{rule}.so"))
    for v in test:
        step(f"build ref {v}", lambda v=v: tiletune("model", "build", a.model, "--shapes", shapes_arg(a.dim, [v]),
                                                    "-r", str(out / "ref.jsonl"), "-o", str(lib / f"ref{v}.so"),
                                                    "--no-check"))
        step(f"build gensor {v}", lambda v=v: build_gensor(a.model, a.layout, {a.dim: v}, lib / f"gensor{v}.so"))
        step(f"first use {v}", lambda v=v: first_use(lib / "nearest.so", {a.dim: v}))
    results = out / "results.jsonl"
    rounds_done = len({r["round"] for r in read_jsonl(results)})
    for r in range(rounds_done, a.rounds):
        items = []
        for v in test:
            b = {a.dim: v}
            for method, path in (("nearest", lib / "nearest.so"), ("default", lib / "default.so"),
                                 ("gensor", lib / f"gensor{v}.so"), ("tuned", lib / f"ref{v}.so")):
                items.append({"method": method, "lib": str(path), "binding": b, "round": r})
        job = lib / "job.json"
        job.write_text(json.dumps({"model": a.model, "items": items, "repeat": a.repeat,
                                   "min_repeat_ms": a.min_repeat_ms}))
        env = dict(os.environ, TVM_NUM_THREADS=str(os.cpu_count()))
        proc = subprocess.run([sys.executable, __file__, "--out", str(out), "--child", str(job)], env=env,
                              capture_output=True, text=True, check=True)
        line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
        with open(results, "a") as f:
            for row in json.loads(line[len("RESULT "):]):
                f.write(json.dumps(row) + "\n")
    summarize(out, test, a.dim)
    return 0


def summarize(out: Path, test: list[int], dim: str) -> None:
    rows = read_jsonl(out / "results.jsonl")
    steps = {r["step"]: r for r in read_jsonl(out / "steps.jsonl")}
    med = latencies(rows, dim)
    methods = ("tuned", "nearest", "gensor", "default")
    lines = [f"| {dim} | " + " | ".join(methods) + " | nearest / tuned | gensor / tuned | default / tuned | "
             "first use s (process) |", "|---:|" + "---:|" * (len(methods) + 4)]
    ratios = {m: [] for m in methods[1:]}
    for v in test:
        ms = {m: float(np.median(med[(m, v)])) * 1e3 for m in methods if (m, v) in med}
        if "tuned" not in ms:
            continue
        rs = {m: ms["tuned"] / ms[m] for m in methods[1:] if m in ms}
        for m, x in rs.items():
            ratios[m].append(x)
        g = steps.get(f"first use {v}", {})
        lines.append(f"| {v} | " + " | ".join(f"{ms.get(m, float('nan')):.2f}" for m in methods) + " | "
                     + " | ".join(f"{rs.get(m, float('nan')):.2f}" for m in methods[1:])
                     + f" | {g.get('process_s', float('nan')):.1f} |")
    lines.append("| mean | | | | | " + " | ".join(f"{np.mean(ratios[m]):.2f}" if ratios[m] else "-"
                                             for m in methods[1:]) + " | |")
    n_rounds = len({r["round"] for r in rows})
    errs = max((r["error"] for r in rows), default=float("nan"))
    text = (f"Latency in ms (median of {n_rounds} rounds, each the median of its samples); ratio = tuned latency / "
            f"method latency (1 = as fast as a build tuned at that shape). Largest output error against torch: "
            f"{errs:.1e}.\n\n" + "\n".join(lines) + "\n")
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
