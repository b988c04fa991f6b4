"""Config -> TensorIR schedule, per target family (``cpu`` for LLVM targets, ``cuda`` for CUDA targets),
and the space of a workload that each family's template tunes."""
from __future__ import annotations

from typing import Any

from ..space import Config, Space
from ..workloads.base import Workload
from . import cpu, cuda


def _is_cuda(target: dict[str, Any] | None) -> bool:
    return target is not None and target.get("kind") == "cuda"


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None) -> Space:
    """The default space of a workload for a target: (4, 2) levels and the template's choice knobs
    (unroll; pack for the CPU template where it applies)."""
    if _is_cuda(target):
        return cuda.make_space(workload, levels)
    return Space.from_axes(workload.axes(), levels=levels, choices=cpu.choice_knobs(workload))


def check(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None) -> None:
    """Raise ``cpu.InvalidConfig`` (or its GPU subclass) when the target's template rejects ``config``."""
    if _is_cuda(target):
        cuda.check(workload, space, config, target)
    else:
        cpu.check(workload, space, config)


def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any]):
    if _is_cuda(target):
        return cuda.schedule(workload, space, config, target)
    return cpu.schedule(workload, space, config, target)


def build(workload: Workload, space: Space, config: Config, target: dict[str, Any]):
    """Compile ``config`` for ``target``; the result's ``.mod`` is the runtime module."""
    import tvm

    sch = schedule(workload, space, config, target)
    return tvm.compile(sch.mod, target=tvm.target.Target(target))
