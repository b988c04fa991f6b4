"""Ansor's evolutionary search with a learned cost model (Zheng et al., "Ansor", OSDI 2020, section 5.1;
``SketchPolicy::SearchOneRound`` / ``EvolutionarySearch`` / ``PickStatesWithEpsGreedy``), the baseline
of TVM-AF-DS (Li et al., ICS'24), with the program-feature model (``evo``) or the seven analytical
features (``evo-af``, the paper's Ansor-AF).

One round (``measure_per_round`` = Ansor's num_measure_per_iter, 64)::

    model.update(all measured so far)                  # XGBoost on normalised throughput
    init = population random configurations            # SampleInitPopulation
         + the best use_measured_ratio x population measured ones
    best = EvolutionarySearch(init, out_size = 2 x measure_per_round):
        for k in 0 .. num_iters:
            scores = model.predict(pop)
            keep the out_size best unmeasured configurations seen (a heap, no duplicates)
            if k == num_iters: break
            next = []
            while len(next) < population:
                s = pop[roulette(max(scores, 0))]
                u = uniform()
                if u < crossover_ratio: s = crossover(s, pop[roulette(...)])    # per knob from either
                elif u < crossover_ratio + mutation_prob: s = mutate(s)        # rules, weighted
                next.append(s)
            pop = next
    random = eps_greedy x measure_per_round (at least 1) random unmeasured configurations
    measure: the best first until (1 - eps_greedy) of the round is filled, then the random ones
             (each list falls back on the other when it runs out; nothing is measured twice)

Mutation rules with Ansor's weights: MutateTileSize 0.90 (pick a split knob, a level whose factor is > 1,
a divisor d > 1 of it, and another level; move d: s[src] /= d, s[dst] *= d, so the split stays exact),
and the rest of the weight (Ansor: auto-unroll 0.04, compute location 0.05, parallel 0.01; here the
template's only other knobs) on MutateChoice, a new value of a random choice knob (``unroll``, ``pack``).
With no choice knob all the weight is on tile sizes.

Choices where Ansor or the paper leaves a detail open here:

- Crossover: released Ansor has none ("TODO: add crossover"); its first version had
  ``crossover_ratio`` 0.05, which is the default here (uniform crossover over knobs).
- Cost model before it has data: Ansor's XGBModel predicts uniform random scores until it has
  ``num_warmup_sample`` = 100 results; ``warmup`` (default 100) does the same.
- Scores are the model's predictions of normalised throughput (min_cost / cost, 0 for a failure),
  ``tiletune.cost_model.xgb.XGBCostModel`` with the ``reg`` loss (Ansor's XGBModel regresses the
  normalised throughput too); the model is refitted when a round's measurements are all told (Ansor
  updates after every measured batch, which is one round).
- Features (option ``feature``): ``program`` = itervar features of the lowered program
  (``tiletune.features``) when TuneContext.workload is set, the knob features (``tiletune.features.knob``)
  when it is not (synthetic spaces, the conformance suite); ``analytical`` = the seven TVM-AF-DS
  features (``tiletune.features.analytical``), also falling back on the knob features without a workload;
  ``knob``, ``itervar``, ``curve``, ``curve1`` by name (``tiletune.strategies.surrogate``).
- Population: Ansor's 2048 for cheap features (knob, analytical); ``population=0`` (auto) gives 128 for
  features that lower every configuration with TVM (Ansor's C++ extraction is far cheaper), so that a
  round's extraction (about population x (num_iters + 1) new configurations) stays comparable to its
  measurements. ``timing()`` reports the seconds spent in features, fitting and prediction.
- The start (``tiletune.strategies.starts``; Ansor's is ``random``: the first round from a random
  population): its configurations are measured first, as a round of their own, and the measured ones seed
  the next populations (``use_measured_ratio``).
- Warm starts: ``prior=analytic`` (pseudo-measurements from Gensor's analytic model,
  ``tiletune.strategies.prior``) and records of other workloads (``--transfer``) are background rows of the
  model (``tiletune.strategies.surrogate``); with either, the model's scores are used from the first round
  instead of random ones until ``warmup``. ``prior=analytic`` is the default (docs/decisions/prior.md): without
  it the first round is the start and a random-scored evolution. Where the analytic model cannot apply (a space
  without tile knobs) the default falls back on ``prior=none`` with a warning; ``prior=none`` is Ansor's (the
  paper benchmarks pin it).
- A round shorter than ``measure_per_round`` happens when the space runs out of unmeasured points; when
  the whole space is measured ``ask`` returns [].
"""
from __future__ import annotations

import heapq
import math
from typing import Sequence

import numpy as np

from ..space import ChoiceKnob, Config, Space, divisors
from .base import Trial, register
from .learned import EVO_PRIOR, SurrogateStrategy, surrogate_options
from .options import NONNEGATIVE, POSITIVE, PROBABILITY, Option, with_default
from .sampling import sample_unvisited
from .starts import start_options, start_seeds
from .surrogate import TVM_FEATURES


