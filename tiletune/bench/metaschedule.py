"""The MetaSchedule baseline: TVM's own auto-tuner on the same compute with the same trial budget.

``metaschedule(workload, target, trials)`` runs ``tvm.s_tir.meta_schedule.tune_tir`` on the same TE
compute (``workload.prim_func()``). Out of the box it does not work here (its LocalBuilder spends ~37 s
per candidate in a fresh worker and times out; its LocalRunner's popen worker also takes ~30 s to start),
so it runs with an in-process builder (``PyBuilder``: ``tvm.compile`` + ``export_library`` to a .tar in a
fresh temporary directory per artifact, since the default measure callback deletes the artifact's
directory) and an in-process runner (``PyRunner``: load, random inputs, TVM's ``time_evaluator``). The
whole tuning runs in a child process (``python -m tiletune.bench.metaschedule``) with a wall-clock
limit, so that a crash in TVM costs the baseline, not the benchmark. Its best schedule is then timed by
our runner (``tiletune.measure.local.run_kernel``: checked against numpy, the timing rule of
``tiletune.measure.timing``). We report its best GFLOPS and its wall time, and the curve of its own
measurements.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TiletuneError
from ..measure.base import MeasureSettings
from ..measure.factory import WrongAnswer, run_kernel
from ..tvmscript import fast_tvmscript_parsing
from ..workloads import parse
from ..workloads.base import Workload
from .results import BaselineResult


def metaschedule(workload: Workload | str, target: dict, trials: int, *,
                 settings: MeasureSettings | None = None, timeout: float = 3600.0, seed: int = 0,
                 log_path: str | Path | None = None) -> BaselineResult:
    """Tune ``workload`` with MetaSchedule (``trials`` candidates) in a child process; time its best."""
    wl = parse(workload)
    settings = settings or MeasureSettings()
    if trials < 1:
        raise TiletuneError(f"MetaSchedule needs at least 1 trial, got {trials}")
    with tempfile.TemporaryDirectory(prefix="tiletune-ms-") as tmp:
        job = {"workload": wl.key, "target": target, "trials": int(trials), "seed": int(seed),
               "settings": asdict(settings), "work_dir": tmp, "result": os.path.join(tmp, "result.json")}
        job_path = os.path.join(tmp, "job.json")
        Path(job_path).write_text(json.dumps(job))
        log = open(log_path, "a", encoding="utf-8") if log_path else subprocess.DEVNULL
        env = dict(os.environ)
        env.setdefault("TVM_NUM_THREADS", str(target.get("num-cores") or os.cpu_count() or 1))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "tiletune.bench.metaschedule", job_path], stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            return BaselineResult("metaschedule", wl.key, label="MetaSchedule", error="timeout",
                                  message=f"MetaSchedule did not finish within {timeout:.0f} s",
                                  wall_s=time.perf_counter() - t0, trials=trials)
        finally:
            if log_path:
                log.close()
        wall = time.perf_counter() - t0
        try:
            res = json.loads(Path(job["result"]).read_text())
        except (OSError, json.JSONDecodeError):
            hint = f"; see {log_path}" if log_path else ""
            return BaselineResult("metaschedule", wl.key, label="MetaSchedule", error="crash",
                                  message=f"MetaSchedule process exited with code {code} without a result{hint}",
                                  wall_s=wall, trials=trials)
    return BaselineResult(
        "metaschedule", wl.key, label=res.get("label", "MetaSchedule"), costs=tuple(res.get("costs", ())),
        error=res.get("error"), message=res.get("message", ""), wall_s=wall, trials=res.get("trials", trials),
        curve=res.get("curve", []), extra={k: res[k] for k in ("tune_s", "ms_best_s", "failed") if k in res},
    )


def _index_safe_fill(fill):
    """MetaSchedule's random fill for float tensors; integer and boolean tensors are zeroed instead. In a
    model's kernels those are indices (``take``/embedding lookups, ``index_tensor``) and masks, and random
    indices read outside the table: tuning bert-small's ``take`` segfaulted the tuning process (exit -11)."""

    def f(arr):
        dtype = str(arr.dtype)
        if dtype.startswith(("int", "uint", "bool")):
            arr.copyfrom(np.zeros(tuple(int(d) for d in arr.shape), dtype=dtype))
        elif fill is not None:
            fill(arr)

    return f


