"""A tuning run's builds and measurements spread over the nodes of a Ray cluster (``--cluster ADDRESS``).

``RayPool`` is the cluster's implementation of the builder/runner interface (``kernel_pool.KernelPool``); the
local ``WorkerPool`` is the other. It keeps warm workers as Ray actors, one per CPU of every node that measures
the target, each doing what a local worker does (``local.serve``: TVM imported once, a kernel compiled from the
workload's spec, its space, the configuration and the target, kept in memory, then run, checked and timed where
it was built). A batch goes in two phases per node, as on one machine: every configuration is built, each free
actor of the cluster taking the next one; once none is left to build, each node whose builds are over runs its
kernels, one at a time (its actors take turns; the nodes side by side), so no timing competes with a build or
another timing on its node; a node with nothing left to run takes kernels waiting on the busiest node, builds them
again and runs them (``RayPool._steal``). The driver (the ``tiletune`` process) alone writes the records: the actors only return
results.

Which nodes measure a target: those that advertise the Ray resource ``resource_name(target)``
("tiletune-llvm-znver4", "tiletune-cuda-sm_80"; ``ray start --resources='{"tiletune-llvm-znver4": 1}'``). Where no
node advertises it, every node with CPUs measures an LLVM target and every node with GPUs a CUDA target (a cluster
of one kind of machine).

Faults (docs/cluster.md):

- a node that dies or is removed mid-run costs only the trials it held (being built, or built and waiting for
  their run): they are built again on the other nodes in the same batch, up to ``MAX_LOSSES`` times each, then
  recorded as a ``run-error`` (so are the kernels held by an actor that another kernel crashed); every configuration gets exactly one result, so none is lost or recorded twice;
- an actor that crashes on a node that lives on (a kernel that segfaults) is that configuration's ``build-error``
  / ``run-error``, as locally; a build or a run past ``MeasureSettings.build_timeout`` / ``run_timeout`` kills its
  actor (``build-timeout`` / ``run-timeout``); a killed or crashed actor is replaced on its node;
- an exception in the driver (Ctrl-C) kills the actors that were busy before it propagates, and ``close()`` kills
  the rest: the actors belong to the driver's Ray job, so Ray also ends them when the driver dies.

Nothing but data goes over the network: the workload's spec (its key), its space, the target, the names of the
builder and runner functions (which every node imports from its own tiletune), the configurations, and back the
timings or the error messages. Ray is the ``cluster`` extra (``pip install "tiletune[cluster]"``), imported only
here and only when a cluster is asked for.
"""
from __future__ import annotations

import gc
import math
import os
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import TiletuneError
from ..space import Config
from ..target import is_cuda
from .base import MeasureResult
from .kernel_pool import BatchOutcome, Job, KernelPool
from .local import WORKER_SPIN_COUNT, serve

#: how many times a trial may lose its node before it is recorded as a run-error (its kernel is rebuilt elsewhere
#: after each loss)
MAX_LOSSES = 3
#: an idle node takes a kernel from another node's run queue when that queue holds at least this many kernels
#: (the kernel is built again: worth it when the wait behind the queue is longer than a build)
STEAL_MIN = 2
#: seconds to wait for the actors' start (a cold TVM import on a loaded node takes many seconds)
STARTUP_TIMEOUT = 180.0
#: seconds to wait for the Ray head to answer a connection before the address is refused (one line)
CONNECT_TIMEOUT = 10.0
#: the Ray namespace of tiletune's actors
NAMESPACE = "tiletune"
RAY_MISSING = 'the cluster path needs Ray: pip install "tiletune[cluster]" (or pip install "ray[default]")'


def import_ray():
    """The ``ray`` module, or a TiletuneError that names the extra to install."""
    try:
        import ray
    except ImportError:
        raise TiletuneError(RAY_MISSING) from None
    return ray


def resource_name(target: dict) -> str:
    """The Ray resource that a node measuring ``target`` advertises: ``tiletune-<kind>[-<mcpu or arch>]``."""
    detail = target.get("arch") if is_cuda(target) else target.get("mcpu")
    return f"tiletune-{target.get('kind')}" + (f"-{detail}" if detail else "")


