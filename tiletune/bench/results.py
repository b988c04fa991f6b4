"""What a benchmark run produces: one tuning run (``RunResult``), one baseline on one workload
(``BaselineResult``) and the whole bench (``BenchResult``). The harness (``run.py``) fills them; the
summary, report and plots read them."""
from __future__ import annotations

import gzip
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .machine import Peak
from .suites import Suite

def jsonl_lines(path: Path) -> Iterator[tuple[str, Any]]:
    """(line, object) for every readable line of a JSONL results file: first those of its compressed copy
    ``PATH.gz`` (a committed study's, benchmarks/out/README.md), then those of ``PATH`` (what a resumed run appended);
    none if neither exists. A line cut off by a crash is skipped."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    texts = [gzip.decompress(packed.read_bytes()).decode("utf-8")] if packed.exists() else []
    texts += [path.read_text(encoding="utf-8")] if path.exists() else []
    for text in texts:
        for line in text.splitlines():
            try:
                yield line, json.loads(line)
            except json.JSONDecodeError:
                continue


def read_jsonl(path: Path) -> list[Any]:
    """The objects of ``jsonl_lines``."""
    return [obj for _, obj in jsonl_lines(path)]


#: the baselines a bench can measure: per workload "vendor" and "metaschedule", per machine "peak"
BASELINES = ("vendor", "metaschedule", "peak")


@dataclass
class BaselineResult:
    """One baseline on one workload. ``costs`` are seconds per run; ``wall_s`` the time it took to get
    the number (for MetaSchedule: the whole tuning); ``curve`` (MetaSchedule only) lists
    (trial, seconds since start, seconds per run or None) of its own measurements."""

    name: str
    workload: str
    label: str = ""
    costs: tuple[float, ...] = ()
    error: str | None = None
    message: str = ""
    wall_s: float = 0.0
    trials: int = 0
    curve: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def median_s(self) -> float | None:
        return float(np.median(self.costs)) if self.ok else None

    def gflops(self, flops: int) -> float:
        return flops / self.median_s / 1e9 if self.ok else 0.0

    def to_dict(self, flops: int | None = None) -> dict[str, Any]:
        d = asdict(self)
        d["costs"] = list(self.costs)
        d["median_s"] = self.median_s
        if flops is not None:
            d["gflops"] = self.gflops(flops)
        return d


@dataclass
class RunResult:
    """One tuning run (workload, strategy, seed)."""

    workload: str
    strategy: str
    seed: int
    trials: int
    measured: int
    errors: int
    best_gflops: float
    best_median_s: float | None
    best_trial: int | None
    best_config: dict | None
    elapsed_s: float
    stopped: str
    space_size: int
    trace: list = field(default_factory=list)  # (trial, elapsed_s, gflops, best_gflops_so_far)
    error_kinds: dict = field(default_factory=dict)
    error_samples: dict = field(default_factory=dict)  # error kind -> the first message of that kind

    def best_at(self, trials: int) -> float:
        """Best GFLOPS within the first ``trials`` trials."""
        best = 0.0
        for t, _, _, b in self.trace:
            if t > trials:
                break
            best = b
        return best


@dataclass
class BenchResult:
    """A whole bench: its settings, the machine, and every run and baseline result so far (the summary,
    report and plots are made from it)."""

    suite: Suite
    strategies: list[str]
    seeds: int
    budget: int
    budget_seconds: float | None
    target: dict
    baselines: list[str]
    out_dir: Path
    replay: str | None = None
    machine: dict = field(default_factory=dict)
    peak: Peak | None = None
    flops: dict = field(default_factory=dict)
    space_sizes: dict = field(default_factory=dict)
    runs: list[RunResult] = field(default_factory=list)
    baseline_results: dict = field(default_factory=dict)  # workload -> name -> BaselineResult
    started: float = field(default_factory=time.time)
    finished: float | None = None
    workloads_done: list[str] = field(default_factory=list)
    drawn: set = field(default_factory=set)  # workloads whose curves are drawn

    def runs_of(self, workload: str, strategy: str) -> list[RunResult]:
        return [r for r in self.runs if r.workload == workload and r.strategy == strategy]
