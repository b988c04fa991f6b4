"""Random search (Bergstra & Bengio): uniform samples without replacement."""
from __future__ import annotations

from typing import Sequence

from ..space import Config
from .base import Strategy, Trial, register
from .sampling import sample_unvisited


@register
class RandomSearch(Strategy):
    name = "random"
    summary = "uniform random sampling without replacement"
    batch_size = 16  # proposals do not depend on results: see Strategy.batch_size

    def __init__(self, space, **kw):
        super().__init__(space, **kw)
        self._proposed: set[Config] = set()

    def ask(self, n: int) -> list[Config]:
        out = sample_unvisited(self.space, self.rng, n, self._proposed)
        self._proposed.update(out)
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        pass
