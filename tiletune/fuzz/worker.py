"""Run models in a separate process, so that a segfault or a hang of TVM is counted as a ``crash``, not fatal.

``Worker`` holds one spawned process (it imports torch and TVM once, then runs model after model:
``tiletune.fuzz.run.run_model``); ``worker.run(spec)`` sends it one model and waits up to ``timeout`` seconds.
A process that dies or does not answer in time is killed and replaced, and every path of that model becomes
a ``crash`` (reason ``died:SIGNAL`` or ``timeout``). The process measures in its own pool of warm workers
(started at the first tuned model), so it is not a daemon. TVM's thread pool keeps its default size: a
race between the threads of a parallel kernel is a wrong result to find.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal

from ..measure.factory import shared_pool
from ..target import parse_target
from .generate import Spec, build
from .run import PATHS, run_model


def _serve(conn, workdir: str, log: str) -> None:
    """The worker process: rows for the specs it receives until it receives None; its stderr (TVM's log, and
    the last words of a process that dies) goes to ``log``."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)

    pool = None
    while True:
        msg = conn.recv()
        if msg is None:
            break
        spec, opts = Spec.from_json(msg[0]), msg[1]
        if opts.get("tune") and pool is None:
            pool = shared_pool(parse_target("llvm"))
        try:
            row = run_model(spec, workdir=workdir, pool=pool, **opts)
        except Exception as e:  # noqa: BLE001  (the generator's own failure: the row says so)
            row = {**spec.to_json(), "error": f"{type(e).__name__}: {e}"[:300]}
        conn.send(row)
    if pool is not None:
        pool.close()


class Worker:
    """One worker process (see the module docstring); ``close()`` ends it."""

    def __init__(self, workdir: str, timeout: float = 120.0):
        self.workdir, self.timeout = workdir, timeout
        self.proc = self.conn = None
        self.log = os.path.join(workdir, f"worker-{os.getpid()}-{id(self):x}.log")

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, self.workdir, self.log), daemon=False)
        self.proc.start()
        child.close()

    def _kill(self) -> None:
        p, self.proc, self.conn = self.proc, None, None
        if p is not None and p.pid is not None:
            if p.is_alive():
                p.kill()
            p.join(5)

    def run(self, spec: Spec, paths=PATHS, tune: int = 0, seeds=(0, 1, 2)) -> dict:
        """The row of ``spec`` (``tiletune.fuzz.run.run_model``), or a crash row when the process died or hung."""
        if self.proc is None or not self.proc.is_alive():
            self._start()
        start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        try:
            self.conn.send((spec.to_json(), {"paths": tuple(paths), "tune": tune, "seeds": tuple(seeds)}))
            if self.conn.poll(self.timeout):
                return self.conn.recv()
            why = "timeout"
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            why = None
        if why is None:
            self.proc.join(5)
            code = self.proc.exitcode
            why = f"died:{signal.Signals(-code).name}" if code and code < 0 else f"died:exit {code}"
        self._kill()
        return crash_row(spec, paths, why, tune, last_words(self.log, start))

    def restart(self) -> None:
        """End the process now (the next ``run`` starts a fresh one): a run that must not inherit the state of
        the ones before it, such as a heap another model corrupted."""
        self._kill()

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(30)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def last_words(log: str, start: int = 0) -> str:
    """The last line of ``log`` after offset ``start`` that says something (not a stack frame, not a warning)."""
    try:
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [ln.strip("! ") for ln in text.splitlines() if ln.strip("! ") and not ln.startswith("  ")
             and "Warning" not in ln and "warn" not in ln]
    return lines[-1][:200] if lines else ""


def crash_row(spec: Spec, paths, why: str, tune: int = 0, words: str = "") -> dict:
    """The row of a model whose process died or hung: every path a crash (``words``: the process's last)."""

    gen = build(spec)
    detail = f"the worker process {why.replace(':', ' ')}" + (f" ({words})" if words else "")
    res = {"outcome": "crash", "reason": why, "detail": detail,
           "stage": "", "max_error": None, "seconds": 0.0}
    return {**spec.to_json(), "description": gen.description, "dynamic": gen.dynamic, "tune": tune,
            "paths": {p: {"path": p, **res} for p in paths}}
