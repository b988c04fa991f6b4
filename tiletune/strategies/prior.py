"""An analytic prior for the learned cost models (xgb, evo, dgd): pseudo-measurements from Gensor's
analytic model, so that a model has something to say before the first measurement.

``analytic_prior(space, context, rng, n)`` labels ``n`` uniform configurations plus Roller's constructed
leaves (so that the fast end of the space is represented) with the analytic model's normalised throughput,
t_min / t(c), t = ``tiletune.analytic.etir.Model.config_time`` (the roofline time of the tiling, the
model Gensor and Roller construct with). The learned model trains on them as one extra group of rows
weighted ``background_weight(n_measured, decay)`` = 1 / 2^(n_measured / decay), the discount AutoTVM gives
transferred data, and dropped once that weight falls under 0.05: a prior until enough measurements exist.
The analytic model sees the tile sizes only (not ``unroll`` or ``pack``); the measurements teach the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analytic.etir import Model
from ..analytic.mma import MmaModel
from ..analytic.wgmma import WgmmaModel
from ..construct.mma import MmaRollerTree
from ..construct.wgmma import WgmmaRollerTree
from ..construct.roller import RollerTree
from ..schedules import cuda_mma, cuda_wgmma
from ..errors import TiletuneError
from ..space import Config, Space

PRIORS = ("none", "analytic")
MIN_WEIGHT = 0.05


@dataclass
class PriorData:
    configs: list[Config]
    y: np.ndarray  # analytic normalised throughput in (0, 1]


def background_weight(n_measured: int, decay: float) -> float:
    """1 / 2^(n / decay) (1 when decay is 0), or 0 once under MIN_WEIGHT."""
    w = 1.0 if decay == 0 else 1.0 / 2 ** (n_measured / decay)
    return w if w >= MIN_WEIGHT else 0.0


def analytic_prior(space: Space, context, rng: np.random.Generator, n: int = 256) -> PriorData:
    """``n`` uniform configurations and Roller's leaves, labelled by the analytic model (see above)."""
    wg = cuda_wgmma.owns(space)  # the Hopper template's space: its own model (tiletune.analytic.wgmma)
    mma = cuda_mma.owns(space)  # the tensor-core template's space: its own model (tiletune.analytic.mma)
    try:
        model = (WgmmaModel if wg else MmaModel if mma else Model)(
            space, getattr(context, "workload", None), getattr(context, "hardware", None),
            getattr(context, "target", None))
    except TiletuneError as e:
        raise TiletuneError(f"prior=analytic: {e}") from None
    leaves = [c for _, c in (WgmmaRollerTree if wg else MmaRollerTree if mma else RollerTree)(space, model).construct()]
    configs = list(dict.fromkeys(leaves + space.sample_unique(rng, n, exclude=leaves)))
    t = np.asarray([model.config_time(c) for c in configs], dtype=np.float64)
    return PriorData(configs, t.min() / t)
