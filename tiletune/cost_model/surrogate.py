"""The surrogate of the model-steered searches (evo, dgd and their -af variants): features + the XGBoost
cost model (``XGBCostModel``, ``reg`` loss), trained on every measured configuration.

Training targets are normalised throughput y = min_cost / cost (0 for failures), so predictions are scores
on that scale (higher is better). Features (``FEATURES``): ``program`` = itervar features of the lowered
program when a workload is known; ``analytical`` = the seven TVM-AF-DS features
(``tiletune.features.analytical``); ``knob``, ``itervar``, ``curve``, ``curve1`` by name. Without a
workload (synthetic spaces, the conformance suite) every kind falls back on ``knob``, which needs
nothing but the space.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import TiletuneError
from ..features import FeatureExtractor, make_extractor
from ..features.analytical import AnalyticalExtractor
from ..space import Config, Space
from ..strategies.base import Trial, TuneContext
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


class Surrogate:
    """Features + XGBoost: ``add`` results, ``predict`` scores (refitted lazily on everything added)."""

    def __init__(self, space: Space, context: TuneContext, feature: str, *, seed: int, workers: int = 2,
                 nthread: int = 1, model: XGBCostModel | None = None):
        self.kind = resolve_feature(feature, context)
        self.features = make_features(self.kind, space, context, workers)
        self.model = model if model is not None else XGBCostModel("reg", seed=seed, nthread=nthread)
        self.costs: dict[Config, float] = {}
        self.fitted = False
        self.dirty = False  # results added since the last fit

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
        if len(configs) < 2 or not finite.any():
            return
        y = np.where(finite, costs[finite].min() / np.where(finite, costs, 1.0), 0.0)
        self.model.fit(self.features.extract(configs), y)
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
