"""Local measurement in warm worker processes.

Workers (one per core by default) compile a batch of configurations in parallel and keep each compiled
kernel in memory; then the kernels are run, checked and timed one at a time, each by the worker that
built it, while the other workers wait, so a timing is never taken while a build competes for the
cores, and no kernel is written to disk and linked (that step cost as much as compiling). Workers import
TVM once (without torch, see the end of this file) and stay warm across batches and across workloads
(TVM's own LocalBuilder spends ~37 s per candidate here for a 0.07 s compile).

Failures are data: a configuration the template rejects is ``invalid`` (nothing built); an exception
while building is ``build-error``; a worker that dies (segfault) is replaced and the configuration is
``build-error`` / ``run-error`` (the other kernels it held are rebuilt by its replacement); a task that
exceeds its timeout kills the worker (``build-timeout`` / ``run-timeout``); an output different from the
numpy reference is ``wrong-answer``.

The builder and runner are named by "module:function" so that tests can inject faults:
``builder(workload, space, config, target) -> runtime module`` and
``runner(workload, module, settings[, best_s=...]) -> list of seconds``; ``best_s``, the best median this
measurer has measured so far, is passed only when the early cut-off applies (``MeasureSettings.cutoff``
> 0 and a kernel has been measured): a kernel clearly slower than it gets one timing sample instead of
``repeat`` (``tiletune.measure.timing``, step 3).
"""
from __future__ import annotations

import gc
import importlib
import math
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Sequence

import cloudpickle

from ..errors import TiletuneError
from ..lifetime import Lifeline, job_deadline
from ..schedules import build, check, prepacked_inputs
from ..schedules.cuda import cuda_module
from ..schedules.cpu import InvalidConfig, packable_inputs
from ..space import Config, Space
from ..target import check_local_target, host_cores
from ..workloads import parse
from ..workloads.base import Workload
from ..workloads.primfunc import remember_text
from ..workloads.size import check_memory
from .base import MeasureResult, MeasureSettings, Measurer
from .kernel_pool import BatchOutcome, Job, KernelPool
from .timing import warm_and_plan

DEFAULT_BUILDER = "tiletune.measure.local:build_kernel"
GPU_BUILDER = "tiletune.measure.local:build_kernel_gpu"  # a CUDA target measured here: compiled while building
DEFAULT_RUNNER = "tiletune.measure.local:run_kernel"
STARTUP_TIMEOUT = 180.0  # a cold TVM import on a loaded 2-core machine can take many seconds
# TVM's pool threads spin (sched_yield) this many times after a parallel call before they sleep. TVM's
# default, 300000, is ~250 ms of a core after *every* kernel call: a worker's spinning thread competed with the
# other worker's timing and with the next builds. 10000 is ~8 ms: still far longer than the gaps between the
# back-to-back calls of a timing, so timed calls find their threads awake (docs/decisions/worker-spin.md).
WORKER_SPIN_COUNT = 10000


def _resolve(path: str):
    mod, _, fn = path.partition(":")
    return getattr(importlib.import_module(mod), fn)


# ---- functions that run inside the workers --------------------------------------------------------

def build_kernel(workload: Workload, space: Space, config: Config, target: dict):
    """Schedule and compile ``config``; returns the runtime module, machine code generated.

    TVM's in-memory LLVM module generates machine code (JIT) at its first function look-up; doing that
    here keeps code generation in the parallel build phase instead of the sequential run phase.
    The kernel is always called with arrays of the workload's shapes and dtypes (``run_kernel``), so it is
    compiled without the entry function's argument checks (``schedules.build``).

    A kernel that takes some of a model's weights packed (``schedules.prepacked_inputs``) is returned as
    ``Prepacked``: ``run_kernel`` packs those inputs before the first run, outside the timing, as the model
    build packs the weights once."""
    panels = prepacked_inputs(workload, space, config, target)
    mod = build(workload, space, config, target, arg_checks=False, prepacked=bool(panels)).mod
    mod["main"]
    return Prepacked(mod, panels) if panels else mod


