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

- One window = one batch: ``ask`` returns the window's unmeasured members (at most 3; fewer when the
  loop asks for fewer, the rest follow on the next ask); the 64 initial samples go out in batches of
  the loop's size; the random start point is one batch of 1. Every measured batch goes to the model
  (the paper's model.update(meas_list)); the refit itself is lazy: it happens before the model's next
  prediction, so every prediction sees every batch measured before it and no fit is wasted on windows
  scanned with scores already computed.
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
  TuneContext.workload is set, else the knob encoding (``Space.encode``: synthetic spaces, the
  conformance suite); ``analytical`` (default for ``dgd-af``, the paper's Ansor-AF-DS) = the seven
  features of ``tiletune.features.analytical``, also falling back on the knob encoding without a workload.
  The model is ``tiletune.cost_model.xgb.XGBCostModel`` (reg loss on normalised throughput), see
  ``evo.Surrogate``.

``self.events`` keeps the trajectory for inspection: ("start", config), ("window", [configs]),
("move", config), ("local_min", config).
"""
from __future__ import annotations

import math
from typing import Generator, Sequence

import numpy as np

from ..space import Config, Space
from .base import Option, Strategy, Trial, register, with_default
from .evo import Surrogate, feature_options

_POS = dict(check=lambda v: v >= 1, check_help="must be >= 1")
_NONNEG = dict(check=lambda v: v >= 0, check_help="must be >= 0")
_RATIO = dict(check=lambda v: 0 <= v <= 1, check_help="must be in [0, 1]")

Request = list  # configurations the search needs measured before it can go on


@register
class DGD(Strategy):
    name = "dgd"
    summary = "TVM-AF-DS dynamic gradient descent over n-hop tile neighbours, XGBoost-ranked, windows of 3"
    options = (
        Option("sample_size", 64, "random configurations measured to build the initial model (paper: 64)", int,
               **_NONNEG),
        Option("hop_threshold", 3, "largest hop distance n tried before declaring a local minimum", int, **_POS),
        Option("window", 3, "sliding-window size: candidates measured per batch (paper: 3)", int, **_POS),
        Option("score_ratio", 0.6, "stop scanning below this share of the best prediction (paper: 0.6)", float,
               **_RATIO),
        Option("measure_ratio", 0.6, "early stop when a window is below this share of the best measured "
               "(paper: 0.6)", float, **_RATIO),
        Option("search_budget", 0, "random restarts (the paper's search_budget); 0: until the loop's budget",
               int, **_NONNEG),
    ) + feature_options("program")

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        o = self.opts
        self.model = Surrogate(space, self.context, o["feature"], seed=self.seed, workers=o["workers"],
                               nthread=o["nthread"])
        self.perf: dict[Config, float] = {}  # measured performance, 1 / cost (0 on failure)
        self.best_measured = 0.0
        self.asked: set[Config] = set()
        self.pending: list[Config] = []  # the current request, not yet handed out
        self.events: list[tuple] = []
        self._search = self.dgd_search()
        self._done = False

    # ---- the paper's algorithm (a generator: ``yield request`` = measure these, then go on) ---------
    def dgd_search(self) -> Generator[Request, None, None]:
        o = self.opts
        yield self.space.sample_unique(self.rng, o["sample_size"])  # model.init(sample_size=64)
        i = 0
        while o["search_budget"] == 0 or i < o["search_budget"]:
            cur = self.random_sample_point()
            if cur is None:
                return  # every configuration measured
            self.events.append(("start", cur))
            if cur not in self.perf:
                yield [cur]
            while cur is not None:
                n, nxt = 1, None
                while True:  # do ... while n <= hop_threshold and nxt is None
                    points = self.space.hop_neighbours(cur, n)
                    scores = self.model.predict(points)
                    order = np.argsort(-scores, kind="stable")
                    nxt = yield from self.dgd_move([points[j] for j in order], scores[order], self.perf[cur])
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
            todo = [p for p in window if p not in self.perf]
            if todo:
                yield todo  # measure(points[i:i+wd]); tell() hands it to the model (model.update)
            local = [self.perf[p] for p in window]
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
        got = self.space.sample_unique(self.rng, 1, exclude=self.asked)
        if got:
            return got[0]
        if self.space.size <= 200_000:
            for j in self.rng.permutation(self.space.size):
                c = self.space.get(int(j))
                if c not in self.asked and self.space.is_legal(c):
                    return c
        return None

    # ---- ask / tell --------------------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        while not self.pending and not self._done:
            try:
                req = next(self._search)
            except StopIteration:
                self._done = True
                break
            self.pending = [c for c in dict.fromkeys(req) if c not in self.asked]
            if not self.pending and req:  # everything known already: go on without a batch
                continue
        out, self.pending = self.pending[:n], self.pending[n:]
        self.asked.update(out)
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        self.model.add(trials)
        for t in trials:
            p = 1.0 / t.cost if t.ok and t.cost > 0 else 0.0
            self.perf[t.config] = p
            self.asked.add(t.config)
            self.best_measured = max(self.best_measured, p)

    def timing(self) -> dict[str, float]:
        return self.model.timing()

    def close(self) -> None:
        self.model.close()


@register
class DGDAF(DGD):
    name = "dgd-af"
    summary = "TVM-AF-DS (Ansor-AF-DS): dynamic gradient descent ranked by XGBoost on the seven analytical features"
    options = with_default(DGD.options, "feature", "analytical")
