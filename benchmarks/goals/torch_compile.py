"""torch.compile(model, backend="tiletune") against the other ways to run the same model on this CPU.

    python benchmarks/goals/torch_compile.py --out benchmarks/out/torch-compile \\
        [--models bert-small,gpt2,mobilenetv2,resnet50] [--records benchmarks/out/fig9/{model}-xgb.jsonl.gz] \\
        [--rounds 3] [--engines ours,construct,library,inductor,onnxruntime,eager] [--background SECONDS]

For each model (``tiletune.model.frontend.zoo``), every engine runs in its own process, the engines taking turns
(round 1: each engine once, round 2: each again, ...); each process builds the model, runs it once (its first
output, checked against eager PyTorch in float32), then times calls by the project's one timing rule
(``tiletune.measure.timing.time_callable``: 10 ms of warm calls, then samples; the median is reported):

- ``ours``: ``torch.compile(model, backend="tiletune")`` with a tuning database holding the model's records of
  ``tiletune model tune`` (``--records``, imported with ``Database.absorb`` into the model's own
  TILETUNE_CACHE_DIR);
- ``construct``: the same with an empty database (Gensor's constructions, no measurement);
- ``library``: ``tiletune model build MODEL -r RECORDS`` once (before the rounds), loaded with
  ``tiletune.api.load_model`` and called on numpy arrays;
- ``inductor``: ``torch.compile(model)``; ``onnxruntime``: the model exported to ONNX (opset 17), ONNX Runtime's
  CPU session (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset in that process); ``eager``: the module under
  ``torch.no_grad()``.

First-compile and warm-start times: round 1 of ``ours`` and ``construct`` starts from an empty cache of compiled
graphs (the first compile); later rounds find their graphs in the cache (a warm start). Each process reports the
seconds from its start (before ``import torch``) to the first output, and from ``torch.compile`` to it.

``--background S``: bert-small (the first model) in ``background`` mode with an empty database: the process calls
the model for S seconds while a separate process tunes its tasks (budget S seconds), and writes every call's time.

Results: ``results.jsonl`` (one line per process), ``summary.md`` (medians over the rounds, ratios), the machine
and commit in ``summary.md``'s header. Not a test: the machine is shared and noisy; compare within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

T0 = time.time()  # the process's start, for the first-output times
ENGINES = ("ours", "construct", "library", "inductor", "onnxruntime", "eager")
MODELS = ("bert-small", "gpt2", "mobilenetv2", "resnet50")


def _flat(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flat(o)]
    return [t for o in (getattr(out, "to_tuple", lambda: [])()) for t in _flat(o)]


def _error(got, want) -> float:
    import numpy as np

    got, want = [np.asarray(g, dtype=np.float64) for g in got], [np.asarray(w, dtype=np.float64) for w in want]
    return max(float(np.max(np.abs(g - w))) / max(1.0, float(np.max(np.abs(w)))) for g, w in zip(got, want))


def run_engine(engine: str, model: str, lib: str | None) -> dict:
    """One engine in this process (module docstring): first output, its error against eager, timing."""
    if engine == "onnxruntime":
        for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            os.environ.pop(k, None)
    import numpy as np
    import torch

    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.timing import time_callable
    from tiletune.model.frontend.zoo import MODELS as ZOO

    module, example, *_ = ZOO[model]()
    module = module.eval()
    with torch.no_grad():
        want = [t.numpy() for t in _flat(module(*example))]
    arrays = [t.numpy() for t in example]
    t_start = time.time()
    if engine in ("ours", "construct", "inductor", "eager"):
        if engine == "eager":
            fn = module
        elif engine == "inductor":
            fn = torch.compile(module)
        else:
            fn = torch.compile(module, backend="tiletune")

        def call():
            with torch.no_grad():
                return fn(*example)

        got = [t.numpy() for t in _flat(call())]
    elif engine == "library":
        from tiletune.api import load_model

        m = load_model(lib)

        def call():
            return m(*arrays)

        got = call()
    elif engine == "onnxruntime":
        import tempfile

        from tiletune.model.frontend.source import export_onnx, from_torch, onnx_session

        path = os.path.join(tempfile.mkdtemp(), f"{model}.onnx")
        export_onnx(from_torch(model, model, module, tuple(example)), path)
        sess = onnx_session(path, threads=os.cpu_count())
        names = [i.name for i in sess.get_inputs()]
        feeds = dict(zip(names, arrays))

        def call():
            return sess.run(None, feeds)

        got = call()
    else:
        raise SystemExit(f"unknown engine {engine}")
    first = time.time()
    err = _error(got[:len(want)], want)
    samples = time_callable(call, MeasureSettings(repeat=10, min_repeat_ms=200))
    return {"engine": engine, "model": model, "ms": statistics.median(samples) * 1e3, "samples": len(samples),
            "error": err, "first_output_s": first - T0, "compile_s": first - t_start}


def run_background(model: str, seconds: float) -> dict:
    import torch

    from tiletune.model.frontend.zoo import MODELS as ZOO

    module, example, *_ = ZOO[model]()
    module = module.eval()
    fn = torch.compile(module, backend="tiletune", options={"mode": "background", "seconds": seconds, "poll": 2.0})
    times = []
    with torch.no_grad():
        fn(*example)
        start = time.time()
        while time.time() - start < seconds + 60:
            t = time.perf_counter()
            fn(*example)
            times.append((time.time() - start, (time.perf_counter() - t) * 1e3))
            time.sleep(0.05)
    return {"engine": "background", "model": model, "calls": times}


def _machine() -> str:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu or platform.processor()}, {os.cpu_count()} cores"


def _sub(args: list[str], env: dict) -> dict | None:
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        print(f"  failed: {' '.join(args)}: {r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else r.returncode}")
        return None
    out = json.loads(lines[-1])
    out["stderr"] = [ln for ln in r.stderr.splitlines() if ln.startswith("tiletune:")]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--records", default="benchmarks/out/fig9/{model}-xgb.jsonl.gz",
                   help="records of 'tiletune model tune' per model ({model} is replaced)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--background", type=float, default=0.0, help="seconds of the background-mode run (0: none)")
    p.add_argument("--engine", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--lib", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.engine == "background":
        print(json.dumps(run_background(a.model, a.background)))
        return
    if a.engine:
        print(json.dumps(run_engine(a.engine, a.model, a.lib)))
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    engines = a.engines.split(",")
    results = []
    log = open(out / "results.jsonl", "a")
    for model in a.models.split(","):
        records = a.records.format(model=model)
        mdir = out / "work" / model
        mdir.mkdir(parents=True, exist_ok=True)
        env_tuned = {**os.environ, "TILETUNE_CACHE_DIR": str(mdir / "cache-tuned")}
        env_empty = {**os.environ, "TILETUNE_CACHE_DIR": str(mdir / "cache-empty")}
        lib = str(mdir / f"{model}.so")
        if "ours" in engines or "library" in engines:
            plain = mdir / "records.jsonl"
            if records.endswith(".gz"):
                import gzip

                plain.write_bytes(gzip.open(records).read())
            else:
                plain.write_bytes(Path(records).read_bytes())
            env_build = {**os.environ, "TILETUNE_CACHE_DIR": str(mdir / "cache-build")}  # the build's own database
            subprocess.run([sys.executable, "-m", "tiletune.cli", "db", "import", str(plain)], env=env_tuned,
                           check=True, capture_output=True)
            if "library" in engines and not os.path.exists(lib):
                r = subprocess.run([sys.executable, "-m", "tiletune.cli", "model", "build", model, "-r", str(plain),
                                    "-o", lib], env=env_build, capture_output=True, text=True)
                print(f"{model}: model build: {(r.stdout + r.stderr).strip().splitlines()[-1:]}")
        for rnd in range(a.rounds):
            for engine in engines:
                env = env_tuned if engine == "ours" else env_empty if engine == "construct" else dict(os.environ)
                res = _sub(["--out", a.out, "--engine", engine, "--model", model, "--lib", lib], env)
                if res is None:
                    continue
                res.update(round=rnd + 1, cold=rnd == 0)
                results.append(res)
                log.write(json.dumps(res) + "\n")
                log.flush()
                print(f"{model} round {rnd + 1} {engine:12s} {res['ms']:9.3f} ms  error {res['error']:.2g}  "
                      f"first output {res['first_output_s']:.1f} s (compile {res['compile_s']:.1f} s)")
    if a.background:
        model = a.models.split(",")[0]
        env = {**os.environ, "TILETUNE_CACHE_DIR": str(out / "work" / model / "cache-background")}
        res = _sub(["--out", a.out, "--engine", "background", "--model", model, "--background", str(a.background)],
                   env)
        if res is not None:
            log.write(json.dumps(res) + "\n")
            (out / "background.json").write_text(json.dumps(res))
    log.close()
    write_summary(out, [json.loads(ln) for ln in open(out / "results.jsonl")], a)


def write_summary(out: Path, rows: list[dict], a) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# torch.compile(backend='tiletune') on this CPU", "",
             f"{_machine()}; {time.strftime('%Y-%m-%d', time.gmtime())}; commit {commit}; every model of "
             f"`results.jsonl` (the last command: `python benchmarks/goals/torch_compile.py --models {a.models} "
             f"--rounds {a.rounds}`)", "",
             "Median ms per call over the rounds (each round: every engine once, each in its own process); "
             "ratios are speeds relative to ours (>1: ours is faster).", "",
             "| model | ours (tuned DB) | library | inductor | ONNX Runtime | eager | ours / library speed | "
             "construct (empty DB) | construct vs eager |",
             "|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        if "ms" in r:
            by.setdefault((r["model"], r["engine"]), []).append(r)
    models = list(dict.fromkeys(r["model"] for r in rows if "ms" in r))

    def med(m, e):
        v = [r["ms"] for r in by.get((m, e), [])]
        return statistics.median(v) if v else float("nan")

    def fmt(x):
        return "-" if x != x else f"{x:.2f}"

    for m in models:
        o, lib, ind, ort, eag, con = (med(m, e) for e in ("ours", "library", "inductor", "onnxruntime", "eager",
                                                            "construct"))
        lines.append(f"| {m} | {fmt(o)} | {fmt(lib)} | {fmt(ind)} | {fmt(ort)} | {fmt(eag)} | "
                     f"{fmt(lib / o) if o == o and lib == lib else '-'}x | {fmt(con)} | "
                     f"{fmt(eag / con) if con == con and eag == eag else '-'}x |")
    lines += ["", "First output (seconds from the process's start, before `import torch`; compile: from "
              "`torch.compile` to the first output). Cold: round 1, an empty cache of compiled graphs; warm: the "
              "later rounds (median).", "", "| model | engine | cold first output | cold compile | warm first output | "
              "warm compile | max error vs eager |", "|---|---|---|---|---|---|---|"]
    for m in models:
        for e in ("ours", "construct", "inductor"):
            rs = by.get((m, e), [])
            if not rs:
                continue
            cold = [r for r in rs if r.get("cold")]
            warm = [r for r in rs if not r.get("cold")]

            def mf(rs, k):
                return f"{statistics.median([r[k] for r in rs]):.1f}" if rs else "-"

            lines.append(f"| {m} | {e} | {mf(cold, 'first_output_s')} | {mf(cold, 'compile_s')} | "
                         f"{mf(warm, 'first_output_s')} | {mf(warm, 'compile_s')} | "
                         f"{max(r['error'] for r in rs):.2g} |")
    falls = sorted({ln for r in rows for ln in r.get("stderr", []) if "runs in PyTorch" in ln})
    lines += ["", "Graphs that ran in PyTorch: " + ("none" if not falls else "")] + [f"- `{ln}`" for ln in falls]
    bg = next((r for r in rows if r.get("engine") == "background"), None)
    if bg:
        calls = bg["calls"]
        lines += ["", f"Background mode ({bg['model']}, empty database, budget {a.background:g} s): per-call ms by "
                  "elapsed time (median of each 10% of the run)", "", "| elapsed s | ms per call |", "|---|---|"]
        n = len(calls)
        for k in range(10):
            part = calls[k * n // 10:(k + 1) * n // 10]
            if part:
                lines.append(f"| {part[0][0]:.0f}-{part[-1][0]:.0f} | {statistics.median(c[1] for c in part):.2f} |")
        lines.append(f"| slowest call | {max(c[1] for c in calls):.2f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
