"""Measurement on devices served by TVM's RPC tracker (``--rpc HOST:PORT:KEY``).

TVM users run a tracker (``python -m tvm.exec.rpc_tracker``) and, on every device, a server registered
with it under a key (``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY``; ``tiletune rpc``
prints or starts both). A batch of configurations goes through four steps:

1. **build here**, in the warm build workers of ``tiletune.measure.local`` (parallel, crash- and
   timeout-safe), for the remote target (``--target`` is the device's target); configurations the
   template rejects are ``invalid`` and never built;
2. **export** each kernel with ``export_library`` (the build workers again, in parallel). For a CUDA
   target TVM 0.27 keeps the device code as CUDA C source in the library, so no nvcc is needed here: the
   GPU machine's TVM compiles it when it loads the library (NVRTC, or nvcc with
   ``TVM_CUDA_COMPILE_MODE=nvcc``);
3. **run on a device**: one thread per device of the farm (as many as the tracker lists servers with the
   key when the measurer starts), each holding a session requested from the tracker, takes the next
   exported kernel of the batch, uploads and loads it, sends the inputs (drawn here, once per session and
   workload), runs it once and checks the output against the reference computed here, then times it with
   the device's ``time_evaluator`` by the rule of ``tiletune.measure.timing``: warm calls (counted and
   timed on the device, ``warm_runs_timed``), the early cut-off, and ``plan_samples``' number and repeat;
4. **results** come back as MeasureResults whose ``extra["device"]`` names the server
   (``KEY@HOST:PORT``), which the records keep in their ``device`` field.

Failures are data. An exception on the device (a lost connection, a server that disappeared, a kernel
that crashed the server's session process) is a ``run-error`` for that kernel naming the device; the
thread drops its session and requests a new one from the tracker, which hands it the next free server,
so the run goes on with the remaining devices. A kernel that has not finished ``run_timeout`` +
``KERNEL_MARGIN_S`` seconds after its device took it is a ``run-timeout``; its thread stays blocked until
the server ends the session (sessions are requested with ``session_timeout`` = ``SESSION_KERNELS``
kernel bounds, and renewed before a kernel could outlive it), then requests another. Kernels that no
device takes for ``request_timeout`` seconds (every server gone or stuck) are ``run-error``.
"""
from __future__ import annotations

import gc
import json
import os
import queue
import shutil
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Sequence

from ..errors import TiletuneError
from ..schedules import prepacked_inputs
from ..space import Config, Space
from ..workloads import parse
from ..workloads.base import Workload
from .base import MeasureResult, MeasureSettings
from .local import DEFAULT_BUILDER, LocalMeasurer, WorkerPool, WrongAnswer, check_output, screen
from .timing import plan_after, warm_runs_timed

EXPORTER = "tiletune.measure.rpc:export_kernel"
CONNECT_TIMEOUT_S = 5.0  # reaching the tracker
REQUEST_TIMEOUT_S = 60.0  # waiting for a free device
KERNEL_MARGIN_S = 15.0  # upload, load, inputs and check of one kernel, beyond its run_timeout
SESSION_KERNELS = 4  # a session lasts at most this many kernel bounds (what a hung kernel can hold a server)
RPC_FORM = "HOST:PORT:KEY"


# TVM's tracker protocol (tvm/rpc/base.py), spoken here without importing TVM, so that a wrong address is
# reported in a fraction of a second: a magic number each way, then JSON messages framed by their length.
TRACKER_MAGIC = 0x2F271
TRACKER_SUCCESS, TRACKER_REQUEST, TRACKER_SUMMARY = 0, 4, 6


