"""Measurement where the kernels run on another machine (a GPU): build here, run there, read JSON back.

One batch of configurations goes through four steps:

1. **build here**, in the warm build workers of ``tiletune.measure.local`` (parallel, crash- and
   timeout-safe); configurations the template rejects are ``invalid`` and never built;
2. **write a batch directory**: every kernel as an ``export_library`` .so (for a CUDA target: the host code
   plus the device module, which TVM 0.27 stores as CUDA C source and the GPU machine's TVM runtime compiles
   when it loads the library; tests check here that nvcc compiles that source for sm_90) and ``manifest.json`` (workload key, operator parameters, input/output
   shapes, dtype, tolerance, seed, measure settings, and each kernel's id, file and configuration), see
   ``write_batch`` and ``tiletune/measure/gpu_runner.py``;
3. a **transport** runs ``gpu_runner.py`` on that directory on the machine that has the device
   (it needs only the TVM runtime, numpy and torch there; ``tiletune.measure.gpu_bundle`` makes the
   runtime-only TVM bundle) and brings ``results.json`` back into the directory;
4. **read the results** back into MeasureResults (``run-error``, ``run-timeout``, ``wrong-answer`` come
   from the runner; a kernel without a result, or a failed transport, is ``run-error`` with the reason).

Transports:

- ``LocalTransport(device)``: runs ``gpu_runner.py`` in a subprocess on this machine (``device="cuda"``
  when this machine has a GPU, ``device="cpu"`` to exercise the whole path with an LLVM-target kernel);
- ``CommandTransport(template)``: any shell command, e.g. copy the directory with rsync, run the runner
  over ssh, copy ``results.json`` back. Placeholders: ``{dir}`` (the batch directory), ``{name}`` (its
  base name), ``{runner}`` (the path of gpu_runner.py here), ``{python}`` (this interpreter);
- ``HandoffTransport(notify)``: writes the batch and waits until ``results.json`` with ``"done": true``
  appears in it, calling ``notify(batch_dir, command)`` once: for a GPU that only a person or an agent
  can reach (the agent's device tool copies the working tree to a GPU machine and returns the files the
  command writes under ``$OUT``; see ``handoff_command``).

The same steps split in two for a GPU reached by hand: ``RemoteMeasurer.prepare(configs)`` builds a batch
directory (its manifest lists every configuration with its build outcome) and ``collect(batch_dir, space)``
turns the runner's results.json into MeasureResults, in the configurations' order. From the shell::

    python -m tiletune.measure.remote prepare gemm:M=1024,N=1024,K=1024 --target cuda:sm_90 --sample 32
    # on the GPU machine:  sh gpu-bundle/run.sh gpu-batches/batch0001-XXXX --out $OUT/results.json
    python -m tiletune.measure.remote collect gpu-batches/batch0001-XXXX --results RESULTS.json --records r.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import asdict
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import TiletuneError
from ..records import Record, RecordWriter, now
from ..schedules import check, make_space
from ..schedules.cpu import InvalidConfig
from ..space import Config, Space
from ..target import parse_target, target_key
from ..workloads import parse
from ..workloads.base import Workload
from .base import MeasureResult, MeasureSettings
from .local import DEFAULT_BUILDER, LocalMeasurer, WorkerPool

RUNNER = str(Path(__file__).with_name("gpu_runner.py"))
RUNNER_STARTUP_S = 120.0  # torch + tvm import and the reference, per runner launch


EXPORTER = "tiletune.measure.remote:export_kernel"


def export_kernel(workload: Workload, lib, path: str) -> float:
    """Runs in a build worker (as its "runner"): write the kernel it built as a shared library."""
    t0 = time.perf_counter()
    lib.export_library(path)
    return time.perf_counter() - t0


class TransportError(Exception):
    """The transport could not run the batch (reported as run-error for every kernel of the batch)."""


# ---- transports ----------------------------------------------------------------------------------
class Transport(ABC):
    """Runs gpu_runner.py on a batch directory somewhere and leaves ``results.json`` in it."""

    @abstractmethod
    def run(self, batch_dir: str, timeout: float) -> None:
        ...

    def describe(self) -> str:
        return type(self).__name__


def _run_process(cmd, timeout: float, shell: bool = False, env: dict | None = None) -> None:
    try:
        p = subprocess.run(cmd, shell=shell, timeout=timeout, capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise TransportError(f"transport command exceeded {timeout:.0f} s") from None
    except OSError as e:
        raise TransportError(f"transport command could not start: {e}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout or "").strip()[-1500:]
        raise TransportError(f"transport command exited with code {p.returncode}: {tail}")


class LocalTransport(Transport):
    """Runs the runner in a subprocess here (``python gpu_runner.py DIR --device DEVICE``)."""

    def __init__(self, device: str = "cuda", python: str = sys.executable, env: dict | None = None,
                 isolate: bool = True):
        if device not in ("cuda", "cpu"):
            raise TiletuneError(f"LocalTransport device must be 'cuda' or 'cpu', got {device!r}")
        self.device, self.python, self.env, self.isolate = device, python, env, isolate

    def run(self, batch_dir: str, timeout: float) -> None:
        cmd = [self.python, RUNNER, batch_dir, "--device", self.device]
        if not self.isolate:
            cmd.append("--no-isolate")
        env = None if self.env is None else {**os.environ, **self.env}
        _run_process(cmd, timeout, env=env)

    def describe(self) -> str:
        return f"local ({self.device})"


class CommandTransport(Transport):
    """A user's shell command that runs the runner on the batch and puts results.json back into it."""

    def __init__(self, template: str):
        if "{dir}" not in template and "{name}" not in template:
            raise TiletuneError("a transport command must name the batch directory as {dir} (or {name}); e.g. "
                                "'rsync -a {dir} gpu:/tmp/ && ssh gpu python3 /tmp/gpu_runner.py /tmp/{name} && "
                                "rsync gpu:/tmp/{name}/results.json {dir}/'")
        self.template = template

    def run(self, batch_dir: str, timeout: float) -> None:
        cmd = self.template.format(dir=shlex.quote(batch_dir), name=shlex.quote(os.path.basename(batch_dir)),
                                   runner=shlex.quote(RUNNER), python=shlex.quote(sys.executable))
        _run_process(cmd, timeout, shell=True)

    def describe(self) -> str:
        return f"command ({self.template})"