# ---- Ansor's mutation and crossover ------------------------------------------------------------------
def mutate_tile_size(space: Space, config: Config, rng: np.random.Generator) -> Config | None:
    """Ansor's MutateTileSize on one split knob: move a divisor d > 1 of one level's factor to another
    level (None when no split knob has a level > 1 to take from)."""
    splits = [i for i, k in space.split_knobs if k.levels > 1]
    if not splits:
        return None
    ki = splits[int(rng.integers(len(splits)))]
    f = list(config.values[ki])
    src_choices = [i for i, x in enumerate(f) if x > 1]
    if not src_choices:
        return None
    src = src_choices[int(rng.integers(len(src_choices)))]
    ds = divisors(f[src])[1:]
    d = ds[int(rng.integers(len(ds)))]
    dst = int(rng.integers(len(f) - 1))
    dst += dst >= src
    f[src] //= d
    f[dst] *= d
    vals = list(config.values)
    vals[ki] = tuple(f)
    return Config(tuple(vals))


def mutate_choice(space: Space, config: Config, rng: np.random.Generator) -> Config | None:
    """Another value of a random choice knob (Ansor's MutateAutoUnroll, for every categorical knob)."""
    choices = [i for i, k in enumerate(space.knobs) if isinstance(k, ChoiceKnob) and len(k) > 1]
    if not choices:
        return None
    ki = choices[int(rng.integers(len(choices)))]
    k = space.knobs[ki]
    cur = k.index(config.values[ki])
    j = int(rng.integers(len(k) - 1))
    j += j >= cur
    vals = list(config.values)
    vals[ki] = k.values[j]
    return Config(tuple(vals))


def crossover(space: Space, a: Config, b: Config, rng: np.random.Generator) -> Config:
    """Uniform crossover: every knob from one of the two parents."""
    take = rng.random(len(space.knobs)) < 0.5
    return Config(tuple(x if t else y for x, y, t in zip(a.values, b.values, take)))


