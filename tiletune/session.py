"""Assemble tuning runs from user-level inputs: workload spec, target, levels, strategy, measurer.

``build_task`` turns a workload into what the tuning loop needs (space, context, strategy, measurer); ``run``
builds one task and tunes it. The CLI and the benchmark harness go through ``run`` so that every comparison is
made the same way; the model tuner builds each of its tasks with ``build_task``. The space comes from
``tiletune.schedules.make_space`` and the measurer from ``tiletune.measure.factory``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import TiletuneError
from .hardware import HardwareSpec
from .hardware import load as load_hardware
from .measure.factory import MeasureSettings, Measurer, WorkerPool, check_measurable, make_measurer
from .paths import check_output
from .schedules import make_space
from .space import Space
from .strategies import Strategy, TuneContext, create
from .strategies import get as get_strategy
from .target import parse_target, target_key
from .tune import Callback, TuneRun, check_budget, tune
from .workloads import parse
from .workloads.base import Workload

DEFAULT_STRATEGY = "dgd"  # of `tiletune tune` and RunSpec: docs/decisions/default-strategy.md


@dataclass
class RunSpec:
    workload: str | Workload  # a spec, or the workload already parsed
    strategy: str = DEFAULT_STRATEGY
    trials: int | None = 64
    seconds: float | None = None
    early_stop: int | None = None
    seed: int = 0
    target: Any = None
    levels: Any = None
    options: dict = field(default_factory=dict)
    records: str | None = None
    replay: str | None = None
    batch_size: int | None = None  # None: the strategy's (Strategy.batch_size)
    transfer: Sequence[str] = ()
    settings: MeasureSettings | None = None
    hardware: str | None = None  # a HardwareSpec JSON file; None = strategies detect what they need
    rpc: str | None = None  # HOST:PORT:KEY of a TVM RPC tracker whose devices measure (tiletune.measure.rpc)
    cluster: str | None = None  # the address of a Ray cluster whose nodes build and measure (tiletune.measure.cluster)
    recall: Sequence = ()  # records read elsewhere (the tuning database's) recalled, not measured again (tune.tune)


@dataclass
class Task:
    """One workload ready for the tuning loop: its space, the strategy's context, the strategy and the measurer
    (None when ``build_task`` was asked for none)."""

    workload: Workload
    target: dict
    space: Space
    context: TuneContext
    strategy: Strategy
    measurer: Measurer | None = None
    owns_measurer: bool = False  # made by build_task (closed by ``close``), not given by the caller

    def close(self) -> None:
        """Stop the measurer ``build_task`` made (its workers) and what the strategy holds (feature workers),
        also when the first fails."""
        try:
            if self.owns_measurer and self.measurer is not None:
                self.measurer.close()
        finally:
            self.strategy.close()


def build_task(workload: str | Workload, strategy: str = DEFAULT_STRATEGY, *, target: Any = None,
               levels: Any = None, seed: int = 0, options: dict | None = None, defaults: dict | None = None,
               hardware: str | HardwareSpec | None = None, transfer: Sequence[str] = (),
               measurer: Measurer | None = None, measure: bool = True, replay: str | None = None,
               settings: MeasureSettings | None = None, rpc: str | None = None,
               pool: WorkerPool | None = None, seeds: Sequence[dict] = (), cluster: str | None = None) -> Task:
    """The space, context, strategy and measurer of one workload. Everything a user can get wrong (target,
    workload size, hardware and transfer files, options) is checked before the measurer and the strategy start.

    ``strategy`` with the caller's ``options`` and its own ``defaults`` (``strategies.create``: a model's
    task-specific start, which still falls back where it cannot apply); ``hardware``: a HardwareSpec or its
    JSON file. The measurer: ``measurer`` when given (the caller closes it); else, with ``measure``, one made
    here (``measure.factory.make_measurer`` with ``replay``, ``settings``, ``rpc``, ``cluster`` and the shared
    ``pool``), started before the strategy so that its workers import TVM while the strategy prepares, and closed by
    ``Task.close``; ``measure=False``: none (a caller that makes its measurers itself, round by round)."""
    wl = parse(workload)
    target = parse_target(target)
    if measurer is None and measure:
        check_measurable(wl, target, replay=replay, rpc=rpc, cluster=cluster)  # before the space (TVM) loads
    space = make_space(wl, levels, target)
    hw = load_hardware(hardware) if isinstance(hardware, (str, Path)) else hardware
    context = TuneContext(workload=wl, target=target, hardware=hw, transfer=tuple(transfer), levels=levels,
                          seeds=tuple(seeds))
    for p in transfer:
        if not Path(p).exists():
            raise TiletuneError(f"--transfer file {p!r} does not exist")
    get_strategy(strategy).check_options(options or {})  # option errors before any worker starts
    own = measurer is None and measure
    m = make_measurer(wl, space, target, replay=replay, settings=settings, rpc=rpc, pool=pool,
                      cluster=cluster) if own else measurer
    try:
        strat = create(strategy, space, seed=seed, context=context, options=options, defaults=defaults)
    except BaseException:
        if own:
            m.close()
        raise
    return Task(wl, target, space, context, strat, m, own)


def run(spec: RunSpec, callbacks: Sequence[Callback] = (), measurer: Measurer | None = None) -> TuneRun:
    """One tuning run. Everything a user can get wrong (budget, records path, and what ``build_task`` checks)
    is checked before the strategy and the measurer start."""
    batch_size = spec.batch_size if spec.batch_size is not None else get_strategy(spec.strategy).batch_size
    check_budget(spec.trials, spec.seconds, spec.early_stop, batch_size)
    if spec.records is not None:
        check_output(spec.records, "records file")
    task = build_task(spec.workload, spec.strategy, target=spec.target, levels=spec.levels, seed=spec.seed,
                      options=spec.options, hardware=spec.hardware, transfer=spec.transfer, measurer=measurer,
                      replay=spec.replay, settings=spec.settings, rpc=spec.rpc, cluster=spec.cluster)
    try:
        key = target_key(task.target)
        if spec.replay is not None:
            key = getattr(task.measurer, "target_key", key)
        return tune(space=task.space, strategy=task.strategy, measurer=task.measurer, workload=task.workload.key,
                    flops=task.workload.flops, target=key, trials=spec.trials, seconds=spec.seconds,
                    early_stop=spec.early_stop, batch_size=batch_size, records=spec.records, callbacks=callbacks,
                    recall=spec.recall)
    finally:
        task.close()  # the measurer's workers and the strategy's (feature pools), even on errors
