"""Gensor's Fig. 9 on this CPU: end-to-end inference of whole models, our tuned builds against PyTorch eager,
torch.compile, ONNX Runtime, TVM's default build and MetaSchedule at an equal trial budget.

Per model (default: bert-small, resnet50, mobilenetv2, gpt2; batch 1, fp32):

1. tune with each strategy of ``--strategies`` (default: gensor and roller, the constructive settings of
   Gensor's figure, at ``--constructive-per-task`` trials per task; and the search strategy ``--search``
   (default evo, Ansor's evolutionary search) at ``--trials-per-task`` trials per task), each with
   ``tiletune model tune`` into ``OUT/<model>-<strategy>.jsonl``; its wall time goes to ``OUT/tuning.jsonl``;
2. time each tuned build (``tiletune model bench --methods tiletune``, into ``OUT/<model>-<strategy>/``);
3. time the baselines once (``OUT/<model>-baselines/``), MetaSchedule's tune_relax with the search
   strategy's budget (``--no-metaschedule`` skips it);
4. write ``OUT/summary.md`` (latency and speed-up over PyTorch eager per model and method, tuning time) and
   ``OUT/fig9.png`` (speed-up over PyTorch eager, grouped by model).

``--rounds N`` (N > 1; the CPU): after every model is tuned, each build and each baseline is timed N times, in
rounds (every model x method once per round, in its own process, the methods' order rotated from round to round,
into ``OUT/rounds/r<k>/<model>-<method>/``), and ``OUT/summary-rounds.md`` gives the median over the rounds and,
per round, each method's speed against ONNX Runtime's in the same round (median and range): on a shared machine
whose speed drifts between minutes, ratios within a round are what can be compared.

``--alternate N`` (the CPU): instead, after every model is tuned, each model's builds, ONNX Runtime and the torch
baselines (``--baselines``, default torch,torch-compile) are alive at once, each in its own process, taking N turns of
``--calls`` single inferences (``benchmarks/research/in_model/threads_vs_ort.py --alternate``), into ``OUT/alternate/<model>.md``
and ``OUT/summary-alternate.md``: each side's speed against ONNX Runtime per turn (the median over the turns) and by
the minima. On a shared host whose speed drifts by tens of percent between minutes, this resolves differences of a
few percent that rounds of one process per method do not. MetaSchedule is timed only without ``--alternate``.

Everything is resumable per model x method: a tuning run that finished is listed in tuning.jsonl and
skipped; an interrupted one resumes from its records; a timed method is kept in its results.jsonl. Run it on
an idle machine (a PyTorch timing swung 8.5 -> 140 ms under load here):

    python benchmarks/papers/model_fig9.py --out benchmarks/out/fig9
    python benchmarks/papers/model_fig9.py --out /tmp/fig9-quick --quick        # tiny model, a few trials: a check

On an NVIDIA GPU (``--target cuda[:sm_XX]``, ``--dtype float32|float16|bfloat16``), where the paper ran it: the
constructive settings are the constructions alone (``model bench --construct gensor|roller``: every task's top
construction, no measurement, seconds per task), the search strategy tunes ``--trials-per-task`` (default 20 on a
GPU) on this machine's GPU, and the baselines are PyTorch eager (cuBLAS/cuDNN), torch.compile (inductor/Triton)
and TVM's default build (dlight on every kernel), all in the model's dtype:

    python benchmarks/papers/model_fig9.py --out fig9-h100-fp16 --target cuda --dtype float16

``--cuda-graph`` (GPU): each construction is also timed with ``model bench --cuda-graph`` (into
``OUT/<model>-<strategy>-graphs/``), and torch.compile in its ``reduce-overhead`` mode (``OUT/<model>-baselines-graphs/``).

``--libs DIR --stage ...`` (GPU; ``benchmarks/device/run_gpu_claims.sh``): the same figure with the builds apart from
the timings, so that a GPU machine's cores build every library at once while its GPU runs other steps, and the
timings come after, on an idle machine:

- ``--stage build-cmds`` prints one shell command per library (``DIR/<model>-<variant>.so``, variants: each
  construction, with ``-graphs`` under ``--cuda-graph``, ``evo`` where ``OUT/<model>-evo.jsonl`` holds records, and
  ``tvm-default``), for ``xargs -P``; ``model build --no-check``: the output check is the timing's;
- ``--stage default-lib`` builds and exports TVM's default build of one model (``--models M``), as
  ``model bench --methods tvm-default`` builds it (dlight on every kernel);
- ``--stage tune`` runs the search (``-s SEARCH``) for ``--tune-seconds`` per model (or ``--trials-per-task``),
  records into ``OUT/<model>-evo.jsonl``, its trials and wall time into ``OUT/tuning.jsonl`` (trials per second);
- ``--stage time`` times, per model in one child process, every library of DIR after the other (Relax's VM on
  the GPU, inputs on the device, each call waiting for it: what ``model bench`` does with ours), each checked
  against the original in float32 (``check_error``, allowed ``RTOL`` of the dtype), into the directories above
  (TVM's default build into ``OUT/<model>-baselines/``); ``--dry-run``: no GPU, each library's model and its
  float32 reference computed on the CPU and the library's presence checked;
- ``--stage summary`` writes ``OUT/summary.md`` from what is there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from tiletune.bench.plots import agg_pyplot
from tiletune.bench.results import read_jsonl
from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import time_callable
from tiletune.model.build import RTOL, compare
from tiletune.model.evaluate.baselines import LABELS, _vm_method
from tiletune.model.evaluate.bench import latest
from tiletune.model.frontend.source import load
from tiletune.model.passes.pipeline import prepare
from tiletune.model.frontend.source import short_name
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.target import is_cuda, parse_target
from tiletune.tvmscript import fast_tvmscript_parsing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # cli_run, dyn_bench, gzjsonl
from cli_run import tiletune  # noqa: E402  (benchmarks/common/cli_run.py)
from gzjsonl import existing, unpack  # benchmarks/common/gzjsonl.py: records committed as .jsonl.gz

CONSTRUCTIVE = ("gensor", "roller")


def tuned_before(out: Path, model: str, strategy: str, trials: int) -> dict | None:
    for r in read_jsonl(out / "tuning.jsonl"):
        if r["model"] == model and r["strategy"] == strategy and r["trials"] == trials:
            return r
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="bert-small,resnet50,mobilenetv2,gpt2")
    p.add_argument("--strategies", default="gensor,roller,evo", help="tiletune strategies to tune with")
    p.add_argument("--search", default="evo", help="the search strategy whose budget MetaSchedule gets")
    p.add_argument("--target", default=None, help="'host' (default) or 'cuda[:sm_XX]' (this machine's GPU)")
    p.add_argument("--dtype", default="float32", help="the models' compute dtype on a CUDA target")
    p.add_argument("--trials-per-task", type=int, default=None, help="the search's budget (default 50; 20 on a GPU)")
    p.add_argument("--constructive-per-task", type=int, default=4)
    p.add_argument("--no-metaschedule", action="store_true")
    p.add_argument("--baselines", default=None,
                   help="the baselines to time (default: torch,torch-compile,onnxruntime,tvm-default on a CPU, "
                   "torch,torch-compile,tvm-default on a GPU; MetaSchedule unless --no-metaschedule)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--min-repeat-ms", type=int, default=200)
    p.add_argument("--quick", action="store_true", help="the tiny model, 2 trials per task, short timings")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every build and baseline this many times in rotating rounds after tuning (CPU; see above)")
    p.add_argument("--alternate", type=int, default=0, metavar="TURNS",
                   help="after tuning, time every build with ONNX Runtime and the torch baselines alive at once, "
                   "taking TURNS turns each (CPU; see above)")
    p.add_argument("--calls", type=int, default=10, help="with --alternate: single inferences per turn")
    p.add_argument("--cuda-graph", action="store_true",
                   help="GPU: each construction also with CUDA graphs, torch.compile also in reduce-overhead mode")
    p.add_argument("--libs", default=None, metavar="DIR", help="GPU: where --stage keeps the libraries")
    p.add_argument("--stage", default="all", choices=STAGES, help="GPU with --libs: one stage of the prepared run "
                   "(see above); 'all': tune, build and time each model in turn")
    p.add_argument("--tune-seconds", type=float, default=None, help="--stage tune: the search's wall time per model")
    p.add_argument("--dry-run", action="store_true",
                   help="--stage time without a GPU: the models' references and the libraries' presence only")
    a = p.parse_args()
    target = parse_target(a.target)
    gpu = is_cuda(target)
    if a.trials_per_task is None:
        a.trials_per_task = 20 if gpu else 50
    if a.stage != "all":
        if not gpu or not a.libs:
            raise SystemExit("--stage is for a CUDA target with --libs DIR")
        return staged(a, target)
    if a.quick:
        a.models, a.trials_per_task, a.constructive_per_task, a.repeat, a.min_repeat_ms = "tiny", 2, 1, 3, 10
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    timing = ["--repeat", str(a.repeat), "--min-repeat-ms", str(a.min_repeat_ms)]
    where = ["--target", f"cuda:{target['arch']}", "--dtype", a.dtype] if gpu else []
    strategies = [s for s in a.strategies.split(",") if s]
    for model in [m for m in a.models.split(",") if m]:
        _, tasks = load_model_tasks(model, target, dtype=a.dtype)
        n = len(tasks.tasks)
        name = short_name(model)
        budgets = {s: n * (a.constructive_per_task if s in CONSTRUCTIVE else a.trials_per_task) for s in strategies}
        for s in strategies:
            if gpu and s in CONSTRUCTIVE:  # the constructions alone: no measurement, no records
                for graphs in ([], ["--cuda-graph"]) if a.cuda_graph else ([],):
                    tiletune("model", "bench", model, *where, "--construct", s, "--methods", "tiletune", *graphs,
                             "--out", str(out / f"{name}-{s}{'-graphs' if graphs else ''}"), *timing)
                continue
            rec = out / f"{name}-{s}.jsonl"
            if tuned_before(out, model, s, budgets[s]) is None:
                unpack(rec)  # a compressed records file resumes as the plain one
                t0 = time.time()
                tiletune("model", "tune", model, *where, "-s", s, "--trials", str(budgets[s]), "-r", str(rec), "-q")
                with open(out / "tuning.jsonl", "a") as f:
                    f.write(json.dumps({"model": model, "strategy": s, "trials": budgets[s], "tasks": n,
                                        "wall_s": time.time() - t0}) + "\n")
            if a.rounds <= 1 and not a.alternate:
                tiletune("model", "bench", model, *where, "-r", str(existing(rec) or rec), "--methods", "tiletune",
                         "--out", str(out / f"{name}-{s}"), *timing)
        if a.rounds > 1 or a.alternate:
            continue
        base = a.baselines or ("torch,torch-compile,tvm-default" if gpu else "torch,torch-compile,onnxruntime,tvm-default")
        if gpu:
            methods, ms = base, []
        else:
            methods = base + ("" if a.no_metaschedule else ",metaschedule")
            ms = ["--metaschedule-trials", str(n * a.trials_per_task)] if not a.no_metaschedule else []
        tiletune("model", "bench", model, *where, "--methods", methods, "--out", str(out / f"{name}-baselines"),
                 *ms, *timing)
        if gpu and a.cuda_graph and "torch-compile" in methods.split(","):
            tiletune("model", "bench", model, *where, "--methods", "torch-compile", "--cuda-graph",
                     "--out", str(out / f"{name}-baselines-graphs"), *timing)
        summarize(out, [m for m in a.models.split(",") if m],
                  [v for s in strategies for v in ([s, f"{s}-graphs"] if a.cuda_graph and s in CONSTRUCTIVE else [s])],
                  f"{a.dtype} on {target['arch']}" if gpu else "fp32")
    if a.alternate:
        if gpu:
            raise SystemExit("--alternate is for the CPU")
        baselines = [b for b in (a.baselines or "torch,torch-compile").split(",") if b and b != "onnxruntime"]
        models = [m for m in a.models.split(",") if m]
        alternating(out, models, strategies, baselines, a.alternate, a.calls, int(target.get("num-cores") or 0))
        return 0
    if a.rounds > 1:
        if gpu:
            raise SystemExit("--rounds is for the CPU")
        baselines = (a.baselines or "torch,torch-compile,onnxruntime").split(",")
        models = [m for m in a.models.split(",") if m]
        in_rounds(out, models, strategies, baselines, a.rounds, timing)
        summarize_rounds(out, models, strategies + baselines, a.rounds)
    return 0


STAGES = ("all", "build-cmds", "default-lib", "tune", "time", "time-one", "summary")


def variants(a, out: Path, name: str) -> list[str]:
    """The libraries of the prepared run for one model: each construction (and with CUDA graphs), the search's
    build where its records exist, TVM's default build."""
    strategies = [s for s in a.strategies.split(",") if s]
    got = []
    for s in strategies:
        if s in CONSTRUCTIVE:
            got += [s] + ([f"{s}-graphs"] if a.cuda_graph else [])
        elif existing(out / f"{name}-{s}.jsonl"):
            got.append(s)
    return got + ["tvm-default"]