def roulette(scores: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """Indices drawn with probability proportional to max(score, 0) (Ansor's ComputePrefixSumProb);
    uniform when every score is <= 0."""
    w = np.maximum(np.nan_to_num(scores, nan=0.0), 0.0)
    tot = w.sum()
    if tot <= 0:
        return rng.integers(len(scores), size=size)
    return rng.choice(len(scores), size=size, p=w / tot)


# ---- the strategy ------------------------------------------------------------------------------------
@register
class EvolutionarySearch(SurrogateStrategy):
    name = "evo"
    summary = "Ansor's evolutionary search (population, mutation, crossover) scored by an XGBoost model"
    options = (
        Option("measure_per_round", 64, "measurements per round (Ansor num_measure_per_iter)", int, **POSITIVE),
        Option("population", 0, "evolution population (Ansor 2048; 0: auto, 2048 or 128 for TVM features)", int,
               **NONNEGATIVE),
        Option("num_iters", 4, "evolution iterations per round (Ansor 4)", int, **NONNEGATIVE),
        Option("mutation_prob", 0.85, "probability to mutate a selected configuration (Ansor 0.85)", float,
               **PROBABILITY),
        Option("crossover_ratio", 0.05, "probability to cross it with a second parent instead", float,
               **PROBABILITY),
        Option("eps_greedy", 0.05, "share of each round measured from random configurations (Ansor 0.05)", float,
               **PROBABILITY),
        Option("use_measured_ratio", 0.2, "share of the population seeded with the best measured (Ansor 0.2)",
               float, **PROBABILITY),
        Option("warmup", 100, "results before the model's scores are used (Ansor num_warmup_sample 100)", int,
               **NONNEGATIVE),
        Option("tile_weight", 0.9, "weight of MutateTileSize among the rules (Ansor 0.90; rest: choice knobs)",
               float, **PROBABILITY),
    ) + start_options("Ansor: random") + surrogate_options("program", EVO_PRIOR)

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        o = self.opts
        self.population = o["population"] or (128 if self.model.kind in TVM_FEATURES else 2048)
        self.asked: set[Config] = set()
        self.queue: list[Config] = start_seeds(self)  # the current round, in measuring order: the start first
        self.round = 0
        has_choice = any(isinstance(k, ChoiceKnob) and len(k) > 1 for k in space.knobs)
        has_split = any(k.levels > 1 for _, k in space.split_knobs)
        self.rules = []
        if has_split:
            self.rules.append((mutate_tile_size, o["tile_weight"] if has_choice else 1.0))
        if has_choice:
            self.rules.append((mutate_choice, (1.0 - o["tile_weight"]) if has_split else 1.0))
        w = np.array([r[1] for r in self.rules], dtype=np.float64)
        self.rule_p = w / w.sum() if len(w) and w.sum() > 0 else np.full(len(w), 1.0 / max(1, len(w)))

    # ---- model ---------------------------------------------------------------------------------------
    def _scores(self, configs: list[Config]) -> np.ndarray:
        warm = len(self.measured) >= self.opts["warmup"] or self.model.background  # a prior or transfer data
        if not warm or not self.model.fitted:
            return self.rng.random(len(configs))  # Ansor: random predictions before num_warmup_sample
        return self.model.predict(configs)

    # ---- one round ----------------------------------------------------------------------------------
    def _random_unmeasured(self, n: int, exclude: set[Config]) -> list[Config]:
        return sample_unvisited(self.space, self.rng, n, self.asked | exclude)

    def _mutate(self, c: Config) -> Config | None:
        if not self.rules:
            return None
        rule = self.rules[int(self.rng.choice(len(self.rules), p=self.rule_p))][0]
        new = rule(self.space, c, self.rng)
        if new is None or not self.space.is_legal(new):
            return None
        return new

    def evolutionary_search(self, init: list[Config], out_size: int) -> list[Config]:
        o = self.opts
        pop = list(init)
        heap: list[tuple[float, int, Config]] = []  # min-heap of the out_size best unmeasured
        in_heap: set[Config] = set()
        order = 0
        for k in range(o["num_iters"] + 1):
            scores = self._scores(pop)
            for s, c in zip(scores, pop):
                if c in self.asked or c in in_heap:
                    continue
                item = (float(s), order, c)
                order += 1
                if len(heap) < out_size:
                    heapq.heappush(heap, item)
                    in_heap.add(c)
                elif item[0] > heap[0][0]:
                    _, _, gone = heapq.heapreplace(heap, item)
                    in_heap.discard(gone)
                    in_heap.add(c)
            if k == o["num_iters"]:
                break
            nxt: list[Config] = []
            tries = 0
            parents: list[int] = []
            while len(nxt) < self.population and tries < 20 * self.population:
                tries += 1
                if len(parents) < 2:
                    parents = list(roulette(scores, self.rng, self.population + 2))
                s = pop[int(parents.pop())]
                u = self.rng.random()
                if u < o["crossover_ratio"]:
                    other = pop[int(parents.pop())]
                    child = crossover(self.space, s, other, self.rng)
                    if self.space.is_legal(child):
                        nxt.append(child)
                elif u < o["crossover_ratio"] + o["mutation_prob"]:
                    child = self._mutate(s)
                    if child is not None:
                        nxt.append(child)
                else:
                    nxt.append(s)
            pop = nxt or pop
        best = sorted(heap, key=lambda t: (-t[0], t[1]))
        return [c for _, _, c in best]

    def search_one_round(self) -> list[Config]:
        o = self.opts
        n = o["measure_per_round"]
        if self.measured or self.model.background:
            self.model.fit()
        init = self.space.sample_unique(self.rng, min(self.population, self.space.size))
        measured_ok = sorted((c for c, v in self.measured.items() if math.isfinite(v)), key=self.measured.get)
        init += measured_ok[: int(o["use_measured_ratio"] * self.population)]
        best = self.evolutionary_search(init, 2 * n)
        num_random = max(1, int(o["eps_greedy"] * n)) if o["eps_greedy"] > 0 else 0
        random_states = self._random_unmeasured(num_random * 3, set(best))
        # PickStatesWithEpsGreedy
        num_good = n - num_random
        out: list[Config] = []
        picked: set[Config] = set()
        ib = ir = 0
        while len(out) < n:
            has_b, has_r = ib < len(best), ir < len(random_states)
            if len(out) < num_good:
                src = "b" if has_b else ("r" if has_r else None)
            else:
                src = "r" if has_r else ("b" if has_b else None)
            if src is None:
                break
            if src == "b":
                c, ib = best[ib], ib + 1
            else:
                c, ir = random_states[ir], ir + 1
            if c not in self.asked and c not in picked:
                picked.add(c)
                out.append(c)
        if len(out) < n:  # the evolution found too few new points: fill with random unmeasured ones
            out += self._random_unmeasured(n - len(out), picked)
        return out

    # ---- ask / tell -----------------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        if not self.queue:
            self.queue = self.search_one_round()
            self.round += 1
        out = []
        while self.queue and len(out) < n:
            c = self.queue.pop(0)
            if c not in self.asked:
                self.asked.add(c)
                out.append(c)
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        super().tell(trials)  # the model and self.measured (told costs, inf for failures)
        self.asked.update(t.config for t in trials)


@register
class EvolutionarySearchAF(EvolutionarySearch):
    name = "evo-af"
    summary = "Ansor-AF: Ansor's evolutionary search scored by XGBoost on the seven analytical features"
    options = with_default(EvolutionarySearch.options, "feature", "analytical")