def _recvall(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed")
        out += chunk
    return bytes(out)


def _send_json(sock: socket.socket, data) -> None:
    text = json.dumps(data).encode("utf-8")
    sock.sendall(struct.pack("<i", len(text)) + text)


def _recv_json(sock: socket.socket):
    return json.loads(_recvall(sock, struct.unpack("<i", _recvall(sock, 4))[0]).decode("utf-8"))


def export_kernel(workload: Workload, lib, path: str) -> float:
    """Runs in a build worker (as its "runner"): write the kernel it built as a shared library."""
    t0 = time.perf_counter()
    lib.export_library(path)
    return time.perf_counter() - t0


# ---- the tracker -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tracker:
    """The address of a TVM RPC tracker and the key of the devices to use."""

    host: str
    port: int
    key: str

    @classmethod
    def parse(cls, text: "str | Tracker") -> "Tracker":
        """``HOST:PORT:KEY`` (an IPv6 host in brackets: ``[::1]:9190:KEY``)."""
        if isinstance(text, Tracker):
            return text
        bad = f"bad --rpc {text!r}: expected {RPC_FORM}, e.g. 127.0.0.1:9190:my-device"
        host, sep, rest = str(text).strip().rpartition("]") if str(text).startswith("[") else ("", "", text)
        if sep:
            host = host[1:]
            if not rest.startswith(":"):
                raise TiletuneError(bad)
            port, _, key = rest[1:].partition(":")
        else:
            host, _, rest = str(text).partition(":")
            port, _, key = rest.partition(":")
        # no ':' in KEY: TVM's server registers KEY:RANDOM and the tracker splits at the colon
        if not host or not key or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() or c == ":"
                                                                                        for c in key):
            raise TiletuneError(bad)
        return cls(host, int(port), key)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}:{self.key}"

    @property
    def where(self) -> str:
        """``HOST:PORT``."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def _socket(self, timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
        """A connection to the tracker, handshake done; TiletuneError when there is none."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
        except OSError as e:
            raise TiletuneError(f"no RPC tracker at {self.where} ({e.strerror or e}); start one with "
                                f"'tiletune rpc tracker --host {self.host} --port {self.port}'") from None
        try:
            sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            magic = struct.unpack("<i", _recvall(sock, 4))[0]
        except OSError as e:
            sock.close()
            raise TiletuneError(f"{self.where} does not answer as an RPC tracker ({e})") from None
        if magic != TRACKER_MAGIC:
            sock.close()
            raise TiletuneError(f"{self.where} is not an RPC tracker")
        return sock

    def summary(self, timeout: float = CONNECT_TIMEOUT_S) -> dict:
        """The tracker's summary: ``server_info`` (key, addr of each server) and ``queue_info``."""
        sock = self._socket(timeout)
        try:
            sock.settimeout(timeout)
            _send_json(sock, [TRACKER_SUMMARY])
            value = _recv_json(sock)
        except (OSError, ValueError, struct.error) as e:
            raise TiletuneError(f"the RPC tracker at {self.where} did not answer ({e})") from None
        finally:
            sock.close()
        if not isinstance(value, list) or value[0] != TRACKER_SUCCESS or not isinstance(value[1], dict):
            raise TiletuneError(f"the RPC tracker at {self.where} answered {value!r}"[:300])
        return value[1]

    def servers(self) -> list[str]:
        """``HOST:PORT`` of the servers registered with this key (HOST is ``?`` where a server reported no
        address: TVM's server reports only its ``--custom-addr``)."""
        return sorted(server_address(s) for s in self.summary().get("server_info", [])
                      if s.get("key") == "server:" + self.key)

    def request(self, timeout: float, session_timeout: float):
        """A session on a free device with the key: ``(tvm RPCSession, "KEY@HOST:PORT")``; TimeoutError when
        none is free within ``timeout`` seconds, OSError/RuntimeError when the tracker or server fails."""
        from tvm import rpc

        sock = self._socket()
        try:
            sock.settimeout(timeout)
            _send_json(sock, [TRACKER_REQUEST, self.key, "", 0])
            value = _recv_json(sock)
        finally:
            sock.close()
        if not isinstance(value, list) or value[0] != TRACKER_SUCCESS:
            raise RuntimeError(f"the tracker answered {value!r}")
        url, port, matchkey = value[1]
        sess = rpc.connect(url, port, matchkey, session_timeout=session_timeout)
        return sess, f"{self.key}@{url}:{port}"


def server_address(info: dict) -> str:
    """``HOST:PORT`` of a server in a tracker's summary."""
    addr = list(info.get("addr") or ()) + [None, None]
    return f"{addr[0] or '?'}:{addr[1]}"


def check_tracker(tracker: Tracker) -> list[str]:
    """The servers with the tracker's key; TiletuneError (one line) when the tracker is unreachable or
    has none."""
    servers = tracker.servers()
    if not servers:
        raise TiletuneError(f"the RPC tracker at {tracker.where} has no server with key {tracker.key!r}; start "
                            f"one on each device with 'tiletune rpc server --tracker {tracker.where} "
                            f"--key {tracker.key}' (see 'tiletune rpc query {tracker.where}')")
    return servers


# ---- one kernel of a batch ------------------------------------------------------------------------
class _Job:
    """An exported kernel waiting for a device; its result is set once (by the device or a timeout)."""

    def __init__(self, index: int, config: Config, path: str, build_s: float):
        self.index, self.config, self.path, self.build_s = index, config, path, build_s
        self.device: str | None = None
        self.taken = 0.0
        self.result: MeasureResult | None = None


