"""The surrogate of the model-steered searches (evo, dgd and their -af variants): features + the XGBoost
cost model (``XGBCostModel``, ``reg`` loss), trained on every measured configuration.

Training targets are normalised throughput y = min_cost / cost (0 for failures), so predictions are scores
on that scale (higher is better). Features (``FEATURES``): ``program`` = itervar features of the lowered
program when a workload is known; ``analytical`` = the seven TVM-AF-DS features
(``tiletune.features.analytical``); ``knob``, ``itervar``, ``curve``, ``curve1`` by name. Without a
workload (synthetic spaces, the conformance suite) every kind falls back on ``knob``, which needs
nothing but the space.

Warm starts (options ``prior`` and ``--transfer``): background rows trained with the measured ones, each
group weighted 1 / 2^(n / decay) with n measured results and dropped under 0.05 (``prior.background_weight``):
the analytic prior (``prior.analytic_prior``, pseudo-measurements from Gensor's analytic model) and the
records of other workloads (``transfer.load_transfer``, Zheng 4.3, as in the xgb tuner). With background
rows the model exists before the first measurement.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import TiletuneError
from ..features import FeatureExtractor, make_extractor
from ..features.analytical import AnalyticalExtractor
from ..space import Config, Space
from ..strategies.base import Trial, TuneContext
from .prior import analytic_prior, background_weight
from .transfer import check_dim, load_transfer
from .xgb import XGBCostModel

FEATURES = ("program", "analytical", "knob", "itervar", "curve", "curve1")
TVM_FEATURES = ("itervar", "curve", "curve1")  # lower every configuration with TVM (slow)


def resolve_feature(feature: str, context: TuneContext) -> str:
    """The feature type actually used: program -> itervar; anything but knob -> knob without a workload."""
    if feature not in FEATURES:
        raise TiletuneError(f"unknown feature {feature!r}; accepted: {', '.join(FEATURES)}")
    if context.workload is None:
        return "knob"
    return "itervar" if feature == "program" else feature


def make_features(kind: str, space: Space, context: TuneContext,
                  workers: int = 2) -> FeatureExtractor | AnalyticalExtractor:
    if kind == "analytical":
        return AnalyticalExtractor(space, context.workload, context.hardware, context.target)
    return make_extractor(kind, space, context.workload, context.target, workers=workers)


@dataclass
class Background:
    """Rows the model trains on besides the measurements: groups of (X, y), weight 1/2^(n/decay)."""

    X: np.ndarray
    y: np.ndarray
    groups: list[int]
    decay: float
    name: str


class Surrogate:
    """Features + XGBoost: ``add`` results, ``predict`` scores (refitted lazily on everything added)."""

    def __init__(self, space: Space, context: TuneContext, feature: str, *, seed: int, workers: int = 2,
                 nthread: int = 1, model: XGBCostModel | None = None, prior: str = "none",
                 prior_decay: float = 16.0, transfer_decay: float = 64.0, prior_given: bool = True):
        """``prior_given``: whether the caller chose ``prior`` (then a prior that cannot apply, a space
        without tile knobs, is a one-line error) or left it at a default (then it falls back on none, with a
        warning). The prior is built before the feature workers start, so a failure leaves none behind."""
        self.kind = resolve_feature(feature, context)
        p = None
        if prior == "analytic":
            try:
                p = analytic_prior(space, context, np.random.default_rng([seed, 1]),
                                   n=64 if self.kind in TVM_FEATURES else 256)
            except TiletuneError as e:
                if prior_given:
                    raise
                warnings.warn(f"{e}; the default prior falls back on prior=none", stacklevel=3)
        self.features = make_features(self.kind, space, context, workers)
        self.model = model if model is not None else XGBCostModel("reg", seed=seed, nthread=nthread)
        self.costs: dict[Config, float] = {}
        self.fitted = False
        self.dirty = False  # results added since the last fit
        self.background: list[Background] = []
        if p is not None:
            self.background.append(Background(self.features.extract(p.configs), p.y, [len(p.y)], prior_decay,
                                              "analytic prior"))
        if context.transfer:
            wl = context.workload
            data = load_transfer(
                list(context.transfer), space, self.kind, workload=wl, target=context.target, levels=context.levels,
                make_extractor=lambda kind, sp, w: make_features(
                    kind, sp, TuneContext(workload=w, target=context.target, hardware=context.hardware), workers),
                exclude_workload=getattr(wl, "key", None))
            if len(data):
                check_dim(data, self.features.extract([space.untiled()]).shape[1], self.kind)
                self.background.append(Background(data.X, data.y, data.groups, transfer_decay, "transfer"))
        self.dirty = bool(self.background)  # background rows: a model before the first measurement

    def add(self, trials: Sequence[Trial]) -> None:
        for t in trials:
            self.costs[t.config] = t.cost if t.ok else math.inf
            self.dirty = True

    def fit(self) -> None:
        """model.update: retrain on everything measured (needs a success and two results)."""
        self.dirty = False
        configs = list(self.costs)
        costs = np.array([self.costs[c] for c in configs])
        finite = np.isfinite(costs)
        Xs, ys, groups, weights = [], [], [], []
        if len(configs) >= 2 and finite.any():
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
            return
        self.model.fit(np.concatenate(Xs), np.concatenate(ys), groups=groups, weights=weights)
        self.fitted = True

    def predict(self, configs: Sequence[Config]) -> np.ndarray:
        if not configs:
            return np.zeros(0)
        if self.dirty:  # lazily: the model has seen every measured batch whenever it is used
            self.fit()
        if not self.fitted:
            return np.zeros(len(configs))
        return np.asarray(self.model.predict(self.features.extract(configs)), dtype=np.float64)

    def timing(self) -> dict[str, float]:
        """Seconds in feature extraction, model fitting and prediction (and configurations featurised)."""
        st, ms = self.features.stats, self.model.stats
        return {"features": float(st.get("seconds", 0.0)), "feature_configs": float(st.get("computed", 0)),
                "model_fit": float(ms.get("fit_seconds", 0.0)), "model_predict": float(ms.get("predict_seconds", 0.0))}

    def close(self) -> None:
        self.features.close()
