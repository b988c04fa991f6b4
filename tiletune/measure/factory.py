"""Which measurer answers a tuning run: a replay table, the local warm workers, the warm workers of a Ray
cluster's nodes, or the devices of an RPC tracker. The door into the measurers for everything above ``tiletune.measure`` (sessions, the benchmark
harness, the model tuner): ``make_measurer``, ``measured_here``, ``check_measurable`` (refuse early what this
machine cannot measure) and ``shared_pool`` (warm workers that the measurers of several workloads share).

The local workers and the cluster's are the two implementations of one builder/runner interface
(``kernel_pool.KernelPool``: ``local.WorkerPool``, ``cluster.RayPool``) behind the same ``LocalMeasurer``; the
cluster is chosen by ``cluster`` (a Ray address; Ray is imported only then)."""
from __future__ import annotations

from ..errors import TiletuneError
from ..space import Space
from ..target import check_local_target, has_gpu, host_cores, is_cuda
from ..workloads.base import Workload
from . import rpc as rpc_measure
from .base import MeasureSettings, Measurer
from .cluster import RayPool, import_ray
from .kernel_pool import KernelPool
from .local import LocalMeasurer, WorkerPool, WrongAnswer, build_kernel, check_fits_here, run_kernel
from .replay import ReplayMeasurer

#: what the rest of tiletune takes from measure/: the measurers and their pool, and the one-kernel build and run
#: (the MetaSchedule baseline re-times its kernel with our runner; tiletune.testing injects faults around them)
__all__ = ["KernelPool", "Measurer", "MeasureSettings", "RayPool", "WorkerPool", "WrongAnswer", "build_kernel", "check_measurable",
           "make_measurer", "measured_here", "run_kernel", "shared_pool"]


def make_measurer(workload: Workload, space: Space, target: dict, *, replay: str | None = None,
                  settings: MeasureSettings | None = None, rpc: str | None = None,
                  pool: KernelPool | None = None, cluster: str | None = None) -> Measurer:
    """A ReplayMeasurer when ``replay`` names a table; an RPCMeasurer when ``rpc`` (``HOST:PORT:KEY``) names a
    tracker (built here for ``target``, measured on its devices); else a LocalMeasurer (LLVM targets on this
    machine's CPU, CUDA targets on its GPU: built in parallel by the warm workers, run one at a time), whose
    workers are those of the Ray cluster at ``cluster`` when it is given (``cluster.RayPool``: built over all its
    nodes, run one at a time per node). ``pool``: warm workers a LocalMeasurer shares (the tasks of a model;
    ``shared_pool``), else its own."""
    check_sources(replay=replay, rpc=rpc, cluster=cluster)
    if replay is not None:
        return ReplayMeasurer(replay, workload.key, space)
    if rpc is not None:
        return rpc_measure.make_measurer(workload, space, target, settings, rpc=rpc)
    if cluster is not None and pool is None:
        return LocalMeasurer(workload, space, target, settings, pool=RayPool(cluster, target), owns_pool=True)
    if target.get("kind") not in ("llvm", "cuda"):
        raise TiletuneError(f"a {target.get('kind')!r} target is measured on the device that has it: start a TVM "
                            "RPC server there and give --rpc HOST:PORT:KEY (see 'tiletune rpc --help')")
    return LocalMeasurer(workload, space, target, settings, pool=pool)  # a CUDA target: this machine's GPU


def check_sources(*, replay: str | None = None, rpc: str | None = None, cluster: str | None = None) -> None:
    """One line for a run given more than one place to measure: a replay table, an RPC tracker, a cluster."""
    given = [flag for flag, v in (("--replay", replay), ("--rpc", rpc), ("--cluster", cluster)) if v is not None]
    if len(given) > 1:
        raise TiletuneError(f"{' and '.join(given)} each say where to measure: give one of them")


def measured_here(target: dict, *, replay: str | None = None, rpc: str | None = None,
                  cluster: str | None = None) -> bool:
    """Whether a run measures on this machine's CPU (LocalMeasurer): an llvm target, no replay table, no
    RPC tracker, no cluster."""
    return replay is None and rpc is None and cluster is None and target.get("kind") == "llvm"


def check_measurable(workload: Workload, target: dict, *, replay: str | None = None, rpc: str | None = None,
                     cluster: str | None = None) -> None:
    """Where the run measures on this machine (``measured_here``): refuse, before any worker starts or TVM
    loads, a target this machine cannot run and a workload its memory cannot hold (``check_fits_here``).
    With ``cluster``: that Ray is installed (the nodes' own hardware is found when the pool starts)."""
    check_sources(replay=replay, rpc=rpc, cluster=cluster)
    if cluster is not None:
        import_ray()
    elif measured_here(target, replay=replay, rpc=rpc):
        check_fits_here(workload, target)
    elif is_cuda(target) and replay is None and rpc is None:
        check_local_target(target)  # this machine's GPU


def shared_pool(target: dict, *, rpc: str | None = None, cluster: str | None = None) -> KernelPool | None:
    """Warm workers for the measurers of several workloads in turn (``make_measurer(..., pool=)``; the caller
    closes it): with ``cluster``, the actors of the Ray cluster's nodes that measure ``target``; else as many as a
    LocalMeasurer would start for ``target``, building and running its kernels here, or with ``rpc`` building
    them for the tracker's devices; for a CUDA target without ``rpc``, building here for this machine's GPU
    (None when it has none). None where nothing is built here."""
    check_sources(rpc=rpc, cluster=cluster)
    if cluster is not None:
        return RayPool(cluster, target)
    if not (measured_here(target) or rpc is not None or (is_cuda(target) and has_gpu())):
        return None
    cores = int(target.get("num-cores") or 0) or None
    return WorkerPool(min(host_cores(), cores or host_cores()), threads=cores)
