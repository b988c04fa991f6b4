"""Which measurer answers a tuning run: a replay table, the local warm workers, or a remote device."""
from __future__ import annotations

from ..space import Space
from ..workloads.base import Workload
from . import remote
from .base import MeasureSettings, Measurer
from .local import LocalMeasurer, WorkerPool
from .replay import ReplayMeasurer


def make_measurer(workload: Workload, space: Space, target: dict, *, replay: str | None = None,
                  settings: MeasureSettings | None = None, transport: str | None = None,
                  pool: WorkerPool | None = None) -> Measurer:
    """A ReplayMeasurer when ``replay`` names a table; else a LocalMeasurer for LLVM targets; else (a
    non-LLVM target, or a ``transport`` shell command, see ``tiletune.measure.remote.CommandTransport``)
    a RemoteMeasurer. ``pool``: warm workers a LocalMeasurer shares (the tasks of a model), else its own."""
    if replay is not None:
        return ReplayMeasurer(replay, workload.key, space)
    if not measured_here(target, replay=replay, transport=transport):
        return remote.make_measurer(workload, space, target, settings,
                                    transport=remote.CommandTransport(transport) if transport else None)
    return LocalMeasurer(workload, space, target, settings, pool=pool)


def measured_here(target: dict, *, replay: str | None = None, transport: str | None = None) -> bool:
    """Whether a run measures on this machine's CPU (LocalMeasurer): an llvm target, no replay table, no
    transport."""
    return replay is None and transport is None and target.get("kind") == "llvm"
