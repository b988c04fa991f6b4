"""Tuning a compiled graph's tasks: now (``tune`` mode, ``tune_now``) or beside the running model (``background``).

``background``: the graph runs at once on its constructed kernels (or the database's); a thread of the process
imports the graph's tasks and starts a separate process (``python -m tiletune.torch_backend.tune_process SPEC``)
that tunes them into the tuning database's records file of the target under the budget (``tiletune.model.tuning.tuner``,
the same tuner as ``tiletune model tune``). The thread looks at the database every ``poll`` seconds; when it gives one
of the graph's tasks another kernel, the graph is built again with the database's kernels (into the cache, so the next
process starts with them), checked against PyTorch's outputs on the graph's first inputs (``build.RTOL`` of the
outputs' dtype) and swapped in between two calls; a build that fails the check is not swapped in. The tuning process
ends with its budget, or with the process that started it (``tiletune.lifetime``).

The tasks travel to the tuning process as their PrimFuncs (``tvm.ir.save_json``) with their names; there each is made
the workload it was (``PrimFuncWorkload`` or ``RowWorkload``), whose key must be the same.
"""
from __future__ import annotations

import atexit
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..db.store import cache_root
from ..errors import TiletuneError
from ..lifetime import die_with_parent
from ..model.kernels.tasks import Kernel, ModelTasks
from ..model.tuning.progress import ModelProgress
from ..model.tuning.tuner import tune_model
from ..workloads.primfunc import PrimFuncWorkload
from ..workloads.rows import RowWorkload
from .graph import Fallback, Runner, relative_error, say, tolerance


def tune_now(c) -> None:
    """``tune`` mode: tune the graph's tasks into the database under the options' budget, with the progress display."""
    tasks = c.import_tasks()
    if not tasks.tasks:
        return
    progress = ModelProgress(c.opts.trials, len(tasks.tasks))
    tuned: set = set()

    def on_round(state, run, total):
        if state.best_gflops:
            tuned.add(state.key)
        progress.round_done(state, run, total, len(tuned))

    say(f"{c.name}: tuning {len(tasks.tasks)} tasks into {c.db.path(c.target)}")
    try:
        tune_model(tasks, strategy=c.opts.strategy, trials=c.opts.trials, seconds=c.opts.seconds,
                   records=str(c.db.path(c.target)), on_round=on_round, callbacks=(progress,))
    except TiletuneError as e:
        raise Fallback(f"tuning failed ({e})") from None
    finally:
        progress.close()


def write_spec(tasks: ModelTasks, path: Path, *, records: str, trials: int | None, seconds: float | None,
               strategy: str, layout: str) -> None:
    """The tasks and the budget for the tuning process, as ``path`` (JSON) and ``path.tvm.json`` (the PrimFuncs)."""
    import tvm

    funcs = {k.name: k.func for k in tasks.tasks}
    path.parent.mkdir(parents=True, exist_ok=True)
    Path(str(path) + ".tvm.json").write_text(tvm.ir.save_json(tvm.IRModule(funcs)))
    kernels = [{"name": k.name, "names": k.names, "hash": k.hash, "calls": k.calls, "key": k.workload.key,
                "kind": "rows" if isinstance(k.workload, RowWorkload) else "primfunc"} for k in tasks.tasks]
    path.write_text(json.dumps({"target": tasks.target, "layout": layout, "dtype": tasks.dtype, "kernels": kernels,
                                "records": records, "trials": trials, "seconds": seconds, "strategy": strategy}))


def read_spec(path: Path) -> tuple[ModelTasks, dict]:
    """The tasks ``write_spec`` wrote (those whose workload key comes out the same) and the spec."""
    import tvm

    spec = json.loads(path.read_text())
    mod = tvm.ir.load_json(Path(str(path) + ".tvm.json").read_text())
    kernels = []
    for k in spec["kernels"]:
        func = mod[k["name"]]
        cls = RowWorkload if k["kind"] == "rows" else PrimFuncWorkload
        wl = cls.from_prim_func(func, name=k["name"])
        if wl.key != k["key"]:
            continue
        kernels.append(Kernel(k["name"], k["names"], func, k["hash"], k["calls"], wl.flops, [], (), workload=wl))
    return ModelTasks(None, spec["target"], kernels, spec["layout"], dtype=spec["dtype"]), spec