@dataclass
class Prepacked:
    """A built kernel (``mod``) that takes the inputs at the positions of ``panels`` in their packed layouts."""
    mod: Any
    panels: dict

    def inputs(self, inputs: list) -> list:
        return [self.panels[i].pack(x) if i in self.panels else x for i, x in enumerate(inputs)]

    def export_library(self, path: str) -> None:
        self.mod.export_library(path)


def build_kernel_gpu(workload: Workload, space: Space, config: Config, target: dict):
    """``build_kernel`` for this machine's GPU, and one launch on the workload's inputs: TVM compiles a kernel's
    CUDA source (NVRTC) and loads it onto the device at its first launch, and here that happens in the parallel
    build phase instead of the run phase, which runs one kernel at a time. Nothing is timed or checked here."""
    import tvm

    mod = build_kernel(workload, space, config, target)
    dev = tvm.cuda(0)
    _, args, out, _ = kernel_arguments(workload, mod, dev)
    mod["main"](*args, out)
    dev.sync()
    return mod


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


def kernel_arguments(workload: Workload, lib, dev):
    """``(module, args, out, reference)`` for calling built kernel ``lib`` on ``workload``'s inputs on device ``dev``:
    the runtime module (a ``Prepacked`` kernel's own), the inputs as tensors (packed where the kernel takes them
    packed), a zeroed output tensor and the numpy reference output."""
    import numpy as np
    import tvm

    inputs, ref = _inputs_and_reference(workload)
    if isinstance(lib, Prepacked):
        inputs, lib = lib.inputs(inputs), lib.mod
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(workload.output_shape(), workload.out_dtype), dev)
    return lib, args, out, ref


def run_kernel(workload: Workload, lib, settings: MeasureSettings, best_s: float = math.inf) -> list[float]:
    """Run once and check against numpy, then time by the rule of ``tiletune.measure.timing``; seconds
    per run for every sample (a single one when the kernel's warm runs are slower than
    ``settings.cutoff`` times ``best_s``, the best median known for the workload).
    ``lib`` is a runtime module or the path of an exported library."""
    import tvm

    if isinstance(lib, (str, os.PathLike)):
        lib = tvm.runtime.load_module(str(lib))
    gpu = not isinstance(lib, Prepacked) and cuda_module(lib) is not None  # a CUDA build runs on the GPU
    dev = tvm.cuda(0) if gpu else tvm.cpu()
    lib, args, out, ref = kernel_arguments(workload, lib, dev)
    main = lib["main"]
    main(*args, out)  # first run: also the correctness check
    if settings.check:
        check_output(workload, out.numpy(), ref)
    # the rule of tiletune.measure.timing: warm runs size the samples; TVM's evaluator then times the
    # samples in C++ with that number fixed (min_repeat_ms=0: its own adaptive loop would re-run samples).
    # A GPU launch returns before the kernel ends: each warm call waits for it
    call = (lambda: (main(*args, out), dev.sync())) if gpu else (lambda: main(*args, out))
    plan = warm_and_plan(call, settings, best_s)
    if isinstance(plan, list):  # cut off: clearly slower than the best so far, one sample (the warm-up)
        return plan
    if cold_weights(workload, gpu):  # one call per sample, each after the flush
        f = lib.time_evaluator("main", dev, number=1, repeat=plan.repeat, min_repeat_ms=0, f_preproc=COLD_PREPROC)
    else:
        f = lib.time_evaluator("main", dev, number=plan.number, repeat=plan.repeat, min_repeat_ms=0)
    return [float(x) for x in f(*args, out).results]


#: TVM's preprocessing that flushes every argument but the first (the activation) from the CPU caches
COLD_PREPROC = "cache_flush_cpu_non_first_arg"


