"""A genetic algorithm over knob values, as AutoTVM's GATuner.

A gene is a configuration written as one option index per knob. AutoTVM's GATuner, as ask/tell:

    genes <- pop_size unmeasured configurations drawn uniformly
    repeat
        measure every gene of the generation (ask hands them out in order; tell collects the scores,
        score = 1/cost, 0 for a failed configuration)
        when the whole generation is scored:
            pool <- genes + elites, scores <- their scores + elite scores
            elites <- the elite_num best of the pool                       # elitism
            repeat pop_size times:                                         # crossover
                pick two distinct parents with probability proportional to score
                (scores normalised to max 1, + 1e-8 so that an all-failed pool is uniform)
                child <- parent1[:p] + parent2[p:] for a uniform cut point p over the knobs
            each knob of each child is reset to a uniform option with probability mutation_prob
            a child that was measured before is mutated one random knob at a time until it is new
            genes <- the children (no duplicates)

The start (``tiletune.strategies.starts``; AutoTVM's is ``random``, a uniform first generation): its
configurations come first in the first generation (the rest uniform), so they are measured first and breed.

AutoTVM's defaults are pop_size 100, elite_num 3, mutation_prob 0.1; ours keep elite_num and mutation_prob
and take pop_size 16 (docs/decisions/ga-pop-size.md: with 100, a run below 100 trials never leaves its first
generation, i.e. it is random search plus the start); ``pop_size=100`` is AutoTVM's GA, which the paper
benchmarks pin. When the unmeasured part of the space is smaller than a generation, the generation is cut to
it; the search ends when every configuration has been measured.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..space import Config
from .base import Strategy, Trial, register
from .options import NONNEGATIVE, PROBABILITY, Option, at_least
from .sampling import sample_unvisited
from .starts import start_options, start_seeds


@register
class GATuner(Strategy):
    name = "ga"
    summary = "AutoTVM's genetic algorithm: elitism, one-point crossover of knobs, mutation"
    options = (
        Option("pop_size", 16, "genes per generation (AutoTVM: 100)", int, **at_least(2)),
        Option("elite_num", 3, "best genes carried into the next selection pool", int, **NONNEGATIVE),
        Option("mutation_prob", 0.1, "probability to reset each knob of a child", float, **PROBABILITY),
    ) + start_options("AutoTVM: random")

    def __init__(self, space, **kw):
        super().__init__(space, **kw)
        self.dims = [len(k) for k in space.knobs]
        self.visited: set[tuple[int, ...]] = set()
        self.genes: list[tuple[int, ...]] = self._initial()
        self.scores: dict[tuple[int, ...], float] = {}
        self.elites: list[tuple[int, ...]] = []
        self.elite_scores: list[float] = []
        self.next = 0  # next gene of the generation to hand out

    # ---- encoding --------------------------------------------------------------------------------
    def _config(self, gene: tuple[int, ...]) -> Config:
        return Config(tuple(k.options[i] for k, i in zip(self.space.knobs, gene)))

    def _gene(self, config: Config) -> tuple[int, ...]:
        return tuple(k.index(v) for k, v in zip(self.space.knobs, config.values))

    def _legal(self, gene) -> bool:
        return self.space.allows(self._config(gene))

    def _initial(self) -> list[tuple[int, ...]]:
        n = min(self.opts["pop_size"], self.space.size)
        seeds = list(dict.fromkeys(start_seeds(self)))[:n]  # the start first; [] for start=random
        genes = [self._gene(c) for c in seeds + self.space.sample_unique(self.rng, n - len(seeds), exclude=seeds)]
        self.visited.update(genes)
        return genes

    def _random_unvisited(self) -> tuple[int, ...] | None:
        got = sample_unvisited(self.space, self.rng, 1, {self._config(g) for g in self.visited})
        return self._gene(got[0]) if got else None

    # ---- ask / tell ------------------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        out = self.genes[self.next:self.next + n]
        self.next += len(out)
        return [self._config(g) for g in out]

    def tell(self, trials: Sequence[Trial]) -> None:
        for t in trials:
            g = self._gene(t.config)
            self.visited.add(g)
            self.scores[g] = 1.0 / t.cost if t.ok and t.cost > 0 else 0.0
        if self.next >= len(self.genes) and all(g in self.scores for g in self.genes):
            self._evolve()

    def _evolve(self) -> None:
        pop_size, elite_num, pm = self.opts["pop_size"], self.opts["elite_num"], self.opts["mutation_prob"]
        pool = self.genes + self.elites
        scores = np.asarray([self.scores[g] for g in self.genes] + self.elite_scores, dtype=np.float64)
        # elitism
        k = min(elite_num, len(pool))
        if k:
            best = np.argsort(-scores, kind="stable")[:k]
            self.elites = [pool[i] for i in best]
            self.elite_scores = [float(scores[i]) for i in best]
        # selection probabilities
        s = scores + 1e-8
        s = s / s.max()
        probs = s / s.sum()
        idx = np.arange(len(pool))
        children: list[list[int]] = []
        for _ in range(pop_size):
            if len(pool) >= 2:
                a, b = self.rng.choice(idx, size=2, replace=False, p=probs)
            else:
                a = b = 0
            cut = int(self.rng.integers(len(self.dims)))
            children.append(list(pool[a][:cut]) + list(pool[b][cut:]))
        # mutation, and no configuration twice
        nxt: list[tuple[int, ...]] = []
        for child in children:
            if len(self.visited) >= self.space.size:
                break
            for j, d in enumerate(self.dims):
                if self.rng.random() < pm:
                    child[j] = int(self.rng.integers(d))
            g = tuple(child)
            tries = 0
            while (g in self.visited or not self._legal(g)) and tries < 200:
                j = int(self.rng.integers(len(self.dims)))
                child[j] = int(self.rng.integers(self.dims[j]))
                g = tuple(child)
                tries += 1
            if g in self.visited or not self._legal(g):
                g = self._random_unvisited()
                if g is None:
                    break
            self.visited.add(g)
            nxt.append(g)
        self.genes = nxt
        self.next = 0
