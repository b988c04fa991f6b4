"""The surrogate of the model-steered searches (xgb, evo, dgd and their -af variants): features + the XGBoost
cost model (``XGBCostModel``), trained on every measured configuration and on background rows.

Training targets are normalised throughput y = min_cost / cost (0 for failures), so predictions are scores
on that scale (higher is better). Features: any ``tiletune.features`` type by name (``knob``, ``itervar``,
``curve``, ``curve1``, ``analytical``); evo and dgd name theirs through ``resolve_feature`` (``FEATURES``:
``program`` = itervar features of the lowered program when a workload is known, and without a workload,
synthetic spaces and the conformance suite, every kind falls back on ``knob``, which needs nothing but the
space).

Warm starts (options ``prior`` and ``--transfer``): background rows trained with the measured ones, each
group weighted 1 / 2^(n / decay) with n measured results and dropped under 0.05 (``prior.background_weight``,
AutoTVM's discount of transferred data): the analytic prior (``prior.analytic_prior``, pseudo-measurements
from Gensor's analytic model) and the records of other workloads (``transfer.load_transfer``, Zheng 4.3). With
background rows the model exists before the first measurement.

The model is refitted on demand: ``fit`` when the caller follows a schedule (xgb: every batch or every
plan_size results), or lazily by ``predict`` when results were added since the last fit (evo, dgd).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cost_model.transfer import check_dim, load_transfer
from ..cost_model.xgb import XGBCostModel
from ..errors import TiletuneError
from ..features import make_extractor
from ..schedules import cuda_mma, cuda_wgmma
from ..space import Config, Space
from .base import Trial, TuneContext
from .prior import analytic_prior, background_weight

FEATURES = ("program", "analytical", "knob", "itervar", "curve", "curve1")
TVM_FEATURES = ("itervar", "curve", "curve1")  # lower every configuration with TVM (slow)


def resolve_feature(feature: str, context: TuneContext, space: Space | None = None) -> str:
    """The feature type actually used: program -> itervar, or on the tensor-core template's space (whose
    tensorized loop nests the itervar features do not describe) the seven analytical features of its kernel's
    model; anything but knob -> knob without a workload."""
    if feature not in FEATURES:
        raise TiletuneError(f"unknown feature {feature!r}; accepted: {', '.join(FEATURES)}")
    if context.workload is None:
        return "knob"
    if feature == "program":
        return "analytical" if space is not None and (cuda_mma.owns(space) or cuda_wgmma.owns(space)) else "itervar"
    return feature


@dataclass
class Background:
    """Rows the model trains on besides the measurements: groups of (X, y), weight 1/2^(n/decay)."""

    X: np.ndarray
    y: np.ndarray
    groups: list[int]
    decay: float
    name: str
    workloads: tuple[str, ...] = ()  # transfer: the workload of each group


class Surrogate:
    """Features + XGBoost: ``add`` results, ``fit``, ``predict`` scores (see the module docstring)."""

    def __init__(self, space: Space, context: TuneContext, kind: str, *, seed: int, workers: int = 2,
                 nthread: int = 1, curve_n: int = 30, model: XGBCostModel | None = None, prior: str = "none",
                 prior_decay: float = 16.0, transfer_decay: float = 64.0, prior_given: bool = True,
                 rng: np.random.Generator | None = None, min_results: int = 2):
        """``kind``: the feature type (``tiletune.features.make_extractor``). ``model``: default XGBoost with the
        ``reg`` loss. ``prior_given``: whether the caller chose ``prior`` (then a prior that cannot apply, a
        space without tile knobs, is a one-line error) or left it at a default (then it falls back on none,
        with a warning); the prior is built before the feature workers start, so a failure leaves none
        behind. ``rng``: shuffles the training rows of every fit (default: the model's seed). ``min_results``:
        measured results (one of them a success) needed before they are trained on."""
        self.kind = kind
        self.min_results = min_results
        self.rng = rng
        p = None
        if prior == "analytic":
            try:
                p = analytic_prior(space, context, np.random.default_rng([seed, 1]),
                                   n=64 if kind in TVM_FEATURES else 256)
            except TiletuneError as e:
                if prior_given:
                    raise
                warnings.warn(f"{e}; the default prior falls back on prior=none", stacklevel=3)

        def extractor(kind, sp, wl):
            return make_extractor(kind, sp, wl, context.target, workers=workers, curve_n=curve_n,
                                  hardware=context.hardware)

        self.features = extractor(kind, space, context.workload)
        self.model = model if model is not None else XGBCostModel("reg", seed=seed, nthread=nthread)
        self.costs: dict[Config, float] = {}
        self.fitted = False
        self.background: list[Background] = []
        if p is not None:
            self.background.append(Background(self.features.extract(p.configs), p.y, [len(p.y)], prior_decay,
                                              "analytic prior"))
        if context.transfer:
            wl = context.workload
            data = load_transfer(list(context.transfer), space, kind, workload=wl, target=context.target,
                                 levels=context.levels, make_extractor=extractor,
                                 exclude_workload=getattr(wl, "key", None))
            if len(data):
                check_dim(data, self.features.dim, kind)
                self.background.append(Background(data.X, data.y, data.groups, transfer_decay, "transfer",
                                                  tuple(data.workloads)))
        self.dirty = bool(self.background)  # results (or background rows) not trained on yet

    def add(self, trials: Sequence[Trial]) -> None:
        for t in trials:
            self.costs[t.config] = t.cost if t.ok else math.inf
            self.dirty = True

    def fit(self) -> bool:
        """model.update: retrain on everything added and the background rows whose weight is still >= 0.05;
        False when there was nothing to train on."""
        self.dirty = False
        configs = list(self.costs)
        costs = np.array([self.costs[c] for c in configs])
        finite = np.isfinite(costs)
        Xs, ys, groups, weights = [], [], [], []
        if len(configs) >= self.min_results and finite.any():
            Xs.append(self.features.extract(configs))
            ys.append(np.where(finite, costs[finite].min() / np.where(finite, costs, 1.0), 0.0))
            groups.append(len(configs))
            weights.append(1.0)
        for b in self.background:
            w = background_weight(len(configs), b.decay)
            if w > 0:
                Xs.append(b.X)
                ys.append(b.y)
                groups += b.groups
                weights += [w] * len(b.groups)
        if not Xs:
            return False
        self.model.fit(np.concatenate(Xs), np.concatenate(ys), groups=groups, weights=weights, rng=self.rng)
        self.fitted = True
        return True

    def predict(self, configs: Sequence[Config]) -> np.ndarray:
        """Scores of ``configs``, refitted first when results were added since the last fit (0 without a model)."""
        if not configs:
            return np.zeros(0)
        if self.dirty:  # lazily: the model has seen every measured batch whenever it is used
            self.fit()
        if not self.fitted:
            return np.zeros(len(configs))
        return self.predict_features(self.features.extract(configs))

    def predict_features(self, X: np.ndarray) -> np.ndarray:
        """Scores of feature rows by the model as last fitted (no refit: for a caller with its own schedule)."""
        return np.asarray(self.model.predict(X), dtype=np.float64)

    def timing(self) -> dict[str, float]:
        """Seconds in feature extraction, model fitting and prediction (and configurations featurised)."""
        st, ms = self.features.stats, self.model.stats
        return {"features": float(st.get("seconds", 0.0)), "feature_configs": float(st.get("computed", 0)),
                "model_fit": float(ms.get("fit_seconds", 0.0)), "model_predict": float(ms.get("predict_seconds", 0.0))}

    def close(self) -> None:
        self.features.close()