class _Device(threading.Thread):
    """One device of the farm: a session requested from the tracker, kernels taken from the queue."""

    def __init__(self, m: "RPCMeasurer", n: int):
        super().__init__(name=f"tiletune-rpc-{n}", daemon=True)
        self.m = m
        self.sess = None
        self.name_ = ""
        self.opened = 0.0
        self.buffers: dict[str, tuple] = {}

    def run(self) -> None:
        m = self.m
        while not m._stop.is_set():
            if self.sess is None or time.monotonic() - self.opened + m.kernel_bound > m.session_timeout:
                self.drop()
                try:
                    self.sess, self.name_ = m.tracker.request(min(5.0, m.request_timeout), m.session_timeout)
                    self.opened = time.monotonic()
                except Exception as e:  # noqa: BLE001 - none free yet, or a server that went away
                    m._last_error = f"{type(e).__name__}: {e}"[:300]
                    m._stop.wait(0.5)
                    continue
            try:
                job = m._jobs.get(timeout=0.2)
            except queue.Empty:
                continue
            job.device, job.taken = self.name_, time.monotonic()
            m._progress()
            t0 = time.perf_counter()
            try:
                costs = self.measure(job)
                res = MeasureResult(job.config, costs=tuple(costs), build_s=job.build_s)
            except WrongAnswer as e:
                res = MeasureResult(job.config, error="wrong-answer", message=str(e), build_s=job.build_s)
            except Exception as e:  # noqa: BLE001 - errors are data; the session is suspect: a new one
                msg = f"on {self.name_}: {type(e).__name__}: {e}".strip()[-1500:]
                res = MeasureResult(job.config, error="run-error", message=msg, build_s=job.build_s)
                del e
                self.drop()
            res = MeasureResult(res.config, res.costs, res.error, res.message, res.build_s,
                                time.perf_counter() - t0, extra={"device": job.device})
            if not m._finish(job, res):  # it timed out meanwhile: the session outlived its kernel
                self.drop()

    def drop(self) -> None:
        """Forget the session (it closes when its last remote object is freed)."""
        self.sess, self.buffers = None, {}
        gc.collect()

    def _inputs(self, dev):
        """The inputs (sent once per session and workload) and the output buffer on the device, zeroed (a
        kernel that leaves part of its output unwritten must not pass on the previous kernel's values)."""
        import numpy as np
        import tvm

        wl = self.m.workload
        if wl.key not in self.buffers:
            inputs, _ = self.m.reference()
            zeros = np.zeros(wl.output_shape(), wl.out_dtype)
            args = [tvm.runtime.tensor(x, dev) for x in inputs]
            self.buffers = {wl.key: (args, tvm.runtime.tensor(zeros, dev), zeros)}
        args, out, zeros = self.buffers[wl.key]
        out.copyfrom(zeros)
        return args, out

    def measure(self, job: _Job) -> list[float]:
        """Upload, load, run once and check here, then time on the device (``tiletune.measure.timing``)."""
        m, sess = self.m, self.sess
        name = os.path.basename(job.path)
        sess.upload(job.path, name)
        lib = sess.load_module(name)
        sess.remove(name)  # loaded: the server's copy is not needed any more
        dev = sess.cuda(0) if m.target.get("kind") == "cuda" else sess.cpu(0)
        args, out = self._inputs(dev)
        panels = prepacked_inputs(m.workload, m.space, job.config, m.target)
        if panels:  # the model's weights that this kernel takes packed: sent for this kernel alone
            import tvm

            args = [tvm.runtime.tensor(panels[i].pack(x), dev) if i in panels else a
                    for i, (a, x) in enumerate(zip(args, m.reference()[0]))]
        lib["main"](*args, out)  # first run: also the correctness check
        if m.settings.check:
            check_output(m.workload, out.numpy(), m.reference()[1])

        def timed(n: int) -> list[float]:  # n calls, each timed on the device
            return list(lib.time_evaluator("main", dev, number=1, repeat=n, min_repeat_ms=0)(*args, out).results)

        plan = plan_after(warm_runs_timed(timed, m.settings), m.settings, m.best_s)
        if isinstance(plan, list):  # cut off: clearly slower than the best so far, one sample (the warm-up)
            return plan
        f = lib.time_evaluator("main", dev, number=plan.number, repeat=plan.repeat, min_repeat_ms=0)
        return [float(x) for x in f(*args, out).results]


