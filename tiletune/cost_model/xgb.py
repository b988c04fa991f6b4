"""AutoTVM's XGBoost cost model with a plain interface: ``fit(X, y)``, ``predict(X)``.

``y`` is a score where higher is better: the strategies pass normalised throughput
(min_cost / cost within one workload; 0 for a failed configuration, i.e. failures are the worst cost).
``predict`` returns scores on the same "higher is better" scale (regression) or relative rank scores
(rank losses), so callers only ever compare predictions.

Losses (AutoTVM's XGBoostCostModel):
- ``reg``: squared error on the normalised throughput (AutoTVM's ``reg:linear``);
- ``rank``: pairwise ranking (``rank:pairwise``) on the normalised throughput; each workload is its own
  query group, so only configurations of one workload are compared;
- ``rank-binary``: pairwise ranking on binary relevance. AutoTVM's docs name it without more; our
  reading: relevance 1 for the successful configurations at or above the group's median throughput,
  0 for the rest (failures included).

Parameters are AutoTVM's (max_depth 3, gamma 1e-4, min_child_weight 1, subsample 1, eta 0.3, lambda 1,
alpha 0). Training stops early as in AutoTVM: at most ``max_rounds`` boosting rounds (AutoTVM: 8000),
stopped after ``early_stopping`` (20) rounds without improving ``a-recall@k`` on the training data,
where a-recall@k is the mean over i < k of (#true top-(i+1) among the predicted top-(i+1)) / (i+1)
(AutoTVM's ``xgb_average_recalln_curve_score`` with k = plan size), computed on the first group (the
workload being tuned). The prediction uses the best round. ``nthread`` defaults to 1: the 2 cores of
these machines are shared with the measurer and the feature workers.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ..errors import TiletuneError

LOSSES = ("reg", "rank", "rank-binary")


def average_recall(preds: np.ndarray, labels: np.ndarray, k: int) -> float:
    """AutoTVM's a-recall@k: mean over i < k of |top_(i+1)(pred) & top_(i+1)(label)| / (i+1)."""
    n = len(labels)
    if n == 0:
        return 0.0
    k = max(1, min(k, n))
    order = np.argsort(-preds, kind="stable")
    true_rank = np.empty(n, dtype=np.int64)
    true_rank[np.argsort(-labels, kind="stable")] = np.arange(n)
    ranks = true_rank[order]  # true rank of the j-th predicted best
    # hits[i] = #{j <= i : ranks[j] <= i} = #{j : max(j, ranks[j]) <= i}
    m = np.maximum(np.arange(n), ranks)
    hits = np.cumsum(np.bincount(m[m < k], minlength=k)[:k]).astype(np.float64)
    return float(np.mean(hits / (np.arange(k) + 1)))


class XGBCostModel:
    def __init__(self, loss: str = "reg", *, nthread: int = 1, max_rounds: int = 8000, early_stopping: int = 20,
                 plan_size: int = 64, seed: int = 0, params: dict | None = None):
        if loss not in LOSSES:
            raise TiletuneError(f"unknown loss {loss!r}; accepted: {', '.join(LOSSES)}")
        self.loss = loss
        self.nthread = nthread
        self.max_rounds = max_rounds
        self.early_stopping = early_stopping
        self.plan_size = plan_size
        self.seed = seed
        self.params = {
            "max_depth": 3, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
            "lambda": 1.0, "alpha": 0.0, "verbosity": 0, "nthread": nthread, "seed": seed,
            "disable_default_eval_metric": 1, "tree_method": "hist",
            "objective": "reg:squarederror" if loss == "reg" else "rank:pairwise",
        }
        if loss != "reg":
            # one sampled pair per instance, as the XGBoost that AutoTVM used did for rank:pairwise
            self.params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=1)
        self.params.update(params or {})
        self.bst = None
        self.best_round: int | None = None
        self.stats = {"fits": 0, "fit_seconds": 0.0, "predicts": 0, "predict_rows": 0, "predict_seconds": 0.0,
                      "rounds": 0}

    @property
    def fitted(self) -> bool:
        return self.bst is not None

    def fit(self, X: np.ndarray, y: np.ndarray, *, groups: Sequence[int] | None = None,
            weights: Sequence[float] | None = None, rng: np.random.Generator | None = None) -> "XGBCostModel":
        """Train from scratch on X (n x d) and y (n; higher is better, 0 = failed).

        ``groups``: sizes of consecutive row groups (workloads; default one group); ``weights``: one
        weight per group. Rows are shuffled within their group (AutoTVM shuffled its training set).
        """
        import xgboost as xgb

        t0 = time.perf_counter()
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or len(X) != len(y):
            raise TiletuneError(f"fit: X must be n x d and y of length n, got {X.shape} and {y.shape}")
        if len(y) == 0:
            raise TiletuneError("fit: no training data")
        groups = list(groups) if groups is not None else [len(y)]
        if sum(groups) != len(y) or any(g <= 0 for g in groups):
            raise TiletuneError(f"fit: group sizes {groups} do not add up to {len(y)} rows")
        weights = list(weights) if weights is not None else [1.0] * len(groups)
        rng = rng if rng is not None else np.random.default_rng(self.seed)
        perm, start = [], 0
        for g in groups:
            perm.append(start + rng.permutation(g))
            start += g
        perm = np.concatenate(perm)
        X, y = X[perm], y[perm]
        label = y.copy()
        if self.loss == "rank-binary":
            start = 0
            for g in groups:
                seg = y[start:start + g]
                ok = seg > 0
                thr = np.median(seg[ok]) if ok.any() else np.inf
                label[start:start + g] = (ok & (seg >= thr)).astype(np.float64)
                start += g
        dtrain = xgb.DMatrix(X, label=label, nthread=self.nthread)
        if self.loss == "reg":
            dtrain.set_weight(np.repeat(np.asarray(weights, dtype=np.float64), groups))
        else:
            dtrain.set_group(groups)
            dtrain.set_weight(np.asarray(weights, dtype=np.float64))
        first = groups[0]
        y_first = y[:first]
        k = self.plan_size

        def recall(predt, dm):
            return f"a-recall@{k}", average_recall(predt[:first], y_first, k)

        self.bst = xgb.train(self.params, dtrain, num_boost_round=self.max_rounds, evals=[(dtrain, "tr")],
                             custom_metric=recall, early_stopping_rounds=self.early_stopping, maximize=True,
                             verbose_eval=False)
        self.best_round = int(getattr(self.bst, "best_iteration", self.bst.num_boosted_rounds() - 1))
        self.stats["fits"] += 1
        self.stats["rounds"] = self.best_round + 1
        self.stats["fit_seconds"] += time.perf_counter() - t0
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self.bst is None:
            raise TiletuneError("predict: the cost model has not been fitted")
        t0 = time.perf_counter()
        X = np.asarray(X, dtype=np.float32)
        if len(X) == 0:
            return np.zeros(0)
        out = self.bst.inplace_predict(X, iteration_range=(0, self.best_round + 1))
        self.stats["predicts"] += 1
        self.stats["predict_rows"] += len(X)
        self.stats["predict_seconds"] += time.perf_counter() - t0
        return np.asarray(out, dtype=np.float64)
