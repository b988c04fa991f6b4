"""A measurer over a Python cost function: for testing and comparing strategies without hardware."""
from __future__ import annotations

from typing import Callable, Sequence

from ..space import Config
from .base import MeasureResult, Measurer


class FunctionMeasurer(Measurer):
    """cost_fn(config) -> seconds, or a string error kind (e.g. "run-error") for a failing config."""

    kind = "synthetic"

    def __init__(self, cost_fn: Callable[[Config], float | str]):
        self.cost_fn = cost_fn
        self.calls: list[Config] = []

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        out = []
        for c in configs:
            self.calls.append(c)
            v = self.cost_fn(c)
            if isinstance(v, str):
                out.append(MeasureResult(c, error=v, message="synthetic failure"))
            else:
                out.append(MeasureResult(c, costs=(float(v),)))
        return out