# ---- the measurer ----------------------------------------------------------------------------------
class RPCMeasurer(LocalMeasurer):
    """Builds here (the LocalMeasurer's warm build workers) and measures on the devices of an RPC tracker.

    ``rpc``: ``HOST:PORT:KEY`` or a Tracker. ``devices``: how many devices to use at once (default: the
    servers registered with the key when the measurer starts). ``request_timeout``: seconds a kernel may
    wait for a free device before it is a run-error."""

    kind = "rpc"

    def __init__(self, workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                 *, rpc: "str | Tracker", devices: int | None = None, request_timeout: float = REQUEST_TIMEOUT_S,
                 build_workers: int | None = None, builder: str = DEFAULT_BUILDER, pool: WorkerPool | None = None):
        self.tracker = Tracker.parse(rpc)
        found = check_tracker(self.tracker)  # one clear line before any worker starts
        if devices is not None and devices < 1:
            raise TiletuneError(f"devices must be >= 1, got {devices}")
        super().__init__(workload, space, target, settings, build_workers=build_workers, builder=builder,
                         runner=EXPORTER, pool=pool)
        self.devices = devices or len(found)
        self.request_timeout = request_timeout
        self.kernel_bound = self.settings.run_timeout + KERNEL_MARGIN_S
        self.session_timeout = SESSION_KERNELS * self.kernel_bound
        self._tmp = tempfile.mkdtemp(prefix="tiletune-rpc-")
        self._jobs: "queue.Queue[_Job]" = queue.Queue()
        self._done = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[_Device] = []
        self._ref: tuple | None = None
        self._last = time.monotonic()
        self._last_error = ""
        self.stats["devices"] = {}

    def reference(self) -> tuple:
        """(inputs, reference output) of the workload, computed here once."""
        if self._ref is None:
            inputs = self.workload.make_inputs(seed=0)
            self._ref = (inputs, self.workload.reference(*inputs))
        return self._ref

    def warm_up(self) -> None:
        super().warm_up()
        self.reference()
        self._start()

    def _start(self) -> None:
        if not self._threads:
            self._threads = [_Device(self, i) for i in range(self.devices)]
            for t in self._threads:
                t.start()

    def _progress(self) -> None:
        with self._done:
            self._last = time.monotonic()

    def _finish(self, job: _Job, res: MeasureResult) -> bool:
        """Set ``job``'s result unless it has one already (a timeout); False then."""
        with self._done:
            self._last = time.monotonic()
            if job.result is not None:
                return False
            job.result = res
            if res.ok:
                self.best_s = min(self.best_s, res.median)
                count = self.stats["devices"]
                count[job.device] = count.get(job.device, 0) + 1
            self._done.notify_all()
            return True

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        self.reference()
        self._start()
        results, todo = screen(self.workload, self.space, self.target, configs)
        t0 = time.perf_counter()
        batch = tempfile.mkdtemp(dir=self._tmp)
        jobs: list[_Job] = []
        with self._done:
            self._last = time.monotonic()
        self._export(configs, self._build(configs, todo, results), results, batch, jobs)
        self.stats["build_s"] += time.perf_counter() - t0
        self.stats["worker_restarts"] = self.pool.restarts - self._restarts0
        t0 = time.perf_counter()
        self._wait(jobs)
        self.stats["run_s"] += time.perf_counter() - t0
        shutil.rmtree(batch, ignore_errors=True)
        for j in jobs:
            results[j.index] = j.result
        return [results[i] for i in range(len(configs))]

    def _export(self, configs, built: dict[int, tuple], results, batch: str, jobs: list[_Job]) -> None:
        """Have the build workers export their kernels into ``batch`` in parallel; each exported kernel is
        queued for the devices at once."""
        by_slot: dict[int, list[int]] = {}
        for i, (slot, *_rest) in sorted(built.items()):
            by_slot.setdefault(slot, []).append(i)
        busy: dict[int, tuple[int, float, str]] = {}  # slot -> (config index, deadline, library path)
        while by_slot or busy:
            for slot in list(by_slot):
                if slot in busy:
                    continue
                i = by_slot[slot].pop(0)
                if not by_slot[slot]:
                    del by_slot[slot]
                _, key, owner, _ = built[i]
                w = self.pool.workers[slot]
                if w is not owner:  # its worker died since (another export crashed it): rebuild
                    again = self._build(configs, [i], results, slots=[slot])
                    if i not in again:
                        continue
                    built[i] = again[i]
                    _, key, owner, _ = again[i]
                    w = self.pool.workers[slot]
                path = os.path.join(batch, f"k{key}.so")
                try:
                    w.send(("run", self._blob, key, path, self.settings.build_timeout))
                except (OSError, BrokenPipeError) as e:
                    self.pool.replace(slot)
                    results[i] = MeasureResult(configs[i], error="build-error", message=f"export worker: {e}")
                    continue
                busy[slot] = (i, time.perf_counter() + self.settings.build_timeout, path)
            if not busy:
                continue
            wait([self.pool.workers[s].conn for s in busy],
                 timeout=max(0.0, min(d for _, d, _ in busy.values()) - time.perf_counter()))
            now = time.perf_counter()
            for slot in list(busy):
                i, deadline, path = busy[slot]
                w = self.pool.workers[slot]
                msg, dead = w.poll()
                if msg is None and not dead and now < deadline:
                    continue
                del busy[slot]
                if msg is not None and msg[0] == "ok":
                    job = _Job(i, configs[i], path, built[i][3] + float(msg[1]))
                    jobs.append(job)
                    self._jobs.put(job)
                    continue
                if msg is None:
                    code = w.exitcode
                    self.pool.replace(slot)
                    msg = ("build-error", f"worker crashed while exporting (exit code {code})") if dead else \
                          ("build-timeout", f"export exceeded {self.settings.build_timeout:.0f} s")
                kind = "build-error" if msg[0] == "run-error" else msg[0]
                results[i] = MeasureResult(configs[i], error=kind, message=f"export: {msg[1]}")

    def _wait(self, jobs: list[_Job]) -> None:
        """Until every job has a result: a kernel past its bound is a run-timeout; kernels no device takes
        for ``request_timeout`` seconds are run-errors."""
        with self._done:
            while any(j.result is None for j in jobs):
                now = time.monotonic()
                for j in jobs:
                    if j.result is None and j.device is not None and now - j.taken > self.kernel_bound:
                        j.result = MeasureResult(j.config, error="run-timeout", build_s=j.build_s,
                                                 run_s=now - j.taken, extra={"device": j.device},
                                                 message=f"on {j.device}: no result after {self.kernel_bound:.0f} s "
                                                 f"(run timeout {self.settings.run_timeout:g} s + upload and check)")
                if now - self._last > self.request_timeout:
                    self._drain(f"no device with key {self.tracker.key!r} of the tracker at {self.tracker.where} "
                                f"took it within {self.request_timeout:.0f} s"
                                + (f" (last error: {self._last_error})" if self._last_error else ""))
                self._done.wait(0.5)

    def _drain(self, why: str) -> None:
        """Kernels still queued become run-errors (called with the lock held)."""
        while True:
            try:
                j = self._jobs.get_nowait()
            except queue.Empty:
                return
            j.result = MeasureResult(j.config, error="run-error", message=why, build_s=j.build_s)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2.0)  # a thread blocked on a hung device is a daemon: it ends with the process
        self._threads = []
        super().close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def make_measurer(workload: Workload | str, space: Space, target: dict, settings: MeasureSettings | None = None,
                  *, rpc: "str | Tracker", **kwargs) -> RPCMeasurer:
    return RPCMeasurer(parse(workload), space, target, settings, rpc=rpc, **kwargs)