#: where a run finds its cluster without --cluster, in this order
ADDRESS_VARIABLES = ("TILETUNE_CLUSTER", "RAY_ADDRESS")
CLUSTER_HELP = ("build and measure on the nodes of the Ray cluster whose head is at ADDRESS (HOST:PORT, ray://HOST:PORT "
                "or 'auto'); default: $TILETUNE_CLUSTER, else $RAY_ADDRESS, else this machine; 'none': this machine "
                "(see docs/cluster.md; needs the cluster extra)")


def cluster_address(flag: str | None, environ: Mapping[str, str], *, elsewhere: bool = False) -> str | None:
    """The cluster a run measures on: ``flag`` (--cluster; "none" is this machine), else the first of
    ``ADDRESS_VARIABLES`` set in ``environ``, unless the run measures ``elsewhere`` already (--replay, --rpc: the
    environment's cluster does not apply; the flag with them is refused by ``factory.check_sources``). None: this
    machine."""
    if flag is not None:
        flag = flag.strip()
        if not flag:
            raise TiletuneError("--cluster needs an address: HOST:PORT of a Ray head, ray://HOST:PORT, 'auto' or 'none'")
        return None if flag.lower() == "none" else flag
    if elsewhere:
        return None
    for name in ADDRESS_VARIABLES:
        if environ.get(name, "").strip():
            value = environ[name].strip()
            return None if value.lower() == "none" else value
    return None


def check_address(address: str) -> str:
    """``address`` as given to ``ray.init``: "auto" (the cluster this machine belongs to), ``HOST:PORT`` of a head's
    GCS (checked to answer within ``CONNECT_TIMEOUT``: a TiletuneError otherwise) or ``ray://HOST:PORT`` (Ray
    client)."""
    address = address.strip()
    if address in ("auto", "local") or address.startswith("ray://"):
        return address
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise TiletuneError(f"--cluster {address!r}: expected HOST:PORT of a Ray head (e.g. 10.0.0.5:6379), "
                            "ray://HOST:PORT or 'auto'")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except OSError as e:
        raise TiletuneError(f"--cluster {address}: no Ray head answers there ({e.strerror or e}); start one with "
                            "'ray start --head' (see docs/cluster.md)") from None
    return address


class ClusterWorker:
    """A warm worker on a node (a Ray actor, one CPU): ``local.serve`` for builds and runs, the kernels it built
    kept in memory until they run."""

    def __init__(self, threads: int):
        # as a local worker: the target's cores as TVM's threads, short pool-thread spinning, no torch import
        os.environ.setdefault("TVM_NUM_THREADS", str(threads))
        os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", str(WORKER_SPIN_COUNT))
        sys.modules.setdefault("torch", None)
        import tvm  # noqa: F401  (warm: import once, before the first task)

        gc.collect()
        gc.freeze()
        self.kernels: dict[int, Any] = {}

    def ready(self) -> tuple[str, int, str]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid(), socket.gethostname()

    def build(self, blob: bytes, key: int, config: Config) -> tuple[str, Any]:
        return serve(self.kernels, "build", blob, key, config, {})

    def run(self, blob: bytes, key: int, settings, kw: dict) -> tuple[str, Any]:
        return serve(self.kernels, "run", blob, key, settings, kw)

    def drop(self, key: int) -> None:
        """Forget kernel ``key`` (another node builds and runs it instead)."""
        self.kernels.pop(key, None)


@dataclass
class _Slot:
    """One actor of the pool: its node, and a generation counted up whenever the actor is replaced (the kernels
    the previous one held are gone)."""
    node: str
    actor: Any = None
    pid: int = 0
    generation: int = 0


