"""Measurement results and the Measurer interface.

A Measurer turns a batch of Configs into MeasureResults. Errors are data, never exceptions that stop
the search: every result either carries timings or an error kind with a message.
"""
from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Sequence

from ..space import Config

ERROR_KINDS = ("invalid", "build-error", "build-timeout", "run-error", "run-timeout", "wrong-answer",
               "not-in-table")


@dataclass(frozen=True)
class MeasureSettings:
    """Timing settings: one checked run, warm runs (at least ``warmup``, lasting at least
    ``min(warmup_ms, min_repeat_ms)``), then ``repeat`` samples of N runs
    each, N = max(``number``, enough runs to last ``min_repeat_ms`` at the warm-run speed); timeouts per
    phase in seconds.

    ``warmup_ms``: the warm-up wakes the thread pool, caches and clocks and estimates one run's time, for
    which 10 ms of calls is enough (docs/decisions/measure-warmup.md).

    ``cutoff``: early cut-off of clearly slow kernels (the rule's step 3, ``tiletune.measure.timing``).
    A kernel whose fastest warm run is more than ``cutoff`` times the best median that the same
    measurer has measured so far for its workload is timed no further than its warm-up, which becomes
    its single sample (its record then holds one cost instead of ``repeat``). 0 turns it off: every
    kernel gets ``repeat`` samples. Default 1.5: a kernel 1.5x slower than the best at its fastest warm run is
    not the best, and one sample is all a search needs to rank it (docs/decisions/measure-cutoff.md). Only the
    local measurer applies it (the best so far is its own state: records recalled from a file do not count,
    and its first kernels get all their samples)."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 25
    warmup: int = 1
    warmup_ms: float = 10.0
    build_timeout: float = 30.0
    run_timeout: float = 30.0
    check: bool = True
    cutoff: float = 1.5


@dataclass(frozen=True)
class MeasureResult:
    config: Config
    costs: tuple[float, ...] = ()  # seconds per run, every sample kept
    error: str | None = None
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def median(self) -> float:
        return statistics.median(self.costs) if self.ok else math.inf

    def gflops(self, flops: int) -> float:
        return flops / self.median / 1e9 if self.ok else 0.0


class Measurer(ABC):
    """Measures configurations of one workload on one target."""

    #: a short name stored in records ("local", "replay", "synthetic", ...)
    kind: str = "measurer"

    @abstractmethod
    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        ...

    def warm_up(self) -> None:
        """Start what the measurer needs (worker processes) now, before a run's clock starts."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
