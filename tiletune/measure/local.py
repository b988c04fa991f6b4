"""Local measurement in warm worker processes.

Build workers (one per core by default) compile configurations in parallel and export each kernel as a
shared library; then a single run worker loads, runs, checks and times them one after another, so that
timings are never taken while another build competes for the cores. Workers import TVM once and stay
warm across batches (TVM's own LocalBuilder spends ~37 s per candidate here for a 0.07 s compile).

Failures are data: a configuration the template rejects is ``invalid`` (nothing built); an exception
while building is ``build-error``; a worker that dies (segfault) is replaced and the configuration is
``build-error``/``run-error``; a task that exceeds its timeout kills the worker (``build-timeout`` /
``run-timeout``); an output different from the numpy reference is ``wrong-answer``.

The builder and runner are named by "module:function" so that tests can inject faults.
"""
from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import shutil
import tempfile
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any, Sequence

import cloudpickle

from ..space import Config, Space
from ..workloads import parse
from ..workloads.base import Workload
from .base import MeasureResult, MeasureSettings, Measurer

DEFAULT_BUILDER = "tiletune.measure.local:build_kernel"
DEFAULT_RUNNER = "tiletune.measure.local:run_kernel"


def _resolve(path: str):
    mod, _, fn = path.partition(":")
    return getattr(importlib.import_module(mod), fn)


# ---- functions that run inside the workers --------------------------------------------------------

def build_kernel(workload: Workload, space: Space, config: Config, target: dict, out_path: str) -> None:
    """Schedule, compile and export ``config`` to ``out_path`` (a .so)."""
    from ..schedules import build

    ex = build(workload, space, config, target)
    ex.export_library(out_path)


class WrongAnswer(Exception):
    pass


_RUN_CACHE: dict[str, Any] = {}


def _inputs_and_reference(workload: Workload):
    key = workload.key
    if key not in _RUN_CACHE:
        inputs = workload.make_inputs(seed=0)
        _RUN_CACHE.clear()
        _RUN_CACHE[key] = (inputs, workload.reference(*inputs))
    return _RUN_CACHE[key]


def check_output(workload: Workload, out, ref) -> None:
    import numpy as np

    rtol, atol = workload.tolerance()
    if out.shape != ref.shape:
        raise WrongAnswer(f"output shape {out.shape} != reference {ref.shape}")
    if not np.allclose(out, ref, rtol=rtol, atol=atol):
        err = np.abs(out.astype(np.float64) - ref)
        i = np.unravel_index(int(np.argmax(err)), err.shape)
        raise WrongAnswer(f"max abs error {err[i]:.3g} at {tuple(int(x) for x in i)} "
                          f"(got {out[i]!r}, expected {ref[i]!r}; rtol={rtol}, atol={atol})")


def run_kernel(workload: Workload, path: str, settings: MeasureSettings) -> list[float]:
    """Load, run once and check against numpy, then time; returns seconds per run for every sample."""
    import numpy as np
    import tvm

    dev = tvm.cpu()
    lib = tvm.runtime.load_module(path)
    inputs, ref = _inputs_and_reference(workload)
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(workload.output_shape(), workload.dtype), dev)
    t0 = time.perf_counter()
    lib["main"](*args, out)
    first = time.perf_counter() - t0
    if settings.check:
        check_output(workload, out.numpy(), ref)
    for _ in range(max(0, settings.warmup - 1)):
        lib["main"](*args, out)
    repeat = settings.repeat
    # keep one kernel well inside the run timeout
    while repeat > 1 and first * repeat * settings.number > settings.run_timeout / 3:
        repeat -= 1
    min_ms = settings.min_repeat_ms if first * 1e3 < settings.min_repeat_ms else 0
    f = lib.time_evaluator("main", dev, number=settings.number, repeat=repeat, min_repeat_ms=min_ms)
    res = f(*args, out)
    return [float(x) for x in res.results]