class Background(threading.Thread):
    """The thread of ``background`` mode for one compiled shape of a graph (module docstring)."""

    def __init__(self, compiler, entry, built):
        super().__init__(daemon=True, name=f"tiletune-background-{compiler.number}")
        self.c, self.entry, self.built = compiler, entry, built
        self.swaps = 0
        self.proc: subprocess.Popen | None = None
        self.finished = threading.Event()
        self.stopping = threading.Event()
        self.log = ""
        _RUNNING.append(self)

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001  (the graph keeps running on the kernels it has)
            say(f"{self.c.name}: background tuning stopped ({type(e).__name__}: {str(e)[:200]})")
        finally:
            self.finished.set()

    def _run(self) -> None:
        c = self.c
        tasks = c.import_tasks()
        if not tasks.tasks:
            return
        d = cache_root() / "background"
        spec = d / f"{c.key}.json"
        write_spec(tasks, spec, records=str(c.db.path(c.target)), trials=c.opts.trials, seconds=c.opts.seconds,
                   strategy=c.opts.strategy, layout=c.layout)
        self.log = str(d / f"{c.key}.log")
        if self.stopping.is_set():
            return
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "tiletune.torch_backend.tune_process", str(spec)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        say(f"{c.name}: tuning {len(tasks.tasks)} tasks in the background (process {self.proc.pid}, log {self.log})")
        state = self.built.state
        keys = sorted(tasks.keys())
        while not self.stopping.is_set():
            done = self.proc.poll() is not None
            if not done:
                self.stopping.wait(c.opts.poll)
                if self.stopping.is_set():
                    break
            now = c.db.state(keys, c.target)
            if now != state:
                state = now
                self._swap(tasks)
            if done:
                break
        say(f"{c.name}: background tuning ended (exit {self.proc.returncode}); {self.swaps} tuned builds swapped in")

    def _swap(self, tasks) -> None:
        c = self.c
        try:
            built = c.build(tasks)
            runner = Runner(built.module, c.plan, c.example_in[0].device)
            err = relative_error(runner(c.example_in), c.example_out)
        except Fallback as e:
            say(f"{c.name}: a tuned build was not swapped in ({e})")
            return
        if not err <= tolerance(c.plan.out_dtypes):
            say(f"{c.name}: a tuned build was not swapped in: its outputs differ from PyTorch's by {err:.3g}")
            return
        if self.entry.runner is not None:
            self.entry.runner = runner
            self.swaps += 1


    def stop(self, timeout: float = 120.0) -> None:
        """End the tuning process and the thread (the build in flight finishes first)."""
        self.stopping.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.join(timeout)


_RUNNING: list[Background] = []


@atexit.register
def _stop_all() -> None:
    """At exit, every background tuning ends before the interpreter does (a thread left inside TVM would abort it)."""
    for b in _RUNNING:
        if b.is_alive() or (b.proc is not None and b.proc.poll() is None):
            b.stop()


def main(argv: list[str]) -> int:
    """The tuning process (``tiletune.torch_backend.tune_process``): tune the tasks of the spec ``argv[0]`` into its
    records file under its budget."""
    die_with_parent()
    tasks, spec = read_spec(Path(argv[0]))
    if not tasks.tasks:
        print("no task to tune")
        return 0
    result = tune_model(tasks, strategy=spec["strategy"], trials=spec["trials"], seconds=spec["seconds"],
                        records=spec["records"])
    print(f"{result.trials} trials in {result.elapsed:.1f} s; stopped: {result.stopped}")
    return 0