def in_process_builder_runner(work_dir: str, settings: MeasureSettings, on_run=None) -> tuple:
    """(builder, runner) for MetaSchedule that compile and run in this process (see the module docstring):
    ``tvm.compile`` + ``export_library`` to a .tar in a fresh directory under ``work_dir`` per artifact;
    load, random arguments and TVM's ``time_evaluator`` with ``settings``' repeat and min_repeat_ms.
    ``on_run(artifact_path, costs)`` is called after each run (``costs`` None when it failed)."""
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common, run_evaluator_common

    @derived_object
    class InProcessBuilder(PyBuilder):
        """tvm.compile in this process; each artifact in its own fresh directory."""

        def build(self, build_inputs):
            results = []
            for bi in build_inputs:
                try:
                    ex = tvm.compile(bi.mod, target=bi.target)
                    d = tempfile.mkdtemp(prefix="art-", dir=work_dir)
                    path = os.path.join(d, "tvm_tmp_mod.tar")
                    ex.export_library(path)
                    results.append(BuilderResult(path, None))
                except Exception as e:  # noqa: BLE001
                    results.append(BuilderResult(None, f"{type(e).__name__}: {e}"[:2000]))
            return results

    evaluator = EvaluatorConfig(number=max(1, settings.number), repeat=max(1, settings.repeat),
                                min_repeat_ms=settings.min_repeat_ms, enable_cpu_cache_flush=False)
    fill = _index_safe_fill(tvm.get_global_func("tvm.contrib.random.random_fill_for_measure", allow_missing=True))

    @derived_object
    class InProcessRunner(PyRunner):
        """Load, allocate random arguments and time with TVM's evaluator, in this process."""

        def run(self, runner_inputs):
            futures = []
            for ri in runner_inputs:
                try:
                    mod = tvm.runtime.load_module(str(ri.artifact_path))
                    dev = tvm.runtime.device(str(ri.device_type), 0)
                    args = alloc_argument_common(fill, dev, tuple(a.as_json() for a in ri.args_info), 1)
                    costs = [float(c) for c in run_evaluator_common(mod, dev, evaluator, args)]
                    futures.append(LocalRunnerFuture(res=costs))
                    if on_run is not None:
                        on_run(str(ri.artifact_path), costs)
                except Exception as e:  # noqa: BLE001
                    futures.append(LocalRunnerFuture(error_message=f"{type(e).__name__}: {e}"[:2000]))
                    if on_run is not None:
                        on_run(str(ri.artifact_path), None)
            return futures

    return InProcessBuilder(), InProcessRunner()


def _ms_child(job_path: str) -> int:
    """Child process: tune with MetaSchedule, compile the best schedule, time it with our runner."""
    job = json.loads(Path(job_path).read_text())
    fast_tvmscript_parsing()
    out: dict[str, Any] = {"label": "MetaSchedule (in-process builder/runner)"}

    def write():
        Path(job["result"]).write_text(json.dumps(out))

    try:
        import tvm
        import tvm.s_tir.meta_schedule as ms

        wl = parse(job["workload"])
        settings = MeasureSettings(**job["settings"])
        target = tvm.target.Target(job["target"])
        curve: list = []
        start = time.perf_counter()

        best_seen = [float("inf")]
        best_artifact = os.path.join(job["work_dir"], "best.tar")

        def on_run(artifact_path: str, costs) -> None:
            if costs is None:
                curve.append((len(curve) + 1, time.perf_counter() - start, None))
                return
            med = float(np.median(costs))
            if med < best_seen[0]:  # keep the exact artifact: MetaSchedule deletes its directory
                best_seen[0] = med
                shutil.copyfile(artifact_path, best_artifact)
            curve.append((len(curve) + 1, time.perf_counter() - start, med))

        builder, runner = in_process_builder_runner(job["work_dir"], settings, on_run)

        mod = tvm.IRModule({"main": wl.prim_func()})
        trials = int(job["trials"])
        ms.tune_tir(mod, target, os.path.join(job["work_dir"], "ms"), max_trials_global=trials,
                    num_trials_per_iter=min(64, trials), builder=builder,
                    runner=runner, database="memory", seed=int(job["seed"]),
                    num_tuning_cores=int(job["target"].get("num-cores") or os.cpu_count() or 1))
        out["tune_s"] = time.perf_counter() - start
        out["curve"] = curve
        out["trials"] = len(curve)
        out["failed"] = sum(1 for c in curve if c[2] is None)
        good = [c[2] for c in curve if c[2] is not None]
        out["ms_best_s"] = min(good) if good else None
        if not os.path.exists(best_artifact):
            out.update(error="no-result", message="MetaSchedule found no valid schedule")
            write()
            return 0
        # re-time the very kernel MetaSchedule measured best (its built artifact, post-processing included);
        # recompiling the database's best schedule with compile_tir skips MetaSchedule's post-processors
        # (parallel / vectorize / unroll rewrites), and ran 2x slower on small conv2d
        lib_path = best_artifact
        try:
            out["costs"] = run_kernel(wl, lib_path, settings)
        except WrongAnswer as e:
            out.update(error="wrong-answer", message=str(e))
    except Exception as e:  # noqa: BLE001
        out.update(error="error", message=traceback.format_exc().strip()[-2000:])
    write()
    return 0


if __name__ == "__main__":
    sys.exit(_ms_child(sys.argv[1]))
