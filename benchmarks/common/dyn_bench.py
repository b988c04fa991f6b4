"""What the dynamic-shape figures (model_fig11.py, model_fig12.py) share: timing children, each method in its own
process, results appended as they come.

- ``python benchmarks/common/dyn_bench.py ours JOB``: loads every library of the job (``tiletune.api.load_model``,
  ``first_use=None``: the library as built), runs each (library, shape) item on random inputs (checked against
  torch) and times it by ``tiletune.measure.timing.time_callable``; items in the job's order (the caller
  interleaves methods).
- ``python benchmarks/common/dyn_bench.py torch JOB``: PyTorch eager (``inference_mode``) or ``torch.compile(dynamic=
  True)`` on the job's shapes, the first call (compilation) timed apart; started by ``run`` without
  ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` (``tiletune.bench.vendor.UNSET_ENV``: the vendor's own kernels) and
  naming the kernel torch dispatches to.
- ``frames`` in a job item: instead of timing samples, the wall time of that many calls in a row (Fig. 12).
- ``device`` "cuda" in a job (Fig. 12 on a GPU): ours are CUDA libraries (``load_model`` copies a host input
  to the device and the output back), PyTorch runs the module in the job's ``dtype`` on the GPU; a call of
  either takes the host's float32 input and returns the host's output, so each waits for the device.
- ``clock`` "cpu" in a job: one thread (``TVM_NUM_THREADS=1``, ``torch.set_num_threads(1)``) timed by the calling
  thread's CPU time (``time.thread_time``), which leaves out the time other processes hold the core: the work of
  one core, for a machine that others load (as ``benchmarks/goals/api_overhead.py --clock cpu``); "wall" (the
  default): every core, the wall clock.

A child prints one ``RESULT <json list>`` line; ``run(kind, job, out_file)`` starts it, appends its rows to
``out_file`` and returns them.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tiletune.bench.results import read_jsonl
from tiletune.bench.vendor import UNSET_ENV, torch_kernel
from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import time_callable
from tiletune.model.frontend.source import load

HERE = Path(__file__).resolve().parent


def steps(path: Path, **extra):
    """``step(name, fn)`` of a resumable study: runs ``fn`` once and appends ``{step, wall_s, **extra, **fn()}`` to
    ``path``; a step that ``path`` already holds is skipped."""
    done = {r["step"] for r in read_jsonl(path)}

    def step(name, fn):
        if name in done:
            return
        t0 = time.time()
        info = fn() or {}
        with open(path, "a") as f:
            f.write(json.dumps(dict(step=name, wall_s=time.time() - t0, **extra, **info)) + "\n")

    return step


def timing_rounds(results: Path, rounds: int, job: dict, items) -> None:
    """A study's timing rounds, resumed: round ``r`` runs ``run("ours", {**job, "items": items(r)})`` unless
    ``results`` holds that round already."""
    for r in range(len({x["round"] for x in read_jsonl(results)}), rounds):
        run("ours", {**job, "items": items(r)}, results)


def latencies(rows: list[dict], dim: str) -> dict[tuple[str, int], list[float]]:
    """The rows' median seconds by (method, the value of ``dim``), one per round."""
    med: dict = {}
    for r in rows:
        med.setdefault((r["method"], r["binding"][dim]), []).append(r["median_s"])
    return med


def _error(got, ref) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def _clock(job: dict):
    return time.thread_time if job.get("clock") == "cpu" else time.perf_counter


def _timed(fn, item: dict, settings: MeasureSettings, clock=time.perf_counter) -> dict:
    if item.get("frames"):
        t0 = clock()
        for _ in range(item["frames"]):
            fn()
        return {"frames_s": clock() - t0}
    s = time_callable(fn, settings, clock)
    return {"median_s": float(np.median(s)), "samples": [float(x) for x in s]}


def ours(job: dict) -> list[dict]:
    from tiletune.api import load_model

    settings = MeasureSettings(repeat=job["repeat"], min_repeat_ms=job["min_repeat_ms"])
    models, sources, out = {}, {}, []
    for item in job["items"]:
        t0 = time.perf_counter()
        if item["lib"] not in models:
            models[item["lib"]] = load_model(item["lib"], first_use=None)
        load_s = time.perf_counter() - t0
        m = models[item["lib"]]
        spec = item.get("model", job.get("model"))
        source = sources.setdefault(spec, load(spec))
        x = source.random_inputs(0, item.get("binding") or None) if item.get("binding") else source.random_inputs(0)
        err = _error(m(*x)[0], source.reference(x)[0])
        timed = _timed(lambda: m(*x), item, settings, _clock(job))
        out.append(dict(item, error=err, load_s=load_s, loadavg=os.getloadavg()[0], clock=job.get("clock", "wall"),
                        **timed))
    return out


def torch_child(job: dict) -> list[dict]:
    import torch

    threads = 1 if job.get("clock") == "cpu" else (job.get("threads") or os.cpu_count())
    torch.set_num_threads(threads)
    settings = MeasureSettings(repeat=job["repeat"], min_repeat_ms=job["min_repeat_ms"])
    gpu = job.get("device") == "cuda"
    dtype = getattr(torch, job.get("dtype", "float32"))
    out, compiled = [], {}
    for item in job["items"]:
        spec = item.get("model", job.get("model"))
        source = load(spec)
        # on a GPU a copy: the source's module stays the CPU reference
        module = copy.deepcopy(source.module).to("cuda", dtype=dtype) if gpu else source.module
        if item["method"] == "torch-compile":
            module = compiled.setdefault(spec, torch.compile(module, dynamic=True))
        x = source.random_inputs(0, item.get("binding") or None) if item.get("binding") else source.random_inputs(0)
        args = [torch.from_numpy(a) for a in x]

        def call():
            with torch.inference_mode():
                if not gpu:
                    return module(*args)
                ins = [a.to("cuda", dtype=dtype) if a.is_floating_point() else a.to("cuda") for a in args]
                return module(*ins).float().cpu()  # the host's output, as ours returns it

        t0 = time.perf_counter()
        first = call()
        first_s = time.perf_counter() - t0
        err = _error(first.detach().numpy(), source.reference(x)[0])
        device = {"device": torch.cuda.get_device_name(0)} if gpu else {}
        out.append(dict(item, error=err, first_s=first_s, kernel=torch_kernel(torch), loadavg=os.getloadavg()[0],
                        clock=job.get("clock", "wall"), **device, **_timed(call, item, settings, _clock(job))))
    return out


def run(kind: str, job: dict, out_file: Path, timeout: float = 3600) -> list[dict]:
    """Run a child of ``kind`` ("ours" or "torch") on ``job``; its rows are appended to ``out_file``."""
    env = dict(os.environ)
    env["TVM_NUM_THREADS"] = "1" if job.get("clock") == "cpu" else env.get("TVM_NUM_THREADS", str(os.cpu_count()))
    if kind == "torch":
        for k in UNSET_ENV:
            env.pop(k, None)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
        path = f.name
    try:
        proc = subprocess.run([sys.executable, str(HERE / "dyn_bench.py"), kind, path], env=env, capture_output=True,
                              text=True, timeout=timeout)
    finally:
        os.unlink(path)
    line = next((s for s in proc.stdout.splitlines() if s.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{kind} child failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    rows = json.loads(line[len("RESULT "):])
    with open(out_file, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    job = json.loads(Path(sys.argv[2]).read_text())
    rows = ours(job) if sys.argv[1] == "ours" else torch_child(job)
    print("RESULT " + json.dumps(rows), flush=True)
