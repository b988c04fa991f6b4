"""Assemble one tuning run from user-level inputs: workload spec, target, levels, strategy, measurer.

The CLI and the benchmark harness both go through ``prepare``/``run`` so that every comparison is
made the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import TiletuneError
from .measure.base import MeasureSettings, Measurer
from .space import Space
from .strategies import TuneContext, create
from .target import parse_target, target_key
from .tune import Callback, TuneRun, tune
from .workloads import parse
from .workloads.base import Workload


def make_space(workload: Workload, levels=None, target: dict | None = None) -> Space:
    """The default space of a workload for a target: (4, 2) levels and the unroll knob."""
    if target is not None and target.get("kind") == "cuda":
        from .schedules import cuda

        return cuda.make_space(workload, levels)
    from .schedules.cpu import choice_knobs

    return Space.from_axes(workload.axes(), levels=levels, choices=choice_knobs(workload))


def make_measurer(workload: Workload, space: Space, target: dict, *, replay: str | None = None,
                  settings: MeasureSettings | None = None, transport: str | None = None) -> Measurer:
    if replay is not None:
        from .measure.replay import ReplayMeasurer

        return ReplayMeasurer(replay, workload.key, space)
    if target.get("kind") != "llvm" or transport is not None:
        from .measure import remote

        return remote.make_measurer(workload, space, target, settings,
                                    transport=remote.CommandTransport(transport) if transport else None)
    from .measure.local import LocalMeasurer

    return LocalMeasurer(workload, space, target, settings)


@dataclass
class RunSpec:
    workload: str
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
    batch_size: int = 8
    transfer: Sequence[str] = ()
    settings: MeasureSettings | None = None
    hardware: str | None = None  # a HardwareSpec JSON file; None = strategies detect what they need
    transport: str | None = None  # shell command that runs a batch directory {dir} on a GPU machine


def run(spec: RunSpec, callbacks: Sequence[Callback] = (), measurer: Measurer | None = None) -> TuneRun:
    wl = parse(spec.workload)
    target = parse_target(spec.target)
    space = make_space(wl, spec.levels, target)
    hardware = None
    if spec.hardware is not None:
        from .hardware import load as load_hardware

        hardware = load_hardware(spec.hardware)
    context = TuneContext(workload=wl, target=target, hardware=hardware, transfer=tuple(spec.transfer),
                          levels=spec.levels)
    for p in spec.transfer:
        if not Path(p).exists():
            raise TiletuneError(f"--transfer file {p!r} does not exist")
    strat = create(spec.strategy, space, seed=spec.seed, context=context, options=spec.options)
    m = measurer
    try:
        if m is None:
            m = make_measurer(wl, space, target, replay=spec.replay, settings=spec.settings,
                              transport=spec.transport)
        key = target_key(target) if spec.replay is None else getattr(m, "target_key", target_key(target))
        return tune(space=space, strategy=strat, measurer=m, workload=wl.key, flops=wl.flops, target=key,
                    trials=spec.trials, seconds=spec.seconds, early_stop=spec.early_stop,
                    batch_size=spec.batch_size, records=spec.records, callbacks=callbacks)
    finally:
        if measurer is None and m is not None:
            m.close()
        strat.close()  # strategies with worker pools (feature extraction) stop them, even on errors
