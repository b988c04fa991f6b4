"""Parallel simulated annealing over a Space with a cost model as energy (AutoTVM's
SimulatedAnnealingOptimizer), with the improvements Zheng proposes (section 5) as options.

Points are rows of knob option indices (one column per knob), so a move and a whole batch of
predictions are numpy operations. ``find_maximums(score, num, exclude)``:

    points <- the chains' last points (persistent across calls) or ``chains`` uniform samples
    scores <- score(points)                           # model prediction, higher is better
    heap   <- the best ``num`` points seen that are not in ``exclude`` (measured ones)
    T <- T0;  k <- 0
    while k < iters and k < k_last_modify + early_stop:
        new <- random_walk(points)                   # one knob of each chain moved to another value
        accept with probability exp(min((score(new) - score(points)) / (T + 1e-5), 1))
        push new points into the heap; k_last_modify <- k if the heap changed
        T <- cooling(k)
        on early stop with restarts left: chains <- fresh uniform samples, T <- T0, k_last_modify <- k
    return the heap, best first

- AutoTVM defaults: ``chains`` (parallel_size) 128, ``iters`` (n_iter) 500, ``early_stop`` 50,
  temperature from T0 = 1 to T1 = 0.
- ``cooling='linear'`` (AutoTVM): T_k = T0 - (k + 1) (T0 - T1) / (iters + 1).
  ``cooling='exp'`` (a geometric schedule, Zheng's "cooling schedule"): T_k = T0 a^(k+1) with a chosen so
  that T reaches max(T1, 1e-3 T0) at k = iters: fast early exploration then long greedy refinement.
- ``restarts`` (Zheng's "restarts", Mendivil et al.): when the chains stall (early stop), restart them
  from fresh uniform points with the temperature back at T0, up to ``restarts`` times; every restart
  gets a fresh budget of ``iters`` iterations.
- The random walk is AutoTVM's: pick one knob with more than one option uniformly, move it to a
  uniformly chosen *other* option. A move that breaks the space's constraint is rejected.
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Iterable

import numpy as np

from ..errors import TiletuneError
from ..space import Config, Space

COOLINGS = ("linear", "exp")


class SimulatedAnnealing:
    def __init__(self, space: Space, rng: np.random.Generator, *, chains: int = 128, iters: int = 500,
                 early_stop: int = 50, t0: float = 1.0, t1: float = 0.0, cooling: str = "linear",
                 restarts: int = 0, persistent: bool = True):
        if cooling not in COOLINGS:
            raise TiletuneError(f"unknown cooling {cooling!r}; accepted: {', '.join(COOLINGS)}")
        self.space = space
        self.rng = rng
        self.chains = max(1, int(chains))
        self.iters = max(1, int(iters))
        self.early_stop = max(1, int(early_stop))
        self.t0, self.t1 = float(t0), float(t1)
        self.cooling = cooling
        self.restarts = max(0, int(restarts))
        self.persistent = persistent
        self.radix = np.asarray([len(k) for k in space.knobs], dtype=np.int64)
        self.mutable = np.flatnonzero(self.radix > 1)
        # mixed-radix weights, first knob most significant: key(row) == space.index(config)
        w = np.ones(len(self.radix), dtype=np.int64)
        for i in range(len(self.radix) - 2, -1, -1):
            w[i] = w[i + 1] * self.radix[i + 1]
        if space.size >= 2 ** 62:
            raise TiletuneError(f"simulated annealing needs a space under 2^62 configurations, got {space.size}")
        self.weights = w
        self.points: np.ndarray | None = None
        self.stats = {"runs": 0, "iterations": 0, "restarts": 0, "evaluated": 0}

    # ---- conversions -------------------------------------------------------------------------
    def to_config(self, row: np.ndarray) -> Config:
        return Config(tuple(k.options[int(i)] for k, i in zip(self.space.knobs, row)))

    def to_row(self, config: Config) -> tuple[int, ...]:
        return tuple(k.index(v) for k, v in zip(self.space.knobs, config.values))

    def keys(self, points: np.ndarray) -> np.ndarray:
        """Space indices of option-index rows."""
        return points @ self.weights

    def rows(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        return (keys[:, None] // self.weights[None, :]) % self.radix[None, :]

    def sample(self, n: int) -> np.ndarray:
        pts = self.rng.integers(0, self.radix, size=(n, len(self.radix)))
        if self.space.constraint is not None:
            for i in range(n):
                if not self.space.constraint(self.space, self.to_config(pts[i])):
                    pts[i] = self.to_row(self.space.sample(self.rng))
        return pts

    def random_walk(self, points: np.ndarray) -> np.ndarray:
        new = points.copy()
        if len(self.mutable) == 0:
            return new
        n = len(points)
        j = self.mutable[self.rng.integers(0, len(self.mutable), size=n)]
        r = self.radix[j]
        step = 1 + (self.rng.random(n) * (r - 1)).astype(np.int64)  # 1 .. r-1: another value
        new[np.arange(n), j] = (points[np.arange(n), j] + step) % r
        if self.space.constraint is not None:
            for i in range(n):
                if not self.space.constraint(self.space, self.to_config(new[i])):
                    new[i] = points[i]
        return new

    def temperature(self, k: int) -> float:
        if self.cooling == "linear":
            return self.t0 - (k + 1) * (self.t0 - self.t1) / (self.iters + 1)
        t_end = max(self.t1, 1e-3 * self.t0)
        a = (t_end / self.t0) ** (1.0 / self.iters)
        return self.t0 * a ** (k + 1)

    # ---- the search --------------------------------------------------------------------------
    def find_maximums(self, score: Callable[[np.ndarray], np.ndarray], num: int,
                      exclude: Iterable[int] = ()) -> list[tuple[float, int]]:
        """Up to ``num`` (score, space index) pairs, best first, none of them in ``exclude`` (space
        indices). ``score`` maps an option-index matrix to scores (higher is better)."""
        self.stats["runs"] += 1
        excluded = set(exclude)
        if self.points is None or not self.persistent or len(self.points) != self.chains:
            points = self.sample(self.chains)
        else:
            points = self.points
        scores = score(points)
        self.stats["evaluated"] += len(points)
        heap: list[tuple[float, int, int]] = []  # (score, tiebreak, key)
        in_heap: set[int] = set()
        tick = 0

        def push(s_arr: np.ndarray, pts: np.ndarray) -> bool:
            nonlocal tick
            changed = False
            floor = heap[0][0] if len(heap) >= num else -math.inf
            cand = np.flatnonzero(s_arr > floor)
            keys = self.keys(pts[cand]).tolist()
            for i, key in zip(cand.tolist(), keys):
                if key in excluded or key in in_heap:
                    continue
                s = float(s_arr[i])
                tick += 1
                if len(heap) < num:
                    heapq.heappush(heap, (s, -tick, key))
                elif s > heap[0][0]:
                    _, _, old = heapq.heapreplace(heap, (s, -tick, key))
                    in_heap.discard(old)
                else:
                    continue
                in_heap.add(key)
                changed = True
            return changed

        push(scores, points)
        restarts_left = self.restarts
        k = k_last = 0
        t = self.t0
        while True:
            if k >= self.iters or k >= k_last + self.early_stop:
                if restarts_left == 0:
                    break
                restarts_left -= 1
                self.stats["restarts"] += 1
                points = self.sample(self.chains)
                scores = score(points)
                self.stats["evaluated"] += len(points)
                push(scores, points)
                k = k_last = 0
                t = self.t0
                continue
            new = self.random_walk(points)
            new_scores = score(new)
            self.stats["evaluated"] += len(new)
            with np.errstate(over="ignore"):
                prob = np.exp(np.minimum((new_scores - scores) / (t + 1e-5), 1.0))
            accept = self.rng.random(len(prob)) < prob
            points = np.where(accept[:, None], new, points)
            scores = np.where(accept, new_scores, scores)
            if push(new_scores, new):
                k_last = k
            k += 1
            self.stats["iterations"] += 1
            t = self.temperature(k - 1)
        self.points = points
        return [(s, key) for s, _, key in sorted(heap, key=lambda x: (-x[0], -x[1]))]