def handoff_command(batch_dir: str, bundle: str = "gpu-bundle") -> str:
    """The command to run on the GPU machine, from the same working directory as here (paths under it are
    given relative, as the device tool's copy of the working tree has another root)."""
    def rel(p: str) -> str:
        p = os.path.abspath(p)
        here = os.getcwd()
        return os.path.relpath(p, here) if p.startswith(here + os.sep) else p

    return f"sh {rel(bundle)}/run.sh {rel(batch_dir)} --out $OUT/results.json"


class HandoffTransport(Transport):
    """Waits for someone else to run the batch: polls for ``results.json`` with ``"done": true``."""

    def __init__(self, notify: Callable[[str, str], None] | None = None, poll_s: float = 2.0,
                 bundle: str = "gpu-bundle"):
        self.notify = notify or (lambda d, c: print(f"[tiletune] run on the GPU machine: {c}\n"
                                                    f"[tiletune] then copy results.json into {d}", flush=True))
        self.poll_s, self.bundle = poll_s, bundle

    def run(self, batch_dir: str, timeout: float) -> None:
        self.notify(batch_dir, handoff_command(batch_dir, self.bundle))
        path = os.path.join(batch_dir, "results.json")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    if json.load(f).get("done"):
                        return
            except (OSError, ValueError):
                pass
            time.sleep(self.poll_s)
        raise TransportError(f"no results.json in {batch_dir} after {timeout:.0f} s")


def cuda_available() -> bool:
    """Whether this machine's TVM runtime sees a CUDA device."""
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001
        return False


# ---- batch directory -------------------------------------------------------------------------------
def manifest(workload: Workload, space: Space, kernels: Sequence[tuple[str, str, Config]], settings: MeasureSettings,
             device: str, seed: int = 0, target: dict | None = None, entries: list | None = None) -> dict[str, Any]:
    """The manifest that gpu_runner.py reads (see its docstring); ``entries`` (ignored by the runner) list
    every configuration of the batch with its build outcome, for ``collect``."""
    return {
        "version": 1,
        "workload": {"key": workload.key, "op": workload.op, "params": dict(workload.values),
                     "layout": getattr(workload, "layout", None), "dtype": workload.dtype, "input_shapes": [list(s) for s in workload.input_shapes()],
                     "output_shape": list(workload.output_shape()), "tolerance": list(workload.tolerance())},
        "seed": seed,
        "device": device,
        "target": target,
        "settings": asdict(settings),
        "kernels": [{"id": kid, "file": f, "config": space.to_dict(c)} for kid, f, c in kernels],
        "entries": entries if entries is not None else
        [{"id": kid, "config": space.to_dict(c), "build_s": 0.0} for kid, _, c in kernels],
    }


