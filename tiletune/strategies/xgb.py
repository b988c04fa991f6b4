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
corrected curve, ``curve_n`` points, default 30), ``curve1`` (AutoTVM's one-point curve); the last three
lower every configuration with TVM in worker processes (``workers``) and need TuneContext.workload.
AutoTVM's default feature was itervar; knob is the default here because it works without a workload
(synthetic tests) and costs nothing.

Simulated annealing (tiletune.cost_model.sa): AutoTVM's defaults 128 chains x 500 iterations, early stop
after 50 iterations without a new top-plan_size point, temperature 1 -> 0 linearly; Zheng's cooling
schedule (``cooling=exp``) and restarts (``restarts``) as options. ``sa_chains``/``sa_iters`` = 0 means
"auto": 128 / 500 for knob features, 16 / 40 for the TVM features, whose extraction costs ~10-30 ms per
new configuration on these 2-core machines (AutoTVM paid the same, which is Zheng's table 3), so that
extraction stays a fraction of the measurement time.

Transfer learning (Zheng 4.3): TuneContext.transfer lists records files of other workloads;
their configurations become training data (one group per workload, normalised within it; see
tiletune.cost_model.transfer for which features transfer), weighted by AutoTVM's base-model discount
1 / 2^(n / transfer_decay) with n local results, and dropped once the weight falls under 0.05. With
transfer data the model exists before the first measurement, so the first batch already comes from it.

The start (option ``start``, shared with the other local searches): ``random`` is AutoTVM's (random first
batches, SA chains from uniform points); ``gensor`` / ``roller`` / ``construct`` (construct, then refine;
``construct`` is the default, chosen by measurement) measure the top ``start_k`` constructions of that
method first (then random points until ``min_train`` results) and seed the first SA chains with them, so
the annealing explores around them; ``untiled`` or a JSON object does the same with that one state. The
benchmarks that reproduce the papers pin ``start=random``.

Analytic prior (option ``prior=analytic``, ``tiletune.cost_model.prior``): 256 uniform configurations
(64 for the TVM features) and Roller's constructed leaves, labelled with the normalised throughput that
Gensor's analytic model predicts, are one more training group, weighted 1 / 2^(n / prior_decay) with n
local results and dropped under 0.05; the model then exists before the first measurement, so the first
batch after the start already comes from the annealing.

Tuning-time split: ``timing()`` returns seconds spent in feature extraction, model fitting, model
prediction and the whole ask/tell of this strategy; ``extractor.summary()`` the per-configuration cost.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from ..cost_model.prior import analytic_prior, background_weight
from ..cost_model.sa import COOLINGS, SimulatedAnnealing
from ..cost_model.transfer import check_dim, load_transfer
from ..cost_model.xgb import LOSSES, XGBCostModel
from ..features import FEATURE_TYPES, make_extractor
from ..space import Config
from .base import Option, Strategy, Trial, register
from .common import (DEFAULT_PRIOR, DEFAULT_START, START_K_OPTION, START_SWEEP_OPTION, prior_options, start_option,
                     start_seeds)

_POS = dict(check=lambda v: v >= 1, check_help="must be >= 1")
_NONNEG = dict(check=lambda v: v >= 0, check_help="must be >= 0")


@register
class XGBTuner(Strategy):
    name = "xgb"
    summary = "AutoTVM: XGBoost cost model (knob/itervar/curve/analytical features) + simulated annealing"
    options = (
        Option("feature", "knob", "feature type", str, choices=FEATURE_TYPES),
        Option("loss", "rank", "XGBoost loss (AutoTVM: reg, rank, rank-binary)", str, choices=LOSSES),
        Option("plan_size", 64, "configurations SA proposes per plan (AutoTVM plan_size)", int, **_POS),
        Option("epsilon", 0.05, "probability that a proposal is uniform random instead (epsilon-greedy)", float,
               check=lambda v: 0 <= v <= 1, check_help="must be in [0, 1]"),
        Option("retrain", "batch", "retrain after every batch, or every plan_size results (AutoTVM)", str,
               choices=("batch", "plan")),
        Option("min_train", 8, "results needed before the first model (random proposals until then)", int, **_POS),
        Option("sa_chains", 0, "parallel SA chains (0: 128 for knob, 16 for TVM features)", int, **_NONNEG),
        Option("sa_iters", 0, "SA iterations per run (0: 500 for knob, 40 for TVM features)", int, **_NONNEG),
        Option("sa_early_stop", 50, "stop SA after this many iterations without a new top point", int, **_POS),
        Option("cooling", "linear", "SA temperature schedule from 1 to 0 (linear: AutoTVM; exp: geometric)",
               str, choices=COOLINGS),
        Option("restarts", 0, "SA restarts from random points when the chains stall (Zheng)", int, **_NONNEG),
        Option("curve_n", 30, "points sampled per curve for feature=curve (Zheng: 30)", int, **_POS),
        Option("workers", 2, "feature worker processes for the TVM features (0: in this process)", int, **_NONNEG),
        Option("nthread", 1, "XGBoost threads", int, **_POS),
        Option("max_rounds", 8000, "boosting rounds at most (early stopping after 20 without gain)", int, **_POS),
        Option("transfer_decay", 64.0, "transfer data weight 1/2^(n/decay) with n local results (0: constant)",
               float, **_NONNEG),
        start_option(DEFAULT_START, "AutoTVM: random"),
        START_K_OPTION,
        START_SWEEP_OPTION,
    ) + prior_options(DEFAULT_PRIOR)

    def __init__(self, space, **kw):
        super().__init__(space, **kw)
        o = self.opts
        feature = o["feature"]
        tvm_features = feature in ("itervar", "curve", "curve1")  # slow to extract: smaller SA
        self.extractor = make_extractor(feature, space, self.context.workload, self.context.target,
                                        workers=o["workers"], curve_n=o["curve_n"], hardware=self.context.hardware)
        self.model = XGBCostModel(o["loss"], nthread=o["nthread"], max_rounds=o["max_rounds"],
                                  plan_size=o["plan_size"], seed=self.seed)
        self.sa = SimulatedAnnealing(
            space, self.rng, chains=o["sa_chains"] or (16 if tvm_features else 128),
            iters=o["sa_iters"] or (40 if tvm_features else 500), early_stop=o["sa_early_stop"],
            cooling=o["cooling"], restarts=o["restarts"])
        self.visited: set[Config] = set()
        self.visited_keys: set[int] = set()  # space indices of self.visited
        self._pred: dict[int, float] = {}  # prediction cache of the current model
        self.data: dict[Config, float] = {}  # config -> throughput 1/cost (0: failed)
        self.plan: list[int] = []
        self.fits_at: list[int] = []
        self.time = {"ask": 0.0, "tell": 0.0, "sa": 0.0}
        self.transfer = None
        self.seeds = start_seeds(self)  # measured first; [] for start=random (AutoTVM)
        if self.seeds:  # the first SA chains start from the seeds (the rest uniform)
            pts = self.sa.sample(self.sa.chains)
            rows = [self.sa.to_row(c) for c in self.seeds[: self.sa.chains]]
            pts[: len(rows)] = np.asarray(rows, dtype=pts.dtype)
            self.sa.points = pts
        paths = list(self.context.transfer)
        if paths:
            self._load_transfer(paths)
        if tvm_features and hasattr(self.extractor, "start"):
            self.extractor.start()
        self.prior = None  # (X, y) of the analytic prior
        if o["prior"] == "analytic":
            p = analytic_prior(space, self.context, np.random.default_rng([self.seed, 1]),
                               n=64 if tvm_features else 256)
            self.prior = (self._features(p.configs), p.y)
        if (self.transfer is not None and len(self.transfer)) or self.prior is not None:
            self._fit()

    # ---- transfer --------------------------------------------------------------------------------
    def _load_transfer(self, paths: list[str]) -> None:
        o = self.opts
        wl = self.context.workload
        data = load_transfer(
            paths, self.space, o["feature"], workload=wl, target=self.context.target,
            levels=self.context.levels,
            make_extractor=lambda kind, sp, w: make_extractor(kind, sp, w, self.context.target,
                                                              workers=o["workers"], curve_n=o["curve_n"]),
            exclude_workload=getattr(wl, "key", None))
        if len(data):
            check_dim(data, self.extractor.dim, o["feature"])
            self.transfer = data

    # ---- model -----------------------------------------------------------------------------------
    def _features(self, configs: Sequence[Config]) -> np.ndarray:
        return self.extractor.extract(list(configs))

    def _score(self, rows: np.ndarray) -> np.ndarray:
        """Model prediction for option-index rows, cached per model (SA revisits points)."""
        keys = self.sa.keys(rows).tolist()
        out = np.empty(len(keys))
        todo = [i for i, k in enumerate(keys) if k not in self._pred]
        if todo:
            uniq = list(dict.fromkeys(keys[i] for i in todo))
            sub = self.sa.rows(np.asarray(uniq, dtype=np.int64))
            if self.opts["feature"] == "knob":
                X = self.extractor.table(sub)
            else:
                X = self.extractor.extract([self.sa.to_config(r) for r in sub])
            for k, p in zip(uniq, self.model.predict(X).tolist()):
                self._pred[k] = p
        for i, k in enumerate(keys):
            out[i] = self._pred[k]
        return out

    def _fit(self) -> None:
        configs = list(self.data)
        y = np.asarray([self.data[c] for c in configs], dtype=np.float64)
        Xs, ys, groups, weights = [], [], [], []
        if len(y) and y.max() > 0:
            Xs.append(self._features(configs))
            ys.append(y / y.max())  # min_cost / cost; 0 for failures
            groups.append(len(y))
            weights.append(1.0)
        if self.transfer is not None and len(self.transfer):
            decay = self.opts["transfer_decay"]
            w = 1.0 if decay == 0 else 1.0 / 2 ** (len(y) / decay)
            if w >= 0.05:
                Xs.append(self.transfer.X)
                ys.append(self.transfer.y)
                groups += self.transfer.groups
                weights += [w] * len(self.transfer.groups)
        if self.prior is not None:
            w = background_weight(len(y), self.opts["prior_decay"])
            if w > 0:
                Xs.append(self.prior[0])
                ys.append(self.prior[1])
                groups.append(len(self.prior[1]))
                weights.append(w)
        if not Xs:
            return
        self.model.fit(np.concatenate(Xs), np.concatenate(ys), groups=groups, weights=weights, rng=self.rng)
        self.fits_at.append(len(y))
        self.plan = []
        self._pred = {}

    # ---- ask / tell ------------------------------------------------------------------------------
    def _random_unvisited(self, n: int) -> list[Config]:
        size = self.space.size
        if n <= 0 or len(self.visited) >= size:
            return []
        if size <= 4 * n + len(self.visited) and size <= 200_000:
            rest = self.space.remaining(self.visited)
            pick = self.rng.permutation(len(rest))[:n]
            return [rest[i] for i in pick]
        return self.space.sample_unique(self.rng, n, exclude=self.visited)

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

    def tell(self, trials: Sequence[Trial]) -> None:
        t0 = time.perf_counter()
        for t in trials:
            self._mark(t.config)
            self.data[t.config] = 1.0 / t.cost if t.ok and t.cost > 0 else 0.0
        n = len(self.data)
        ready = n >= self.opts["min_train"] and max(self.data.values(), default=0.0) > 0
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
        return {
            "features": float(self.extractor.stats["seconds"]),
            "feature_configs": float(self.extractor.stats["computed"]),
            "model_fit": float(self.model.stats["fit_seconds"]),
            "model_predict": float(self.model.stats["predict_seconds"]),
            "sa": self.time["sa"],
            "ask": self.time["ask"],
            "tell": self.time["tell"],
        }

    def close(self) -> None:
        self.extractor.close()