def staged(a, target: dict) -> int:
    """One stage of the prepared GPU run (module docstring): build commands, TVM's default library, the search,
    the timings of the libraries, or the summary."""
    out, libs = Path(a.out), Path(a.libs)
    out.mkdir(parents=True, exist_ok=True)
    libs.mkdir(parents=True, exist_ok=True)
    models = [m for m in a.models.split(",") if m]
    where = ["--target", f"cuda:{target['arch']}", "--dtype", a.dtype]
    me = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--libs", str(libs), *where]
    if a.stage == "build-cmds":
        for model in models:
            name = short_name(model)
            for v in variants(a, out, name):
                lib = libs / f"{name}-{v}.so"
                if v == "tvm-default":
                    cmd = [*me, "--stage", "default-lib", "--models", model]
                else:
                    s = v.removesuffix("-graphs")
                    how = ["--construct", s] if s in CONSTRUCTIVE else ["-r", str(existing(out / f"{name}-{s}.jsonl"))]
                    cmd = [sys.executable, "-m", "tiletune.cli", "model", "build", model, *where, *how,
                           *(["--cuda-graph"] if v.endswith("-graphs") else []), "--no-check", "-o", str(lib)]
                print(f"{lib}\t{' '.join(cmd)}")  # the runner logs each library's build time into DIR/builds.jsonl
        return 0
    if a.stage == "default-lib":
        for model in models:
            default_library(model, target, a.dtype, libs / f"{short_name(model)}-tvm-default.so")
        return 0
    if a.stage == "tune":
        budget = ["--seconds", str(a.tune_seconds)] if a.tune_seconds else None
        failed = 0
        for model in models:
            name = short_name(model)
            rec = out / f"{name}-{a.search}.jsonl"
            # the tasks are counted for a budget in trials only (a wall-time budget spares the extraction)
            n = None if budget else len(load_model_tasks(model, target, dtype=a.dtype)[1].tasks)
            t0 = time.time()
            try:
                tiletune("model", "tune", model, *where, "-s", a.search,
                         *(budget or ["--trials", str(n * a.trials_per_task)]), "-r", str(rec), "-q")
            except subprocess.CalledProcessError as e:  # this model's search failed: the next one is tuned
                print(f"{model}: model tune exited with {e.returncode}", flush=True)
                failed += 1
                continue
            trials = sum(1 for _ in read_jsonl(rec))
            wall = time.time() - t0
            with open(out / "tuning.jsonl", "a") as f:
                f.write(json.dumps({"model": model, "strategy": a.search, "trials": trials, "tasks": n, "wall_s": wall,
                                    "trials_per_s": trials / wall if wall > 0 else None}) + "\n")
            print(f"{model}: {trials} trials in {wall:.0f} s ({trials / wall:.1f}/s)", flush=True)
        return 1 if failed else 0
    if a.stage == "time":
        for model in models:
            cmd = [*me, "--stage", "time-one", "--models", model, "--repeat", str(a.repeat),
                   "--min-repeat-ms", str(a.min_repeat_ms), "--strategies", a.strategies,
                   *(["--cuda-graph"] if a.cuda_graph else []), *(["--dry-run"] if a.dry_run else [])]
            proc = subprocess.run(cmd)  # each model in its own process: its libraries, one after another
            if proc.returncode:
                print(f"{model}: timing child exited with {proc.returncode}", flush=True)
        return 0
    if a.stage == "time-one":
        for model in models:
            time_libraries(a, out, libs, model, target)
        return 0
    strategies = [s for s in a.strategies.split(",") if s]
    summarize(out, models, [v for s in strategies for v in ([s, f"{s}-graphs"] if s in CONSTRUCTIVE else [s])],
              f"{a.dtype} on {target['arch']}")
    return 0


