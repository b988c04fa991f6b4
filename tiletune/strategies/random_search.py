"""Random search (Bergstra & Bengio): uniform samples without replacement."""
from __future__ import annotations

from typing import Sequence

from ..space import Config
from .base import Strategy, Trial, register


@register
class RandomSearch(Strategy):
    name = "random"
    summary = "uniform random sampling without replacement"
    batch_size = 16  # proposals do not depend on results: see Strategy.batch_size

    def __init__(self, space, **kw):
        super().__init__(space, **kw)
        self._proposed: set[Config] = set()
        self._exhausted = False

    def ask(self, n: int) -> list[Config]:
        if len(self._proposed) >= self.space.size:
            return []
        if self.space.size <= 4 * n + len(self._proposed) and self.space.size <= 200_000:
            # small remaining space: draw from the complement exactly
            rest = self.space.remaining(self._proposed)
            pick = self.rng.permutation(len(rest))[:n]
            out = [rest[i] for i in pick]
        else:
            out = self.space.sample_unique(self.rng, n, exclude=self._proposed)
        self._proposed.update(out)
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        pass
