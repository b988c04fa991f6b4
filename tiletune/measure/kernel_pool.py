"""The builder/runner interface: where a measurer's kernels are compiled and timed.

``LocalMeasurer`` (``tiletune.measure.local``) does what every measurement does (refuses the configurations the
template rejects, keeps the best median for the early cut-off, keeps the statistics) and hands the rest of a batch
to a ``KernelPool``: build every configuration, then run, check and time each built kernel, never a timing while a
build competes on the same machine. Two implementations, chosen by ``tiletune.measure.factory``:

- ``local.WorkerPool``: warm worker processes on this machine (the default; nothing to install);
- ``cluster.RayPool``: warm Ray actors on the nodes of a Ray cluster (``--cluster``; the ``cluster`` extra).

Both take the same context (``Job``: the workload's spec, its space, the target and the builder and runner named
"module:function") and give the same ``MeasureResult``s, so the strategies, the tuning loop and the records do not
see which one measured."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from ..space import Config
from .base import MeasureResult, MeasureSettings


@dataclass(frozen=True)
class Job:
    """What a pool needs to build and run one measurer's kernels: ``blob``, the cloudpickled context (workload key,
    space, target, builder, runner; unpickled once per worker), and the timing ``settings``."""
    blob: bytes
    settings: MeasureSettings


@dataclass
class BatchOutcome:
    """A batch's results by configuration index, and the wall time of its build and run phases."""
    results: dict[int, MeasureResult]
    build_s: float = 0.0
    run_s: float = 0.0


class KernelPool(ABC):
    """Builds and runs kernels. ``size``: builds at once; ``restarts``: workers replaced so far (crashes, timeouts,
    lost nodes); ``kind``: what a measurer using it writes as its ``measurer`` in the records."""

    size: int = 1
    restarts: int = 0
    kind: str = "local"

    @abstractmethod
    def measure_batch(self, job: Job, configs: Sequence[Config], todo: Sequence[int],
                      best_s: float) -> BatchOutcome:
        """A result for every index of ``todo`` (configurations the template accepts): built, then run, checked
        and timed; failures as errors (``base.ERROR_KINDS``). ``best_s``: the best median measured so far (the
        early cut-off, ``MeasureSettings.cutoff``)."""

    def warm_up(self) -> None:
        """Start the workers now (their TVM import), before a run's clock starts."""

    def close(self) -> None:
        """Stop every worker this pool started."""