def default_library(model: str, target: dict, dtype: str, path: Path) -> None:
    """TVM's default build of ``model`` (what ``model bench --methods tvm-default`` times: ``tvm.compile`` of the
    imported module in ``dtype``, dlight's rules on every kernel on a GPU), exported to ``path``."""
    import tvm

    fast_tvmscript_parsing()  # dlight's Matmul rule imports the tensor intrinsics: the same answer, sooner
    t0 = time.time()
    ex = tvm.compile(prepare(load(model), dtype).mod, target=tvm.target.Target(target))
    tmp = path.with_name(path.name + ".part.so")
    ex.export_library(str(tmp))
    os.replace(tmp, path)
    print(f"wrote {path} ({time.time() - t0:.0f} s)", flush=True)


def time_libraries(a, out: Path, libs: Path, model: str, target: dict) -> None:
    """Every library of ``model`` in ``libs``, one after another in this process: loaded into Relax's VM on the
    GPU, run once on the seed-0 inputs and compared with the original in float32 (``check_error``), then timed by
    ``time_callable`` (inputs on the device, each call waiting for it), as ``model bench`` times ours; a row per
    library appended to ``OUT/<model>-<variant>/results.jsonl`` (TVM's default build: ``OUT/<model>-baselines/``)."""
    import tvm

    name = short_name(model)
    source = load(model)
    inputs = source.random_inputs(0)
    want = source.reference(inputs)
    settings = MeasureSettings(repeat=a.repeat, min_repeat_ms=a.min_repeat_ms)
    built = {Path(r["lib"]).name: r for r in read_jsonl(libs / "builds.jsonl")}  # the runner's build times
    for v in variants(a, out, name):
        lib = libs / f"{name}-{v}.so"
        method = "tvm-default" if v == "tvm-default" else "tiletune"
        row = {"model": model, "method": method, "label": LABELS[method], "dtype": a.dtype, "variant": v,
               "library": lib.name, "cuda_graph": v.endswith("-graphs")}
        d = out / (f"{name}-baselines" if v == "tvm-default" else f"{name}-{v}")
        if a.dry_run and not lib.exists():
            print(f"{model} {v}: {lib} is missing", flush=True)
            continue
        if not lib.exists():
            row.update(error="missing", message=f"{lib} was not built")
        elif a.dry_run:
            print(f"{model} {v}: {lib} ({lib.stat().st_size >> 20} MiB) would be timed; reference outputs "
                  f"{[tuple(w.shape) for w in want]}", flush=True)
            continue
        else:
            try:
                meta = Path(f"{lib}.json")  # model build's description of the library
                kernels = json.loads(meta.read_text()).get("kernels", {}) if meta.exists() else {}
                t0 = time.perf_counter()
                # the loaded library as the executable's ``.mod``, as ``_vm_method`` reads a fresh build
                prep, call, outputs, dev = _vm_method(SimpleNamespace(mod=tvm.runtime.load_module(str(lib))), target)
                args = prep(inputs)
                first = call(args)
                row["load_s"] = time.perf_counter() - t0
                row["check_error"] = compare(outputs(first), want)
                row["within_tolerance"] = row["check_error"] <= RTOL[a.dtype]
                row["device"] = str(dev.device_name)
                row["load_before"] = os.getloadavg()[0]
                samples = time_callable(lambda: call(args), settings)
                row.update(samples=[float(x) for x in samples], median_s=float(np.median(samples)),
                           prepare_s=float(built.get(lib.name, {}).get("wall_s", 0.0)))
                if v != "tvm-default":
                    row["constructed"] = sum(1 for k in kernels.values() if "constructed" in str(k))
                    row["construct"] = v.removesuffix("-graphs") if v.removesuffix("-graphs") in CONSTRUCTIVE else None
                    row["kernels"] = len(kernels)
                del prep, call, outputs, args, first
            except Exception as e:  # noqa: BLE001  (a library's failure is its row; the next one is timed)
                row.update(error="error", message=f"{type(e).__name__}: {str(e).strip()[-300:]}")
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "results.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{model} {v}: " + (f"{row['median_s'] * 1e3:.3f} ms, output error {row['check_error']:.2g}"
                                  if "median_s" in row else f"{row['error']}: {row.get('message', '')}"), flush=True)


