"""Assemble one tuning run from user-level inputs: workload spec, target, levels, strategy, measurer.

The CLI and the benchmark harness both go through ``run`` so that every comparison is made the same
way. The space comes from ``tiletune.schedules.make_space`` and the measurer from
``tiletune.measure.factory.make_measurer`` (both also importable from here, as before).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import TiletuneError
from .hardware import load as load_hardware
from .measure.base import MeasureSettings, Measurer
from .measure.factory import make_measurer, measured_here
from .measure.local import check_fits_here
from .paths import check_output
from .schedules import make_space
from .strategies import TuneContext, create
from .strategies import get as get_strategy
from .target import parse_target, target_key
from .tune import Callback, TuneRun, check_budget, tune
from .workloads import parse
from .workloads.base import Workload


@dataclass
class RunSpec:
    workload: str | Workload  # a spec, or the workload already parsed
    strategy: str = "random"
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


def run(spec: RunSpec, callbacks: Sequence[Callback] = (), measurer: Measurer | None = None) -> TuneRun:
    """One tuning run. Everything a user can get wrong (budget, records path, target, workload size, options,
    files) is checked before the strategy and the measurer start."""
    batch_size = spec.batch_size if spec.batch_size is not None else get_strategy(spec.strategy).batch_size
    check_budget(spec.trials, spec.seconds, spec.early_stop, batch_size)
    if spec.records is not None:
        check_output(spec.records, "records file")
    wl = parse(spec.workload)
    target = parse_target(spec.target)
    if measurer is None and measured_here(target, replay=spec.replay, rpc=spec.rpc):
        check_fits_here(wl, target)  # before the space is built, which loads TVM
    space = make_space(wl, spec.levels, target)
    hardware = None
    if spec.hardware is not None:
        hardware = load_hardware(spec.hardware)
    context = TuneContext(workload=wl, target=target, hardware=hardware, transfer=tuple(spec.transfer),
                          levels=spec.levels)
    for p in spec.transfer:
        if not Path(p).exists():
            raise TiletuneError(f"--transfer file {p!r} does not exist")
    get_strategy(spec.strategy).check_options(spec.options)  # option errors before any worker starts
    # the measurer first: its workers import TVM while the strategy prepares (a model, constructions, torch)
    m, strat = measurer, None
    try:
        if m is None:
            m = make_measurer(wl, space, target, replay=spec.replay, settings=spec.settings,
                              rpc=spec.rpc)
        strat = create(spec.strategy, space, seed=spec.seed, context=context, options=spec.options)
        key = target_key(target) if spec.replay is None else getattr(m, "target_key", target_key(target))
        return tune(space=space, strategy=strat, measurer=m, workload=wl.key, flops=wl.flops, target=key,
                    trials=spec.trials, seconds=spec.seconds, early_stop=spec.early_stop,
                    batch_size=batch_size, records=spec.records, callbacks=callbacks)
    finally:
        if measurer is None and m is not None:
            m.close()
        if strat is not None:
            strat.close()  # strategies with worker pools (feature extraction) stop them, even on errors
