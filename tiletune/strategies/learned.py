"""The searches steered by a learned cost model (xgb, evo, dgd and their -af variants): their shared options and
``SurrogateStrategy``, which holds the model (``tiletune.strategies.surrogate.Surrogate``: features, XGBoost,
the analytic prior and the records of other workloads as background rows)."""
from __future__ import annotations

import math
from typing import Any, Sequence

from ..space import Config, Space
from .base import Strategy, Trial
from .options import NONNEGATIVE, POSITIVE, Option
from .prior import PRIORS
from .surrogate import FEATURES, Surrogate, resolve_feature

#: the default prior of xgb and dgd; evo's is "analytic": docs/decisions/prior.md
DEFAULT_PRIOR = "none"
EVO_PRIOR = "analytic"

WORKERS_OPTION = Option("workers", 2, "feature worker processes for the TVM features (0: in this process)", int,
                        **NONNEGATIVE)
NTHREAD_OPTION = Option("nthread", 1, "XGBoost threads", int, **POSITIVE)
#: transfer is opt-in (``--transfer``): docs/decisions/transfer.md
TRANSFER_DECAY_OPTION = Option("transfer_decay", 64.0, "transfer data (--transfer) weight 1/2^(n/decay) with n "
                               "local results (0: constant)", float, **NONNEGATIVE)


def prior_options(default: str) -> tuple[Option, ...]:
    """``prior`` / ``prior_decay``: the analytic prior of a learned cost model (``tiletune.strategies.prior``)."""
    return (
        Option("prior", default, "cost-model prior before measurements: none, or analytic (pseudo-measurements "
               "from Gensor's analytic model, weight 1/2^(n/prior_decay) with n measured)", str, choices=PRIORS),
        Option("prior_decay", 16.0, "analytic prior weight 1/2^(n/decay) with n measured results (0: constant)",
               float, **NONNEGATIVE),
    )


def surrogate_options(feature: str, prior: str) -> tuple[Option, ...]:
    """The model options of a search steered by ``resolve_feature`` features (evo, dgd), with ``feature`` and
    ``prior`` as defaults."""
    return (
        Option("feature", feature, "cost-model features: program (itervar with a workload), analytical (the "
               "seven TVM-AF-DS features), knob, itervar, curve, curve1; knob features without a workload", str,
               choices=FEATURES),
        WORKERS_OPTION,
        NTHREAD_OPTION,
    ) + prior_options(prior) + (TRANSFER_DECAY_OPTION,)


class SurrogateStrategy(Strategy):
    """Base of a search steered by a ``Surrogate`` in ``self.model`` (its options: ``surrogate_options``, or
    the same names where a subclass declares its own). Every told result goes to the model and to
    ``self.measured`` (cost in seconds, inf for a failure)."""

    def __init__(self, space: Space, **kw: Any):
        super().__init__(space, **kw)
        self.model = self.make_surrogate()
        self.measured: dict[Config, float] = {}

    def make_surrogate(self, **kw: Any) -> Surrogate:
        """The model from the strategy's options; ``kw`` replaces or adds ``Surrogate`` arguments (a subclass's
        own feature kinds, loss, ...)."""
        o = self.opts
        args = dict(seed=self.seed, workers=o["workers"], nthread=o["nthread"], prior=o["prior"],
                    prior_decay=o["prior_decay"], transfer_decay=o["transfer_decay"],
                    prior_given="prior" in self.given_options)
        args.update(kw)
        kind = args.pop("kind", None) or resolve_feature(o["feature"], self.context, self.space)
        return Surrogate(self.space, self.context, kind, **args)

    def tell(self, trials: Sequence[Trial]) -> None:
        self.model.add(trials)
        for t in trials:
            self.measured[t.config] = t.cost if t.ok else math.inf

    def timing(self) -> dict[str, float]:
        return self.model.timing()

    def close(self) -> None:
        self.model.close()