def cold_weights(workload: Workload, gpu: bool) -> bool:
    """Whether a kernel's samples are each one call with its weights (and output) flushed from the caches first
    (``COLD_PREPROC``, MetaSchedule's ``enable_cpu_cache_flush``): a model's kernel with weights on a CPU, which in
    the model finds them cold, the other kernels having run in between (docs/decisions/measure-cold-weights.md).
    Its warm-up and the cut-off stay warm."""
    return not gpu and bool(getattr(workload, "weights", None))


_CONTEXTS: dict[bytes, tuple] = {}


def _context(blob: bytes) -> tuple:
    """(workload, space, target, builder, runner) of a task, unpickled once per worker."""
    if blob not in _CONTEXTS:
        cfg = cloudpickle.loads(blob)
        for hash_, text in cfg.get("sources", {}).items():
            remember_text(hash_, lambda text=text: text)
        if len(_CONTEXTS) > 16:
            _CONTEXTS.clear()
        _CONTEXTS[blob] = (parse(cfg["workload"]), cfg["space"], cfg["target"], _resolve(cfg["builder"]),
                           _resolve(cfg["runner"]))
    return _CONTEXTS[blob]


def _worker_main(conn: Connection, lifeline: Lifeline | None = None) -> None:
    """Serve tasks ``(op, context blob, kernel key, argument[, timeout[, runner keywords]])`` until told to
    stop. ``lifeline`` (see tiletune.lifetime) ends this process when the parent ends, and when a task with
    a timeout overruns it by ``job_deadline``'s margin (the parent, which kills at the timeout itself, is
    stuck)."""
    import tvm  # noqa: F401  (warm: import once, before the first task)

    # TVM's Python objects live as long as the worker: out of the collector's sight, its full
    # collections (triggered by the many objects a schedule creates) stop walking them again and again
    gc.collect()
    gc.freeze()
    kernels: dict[int, Any] = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            if lifeline is not None:
                lifeline.stop()
            return
        op, blob, key = task[0], task[1], task[2]
        if lifeline is not None and len(task) > 4 and task[4]:
            lifeline.arm(job_deadline(float(task[4])), f"{op} of kernel {key}")
        try:
            conn.send(serve(kernels, op, blob, key, task[3], task[5] if len(task) > 5 else {}))
        finally:
            if lifeline is not None:
                lifeline.disarm()


def serve(kernels: dict[int, Any], op: str, blob: bytes, key: int, arg: Any, kw: dict) -> tuple[str, Any]:
    """One task of a worker (here, or a cluster's actor): ``op`` "build" compiles configuration ``arg`` and keeps the
    kernel in ``kernels`` under ``key`` (("ok", seconds)); "run" runs, checks and times it with settings ``arg`` and
    runner keywords ``kw`` (("ok", costs)). Errors as data: (error kind, message)."""
    t0 = time.perf_counter()
    try:
        workload, space, target, builder, runner = _context(blob)
        if op == "build":
            kernels[key] = builder(workload, space, arg, target)
            return "ok", time.perf_counter() - t0
        lib = kernels.pop(key)
        return "ok", runner(workload, lib, arg, **kw)
    except InvalidConfig as e:
        return "invalid", str(e)
    except WrongAnswer as e:
        return "wrong-answer", str(e)
    except Exception as e:  # noqa: BLE001 - errors are data
        kind = "build-error" if op == "build" else "run-error"
        tb = traceback.format_exception_only(type(e), e)
        return kind, "".join(tb).strip()[-1500:]


class _Worker:
    """A worker subprocess (``python -m tiletune.measure.local``) connected by a socket pair.

    A fresh interpreter rather than multiprocessing's spawn: it does not re-import the caller's
    ``__main__`` (so scripts and stdin programs can measure) and nothing is inherited but the socket.
    The worker ends with this process (tiletune.lifetime); the parent-death signal is asked for only when
    the worker is started from the main thread (Linux sends it when the starting *thread* ends)."""

    def __init__(self, threads: int | None = None):
        parent, child = socket.socketpair()
        env = dict(os.environ)
        if threads and "TVM_NUM_THREADS" not in os.environ:
            env["TVM_NUM_THREADS"] = str(threads)
        env.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(WORKER_SPIN_COUNT))
        death_signal = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiletune.measure.local", str(child.fileno()), str(os.getpid()),
             str(int(death_signal))],
            pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=env,
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

    def send(self, msg) -> None:
        if not self.wait_ready():
            raise OSError("worker did not start")
        self.conn.send(msg)

    def poll(self) -> tuple[Any, bool]:
        """(message or None, worker is dead)."""
        try:
            if self.conn.poll():
                return self.conn.recv(), False
        except (EOFError, OSError):
            return None, True
        return None, not self.alive()

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