def in_rounds(out: Path, models: list[str], strategies: list[str], baselines: list[str], rounds: int,
              timing: list[str]) -> None:
    """Every model x method timed once per round, each in its own process, the order of the methods rotated."""
    methods = strategies + baselines
    for r in range(1, rounds + 1):
        order = methods[(r - 1) % len(methods):] + methods[:(r - 1) % len(methods)]
        for model in models:
            name = short_name(model)
            for m in order:
                d = out / "rounds" / f"r{r}" / f"{name}-{m}"
                if (d / "results.jsonl").exists():
                    continue
                how = (["-r", str(existing(out / f"{name}-{m}.jsonl") or out / f"{name}-{m}.jsonl"), "--methods",
                        "tiletune"] if m in strategies else ["--methods", m])
                tiletune("model", "bench", model, *how, "--out", str(d), *timing)


def alternating(out: Path, models: list[str], strategies: list[str], baselines: list[str], turns: int, calls: int,
                threads: int) -> None:
    """Per model, every tuned build, ONNX Runtime and ``baselines`` (torch, torch-compile) alive at once, each in its
    own process, taking ``turns`` turns of ``calls`` single inferences (``benchmarks/research/in_model/threads_vs_ort.py
    --alternate``: a drift of a shared host's speed falls on all sides alike); its table, with each side's speed
    against ONNX Runtime per turn, into ``OUT/alternate/<model>.md`` (a model with its table is skipped), and all
    of them into ``OUT/summary-alternate.md``."""
    script = Path(__file__).resolve().parents[1] / "research" / "in_model" / "threads_vs_ort.py"
    (out / "alternate").mkdir(exist_ok=True)
    parts = ["# Whole-model latency (batch 1, fp32), every side alive at once, taking turns", ""]
    tuning = read_jsonl(out / "tuning.jsonl")
    for model in models:
        name = short_name(model)
        path = out / "alternate" / f"{name}.md"
        if not path.exists():
            recs = []
            for s in strategies:
                rec = out / f"{name}-{s}.jsonl"
                recs += ["-r", str(existing(rec) or rec)]
            cmd = [sys.executable, str(script), "--model", model, *recs, "--alternate", "--rounds", str(turns),
                   "--calls", str(calls), "--threads", str(threads or os.cpu_count() or 1)]
            if baselines:
                cmd += ["--baselines", ",".join(baselines)]
            print(" ".join(cmd), flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{model}: threads_vs_ort.py failed: {done.stderr.strip()[-300:]}")
            path.write_text(done.stdout)
        tuned = [f"{t['strategy']}: {t['trials']} trials in {t['wall_s'] / 60:.1f} min (`model tune`, its confirmation "
                 "included)" for t in tuning if t["model"] == model and t["strategy"] in strategies]
        parts += [f"## {model}", "", "Tuning: " + "; ".join(tuned) + ".", "", path.read_text().strip(), ""]
    (out / "summary-alternate.md").write_text("\n".join(parts) + "\n")
    print("\n".join(parts))


def summarize_rounds(out: Path, models: list[str], methods: list[str], rounds: int) -> None:
    """``OUT/summary-rounds.md``: per model and method, the median over the rounds, and the speed against ONNX
    Runtime in each round (median, min..max)."""
    lines = ["# Whole-model latency (batch 1, fp32), rounds", "",
             f"{rounds} rounds; each method's median ms per round, then the median over the rounds; speed vs ONNX "
             "Runtime: ORT's ms / the method's ms in the same round.", "",
             "| model | method | median ms | per round | speed vs ONNX Runtime (median, range) |",
             "|---|---|---:|---|---|"]
    for model in models:
        name = short_name(model)
        ms = {}
        for m in methods:
            per = []
            for r in range(1, rounds + 1):
                got = [x for x in read_jsonl(out / "rounds" / f"r{r}" / f"{name}-{m}" / "results.jsonl")
                       if x.get("model") == model and not x.get("error")]
                per.append(got[-1]["median_s"] * 1e3 if got else float("nan"))
            ms[m] = per
        ort = ms.get("onnxruntime")
        for m, per in ms.items():
            ok = [v for v in per if v == v]
            if not ok:
                lines.append(f"| {model} | {m} | - | - | - |")
                continue
            ratios = [o / v for o, v in zip(ort or [], per) if o == o and v == v]
            vs = (f"{float(np.median(ratios)):.2f}x ({min(ratios):.2f}..{max(ratios):.2f})" if ratios and m != "onnxruntime"
                  else "")
            lines.append(f"| {model} | {m} | {float(np.median(ok)):.2f} | {', '.join(f'{v:.2f}' for v in per)} | {vs} |")
    (out / "summary-rounds.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summarize(out: Path, models: list[str], strategies: list[str], what: str = "fp32") -> None:
    table: dict[str, dict[str, float]] = {}
    lines = [f"# Whole-model latency (batch 1, {what}), speed-up over PyTorch eager", "",
             "Output error: the largest difference from the original model in float32, relative to the output's "
             "scale (the allowed error per dtype: docs/decisions/model-dtype-tolerance.md).", "",
             "| model | method | median ms | speed-up vs torch eager | output error | tuning |",
             "|---|---|---:|---:|---:|---|"]
    tuning = read_jsonl(out / "tuning.jsonl")
    for model in models:
        name = short_name(model)
        rows = {}
        for r in latest(read_jsonl(out / f"{name}-baselines" / "results.jsonl"), model):
            rows[r["label"]] = r
        for r in latest(read_jsonl(out / f"{name}-baselines-graphs" / "results.jsonl"), model):
            rows[f"{r['label']}, CUDA graphs (reduce-overhead)"] = r
        for s in strategies:
            for r in latest(read_jsonl(out / f"{name}-{s}" / "results.jsonl"), model):
                t = [x for x in tuning if x["model"] == model and x["strategy"] == s]
                tune = ""
                if t and t[-1]["trials"]:
                    tune = f"{t[-1]['trials']} trials, {t[-1]['wall_s']:.0f} s"
                    if t[-1].get("trials_per_s"):  # the prepared GPU run's search (--stage tune)
                        tune += f" ({t[-1]['trials_per_s']:.1f} trials/s)"
                elif r.get("constructed"):
                    tune = f"constructed, {r.get('prepare_s', 0):.0f} s to build"
                r = dict(r, label=f"tiletune {s}", tuning=tune)
                rows[r["label"]] = r
        eager = rows.get("PyTorch eager")
        base = eager["median_s"] if eager and not eager.get("error") else None
        for label, r in rows.items():
            if r.get("error"):
                lines.append(f"| {model} | {label} | - | - | - | {r['error']}: {r.get('message', '')[:80]} |")
                continue
            sp = base / r["median_s"] if base else float("nan")
            table.setdefault(model, {})[label] = sp
            tune = r.get("tuning") or (f"{r.get('trials')} trials, {r.get('prepare_s', 0):.0f} s"
                                       if r["method"] == "metaschedule" else "")
            err = f"{r['check_error']:.1e}" if r.get("check_error") is not None else "-"
            lines.append(f"| {model} | {label} | {r['median_s'] * 1e3:.2f} | {sp:.2f}x | {err} | {tune} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    if not table:
        return
    try:
        plt = agg_pyplot()
    except ImportError:  # matplotlib is optional (a lent GPU machine has none): summary.md is the result
        return
    labels = sorted({lab for v in table.values() for lab in v})
    fig, ax = plt.subplots(figsize=(1.5 + 1.6 * len(table), 4))
    w = 0.8 / max(1, len(labels))
    for j, lab in enumerate(labels):
        ys = [table[m].get(lab, np.nan) for m in table]
        ax.bar(np.arange(len(table)) + j * w, ys, w, label=lab)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(table)) + w * (len(labels) - 1) / 2, list(table))
    ax.set_ylabel("speed-up over PyTorch eager")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig9.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
