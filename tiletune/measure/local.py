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
STARTUP_TIMEOUT = 180.0  # a cold TVM import on a loaded 2-core machine can take many seconds


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


_CONTEXTS: dict[bytes, tuple] = {}


def _context(blob: bytes) -> tuple:
    """(workload, space, target, builder, runner) of a task, unpickled once per worker."""
    if blob not in _CONTEXTS:
        cfg = cloudpickle.loads(blob)
        wl = parse(cfg["workload"])
        if len(_CONTEXTS) > 16:
            _CONTEXTS.clear()
        _CONTEXTS[blob] = (wl, cfg["space"], cfg["target"], _resolve(cfg["builder"]), _resolve(cfg["runner"]))
    return _CONTEXTS[blob]


def _worker_main(conn: Connection) -> None:
    import tvm  # noqa: F401  (warm: import once, before the first task)

    from ..schedules.cpu import InvalidConfig

    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        op, blob = task[0], task[1]
        t0 = time.perf_counter()
        try:
            workload, space, target, builder, runner = _context(blob)
            if op == "build":
                _, _, config, out_path = task
                builder(workload, space, config, target, out_path)
                conn.send(("ok", time.perf_counter() - t0))
            elif op == "run":
                _, _, path, settings = task
                conn.send(("ok", runner(workload, path, settings)))
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

    def __init__(self):
        parent, child = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiletune.measure.local", str(child.fileno())],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
        )
        child.close()
        self.conn = Connection(parent.detach())
        self.ready = False

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> bool:
        """Wait for the worker's start-up (TVM import) so that task timeouts do not count it."""
        if not self.ready:
            try:
                if self.conn.poll(timeout):
                    self.ready = self.conn.recv()[0] == "ready"
            except (EOFError, OSError):
                self.ready = False
        return self.ready

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


class WorkerPool:
    """Warm workers: ``n_build`` build workers and one run worker, replaced when they die.

    One pool can serve many measurers in turn (the benchmark harness keeps one for a whole suite)."""

    def __init__(self, n_build: int | None = None):
        self.n_build = n_build or max(1, os.cpu_count() or 1)
        self.builders: list[_Worker | None] = [None] * self.n_build
        self.runner: _Worker | None = None
        self.restarts = 0
        for slot in range(self.n_build):  # start now: imports overlap with the caller's set-up
            self.get(slot)
        self.get(None)

    def get(self, slot: int | None) -> _Worker:
        w = self.runner if slot is None else self.builders[slot]
        if w is None or not w.alive():
            if w is not None:
                self.restarts += 1
                w.kill()
            w = _Worker()
            if slot is None:
                self.runner = w
            else:
                self.builders[slot] = w
        return w

    def discard(self, slot: int | None) -> None:
        w = self.runner if slot is None else self.builders[slot]
        if w is not None:
            w.kill()
            self.restarts += 1
        if slot is None:
            self.runner = None
        else:
            self.builders[slot] = None

    def warm_up(self) -> None:
        for w in [self.get(i) for i in range(self.n_build)] + [self.get(None)]:
            w.wait_ready()

    def close(self) -> None:
        for w in self.builders + [self.runner]:
            if w is not None:
                w.stop()
        self.builders = [None] * self.n_build
        self.runner = None