def _worker_main(conn: Connection) -> None:
    import tvm  # noqa: F401  (warm: import once, before the first task)

    cfg = cloudpickle.loads(conn.recv_bytes())
    workload = parse(cfg["workload"])
    space: Space = cfg["space"]
    target = cfg["target"]
    builder = _resolve(cfg["builder"])
    runner = _resolve(cfg["runner"])
    from ..schedules.cpu import InvalidConfig

    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        op = task[0]
        t0 = time.perf_counter()
        try:
            if op == "build":
                _, config, out_path = task
                builder(workload, space, config, target, out_path)
                conn.send(("ok", time.perf_counter() - t0))
            elif op == "run":
                _, path, settings = task
                costs = runner(workload, path, settings)
                conn.send(("ok", costs))
            elif op == "ping":
                conn.send(("ok", os.getpid()))
        except InvalidConfig as e:
            conn.send(("invalid", str(e)))
        except WrongAnswer as e:
            conn.send(("wrong-answer", str(e)))
        except Exception as e:  # noqa: BLE001 - errors are data
            kind = "build-error" if op == "build" else "run-error"
            tb = traceback.format_exception_only(type(e), e)
            conn.send((kind, "".join(tb).strip()[-1500:]))


class _Worker:
    """A worker subprocess (``python -m tiletune.measure.local``) connected by a socket pair.

    A fresh interpreter rather than multiprocessing's spawn: it does not re-import the caller's
    ``__main__`` (so scripts and stdin programs can measure) and nothing is inherited but the socket."""

    def __init__(self, init: bytes):
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiletune.measure.local", str(child.fileno())],
            pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
        )
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send_bytes(init)

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.proc.wait(timeout=2)
            self.conn.close()
        except (OSError, BrokenPipeError, subprocess.TimeoutExpired):
            self.kill()


