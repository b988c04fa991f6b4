"""AutoTVM's ``knob`` features: the configuration vector itself (pure Python, no TVM).

AutoTVM's ``config.get_flatten_feature()`` listed the split sizes and the other options. Here: for every
split knob its factors as log2(factor), outermost level first; for every choice knob log2(1 + value)
(the unroll depth), or its position for non-numeric choices. Dimension = sum of the split levels + the
number of choice knobs, e.g. 4 + 4 + 2 + 1 = 11 for GEMM with (4, 2) levels.

Knob features only mean the same thing within one template: the same knob names and levels. They are
raw factors, so a different shape of the same operator gives vectors of the same length (usable for
transfer, as Zheng found C12 -> C7 works), but another operator kind gives other knobs and cannot
transfer at all.

This is what ``feature=knob`` means for every strategy that takes the option (xgb, evo, dgd and their
variants; also evo/dgd's fallback without a workload). evo and dgd once used ``Space.encode`` instead
(log(factor) / log(extent), a choice knob's normalised position): within one space that is a positive
rescaling of log2(factor) per split feature and an order-preserving map per choice knob, and their only
consumer is a tree model (XGBoost, ``hist``), whose splits depend on the order of a feature's values
alone; trained on the same data the two encodings give the same predictions (checked: identical
predictions with the reg and rank losses, and identical evo/dgd proposal sequences), so there is one
definition. The rescaling would matter across workloads (transfer), where raw factors are what carries
over. ``Space.encode`` stays the input of the neural networks (N-A2C), where the scale matters.

``KnobTable`` precomputes one row per knob option so that a whole matrix of configurations given as
option indices (what simulated annealing moves around) is featurised with numpy gathers.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..space import ChoiceKnob, Config, Space, SplitKnob
from .base import FeatureExtractor


def _choice_value(k: ChoiceKnob, v) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return math.log2(1 + float(v))
    return float(k.index(v))


def knob_vector(space: Space, config: Config) -> np.ndarray:
    vals: list[float] = []
    for k, v in zip(space.knobs, config.values):
        if isinstance(k, SplitKnob):
            vals += [math.log2(f) for f in v]
        else:
            vals.append(_choice_value(k, v))
    return np.asarray(vals, dtype=np.float32)


def knob_dim(space: Space) -> int:
    return sum(k.levels if isinstance(k, SplitKnob) else 1 for k in space.knobs)


def signature(space: Space) -> tuple:
    """What two spaces must share for knob features to mean the same: names, kinds, levels, choices."""
    return tuple((k.name, k.levels, k.kind) if isinstance(k, SplitKnob) else (k.name, tuple(k.values))
                 for k in space.knobs)


class KnobTable:
    """Option-index matrix (rows = configurations, columns = knobs) -> knob feature matrix."""

    def __init__(self, space: Space):
        self.space = space
        self.tables: list[np.ndarray] = []
        for k in space.knobs:
            if isinstance(k, SplitKnob):
                self.tables.append(np.log2(np.asarray(k.options, dtype=np.float64)).astype(np.float32))
            else:
                self.tables.append(np.asarray([[_choice_value(k, v)] for v in k.values], dtype=np.float32))
        self.dim = sum(t.shape[1] for t in self.tables)

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        return np.concatenate([t[idx[:, j]] for j, t in enumerate(self.tables)], axis=1)

    def rows(self, configs: Sequence[Config]) -> np.ndarray:
        return np.stack([knob_vector(self.space, c) for c in configs]) if configs else np.zeros((0, self.dim), np.float32)


class KnobExtractor(FeatureExtractor):
    kind = "knob"

    def __init__(self, space: Space):
        super().__init__(space)
        self.table = KnobTable(space)

    @property
    def dim(self) -> int:
        return self.table.dim

    def _compute(self, configs):
        return [knob_vector(self.space, c) for c in configs]
