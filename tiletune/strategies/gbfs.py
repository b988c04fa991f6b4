"""G-BFS: Greedy Best-First Search over the tiling MDP (Zhang et al., "Compiler-Level Matrix
Multiplication Optimization for Deep Learning", section 4.2, Algorithm 1).

The model (section 4.1): a state s is a configuration, e.g. s = [[m0..m3], [k0, k1], [n0..n3]] plus the
legitimacy bit J (``Space.is_legal``); an action a moves a prime factor p of one axis x from level j to
level i != j (s_x[i] <- p s_x[i], s_x[j] <- s_x[j] / p; p = 2 is the paper's eq. 6) or moves a choice
knob one value up or down; s' = step(s, a) (``Space.step``, None when J(s') = 0); g(s) is the list of
legitimate neighbours (``Space.neighbours``, eq. 9).

Algorithm 1::

    Q = PriorityQueue() ordered by increasing cost; S_v = {s0}
    Q.push((cost(s0), s0))
    while Q not empty and budget left:
        (cost(s), s) = Q.pop()
        B = rho neighbours taken at random from g(s)
        for s' in B:
            if s' legitimate and s' not in S_v:
                Q.push((cost(s'), s')); S_v.add(s'); keep s* = argmin cost

Choices where the paper leaves a detail open:

- Batching (``search`` below is a GeneratorStrategy: ``yield B`` hands B to the loop). One pop's B (its
  rho random neighbours, less the visited ones) is one natural batch. ``ask(n)`` first hands out what
  is left of the current B; when it needs more, the search pops the next state from Q, whose costs are
  all known (every asked configuration has been told before the next ask), and takes its B, and so on
  until n configurations are proposed or Q is empty. With n = rho this is Algorithm 1 exactly; with
  n > rho the next-best states are expanded before the first B's costs are known (a batched best-first
  search). The B of one pop is always proposed in full before the next pop, as in the paper's inner
  for-loop; a pop whose neighbours are all visited is followed by the next pop at once.
- s' joins S_v when it is chosen (not after its test), so it is never proposed twice; it joins Q when
  its cost is told.
- A configuration whose measurement fails (build error, wrong answer, ...) is pushed with cost = inf:
  it is legitimate in the sense of J, so its neighbours stay reachable, but it is expanded only after
  every state with a finite cost.
- rho = 0 (or "all") means rho = len(g(s)); then, with no budget, every state reachable from s0 is
  visited (the paper's remark after Algorithm 1). Stop: Q empty (``ask`` returns []) or the loop's
  budget (the paper's T_max).
- The start (``tiletune.strategies.starts``; the paper's s0 is ``untiled``, the untiled state
  [[m,1,1,1],[k,1],[n,1,1,1]]): the first B is its configurations; all of them are tested first and join S_v
  and Q, so the search expands the best of them first. From the untiled s0 the search spends its first ~100
  trials leaving the slow region (docs/decisions/default-start.md); the benchmarks that reproduce the paper pin
  ``start=untiled``.
"""
from __future__ import annotations

import heapq
import math

from ..space import Config, Space
from .base import GeneratorStrategy, Search, register
from .options import Option
from .starts import start_options, strategy_starts


def parse_rho(value) -> int:
    """rho: a positive integer, or 0 / "all" for every neighbour."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return 0
    v = int(value)
    if v < 0:
        raise ValueError(value)
    return v


parse_rho.__name__ = "int or 'all'"


@register
class GBFS(GeneratorStrategy):
    name = "gbfs"
    summary = "Greedy Best-First Search over tiling moves (Zhang et al., Algorithm 1)"
    options = (
        Option("rho", 5, "neighbours of a popped state tested at random (0 or 'all': every neighbour)", parse_rho),
    ) + start_options("the paper: untiled")

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        self.rho: int = self.opts["rho"]
        self.starts = strategy_starts(self, paper="untiled")
        self.s0 = self.starts[0]
        self.Q: list[tuple[float, int, Config]] = []  # (cost(s), push order, s): a min-heap
        self.S_v: set[Config] = set(self.starts)  # visited (chosen for testing)
        self.testing: set[Config] = set()  # proposed, cost not yet told
        self.s_star: Config | None = None
        self.cost_min = math.inf

    def search(self) -> Search:
        """Algorithm 1. ``told = yield B`` proposes B; ``told`` holds costs as they arrive, or is [] when
        the loop asks for more."""
        order = 0
        B = list(self.starts)  # lines 2-3: s0 (or the constructions) tested first (S_v holds them already)
        while True:
            self.testing.update(B)
            told = yield B  # test B
            while told:  # costs arrived
                for t in told:
                    cost = t.cost if t.ok else math.inf
                    if t.config in self.testing:
                        self.testing.discard(t.config)
                        heapq.heappush(self.Q, (cost, order, t.config))  # line 9: Q.push((cost(s'), s'))
                        order += 1
                    if cost < self.cost_min:  # lines 11-13: keep s* = argmin cost
                        self.cost_min, self.s_star = cost, t.config
                told = yield []  # wait for more costs, or for the loop to ask for more
            B = []  # the loop asks for more: line 4, while Q is not empty (else wait for costs)
            while not B and self.Q:  # a pop whose neighbours are all visited: pop again
                _, _, s = heapq.heappop(self.Q)  # line 5: (cost(s), s) = Q.pop()
                g = self.space.neighbours(s)  # g(s): legitimate neighbours only
                rho = len(g) if self.rho == 0 else min(self.rho, len(g))
                picked = self.rng.choice(len(g), size=rho, replace=False) if rho else []  # line 6
                for i in picked:
                    s_next = g[int(i)]
                    if s_next not in self.S_v:  # lines 7-8 (g(s) holds legitimate states only), 10
                        self.S_v.add(s_next)
                        B.append(s_next)
