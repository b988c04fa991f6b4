"""Grid search: every configuration in index order, optionally strided to spread a small budget."""
from __future__ import annotations

from typing import Sequence

from ..space import Config
from .base import Strategy, Trial, register
from .options import Option, POSITIVE


@register
class GridSearch(Strategy):
    name = "grid"
    summary = "exhaustive enumeration in index order (stride > 1 visits every stride-th index first)"
    batch_size = 16  # proposals do not depend on results: see Strategy.batch_size
    options = (
        Option("stride", 1, "visit indices 0, s, 2s, ... then 1, 1+s, ... (s=1: plain order)", int, **POSITIVE),
    )

    def __init__(self, space, **kw):
        super().__init__(space, **kw)
        self._offset = 0
        self._next = 0

    def ask(self, n: int) -> list[Config]:
        s, size, out = self.opts["stride"], self.space.size, []
        while len(out) < n and self._offset < min(s, size):
            c = self.space.get(self._next)
            if self.space.allows(c):  # skip what the constraint forbids
                out.append(c)
            self._next += s
            if self._next >= size:
                self._offset += 1
                self._next = self._offset
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        pass

    def exhausted_reason(self) -> str:
        legal = "" if self.space.constraint is None else " (those its constraint allows)"
        return f"grid enumerated every one of the space's {self.space.size} configurations{legal}"
