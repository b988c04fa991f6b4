"""Config -> TensorIR schedule, per target family."""
from __future__ import annotations

from typing import Any

from ..space import Config, Space
from ..workloads.base import Workload


def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any]):
    if target.get("kind") == "cuda":
        from . import cuda

        return cuda.schedule(workload, space, config, target)
    from . import cpu

    return cpu.schedule(workload, space, config, target)


def build(workload: Workload, space: Space, config: Config, target: dict[str, Any]):
    """Compile ``config`` for ``target``; the result's ``.mod`` is the runtime module."""
    import tvm

    sch = schedule(workload, space, config, target)
    return tvm.compile(sch.mod, target=tvm.target.Target(target))