class LocalMeasurer(Measurer):
    """Measures configurations of ``workload`` on this machine (CPU targets).

    ``pool``: a WorkerPool to share; by default the measurer owns one and closes it on ``close()``."""

    kind = "local"

    def __init__(self, workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                 *, build_workers: int | None = None, builder: str = DEFAULT_BUILDER, runner: str = DEFAULT_RUNNER,
                 pool: WorkerPool | None = None):
        self.workload = parse(workload)
        self.space = space
        self.target = target
        self.settings = settings or MeasureSettings()
        n = build_workers or max(1, min(os.cpu_count() or 1, int(target.get("num-cores", 2) or 2)))
        self._own_pool = pool is None
        self.pool = pool or WorkerPool(n)
        self._blob = cloudpickle.dumps({"workload": self.workload.key, "space": space, "target": target,
                                        "builder": builder, "runner": runner})
        self._tmp = tempfile.mkdtemp(prefix="tiletune-")
        self._count = 0
        self._restarts0 = self.pool.restarts
        self.stats = {"build_s": 0.0, "run_s": 0.0, "worker_restarts": 0}

    def warm_up(self) -> None:
        self.pool.warm_up()

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        from ..schedules.cpu import InvalidConfig, check

        results: dict[int, MeasureResult] = {}
        todo: list[int] = []
        for i, c in enumerate(configs):
            try:
                check(self.workload, self.space, c)
                todo.append(i)
            except InvalidConfig as e:
                results[i] = MeasureResult(c, error="invalid", message=str(e))
        t0 = time.perf_counter()
        built = self._build_all(configs, todo, results)
        self.stats["build_s"] += time.perf_counter() - t0
        for i in todo:  # run phase: one kernel at a time, nothing else running
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
            for f in (path, path + ".fault"):
                try:
                    os.remove(f)
                except OSError:
                    pass
        self.stats["worker_restarts"] = self.pool.restarts - self._restarts0
        return [results[i] for i in range(len(configs))]

    def _build_all(self, configs, todo, results) -> dict[int, tuple[str, float]]:
        """Build in parallel over the pool's build workers; failures go into ``results``."""
        pool, built = self.pool, {}
        pending = list(todo)
        busy: dict[int, tuple[int, float, str]] = {}  # slot -> (config index, deadline, path)
        while pending or busy:
            for slot in range(pool.n_build):
                if slot in busy or not pending:
                    continue
                i = pending.pop(0)
                self._count += 1
                path = os.path.join(self._tmp, f"k{self._count}.so")
                w = pool.get(slot)
                try:
                    if not w.wait_ready():
                        raise OSError("worker did not start")
                    w.conn.send(("build", self._blob, configs[i], path))
                except (OSError, BrokenPipeError) as e:
                    pool.discard(slot)
                    results[i] = MeasureResult(configs[i], error="build-error", message=f"build worker: {e}")
                    continue
                busy[slot] = (i, time.perf_counter() + self.settings.build_timeout, path)
            if not busy:
                continue
            conns = [pool.builders[s].conn for s in busy]
            wait(conns, timeout=max(0.0, min(d for _, d, _ in busy.values()) - time.perf_counter()))
            now = time.perf_counter()
            for slot in list(busy):
                i, deadline, path = busy[slot]
                w = pool.builders[slot]
                msg, dead = _poll(w)
                if msg is None and not dead and now < deadline:
                    continue
                del busy[slot]
                if msg is not None and msg[0] == "ok":
                    built[i] = (path, float(msg[1]))
                elif msg is not None:
                    results[i] = MeasureResult(configs[i], error=msg[0], message=msg[1])
                elif dead:
                    code = w.exitcode
                    pool.discard(slot)
                    results[i] = MeasureResult(configs[i], error="build-error",
                                               message=f"build worker crashed (exit code {code})")
                else:
                    pool.discard(slot)
                    results[i] = MeasureResult(configs[i], error="build-timeout",
                                               message=f"build exceeded {self.settings.build_timeout:.0f} s")
        return built

    def _run_one(self, path: str) -> tuple[str, Any]:
        w = self.pool.get(None)
        try:
            if not w.wait_ready():
                raise OSError("worker did not start")
            w.conn.send(("run", self._blob, path, self.settings))
        except (OSError, BrokenPipeError) as e:
            self.pool.discard(None)
            return "run-error", f"run worker: {e}"
        wait([w.conn], timeout=self.settings.run_timeout)
        msg, dead = _poll(w)
        if msg is not None:
            return msg[0], msg[1]
        if dead:
            code = w.exitcode
            self.pool.discard(None)
            return "run-error", f"run worker crashed (exit code {code})"
        self.pool.discard(None)
        return "run-timeout", f"run exceeded {self.settings.run_timeout:.0f} s"

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def _poll(w: _Worker) -> tuple[Any, bool]:
    """(message or None, worker is dead)."""
    try:
        if w.conn.poll():
            return w.conn.recv(), False
    except (EOFError, OSError):
        return None, True
    return None, not w.alive()


if __name__ == "__main__":
    # run the module's own (imported) copy so exception classes are those the builders raise
    from tiletune.measure.local import _worker_main as main

    main(Connection(int(sys.argv[1])))