class WorkerPool(KernelPool):
    """``size`` warm workers, replaced when they die. One pool can serve many measurers in turn (the
    benchmark harness keeps one for a whole suite); workers start at once so that their TVM imports
    overlap with the caller's own set-up.

    ``threads``: the TVM runtime threads of each worker (TVM_NUM_THREADS; default: the cores this process
    may use). It must be set: TVM's own default halves the hardware concurrency on x86 to skip
    hyper-threads, so on a 2-vCPU machine without them every parallel kernel ran on one core
    (docs/decisions/worker-threads.md)."""

    def __init__(self, size: int | None = None, threads: int | None = None):
        self.size = size or host_cores()
        self.threads = threads or host_cores()
        if self.size < 1 or self.threads < 1:
            raise TiletuneError(f"a worker pool needs >= 1 worker and thread, got {self.size} and {self.threads}")
        self.workers: list[_Worker] = [_Worker(self.threads) for _ in range(self.size)]
        self.restarts = 0
        self._count = 0  # kernel keys, unique in the pool

    def get(self, slot: int) -> _Worker:
        w = self.workers[slot]
        if not w.alive():
            self.replace(slot)
        return self.workers[slot]

    def replace(self, slot: int) -> None:
        self.workers[slot].kill()
        self.workers[slot] = _Worker(self.threads)
        self.restarts += 1

    def warm_up(self) -> None:
        for w in self.workers:
            w.wait_ready()

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def measure_batch(self, job: Job, configs: Sequence[Config], todo: Sequence[int], best_s: float) -> BatchOutcome:
        """Build ``todo`` in parallel over the workers, then run the kernels one at a time, by the worker that
        holds each, each worker's kernels in a row (a worker's pool threads spin a little after its last run;
        see WORKER_SPIN_COUNT)."""
        results: dict[int, MeasureResult] = {}
        t0 = time.perf_counter()
        built = self.build(job.blob, job.settings.build_timeout, configs, todo, results)
        out = BatchOutcome(results, build_s=time.perf_counter() - t0)
        for i in sorted(todo, key=lambda i: built[i][0] if i in built else -1):
            if i not in built:
                continue
            slot, key, owner, build_s = built[i]
            if self.workers[slot] is not owner:  # its worker died since: rebuild in the replacement
                again = self.build(job.blob, job.settings.build_timeout, configs, [i], results, slots=[slot])
                if i not in again:
                    continue
                slot, key, owner, _ = again[i]
            t0 = time.perf_counter()
            kind, payload = self.run(slot, job.blob, key, job.settings, best_s)
            run_s = time.perf_counter() - t0
            out.run_s += run_s
            if kind == "ok":
                results[i] = MeasureResult(configs[i], costs=tuple(payload), build_s=build_s, run_s=run_s)
                if results[i].ok:
                    best_s = min(best_s, results[i].median)
            else:
                results[i] = MeasureResult(configs[i], error=kind, message=payload, build_s=build_s, run_s=run_s)
        return out

    def build(self, blob: bytes, timeout: float, configs, todo, results, slots=None) -> dict[int, tuple]:
        """Build in parallel over the workers; failures go into ``results``.
        Returns {index: (slot, kernel key, worker, build seconds)}."""
        pool, built = self, {}
        slots = list(range(pool.size)) if slots is None else slots
        pending = list(todo)
        busy: dict[int, tuple[int, int, float]] = {}  # slot -> (config index, kernel key, deadline)
        while pending or busy:
            for slot in slots:
                if slot in busy or not pending:
                    continue
                i = pending.pop(0)
                self._count += 1
                w = pool.get(slot)
                try:
                    w.send(("build", blob, self._count, configs[i], timeout))
                except (OSError, BrokenPipeError) as e:
                    pool.replace(slot)
                    results[i] = MeasureResult(configs[i], error="build-error", message=f"build worker: {e}")
                    continue
                busy[slot] = (i, self._count, time.perf_counter() + timeout)
            if not busy:
                continue
            wait([pool.workers[s].conn for s in busy],
                 timeout=max(0.0, min(d for _, _, d in busy.values()) - time.perf_counter()))
            now = time.perf_counter()
            for slot in list(busy):
                i, key, deadline = busy[slot]
                w = pool.workers[slot]
                msg, dead = w.poll()
                if msg is None and not dead and now < deadline:
                    continue
                del busy[slot]
                if msg is not None and msg[0] == "ok":
                    built[i] = (slot, key, w, float(msg[1]))
                elif msg is not None:
                    results[i] = MeasureResult(configs[i], error=msg[0], message=msg[1])
                elif dead:
                    code = w.exitcode
                    pool.replace(slot)
                    results[i] = MeasureResult(configs[i], error="build-error",
                                               message=f"build worker crashed (exit code {code})")
                else:
                    pool.replace(slot)
                    results[i] = MeasureResult(configs[i], error="build-timeout",
                                               message=f"build exceeded {timeout:.0f} s")
        return built

    def run(self, slot: int, blob: bytes, key: int, settings: MeasureSettings, best_s: float) -> tuple[str, Any]:
        """Run, check and time kernel ``key`` in the worker of ``slot`` that built it: (kind, costs or message)."""
        w = self.workers[slot]
        cut = {"best_s": best_s} if settings.cutoff > 0 and math.isfinite(best_s) else {}
        try:
            w.send(("run", blob, key, settings, settings.run_timeout) + ((cut,) if cut else ()))
        except (OSError, BrokenPipeError) as e:
            self.replace(slot)
            return "run-error", f"run worker: {e}"
        wait([w.conn], timeout=settings.run_timeout)
        msg, dead = w.poll()
        if msg is not None:
            return msg[0], msg[1]
        code = w.exitcode
        self.replace(slot)
        if dead:
            return "run-error", f"worker crashed while running (exit code {code})"
        return "run-timeout", f"run exceeded {settings.run_timeout:.0f} s"