class LocalMeasurer(Measurer):
    """Measures configurations of ``workload`` on this machine (CPU targets)."""

    kind = "local"

    def __init__(self, workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                 *, build_workers: int | None = None, builder: str = DEFAULT_BUILDER, runner: str = DEFAULT_RUNNER):
        self.workload = parse(workload)
        self.space = space
        self.target = target
        self.settings = settings or MeasureSettings()
        self.n_build = build_workers or max(1, min(os.cpu_count() or 1, int(target.get("num-cores", 2) or 2)))
        self._init = cloudpickle.dumps({"workload": self.workload.key, "space": space, "target": target,
                                        "builder": builder, "runner": runner})
        self._builders: list[_Worker | None] = [None] * self.n_build
        self._runner: _Worker | None = None
        self._tmp = tempfile.mkdtemp(prefix="tiletune-")
        self._count = 0
        self.stats = {"build_s": 0.0, "run_s": 0.0, "worker_restarts": 0}

    # ---- workers -------------------------------------------------------------------------------
    def _worker(self, slot: int | None) -> _Worker:
        w = self._runner if slot is None else self._builders[slot]
        if w is None or not w.alive():
            if w is not None:
                self.stats["worker_restarts"] += 1
                w.kill()
            w = _Worker(self._init)
            if slot is None:
                self._runner = w
            else:
                self._builders[slot] = w
        return w

    def _discard(self, slot: int | None) -> None:
        w = self._runner if slot is None else self._builders[slot]
        if w is not None:
            w.kill()
            self.stats["worker_restarts"] += 1
        if slot is None:
            self._runner = None
        else:
            self._builders[slot] = None

    def warm_up(self) -> None:
        """Start the workers and wait until they have imported TVM."""
        ws = [self._worker(i) for i in range(self.n_build)] + [self._worker(None)]
        for w in ws:
            w.conn.send(("ping",))
        for w in ws:
            w.conn.recv()

    # ---- measurement ---------------------------------------------------------------------------
    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        from ..schedules.cpu import InvalidConfig, check

        results: dict[int, MeasureResult] = {}
        built: dict[int, tuple[str, float]] = {}
        todo: list[int] = []
        for i, c in enumerate(configs):
            try:
                check(self.workload, self.space, c)
                todo.append(i)
            except InvalidConfig as e:
                results[i] = MeasureResult(c, error="invalid", message=str(e))

        # build phase: parallel over build workers
        pending = list(todo)
        busy: dict[int, tuple[int, float, str]] = {}  # slot -> (config index, deadline, path)
        t_phase = time.perf_counter()
        while pending or busy:
            for slot in range(self.n_build):
                if slot not in busy and pending:
                    i = pending.pop(0)
                    self._count += 1
                    path = os.path.join(self._tmp, f"k{self._count}.so")
                    w = self._worker(slot)
                    try:
                        w.conn.send(("build", configs[i], path))
                    except (OSError, BrokenPipeError):
                        self._discard(slot)
                        results[i] = MeasureResult(configs[i], error="build-error", message="build worker died")
                        continue
                    busy[slot] = (i, time.perf_counter() + self.settings.build_timeout, path)
            if not busy:
                continue
            conns = {self._builders[s].conn: s for s in busy}
            timeout = max(0.0, min(d for _, d, _ in busy.values()) - time.perf_counter())
            ready = wait(list(conns), timeout=timeout)
            now = time.perf_counter()
            for slot in list(busy):
                i, deadline, path = busy[slot]
                w = self._builders[slot]
                if w.conn in ready:
                    try:
                        msg = w.conn.recv() if w.conn.poll() else None
                    except (EOFError, OSError):
                        msg = None
                    del busy[slot]
                    if msg is None:
                        code = w.exitcode
                        self._discard(slot)
                        results[i] = MeasureResult(configs[i], error="build-error",
                                                   message=f"build worker crashed (exit code {code})")
                    elif msg[0] == "ok":
                        built[i] = (path, float(msg[1]))
                    else:
                        results[i] = MeasureResult(configs[i], error=msg[0], message=msg[1])
                elif now >= deadline:
                    del busy[slot]
                    self._discard(slot)
                    results[i] = MeasureResult(configs[i], error="build-timeout",
                                               message=f"build exceeded {self.settings.build_timeout:.0f} s")
        self.stats["build_s"] += time.perf_counter() - t_phase

        # run phase: one kernel at a time
        for i in todo:
            if i not in built:
                continue
            path, build_s = built[i]
            t0 = time.perf_counter()
            kind, payload = self._run_one(path)
            run_s = time.perf_counter() - t0
            self.stats["run_s"] += run_s
            if kind == "ok":
                results[i] = MeasureResult(configs[i], costs=tuple(payload), build_s=build_s, run_s=run_s)
            else:
                results[i] = MeasureResult(configs[i], error=kind, message=payload, build_s=build_s, run_s=run_s)
            try:
                os.remove(path)
            except OSError:
                pass
        return [results[i] for i in range(len(configs))]

    def _run_one(self, path: str) -> tuple[str, Any]:
        w = self._worker(None)
        try:
            w.conn.send(("run", path, self.settings))
        except (OSError, BrokenPipeError):
            self._discard(None)
            return "run-error", "run worker died"
        ready = wait([w.conn], timeout=self.settings.run_timeout)
        if not ready:
            self._discard(None)
            return "run-timeout", f"run exceeded {self.settings.run_timeout:.0f} s"
        try:
            msg = w.conn.recv() if w.conn.poll() else None
        except (EOFError, OSError):
            msg = None
        if msg is None:
            code = w.exitcode
            self._discard(None)
            return "run-error", f"run worker crashed (exit code {code})"
        return msg[0], msg[1]

    def close(self) -> None:
        for w in self._builders + [self._runner]:
            if w is not None:
                w.stop()
        self._builders = [None] * self.n_build
        self._runner = None
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __del__(self):  # pragma: no cover - safety net
        try:
            self.close()
        except Exception:
            pass


if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1])))
