"""Which measurer answers a tuning run: a replay table, the local warm workers, or the devices of an RPC
tracker."""
from __future__ import annotations

from ..errors import TiletuneError
from ..space import Space
from ..workloads.base import Workload
from . import rpc as rpc_measure
from .base import MeasureSettings, Measurer
from .local import LocalMeasurer, WorkerPool
from .replay import ReplayMeasurer


def make_measurer(workload: Workload, space: Space, target: dict, *, replay: str | None = None,
                  settings: MeasureSettings | None = None, rpc: str | None = None,
                  pool: WorkerPool | None = None) -> Measurer:
    """A ReplayMeasurer when ``replay`` names a table; an RPCMeasurer when ``rpc`` (``HOST:PORT:KEY``) names a
    tracker (built here for ``target``, measured on its devices); else a LocalMeasurer (LLVM targets).
    ``pool``: warm workers a LocalMeasurer shares (the tasks of a model), else its own."""
    if replay is not None:
        if rpc is not None:
            raise TiletuneError("--replay answers from a table and --rpc measures on devices: give one of them")
        return ReplayMeasurer(replay, workload.key, space)
    if rpc is not None:
        return rpc_measure.make_measurer(workload, space, target, settings, rpc=rpc)
    if target.get("kind") != "llvm":
        raise TiletuneError(f"a {target.get('kind')!r} target is measured on the device that has it: start a TVM "
                            "RPC server there and give --rpc HOST:PORT:KEY (see 'tiletune rpc --help')")
    return LocalMeasurer(workload, space, target, settings, pool=pool)


def measured_here(target: dict, *, replay: str | None = None, rpc: str | None = None) -> bool:
    """Whether a run measures on this machine's CPU (LocalMeasurer): an llvm target, no replay table, no
    RPC tracker."""
    return replay is None and rpc is None and target.get("kind") == "llvm"
