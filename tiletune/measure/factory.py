"""Which measurer answers a tuning run: a replay table, the local warm workers, or the devices of an RPC
tracker. The door into the measurers for everything above ``tiletune.measure`` (sessions, the benchmark
harness, the model tuner): ``make_measurer``, ``measured_here``, ``check_measurable`` (refuse early what this
machine cannot measure) and ``shared_pool`` (warm workers that the measurers of several workloads share)."""
from __future__ import annotations

from ..errors import TiletuneError
from ..space import Space
from ..target import check_local_target, has_gpu, host_cores, is_cuda
from ..workloads.base import Workload
from . import rpc as rpc_measure
from .base import MeasureSettings, Measurer
from .local import LocalMeasurer, WorkerPool, WrongAnswer, build_kernel, check_fits_here, run_kernel
from .replay import ReplayMeasurer

#: what the rest of tiletune takes from measure/: the measurers and their pool, and the one-kernel build and run
#: (the MetaSchedule baseline re-times its kernel with our runner; tiletune.testing injects faults around them)
__all__ = ["Measurer", "MeasureSettings", "WorkerPool", "WrongAnswer", "build_kernel", "check_measurable",
           "make_measurer", "measured_here", "run_kernel", "shared_pool"]


def make_measurer(workload: Workload, space: Space, target: dict, *, replay: str | None = None,
                  settings: MeasureSettings | None = None, rpc: str | None = None,
                  pool: WorkerPool | None = None) -> Measurer:
    """A ReplayMeasurer when ``replay`` names a table; an RPCMeasurer when ``rpc`` (``HOST:PORT:KEY``) names a
    tracker (built here for ``target``, measured on its devices); else a LocalMeasurer (LLVM targets on this
    machine's CPU, CUDA targets on its GPU: built in parallel by the warm workers, run one at a time).
    ``pool``: warm workers a LocalMeasurer shares (the tasks of a model), else its own."""
    if replay is not None:
        if rpc is not None:
            raise TiletuneError("--replay answers from a table and --rpc measures on devices: give one of them")
        return ReplayMeasurer(replay, workload.key, space)
    if rpc is not None:
        return rpc_measure.make_measurer(workload, space, target, settings, rpc=rpc)
    if target.get("kind") not in ("llvm", "cuda"):
        raise TiletuneError(f"a {target.get('kind')!r} target is measured on the device that has it: start a TVM "
                            "RPC server there and give --rpc HOST:PORT:KEY (see 'tiletune rpc --help')")
    return LocalMeasurer(workload, space, target, settings, pool=pool)  # a CUDA target: this machine's GPU


def measured_here(target: dict, *, replay: str | None = None, rpc: str | None = None) -> bool:
    """Whether a run measures on this machine's CPU (LocalMeasurer): an llvm target, no replay table, no
    RPC tracker."""
    return replay is None and rpc is None and target.get("kind") == "llvm"


def check_measurable(workload: Workload, target: dict, *, replay: str | None = None, rpc: str | None = None) -> None:
    """Where the run measures on this machine (``measured_here``): refuse, before any worker starts or TVM
    loads, a target this machine cannot run and a workload its memory cannot hold (``check_fits_here``)."""
    if measured_here(target, replay=replay, rpc=rpc):
        check_fits_here(workload, target)
    elif is_cuda(target) and replay is None and rpc is None:
        check_local_target(target)  # this machine's GPU


def shared_pool(target: dict, *, rpc: str | None = None) -> WorkerPool | None:
    """Warm workers for the measurers of several workloads in turn (``make_measurer(..., pool=)``; the caller
    closes it): as many as a LocalMeasurer would start for ``target``, building and running its kernels here,
    or with ``rpc`` building them for the tracker's devices; for a CUDA target without ``rpc``, building here
    for this machine's GPU (None when it has none). None where nothing is built here."""
    if not (measured_here(target) or rpc is not None or (is_cuda(target) and has_gpu())):
        return None
    cores = int(target.get("num-cores") or 0) or None
    return WorkerPool(min(host_cores(), cores or host_cores()), threads=cores)
