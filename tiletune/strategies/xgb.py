"""AutoTVM's model-based tuner: XGBoost cost model + simulated annealing (Chen et al., "Learning to
Optimize Tensor Programs"; Zheng, "Automated linear algebra program optimization using ML").

Zheng's description of the loop (section 3.2), as implemented here:

    D <- {}                                         # (configuration, normalised throughput)
    repeat
        propose a batch:                            # ask(n)
            before the model has data: uniform random unmeasured configurations
            else: the top plan_size unmeasured configurations found by simulated annealing with the
                  model as energy, each slot replaced with probability epsilon (0.05) by a random one
        measure the batch, add it to D              # tell(trials): y = 1/cost, 0 for a failure
        train the cost model on D                   # every batch (retrain=batch) or every plan_size
                                                    # results (retrain=plan, AutoTVM's schedule)
    return the fastest configuration in D

Training targets are normalised throughput min_cost / cost (0 for failures: the worst cost). Features
(option ``feature``): ``knob`` (default; needs nothing but the space), ``itervar``, ``curve`` (Zheng's
corrected curve, ``curve_n`` points, default 30), ``curve1`` (AutoTVM's one-point curve), ``analytical`` (the
seven TVM-AF-DS features); itervar and the curves lower every configuration with TVM in worker processes
(``workers``) and need TuneContext.workload.
AutoTVM's default feature was itervar; knob is the default here because it works without a workload
(synthetic tests) and costs nothing.

Simulated annealing (tiletune.cost_model.sa): AutoTVM's defaults 128 chains x 500 iterations, early stop
after 50 iterations without a new top-plan_size point, temperature 1 -> 0 linearly; Zheng's cooling
schedule (``cooling=exp``) and restarts (``restarts``) as options. ``sa_chains``/``sa_iters`` = 0 means
"auto": 128 / 500 for knob features, 16 / 40 for the TVM features, which lower every new configuration with
TVM (AutoTVM paid the same, Zheng's table 3), so that extraction stays a fraction of the measurement time.

The cost model with its features, the transfer data and the analytic prior is the one evo and dgd use
(``tiletune.strategies.surrogate.Surrogate``), here with AutoTVM's losses and retraining schedule:

- Transfer learning (Zheng 4.3): TuneContext.transfer lists records files of other workloads; their
  configurations become training data (one group per workload, normalised within it; see
  tiletune.cost_model.transfer for which features transfer), weighted by AutoTVM's base-model discount
  1 / 2^(n / transfer_decay) with n local results and dropped once the weight falls under 0.05.
- Analytic prior (option ``prior=analytic``, ``tiletune.strategies.prior``): pseudo-measurements of Gensor's
  analytic model, one more training group weighted 1 / 2^(n / prior_decay).
- With either, the model exists before the first measurement, so the first batch after the start already
  comes from the annealing.

The start (``tiletune.strategies.starts``; AutoTVM's is ``random``: random first batches, SA chains from
uniform points): its configurations are measured first (then random points until ``min_train`` results) and
seed the first SA chains, so the annealing explores around them.

Tuning-time split: ``timing()`` returns seconds spent in feature extraction, model fitting, model
prediction and the whole ask/tell of this strategy; ``model.features.summary()`` the per-configuration cost.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from ..cost_model.sa import COOLINGS, SimulatedAnnealing
from ..cost_model.xgb import LOSSES, XGBCostModel
from ..features import FEATURE_TYPES
from ..space import Config
from .base import Trial, register
from .learned import DEFAULT_PRIOR, NTHREAD_OPTION, TRANSFER_DECAY_OPTION, WORKERS_OPTION, SurrogateStrategy, prior_options
from .options import NONNEGATIVE, POSITIVE, PROBABILITY, Option
from .sampling import sample_unvisited
from .starts import start_options, start_seeds
from .surrogate import TVM_FEATURES, Surrogate


@register
class XGBTuner(SurrogateStrategy):
    name = "xgb"
    summary = "AutoTVM: XGBoost cost model (knob/itervar/curve/analytical features) + simulated annealing"
    options = (
        Option("feature", "knob", "feature type", str, choices=FEATURE_TYPES),
        Option("loss", "rank", "XGBoost loss (AutoTVM: reg, rank, rank-binary)", str, choices=LOSSES),
        Option("plan_size", 64, "configurations SA proposes per plan (AutoTVM plan_size)", int, **POSITIVE),
        Option("epsilon", 0.05, "probability that a proposal is uniform random instead (epsilon-greedy)", float,
               **PROBABILITY),
        Option("retrain", "batch", "retrain after every batch, or every plan_size results (AutoTVM)", str,
               choices=("batch", "plan")),
        Option("min_train", 8, "results needed before the first model (random proposals until then)", int, **POSITIVE),
        Option("sa_chains", 0, "parallel SA chains (0: 128 for knob, 16 for TVM features)", int, **NONNEGATIVE),
        Option("sa_iters", 0, "SA iterations per run (0: 500 for knob, 40 for TVM features)", int, **NONNEGATIVE),
        Option("sa_early_stop", 50, "stop SA after this many iterations without a new top point", int, **POSITIVE),
        Option("cooling", "linear", "SA temperature schedule from 1 to 0 (linear: AutoTVM; exp: geometric)",
               str, choices=COOLINGS),
        Option("restarts", 0, "SA restarts from random points when the chains stall (Zheng)", int, **NONNEGATIVE),
        Option("curve_n", 30, "points sampled per curve for feature=curve (Zheng: 30)", int, **POSITIVE),
        WORKERS_OPTION,
        NTHREAD_OPTION,
        Option("max_rounds", 8000, "boosting rounds at most (early stopping after 20 without gain)", int, **POSITIVE),
        TRANSFER_DECAY_OPTION,
    ) + start_options("AutoTVM: random") + prior_options(DEFAULT_PRIOR)

    def __init__(self, space, **kw):
        super().__init__(space, **kw)  # the model: features, XGBoost, the prior and transfer rows
        o = self.opts
        tvm_features = o["feature"] in TVM_FEATURES  # slow to extract: smaller SA
        self.sa = SimulatedAnnealing(
            space, self.rng, chains=o["sa_chains"] or (16 if tvm_features else 128),
            iters=o["sa_iters"] or (40 if tvm_features else 500), early_stop=o["sa_early_stop"],
            cooling=o["cooling"], restarts=o["restarts"])
        self.visited: set[Config] = set()
        self.visited_keys: set[int] = set()  # space indices of self.visited
        self._pred: dict[int, float] = {}  # prediction cache of the current model
        self.plan: list[int] = []
        self.fits_at: list[int] = []
        self.time = {"ask": 0.0, "tell": 0.0, "sa": 0.0}
        self.seeds = start_seeds(self)  # measured first; [] for start=random (AutoTVM)
        if self.seeds:  # the first SA chains start from the seeds (the rest uniform)
            pts = self.sa.sample(self.sa.chains)
            rows = [self.sa.to_row(c) for c in self.seeds[: self.sa.chains]]
            pts[: len(rows)] = np.asarray(rows, dtype=pts.dtype)
            self.sa.points = pts
        if tvm_features and hasattr(self.model.features, "start"):
            self.model.features.start()
        if self.model.background:  # the prior or transfer data: a model before the first measurement
            self._fit()

    def make_surrogate(self) -> Surrogate:
        """AutoTVM's model: its feature kinds by name, its losses, the strategy's generator for the training
        shuffles, and a model from the first successful result on (``min_train`` decides when to train)."""
        o = self.opts
        return super().make_surrogate(
            kind=o["feature"], curve_n=o["curve_n"], rng=self.rng, min_results=1,
            model=XGBCostModel(o["loss"], nthread=o["nthread"], max_rounds=o["max_rounds"], plan_size=o["plan_size"],
                               seed=self.seed))

    # ---- model -----------------------------------------------------------------------------------
    def _score(self, rows: np.ndarray) -> np.ndarray:
        """Model prediction for option-index rows, cached per model (SA revisits points)."""
        keys = self.sa.keys(rows).tolist()
        out = np.empty(len(keys))
        todo = [i for i, k in enumerate(keys) if k not in self._pred]
        if todo:
            uniq = list(dict.fromkeys(keys[i] for i in todo))
            sub = self.sa.rows(np.asarray(uniq, dtype=np.int64))
            features = self.model.features
            if self.opts["feature"] == "knob":
                X = features.table(sub)
            else:
                X = features.extract([self.sa.to_config(r) for r in sub])
            for k, p in zip(uniq, self.model.predict_features(X).tolist()):
                self._pred[k] = p
        for i, k in enumerate(keys):
            out[i] = self._pred[k]
        return out

    def _fit(self) -> None:
        if self.model.fit():
            self.fits_at.append(len(self.model.costs))
            self.plan = []
            self._pred = {}

    # ---- ask / tell ------------------------------------------------------------------------------
    def _random_unvisited(self, n: int) -> list[Config]:
        return sample_unvisited(self.space, self.rng, n, self.visited)

    def _mark(self, c: Config) -> None:
        self.visited.add(c)
        self.visited_keys.add(self.space.index(c))

    def ask(self, n: int) -> list[Config]:
        t0 = time.perf_counter()
        try:
            return self._ask(n)
        finally:
            self.time["ask"] += time.perf_counter() - t0

    def _ask(self, n: int) -> list[Config]:
        if len(self.visited) >= self.space.size:
            return []
        out: list[Config] = [c for c in self.seeds if c not in self.visited][:n]  # the start, measured first
        for c in out:
            self._mark(c)
        if len(out) >= n:
            return out
        if not self.model.fitted:
            more = self._random_unvisited(n - len(out))
            for c in more:
                self._mark(c)
            return out + more
        self.plan = [k for k in self.plan if k not in self.visited_keys]
        if not self.plan:
            t0 = time.perf_counter()
            found = self.sa.find_maximums(self._score, self.opts["plan_size"], self.visited_keys)
            self.time["sa"] += time.perf_counter() - t0
            self.plan = [key for _, key in found]
        while len(out) < n and len(self.visited) < self.space.size:
            c = None
            if self.rng.random() >= self.opts["epsilon"]:
                while self.plan and c is None:
                    key = self.plan.pop(0)
                    if key not in self.visited_keys:
                        c = self.space.get(key)
            if c is None:
                pick = self._random_unvisited(1)
                if not pick:
                    break
                c = pick[0]
            self._mark(c)
            out.append(c)
        return out

    def add_seeds(self, configs: Sequence[Config]) -> int:
        new = [c for c in dict.fromkeys(configs)
               if c not in self.visited and c not in self.seeds and self.space.is_legal(c)]
        self.seeds.extend(new)  # _ask measures them first
        return len(new)

    def tell(self, trials: Sequence[Trial]) -> None:
        t0 = time.perf_counter()
        super().tell(trials)  # the model and self.measured (told costs, inf for failures)
        for t in trials:
            self._mark(t.config)
        n = len(self.measured)
        ready = n >= self.opts["min_train"] and any(math.isfinite(v) for v in self.measured.values())
        if ready:
            if self.opts["retrain"] == "batch":
                self._fit()
            else:  # AutoTVM: retrain whenever plan_size more results have arrived
                last = self.fits_at[-1] if self.fits_at else -math.inf
                if not self.model.fitted or n >= (0 if last == -math.inf else last) + self.opts["plan_size"]:
                    self._fit()
        self.time["tell"] += time.perf_counter() - t0

    # ---- reporting -------------------------------------------------------------------------------
    def timing(self) -> dict[str, float]:
        """Seconds spent so far: features, model fit/predict, SA (incl. features and predictions there),
        and the whole ask/tell."""
        return {**self.model.timing(), "sa": self.time["sa"], "ask": self.time["ask"], "tell": self.time["tell"]}