class RayPool(KernelPool):
    """Warm workers on the nodes of a Ray cluster that measure ``target``: one actor per CPU of each such node,
    each with the target's cores as TVM threads (``threads``, default: the target's ``num-cores``, else the node's
    CPUs). Connects to the cluster at ``address`` unless this process is connected already (and then leaves the
    connection open on ``close``)."""

    kind = "cluster"

    def __init__(self, address: str, target: dict, *, threads: int | None = None):
        ray = import_ray()
        self.ray = ray
        self.target = target
        self.resource = resource_name(target)
        self.threads = threads or int(target.get("num-cores") or 0) or None
        self._own_connection = not ray.is_initialized()
        if self._own_connection:
            address = check_address(address)
            try:
                ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="WARNING",
                         configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise TiletuneError(f"--cluster {address}: cannot join the Ray cluster: {str(e).splitlines()[0]}") \
                    from None
        self.address = address
        self.slots: list[_Slot] = []
        self.restarts = 0
        self.lost = 0  # trials re-queued after their node was lost
        self.stolen = 0  # kernels built again and run on an idle node (``_steal``)
        self._count = 0
        self._blobs: dict[bytes, Any] = {}
        self._start_actors()
        if not self.slots:
            self.close()
            raise TiletuneError(f"the Ray cluster at {address} has no node that measures this target: give nodes the "
                                f"resource {self.resource!r} (ray start --resources='{{\"{self.resource}\": 1}}') or "
                                "CPUs/GPUs of its kind (see docs/cluster.md)")

    # ---- nodes and actors ------------------------------------------------------------------------------

    def nodes(self) -> dict[str, int]:
        """{node id: actors it hosts} for the live nodes that measure the target: one per CPU."""
        alive = [n for n in self.ray.nodes() if n.get("Alive")]
        tagged = [n for n in alive if n.get("Resources", {}).get(self.resource, 0) > 0]
        if not tagged:
            need = "GPU" if is_cuda(self.target) else "CPU"
            tagged = [n for n in alive if n.get("Resources", {}).get(need, 0) > 0]
        return {n["NodeID"]: max(1, int(n["Resources"].get("CPU", 1))) for n in tagged}

    def _new_actor(self, node: str):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = self.ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(ClusterWorker)
        threads = self.threads or max(1, int(self._node_cpus.get(node, 1)))
        return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(threads)

    def _start_actors(self) -> None:
        """Actors for the nodes that have none yet (at the start, and for nodes that joined since), waited for."""
        nodes = self.nodes()
        self._node_cpus = dict(nodes)
        have: dict[str, int] = {}
        for s in self.slots:
            have[s.node] = have.get(s.node, 0) + 1
        new = []
        for node, n in nodes.items():
            for _ in range(n - have.get(node, 0)):
                slot = _Slot(node, self._new_actor(node))
                self.slots.append(slot)
                new.append(slot)
        self._wait_ready(new)

    def _wait_ready(self, slots: list[_Slot]) -> None:
        refs = {s.actor.ready.remote(): s for s in slots}
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while refs and time.monotonic() < deadline:
            done, _ = self.ray.wait(list(refs), num_returns=1, timeout=deadline - time.monotonic())
            for ref in done:
                s = refs.pop(ref)
                try:
                    s.node, s.pid, _ = self.ray.get(ref)
                except Exception:  # noqa: BLE001 - its node went while it started: dropped below
                    s.actor = None
        for s in refs.values():  # never started (its node is gone or full)
            self._kill(s)
            s.actor = None
        self.slots = [s for s in self.slots if s.actor is not None]

    @property
    def size(self) -> int:
        return len(self.slots)

    def warm_up(self) -> None:
        """The actors started (and imported TVM) when the pool was made."""

    def pids(self) -> list[int]:
        """The process ids of the actors (tests check that they end)."""
        return [s.pid for s in self.slots]

    def _kill(self, s: _Slot) -> None:
        if s.actor is not None:
            try:
                self.ray.kill(s.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def _node_alive(self, node: str) -> bool:
        return any(n["NodeID"] == node and n.get("Alive") for n in self.ray.nodes())

    def _replace(self, s: _Slot) -> None:
        """A fresh actor in ``s``'s place on its node (none when the node is gone); the old one is killed."""
        self._kill(s)
        s.generation += 1
        self.restarts += 1
        s.actor = None
        if self._node_alive(s.node):
            s.actor = self._new_actor(s.node)
            self._wait_ready([s])  # drops the slot if the actor does not start (its node went)
        else:
            self.slots = [x for x in self.slots if x is not s]

    def _lost(self, s: _Slot) -> bool:
        """After ``s``'s actor died: True when its node died too (its trials are re-queued), else False (the
        trial crashed it). The node's death may reach the cluster's state a moment after the actor's."""
        for _ in range(20):
            if not self._node_alive(s.node):
                return True
            time.sleep(0.25)
        return False

    def _blob(self, blob: bytes):
        if blob not in self._blobs:
            if len(self._blobs) > 16:
                self._blobs.clear()
            self._blobs[blob] = self.ray.put(blob)
        return self._blobs[blob]

    # ---- one batch ---------------------------------------------------------------------------------------

    def measure_batch(self, job: Job, configs: Sequence[Config], todo: Sequence[int],
                      best_s: float) -> BatchOutcome:
        """Rounds (``_round``) until every index of ``todo`` has a result; a round builds again what the previous
        one lost with its nodes. ``BatchOutcome.build_s``: the seconds until the last build ended; ``run_s``: the
        rest."""
        out = BatchOutcome({})
        self._start_actors()  # nodes that joined since the last batch
        losses: dict[int, int] = {}
        queue = list(todo)
        best = [best_s]
        busy: dict[Any, tuple] = {}
        try:
            while queue:
                t0 = time.perf_counter()
                lost, builds_done = self._round(job, configs, queue, out.results, busy, best)
                out.build_s += builds_done - t0
                out.run_s += time.perf_counter() - builds_done
                queue = []
                for i in lost:
                    losses[i] = losses.get(i, 0) + 1
                    self.lost += 1
                    if losses[i] >= MAX_LOSSES:
                        out.results[i] = MeasureResult(configs[i], error="run-error",
                                                       message=f"lost its worker {losses[i]} times (its cluster node "
                                                       "went, or another kernel crashed the worker)")
                    else:
                        queue.append(i)
        except BaseException:
            for s, *_ in busy.values():  # Ctrl-C or an error here: nothing of this batch goes on running
                self._kill(s)
                s.actor = None
            self.slots = [s for s in self.slots if s.actor is not None]
            raise
        return out

    def _usable(self) -> list[_Slot]:
        if not self.slots:
            raise TiletuneError(f"the Ray cluster at {self.address} has no live node left that measures this target")
        return list(self.slots)

    def _settle(self, ref, s: _Slot) -> tuple[str, Any, bool]:
        """(kind, payload, node lost) of a finished call of ``s``'s actor."""
        try:
            kind, payload = self.ray.get(ref)
            return kind, payload, False
        except self.ray.exceptions.RayActorError as e:
            lost = self._lost(s)
            self._replace(s)
            return "died", f"worker on node {s.node[:8]} died ({type(e).__name__})", lost

    def _round(self, job: Job, configs, queue: list[int], results, busy, best: list) -> tuple[list[int], float]:
        """Build ``queue`` over every actor of the cluster (each free actor takes the next configuration); a node
        whose builds are over once nothing is left to build runs its kernels, one at a time, each by the actor that
        holds it, while other nodes may still build. Returns (indices lost with their worker, to be built again;
        the time the last build ended)."""
        blob = self._blob(job.blob)
        settings = job.settings
        pending = deque(queue)
        built: dict[str, deque] = {}  # node -> (index, slot, generation, key, build seconds) of its kernels
        building: dict[str, int] = {}  # node -> builds in flight
        running: set[str] = set()  # nodes with a run in flight
        lost: list[int] = []
        builds_done = time.perf_counter()
        while pending or busy or any(built.values()):
            if pending:
                used = {id(v[0]) for v in busy.values()}
                for s in self._usable():
                    if not pending:
                        break
                    if id(s) in used:
                        continue
                    i = pending.popleft()
                    self._count += 1
                    ref = s.actor.build.remote(blob, self._count, configs[i])
                    busy[ref] = (s, "build", i, self._count, time.monotonic() + settings.build_timeout, 0.0)
                    building[s.node] = building.get(s.node, 0) + 1
            else:  # nothing left to build: a node whose builds are over runs its kernels
                self._steal(blob, configs, built, building, running, busy, settings)
                for node, kernels in built.items():
                    if node in running or building.get(node, 0) or not kernels:
                        continue
                    i, s, generation, key, build_s = kernels.popleft()
                    if s.generation != generation or s.actor is None:  # its worker was replaced: the kernel is gone
                        lost.append(i)
                        continue
                    cut = {"best_s": best[0]} if settings.cutoff > 0 and math.isfinite(best[0]) else {}
                    ref = s.actor.run.remote(blob, key, settings, cut)
                    busy[ref] = (s, "run", i, key, time.monotonic() + settings.run_timeout, build_s)
                    running.add(node)
            if not busy:
                continue
            first = min(v[4] for v in busy.values())
            done, _ = self.ray.wait(list(busy), num_returns=1, timeout=max(0.0, first - time.monotonic()))
            now = time.monotonic()
            for ref in list(busy):
                s, op, i, key, deadline, build_s = busy[ref]
                if ref not in done and now < deadline:
                    continue
                del busy[ref]
                node = s.node
                if op == "build":
                    building[node] -= 1
                    if not pending and not any(v[1] == "build" for v in busy.values()):
                        builds_done = time.perf_counter()
                else:
                    running.discard(node)
                limit = settings.build_timeout if op == "build" else settings.run_timeout
                if ref not in done:  # past its time limit: the actor is killed and replaced
                    self._replace(s)
                    results[i] = MeasureResult(configs[i], error=f"{op}-timeout", build_s=build_s,
                                               run_s=limit if op == "run" else 0.0,
                                               message=f"{op} exceeded {limit:.0f} s")
                    continue
                kind, payload, node_lost = self._settle(ref, s)
                run_s = now - (deadline - limit) if op == "run" else 0.0
                if node_lost:
                    lost.append(i)
                elif kind == "died":
                    results[i] = MeasureResult(configs[i], error=f"{op}-error", build_s=build_s, run_s=run_s,
                                               message=f"{op} {payload}")
                elif op == "build" and kind == "ok":
                    built.setdefault(node, deque()).append((i, s, s.generation, key, float(payload)))
                elif kind == "ok":
                    results[i] = MeasureResult(configs[i], costs=tuple(payload), build_s=build_s, run_s=run_s)
                    if results[i].ok:
                        best[0] = min(best[0], results[i].median)
                else:
                    results[i] = MeasureResult(configs[i], error=kind, message=payload, build_s=build_s, run_s=run_s)
            for node in [n for n, k in built.items() if k and n not in {x.node for x in self.slots}]:
                lost.extend(k[0] for k in built.pop(node))  # a node gone with kernels it built and had not run
        return lost, builds_done

    def _steal(self, blob, configs, built: dict, building: dict, running: set, busy: dict, settings) -> None:
        """Balance the run phase: a node with nothing left to build or run takes the last kernel waiting on the node
        with the most waiting (at least ``STEAL_MIN``), builds it again and runs it itself; the first node forgets
        it. A batch's slowest node then holds no more than its share of the runs and one more build."""
        used = {id(v[0]) for v in busy.values()}
        for node in {s.node for s in self.slots}:
            if node in running or building.get(node, 0) or built.get(node):
                continue
            donor = max(built, key=lambda n: len(built[n]), default=None)
            if donor is None or len(built[donor]) < STEAL_MIN:
                return
            free = next((s for s in self.slots if s.node == node and id(s) not in used), None)
            if free is None:
                continue
            i, owner, generation, key, _ = built[donor].pop()
            if owner.actor is not None and owner.generation == generation:
                owner.actor.drop.remote(key)
            self._count += 1
            ref = free.actor.build.remote(blob, self._count, configs[i])
            busy[ref] = (free, "build", i, self._count, time.monotonic() + settings.build_timeout, 0.0)
            building[node] = building.get(node, 0) + 1
            used.add(id(free))
            self.stolen += 1

    def close(self) -> None:
        """Kill every actor of the pool; disconnect from the cluster if this pool connected."""
        for s in self.slots:
            self._kill(s)
        self.slots = []
        if self._own_connection and self.ray.is_initialized():
            self.ray.shutdown()
