"""Dynamic gradient-descent search, DGD_Search / DGD_Move of TVM-AF-DS (Li et al., "Accelerated
Auto-Tuning of GPU Kernels for Tensor Computations", ICS'24, section 5: Ansor-DS; with the analytical
features, Ansor-AF-DS).

A hop of one coordinate moves a tile size to the adjacent value of its sorted list of allowed values (the
divisors of the extent; for I = 32: 1 2 4 8 16 32, 8 -> 4 or 16); the n-hop candidates of a point change
n coordinates at once (``Space.hop_neighbours``: 6 one-hop, 12 two-hop and 8 three-hop points for 3
coordinates). The paper's algorithm, as this file runs it::

    DGD_Search(search_budget, hop_threshold):
        model.init(sample_size = 64)                 # 64 random configurations, measured, model fitted
        i = 0
        while i < search_budget:                     # 0 = until the tuning loop's budget
            cur = random_sample_point()
            while cur != null:
                n = 1
                do:
                    points = n_hop_cands(cur, n)
                    scores = model.predict(points); sort points by score, best first
                    cur', meas = DGD_Move(points, scores)
                    n += 1
                while n <= hop_threshold and cur' == null
                cur = cur'                           # null: a local minimum
            i += 1                                   # restart from a new random point

    DGD_Move(points, scores, base_performance):
        score_threshold   = 0.6 x scores[0]
        measure_threshold = 0.6 x best_measured
        for each window of wd = 3 consecutive points, best predicted first:
            stop when the window's predictions fall below score_threshold
            measure the window (one batch); model.update(window)
            if max(window) > base_performance: return the best of the window    # move
            if max(window) < measure_threshold: return null                     # early stop
        return null

Performance is throughput (1 / cost, 0 for a failed configuration), so "better" and the 0.6 thresholds
read as in the paper (higher is better).

Mapping onto ask/tell and details the pseudo-code leaves open (the notes' pseudo-code has index slips):

- The search is a GeneratorStrategy: ``yield from self.measure(configs)`` hands configs to the loop and
  goes on when all of them are measured. One window = one batch: ``ask`` returns the window's unmeasured
  members (at most 3; fewer when the loop asks for fewer, the rest follow on the next ask); the 64
  initial samples go out in batches of the loop's size; the random start point is one batch of 1. Every
  measured batch goes to the model when it is told (the paper's model.update(meas_list)); the refit
  itself is lazy: it happens before the model's next prediction, so every prediction sees every batch
  measured before it and no fit is wasted on windows scanned with scores already computed.
- Windows start at the best-scored candidate (the pseudo-code's i = 1 would skip it; the text says "from
  the highest-scoring end"), the last window may be shorter than 3, and a window that straddles the
  score threshold is cut at it (the pseudo-code's all(scores[i:i+wd]) >= threshold would drop its upper
  members). When the best prediction is <= 0 (no usable model yet) there is no score threshold.
- The measurement threshold uses the best performance measured so far in the whole search (the
  pseudo-code's ``best_measured = max(local)`` overwrites the global best, which the text does not do).
- hop_threshold is the largest n tried (n = 1 .. hop_threshold; default 3).
- A candidate measured before (in an earlier window, trajectory, restart or the initial samples) is not
  measured again: its known performance is used, as a measurement cache would; a window of known points
  costs no batch. Random start points are drawn among the unmeasured configurations; when none is left
  (a small space, fully measured) the search ends (``ask`` returns []).
- Features (option ``feature``): ``program`` (default for ``dgd``) = itervar features when
  TuneContext.workload is set, else the knob features (``tiletune.features.knob``: synthetic spaces, the
  conformance suite); ``analytical`` (default for ``dgd-af``, the paper's Ansor-AF-DS) = the seven
  features of ``tiletune.features.analytical``, also falling back on the knob features without a workload.
  The model is ``tiletune.cost_model.xgb.XGBCostModel`` (reg loss on normalised throughput), see
  ``tiletune.strategies.surrogate``.

- The start (``tiletune.strategies.starts``; the paper's is ``random``: the initial sample of
  ``sample_size`` random configurations, every descent from a random point): a constructive start's
  configurations are measured first and are the initial sample (no random sample: at small budgets 64 random
  measurements would be the whole run), and the first descents start from them, the fastest measured first;
  random restarts follow. ``untiled`` or a JSON object: the paper's initial sample, then the first descent from
  that state.

- Warm starts: ``prior=analytic`` (pseudo-measurements from Gensor's analytic model,
  ``tiletune.strategies.prior``) and records of other workloads (``--transfer``) are background rows of the
  model (``tiletune.strategies.surrogate``), so that the first windows are ranked before much is measured.

``self.events`` keeps the trajectory for inspection: ("start", config), ("window", [configs]),
("move", config), ("local_min", config).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..space import Config, Space
from .base import GeneratorStrategy, Search, Trial, register
from .learned import DEFAULT_PRIOR, SurrogateStrategy, surrogate_options
from .options import NONNEGATIVE, POSITIVE, PROBABILITY, Option, with_default
from .sampling import sample_unvisited
from .starts import CONSTRUCTIVE_STARTS, start_options, start_seeds


@register
class DGD(SurrogateStrategy, GeneratorStrategy):
    name = "dgd"
    summary = "TVM-AF-DS dynamic gradient descent over n-hop tile neighbours, XGBoost-ranked, windows of 3"
    options = (
        Option("sample_size", 64, "random configurations measured to build the initial model (paper: 64; with "
               "a constructive start the constructions are the initial sample instead)", int, **NONNEGATIVE),
        Option("hop_threshold", 3, "largest hop distance n tried before declaring a local minimum", int,
               **POSITIVE),
        Option("window", 3, "sliding-window size: candidates measured per batch (paper: 3)", int, **POSITIVE),
        Option("score_ratio", 0.6, "stop scanning below this share of the best prediction (paper: 0.6)", float,
               **PROBABILITY),
        Option("measure_ratio", 0.6, "early stop when a window is below this share of the best measured "
               "(paper: 0.6)", float, **PROBABILITY),
        Option("search_budget", 0, "random restarts (the paper's search_budget); 0: until the loop's budget",
               int, **NONNEGATIVE),
    ) + start_options("the paper: random") + surrogate_options("program", DEFAULT_PRIOR)

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        self.events: list[tuple] = []
        self.seeds = start_seeds(self)  # [] for start=random (the paper)

    def perf(self, c: Config) -> float:
        """Measured performance, 1 / cost (0 for a failed configuration)."""
        cost = self.measured[c]
        return 1.0 / cost if 0 < cost < math.inf else 0.0

    @property
    def best_measured(self) -> float:
        """The best performance measured so far in the whole search."""
        return max((self.perf(c) for c in self.measured), default=0.0)

    def tell(self, trials: Sequence[Trial]) -> None:
        SurrogateStrategy.tell(self, trials)  # results go to the model as they are told
        GeneratorStrategy.tell(self, trials)  # and to the search

    # ---- the paper's algorithm -----------------------------------------------------------------------
    def search(self) -> Search:  # DGD_Search(search_budget, hop_threshold)
        o = self.opts
        if self.seeds and o["start"] in CONSTRUCTIVE_STARTS:  # construct, then refine
            told = yield from self.measure(self.seeds)  # the constructions are the initial sample
            starts = [t.config for t in sorted(told, key=lambda t: t.cost if t.ok else math.inf)]
        else:
            yield from self.measure(self.space.sample_unique(self.rng, o["sample_size"]))  # model.init(64)
            starts = list(self.seeds)  # untiled or a given state: the first descent's start
        i = 0
        while o["search_budget"] == 0 or i < o["search_budget"]:
            cur = starts.pop(0) if starts else self.random_sample_point()
            if cur is None:
                return  # every configuration measured
            self.events.append(("start", cur))
            if cur not in self.measured:
                yield from self.measure([cur])
            while cur is not None:
                n, nxt = 1, None
                while True:  # do ... while n <= hop_threshold and nxt is None
                    points = self.space.hop_neighbours(cur, n)
                    scores = self.model.predict(points)
                    order = np.argsort(-scores, kind="stable")
                    nxt = yield from self.dgd_move([points[j] for j in order], scores[order], self.perf(cur))
                    n += 1
                    if nxt is not None or n > o["hop_threshold"]:
                        break
                if nxt is None:
                    self.events.append(("local_min", cur))
                else:
                    self.events.append(("move", nxt))
                cur = nxt
            i += 1

    def dgd_move(self, points: list[Config], scores: np.ndarray, base_performance: float):
        o = self.opts
        if not points:
            return None
        wd = o["window"]
        score_threshold = o["score_ratio"] * scores[0] if scores[0] > 0 else -math.inf
        i = 0
        while i < len(points):
            window = [p for p, s in zip(points[i:i + wd], scores[i:i + wd]) if s >= score_threshold]
            if not window:
                break
            self.events.append(("window", window))
            yield from self.measure([p for p in window if p not in self.measured])  # + model.update
            local = [self.perf(p) for p in window]
            best = int(np.argmax(local))
            if local[best] > base_performance:
                return window[best]  # move
            if local[best] < o["measure_ratio"] * self.best_measured:
                break  # early stop
            if len(window) < wd:
                break  # the rest scores below the threshold
            i += wd
        return None

    def random_sample_point(self) -> Config | None:
        """A uniformly random unmeasured configuration (None when none is left)."""
        got = sample_unvisited(self.space, self.rng, 1, set(self.measured))
        return got[0] if got else None


@register
class DGDAF(DGD):
    name = "dgd-af"
    summary = "TVM-AF-DS (Ansor-AF-DS): dynamic gradient descent ranked by XGBoost on the seven analytical features"
    options = with_default(DGD.options, "feature", "analytical")