def write_batch(batch_dir: str, workload: Workload, space: Space, kernels: Sequence[tuple[str, str, Config]],
                settings: MeasureSettings, device: str, target: dict | None = None, entries: list | None = None) -> str:
    """Write manifest.json into ``batch_dir`` (the kernel files, named in ``kernels``, are already there)."""
    os.makedirs(batch_dir, exist_ok=True)
    with open(os.path.join(batch_dir, "manifest.json"), "w") as f:
        json.dump(manifest(workload, space, kernels, settings, device, target=target, entries=entries), f, indent=1)
    return batch_dir


def read_results(batch_dir: str) -> dict[str, Any]:
    path = os.path.join(batch_dir, "results.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise TransportError(f"no results from the runner ({path}: {e.strerror})") from None
    except ValueError as e:
        raise TransportError(f"unreadable results {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise TransportError(f"{path} has no 'results' object")
    return data


# ---- the measurer ----------------------------------------------------------------------------------
class RemoteMeasurer(LocalMeasurer):
    """Builds here (the LocalMeasurer's warm build workers), runs through a Transport.

    ``device``: "cuda" for CUDA targets (default), "cpu" for LLVM targets (tests, or a remote CPU).
    ``keep``: keep the batch directories (kernels, manifest, results) under ``workdir``."""

    kind = "remote"

    def __init__(self, workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                 transport: Transport | None = None, *, device: str | None = None, workdir: str | None = None,
                 keep: bool = False, build_workers: int | None = None, builder: str = DEFAULT_BUILDER,
                 pool: WorkerPool | None = None):
        super().__init__(workload, space, target, settings, build_workers=build_workers, builder=builder,
                         runner=EXPORTER, pool=pool)
        self.device = device or ("cuda" if target.get("kind") == "cuda" else "cpu")
        self.transport = transport or LocalTransport(self.device)
        self.keep = keep
        self.workdir = workdir
        if workdir:
            os.makedirs(workdir, exist_ok=True)
        self._tmp = tempfile.mkdtemp(prefix="tiletune-remote-")
        self._batches = 0
        self.last_info: dict[str, Any] = {}

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        batch = self.prepare(configs)
        with open(os.path.join(batch, "manifest.json")) as f:
            n = len(json.load(f)["kernels"])
        failure = None
        if n:
            timeout = RUNNER_STARTUP_S + n * (self.settings.run_timeout + 5.0)
            t0 = time.perf_counter()
            try:
                self.transport.run(batch, timeout)
            except TransportError as e:
                failure = str(e)
            self.stats["run_s"] += time.perf_counter() - t0
        results, self.last_info = collect(batch, self.space, failure=failure, runner=self.transport.describe())
        if not self.keep:
            shutil.rmtree(batch, ignore_errors=True)
        return results

    def prepare(self, configs: Sequence[Config]) -> str:
        """Check, build and export ``configs`` into a new batch directory and write its manifest; returns the
        directory. The manifest's ``entries`` list every configuration in order with its build outcome
        (invalid and build errors too), so that ``collect(batch_dir, space)`` needs only the directory:
        prepare here, run the batch on the GPU machine any way you like, collect later."""
        results: dict[int, MeasureResult] = {}
        todo: list[int] = []
        for i, c in enumerate(configs):
            try:
                check(self.workload, self.space, c, self.target)
                todo.append(i)
            except InvalidConfig as e:
                results[i] = MeasureResult(c, error="invalid", message=str(e))
        t0 = time.perf_counter()
        self._batches += 1
        batch = tempfile.mkdtemp(prefix=f"batch{self._batches:04d}-", dir=self.workdir or self._tmp)
        built = self._export_all(configs, self._build(configs, todo, results), results, batch)
        self.stats["build_s"] += time.perf_counter() - t0
        self.stats["worker_restarts"] = self.pool.restarts - self._restarts0
        kernels = [(f"k{i}", f"k{i}.so", configs[i]) for i in sorted(built)]
        entries = []
        for i, c in enumerate(configs):
            e = {"id": f"k{i}", "config": self.space.to_dict(c), "build_s": built.get(i, 0.0)}
            if i in results:
                e.update(error=results[i].error, message=results[i].message, build_s=results[i].build_s)
            entries.append(e)
        write_batch(batch, self.workload, self.space, kernels, self.settings, self.device, self.target, entries)
        return batch

    def _export_all(self, configs, built: dict[int, tuple], results, batch: str) -> dict[int, float]:
        """Have each build worker export the kernel it holds into ``batch``; {index: build seconds}."""
        out: dict[int, float] = {}
        for i, (slot, key, owner, build_s) in sorted(built.items()):
            if self.pool.workers[slot] is not owner:  # its worker died since: rebuild in the replacement
                again = self._build(configs, [i], results, slots=[slot])
                if i not in again:
                    continue
                slot, key, owner, build_s = again[i]
            path = os.path.join(batch, f"k{i}.so")
            w = self.pool.workers[slot]
            try:
                w.send(("run", self._blob, key, path, self.settings.build_timeout))
            except (OSError, BrokenPipeError) as e:
                self.pool.replace(slot)
                results[i] = MeasureResult(configs[i], error="build-error", message=f"build worker: {e}")
                continue
            wait([w.conn], timeout=self.settings.build_timeout)
            msg, dead = w.poll()
            if msg is not None and msg[0] == "ok":
                out[i] = build_s + float(msg[1])
                continue
            if msg is None:
                code = w.exitcode
                self.pool.replace(slot)
                msg = ("build-error", f"build worker crashed while exporting (exit code {code})") if dead else \
                      ("build-timeout", f"export exceeded {self.settings.build_timeout:.0f} s")
            kind = "build-error" if msg[0] == "run-error" else msg[0]
            results[i] = MeasureResult(configs[i], error=kind, message=f"export: {msg[1]}")
        return out


def collect(batch_dir: str, space: Space, failure: str | None = None,
            runner: str = "the runner") -> tuple[list[MeasureResult], dict[str, Any]]:
    """MeasureResults of a prepared batch (in the order of its configurations) from its manifest and the
    runner's results.json; returns them with the runner's information (device name, versions).
    A built kernel without a result is a run-error saying why (``failure``, e.g. the transport's error)."""
    with open(os.path.join(batch_dir, "manifest.json")) as f:
        man = json.load(f)
    data: dict[str, Any] = {"results": {}}
    if any(e.get("error") is None for e in man["entries"]):
        try:
            data = read_results(batch_dir)
        except TransportError as e:
            failure = failure or str(e)
    info = {k: v for k, v in data.items() if k != "results"}
    extra = {"device": data.get("device_name", man.get("device"))}
    out = []
    for e in man["entries"]:
        c = space.from_dict(e["config"])
        build_s = float(e.get("build_s", 0.0))
        if e.get("error"):
            out.append(MeasureResult(c, error=str(e["error"]), message=str(e.get("message", "")), build_s=build_s))
            continue
        r = data["results"].get(e["id"])
        if r is None:
            out.append(MeasureResult(c, error="run-error", build_s=build_s, extra=extra,
                                     message=failure or f"{runner} gave no result for this kernel"))
            continue
        run_s = float(r.get("run_s", 0.0))
        costs = tuple(float(x) for x in r.get("costs", ()) or ())
        if r.get("error"):
            out.append(MeasureResult(c, error=str(r["error"]), message=str(r.get("message", "")), build_s=build_s,
                                     run_s=run_s, extra=extra))
        elif not costs:
            out.append(MeasureResult(c, error="run-error", message="the runner returned no timings", build_s=build_s,
                                     run_s=run_s, extra=extra))
        else:
            out.append(MeasureResult(c, costs=costs, build_s=build_s, run_s=run_s, extra=extra))
    return out, info


def make_measurer(workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                  transport: Transport | None = None, **kwargs) -> RemoteMeasurer:
    """The measurer for a non-LLVM target: a RemoteMeasurer with ``transport``, by default a LocalTransport
    on this machine's GPU when it has one."""
    wl = parse(workload)
    if target.get("kind") != "cuda" and transport is None:
        raise TiletuneError(f"no measurer for target kind {target.get('kind')!r} without a transport")
    if transport is None:
        if not cuda_available():
            raise TiletuneError(
                "measuring a CUDA target needs a GPU, and this machine's TVM runtime sees none. Build here and "
                "run there with tiletune.measure.remote.RemoteMeasurer(..., transport=CommandTransport("
                "'<copy {dir} to the GPU machine, run gpu_runner.py on it, copy results.json back>')) or "
                "HandoffTransport(); make the runtime-only TVM bundle for that machine with "
                "'python -m tiletune.measure.gpu_bundle DIR'")
        transport = LocalTransport("cuda")
    return RemoteMeasurer(wl, space, target, settings, transport, **kwargs)


# ---- command line: prepare a batch here, run it on the GPU machine, collect it here ---------------------
def _main(argv: list[str] | None = None) -> int:
    """``python -m tiletune.measure.remote prepare|collect ...`` (see --help)."""
    ap = argparse.ArgumentParser(prog="python -m tiletune.measure.remote",
                                 description="Build a batch of kernels here, run it with gpu_runner.py on the "
                                 "GPU machine (sh BUNDLE/run.sh BATCH --out RESULTS.json), collect it here.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="build configurations into a batch directory (prints its path)")
    p.add_argument("workload")
    p.add_argument("--target", default="cuda", help="default cuda (sm_90)")
    p.add_argument("--levels", default=None, help="Ls,Lr (default 4,2)")
    p.add_argument("--sample", type=int, default=0, help="this many random valid configurations")
    p.add_argument("--config", action="append", default=[], help="a configuration as a JSON object (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="gpu-batches", help="where the batch directory is made")
    c = sub.add_parser("collect", help="read a batch's results (after the runner ran on it)")
    c.add_argument("batch")
    c.add_argument("--results", default=None, help="results JSON (default BATCH/results.json)")
    c.add_argument("--records", default=None, help="append the results to this records file")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "prepare":
            wl = parse(a.workload)
            target = parse_target(a.target)
            levels = tuple(int(x) for x in a.levels.split(",")) if a.levels else None
            space = make_space(wl, levels, target)
            configs = [space.from_dict(json.loads(x)) for x in a.config]
            if a.sample:
                configs += _sample_valid(wl, space, target, a.sample, np.random.default_rng(a.seed), configs)
            if not configs:
                raise TiletuneError("nothing to prepare: give --sample N or --config JSON")
            with RemoteMeasurer(wl, space, target, workdir=a.workdir, keep=True,
                                transport=LocalTransport("cpu")) as m:
                batch = m.prepare(configs)
            print(batch)
            print(f"on the GPU machine: {handoff_command(batch)}", file=sys.stderr)
            return 0
        with open(os.path.join(a.batch, "manifest.json")) as f:
            man = json.load(f)
        if a.results:
            shutil.copyfile(a.results, os.path.join(a.batch, "results.json"))
        wl = parse(man["workload"]["key"])
        target = man.get("target") or {"kind": "cuda", "arch": "sm_90"}
        space = make_space(wl, _levels_of(man), target)
        results, info = collect(a.batch, space)
        print(f"{wl.key} on {info.get('device_name', man.get('device'))}")
        for e, r in zip(man["entries"], results):
            what = f"{r.gflops(wl.flops):9.1f} GFLOPS  {r.median * 1e6:10.1f} us" if r.ok else \
                f"{r.error}: {r.message[:100]}"
            print(f"{e['id']:>6}  {what}  {json.dumps(e['config'])}")
        if a.records:
            t = now()
            with RecordWriter(a.records) as w:
                for i, r in enumerate(results):
                    w.write(Record(workload=wl.key, target=target_key(target), config=space.to_dict(r.config),
                                   costs=tuple(r.costs), median_s=r.median if r.ok else None,
                                   gflops=r.gflops(wl.flops), error=r.error, message=r.message[:2000],
                                   strategy="batch", trial=i, build_s=r.build_s, run_s=r.run_s, started=t,
                                   finished=t, measurer="remote"))
        return 0
    except TiletuneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _levels_of(man: dict):
    """The level counts of a manifest's configurations (the split knobs' lengths): (Ls, Lr) or per axis."""
    cfg = (man.get("entries") or man.get("kernels") or [{}])[0].get("config", {})
    return _guess_levels(man, cfg) if cfg else None


def _guess_levels(man: dict, cfg: dict):
    wl = parse(man["workload"]["key"])
    kinds = {a.name: a.kind for a in wl.axes_no_tvm()}
    s = {len(v) for k, v in cfg.items() if k.startswith("tile_") and kinds.get(k[5:]) == "S"}
    r = {len(v) for k, v in cfg.items() if k.startswith("tile_") and kinds.get(k[5:]) == "R"}
    if len(s) == 1 and len(r) <= 1:
        return (s.pop(), r.pop() if r else 2)
    return {k[5:]: len(v) for k, v in cfg.items() if k.startswith("tile_")}


def _sample_valid(wl, space, target, n, rng, exclude) -> list:
    out: list = []
    for _ in range(200 * n):
        if len(out) == n:
            break
        c = space.sample(rng)
        if c in out or c in exclude:
            continue
        try:
            check(wl, space, c, target)
        except InvalidConfig:
            continue
        out.append(c)
    return out


if __name__ == "__main__":
    sys.exit(_main())
