"""Uniform samples of the configurations a search has not visited yet (random search, xgb's random
proposals, evo's random share of a round, DGD's restarts, GA's and N-A2C's fallbacks, the RNN controller's
fill-up)."""
from __future__ import annotations

from typing import Collection

import numpy as np

from ..space import Config, Space

#: spaces of at most this many configurations are enumerated (``Space.remaining``, at Python speed) when few
#: unvisited configurations are left or sampling by rejection cannot find enough of them
ENUMERATE_MAX = 200_000


def sample_unvisited(space: Space, rng: np.random.Generator, n: int, visited: Collection[Config]) -> list[Config]:
    """Up to ``n`` distinct configurations not in ``visited``, uniformly; fewer only when fewer are left (or
    when the space is too large to enumerate and rejection sampling keeps hitting visited ones). Where the
    unvisited part is small (the space at most 4n + |visited| and at most ENUMERATE_MAX), drawn exactly from
    it; else by rejection (``Space.sample_unique``), topped up from the enumerated rest when that runs short."""
    if n <= 0 or len(visited) >= space.size:
        return []
    excluded = visited if isinstance(visited, (set, frozenset)) else set(visited)
    if space.size <= ENUMERATE_MAX and space.size <= 4 * n + len(excluded):
        rest = space.remaining(excluded)
        return [rest[int(i)] for i in rng.permutation(len(rest))[:n]]
    out = space.sample_unique(rng, n, exclude=excluded)
    if len(out) < n and space.size <= ENUMERATE_MAX:
        rest = space.remaining(excluded | set(out))
        out += [rest[int(i)] for i in rng.permutation(len(rest))[:n - len(out)]]
    return out