def server_command(tracker: str, key: str, *, host: str = "0.0.0.0", port: int = 9090, port_end: int = 9199,
                   python: str = "python3", fork: bool = True) -> list[str]:
    """The command that starts a TVM RPC server registered with ``tracker`` (``HOST:PORT``) under ``key``.
    ``fork=False`` adds ``--no-fork``: each session runs in a spawned process, not a fork of the server."""
    return [python, "-m", "tvm.exec.rpc_server", "--host", host, "--port", str(port), "--port-end", str(port_end),
            "--tracker", tracker, "--key", key, *(() if fork else ("--no-fork",))]


def nvidia_gpu_here() -> bool:
    """Does this machine have an NVIDIA GPU (its driver's device node or nvidia-smi)? Asks no CUDA API."""
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def tracker_command(*, host: str = "0.0.0.0", port: int = 9190, port_end: int = 9199,
                    python: str = "python3") -> list[str]:
    """The command that starts a TVM RPC tracker (it needs tornado: ``pip install -e ".[rpc]"``)."""
    return [python, "-m", "tvm.exec.rpc_tracker", "--host", host, "--port", str(port), "--port-end", str(port_end)]


def check_tornado() -> None:
    """TiletuneError naming the extra when tornado (the tracker's dependency) is missing."""
    try:
        import tornado  # noqa: F401
    except ImportError:
        raise TiletuneError("the RPC tracker needs tornado: pip install -e \".[rpc]\" (or pip install tornado)") \
            from None