def check_fits_here(workload: Workload, target: dict, *, workers: int | None = None, packs: bool = True) -> None:
    """Refuse, before any worker starts, a target this machine cannot run (``check_local_target``) and a
    measurement its memory cannot hold: ``workers`` processes (default: one per core of the target, at most
    the host's) each holding the inputs, the reference and, where ``packs``, the packed copies of the
    inputs the CPU template may pack."""
    check_local_target(target)
    if workers is None:
        workers = min(host_cores(), int(target.get("num-cores") or 0) or host_cores())
    check_memory(workload, workers=workers, packed=packable_inputs(workload) if packs else [])


def screen(workload: Workload, space: Space, target: dict, configs: Sequence[Config]) -> tuple[dict, list[int]]:
    """({position: its ``invalid`` result} for the configurations the template refuses, the positions to build):
    a refused configuration is never built or sent."""
    results: dict[int, MeasureResult] = {}
    todo: list[int] = []
    for i, c in enumerate(configs):
        try:
            check(workload, space, c, target)
            todo.append(i)
        except InvalidConfig as e:
            results[i] = MeasureResult(c, error="invalid", message=str(e))
    return results, todo


class LocalMeasurer(Measurer):
    """Measures configurations of ``workload`` on this machine: its CPU for an LLVM target, its GPU for a CUDA
    target (the workers build in parallel and run the kernels one at a time on the GPU).

    ``pool``: the KernelPool that builds and runs the kernels, shared by the measurers of several workloads: a
    WorkerPool (this machine) or a ``cluster.RayPool`` (the nodes of a Ray cluster; the measurer's ``kind`` is then
    "cluster"); by default the measurer owns a WorkerPool and closes it on ``close()`` (``owns_pool``: whether it
    closes the given ``pool``; default: no)."""

    kind = "local"

    def __init__(self, workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                 *, build_workers: int | None = None, builder: str = DEFAULT_BUILDER, runner: str = DEFAULT_RUNNER,
                 pool: KernelPool | None = None, owns_pool: bool | None = None):
        self.workload = parse(workload)
        self.space = space
        self.target = target
        self.settings = settings or MeasureSettings()
        cores = int(target.get("num-cores") or 0) or None
        n = build_workers or min(host_cores(), cores or host_cores())
        if self.kind == "local" and pool is not None and pool.kind != "local":
            self.kind = pool.kind  # the kernels are built and run on a cluster's nodes (cluster.RayPool)
        if self.kind == "local":  # a subclass that runs the kernels elsewhere may name another machine's cores
            packs = "pack" in {k.name for k in space.knobs}
            check_fits_here(self.workload, target, workers=pool.size if pool is not None else n, packs=packs)
        self._own_pool = pool is None if owns_pool is None else owns_pool
        self.pool = pool or WorkerPool(n, threads=cores)
        if self.kind in ("local", "cluster") and builder == DEFAULT_BUILDER and target.get("kind") == "cuda":
            builder = GPU_BUILDER
        context = {"workload": self.workload.key, "space": space, "target": target, "builder": builder, "runner": runner}
        if self.kind == "cluster" and isinstance(getattr(self.workload, "hash", None), str) \
                and isinstance(getattr(self.workload, "text", None), str):
            # a PrimFunc workload (a model's task) is found by its key in the machine's cache of TVMScript texts:
            # the text travels with the context and a cluster's worker puts it into its node's cache
            context["sources"] = {self.workload.hash: self.workload.text}
        self._blob = cloudpickle.dumps(context)
        self.best_s = math.inf  # the best median measured so far (early cut-off, MeasureSettings.cutoff)
        self._restarts0 = self.pool.restarts
        self.stats = {"build_s": 0.0, "run_s": 0.0, "worker_restarts": 0}

    def warm_up(self) -> None:
        self.pool.warm_up()

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        results, todo = screen(self.workload, self.space, self.target, configs)
        out = self.pool.measure_batch(Job(self._blob, self.settings), configs, todo, self.best_s)
        results.update(out.results)
        self.stats["build_s"] += out.build_s
        self.stats["run_s"] += out.run_s
        for i in todo:
            if results[i].ok:
                self.best_s = min(self.best_s, results[i].median)
        self.stats["worker_restarts"] = self.pool.restarts - self._restarts0
        return [results[i] for i in range(len(configs))]

    def _build(self, configs, todo, results, slots=None) -> dict[int, tuple]:
        """``WorkerPool.build`` with this measurer's context (the RPC measurer builds with it)."""
        return self.pool.build(self._blob, self.settings.build_timeout, configs, todo, results, slots=slots)

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()


if __name__ == "__main__":
    # argv: the socket's fd, the parent's pid, 1 to ask for the parent-death signal
    # A worker never uses torch, but tvm_ffi imports it when it is installed: most of TVM's import time
    # (import tvm: 4 s without torch, 11 s with it on a loaded 2-core machine). None in sys.modules makes
    # ``import torch`` fail with ImportError, which tvm_ffi expects.
    sys.modules.setdefault("torch", None)
    from tiletune.lifetime import die_with_parent

    _line = die_with_parent(int(sys.argv[2]), fd=int(sys.argv[1]), death_signal=sys.argv[3] == "1")
    # run the module's own (imported) copy so exception classes are those the builders raise
    from tiletune.measure.local import _worker_main as main

    main(Connection(int(sys.argv[1])), _line)
