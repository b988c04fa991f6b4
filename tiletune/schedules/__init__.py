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
    (unroll; pack for the CPU template where it applies); for NHWC conv2d on a CPU, the register-tile rule
    of ``cpu.register_rule`` as the space's constraint; on a GPU, its per-block limits (``cuda.LimitRule``)."""
    if _is_cuda(target):
        return cuda.make_space(workload, levels, target)
    space = Space.from_axes(workload.axes(), levels=levels, choices=cpu.choice_knobs(workload))
    space.constraint = cpu.register_rule(workload, space, target)
    return space


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


def build(workload: Workload, space: Space, config: Config, target: dict[str, Any], *, arg_checks: bool = True):
    """Compile ``config`` for ``target``; the result's ``.mod`` is the runtime module.

    ``arg_checks=False`` leaves out the entry function's argument assertions (types, shapes, strides,
    devices: ``tirx.disable_assert``), for callers that always pass arrays made from the workload's own
    shapes and dtypes, as the measurement workers do. They are about a third of a small kernel's LLVM IR,
    and compile time with it (docs/decisions/measure-arg-checks.md); the kernel's loops are the same.
    Libraries given to users keep them."""
    import tvm

    from ..quiet import quiet_tvm

    sch = schedule(workload, space, config, target)
    if arg_checks:
        with quiet_tvm():  # pow's warnings (fused GELU epilogues)
            return tvm.compile(sch.mod, target=tvm.target.Target(target))
    outer = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=outer.opt_level, config={**outer.config, "tirx.disable_assert": True}):
        with quiet_tvm():
            return tvm.compile(sch.mod, target=tvm.target.Target(target))
