"""Pieces several strategies share (this module registers no strategy).

- ``start_option`` / ``START_K_OPTION`` / ``START_SWEEP_OPTION`` / ``start_states`` / ``start_seeds``: where a local
  search begins (G-BFS, N-A2C, DGD, xgb's simulated annealing, evo, ga): the paper's untiled s0, a random state,
  the top constructions of Gensor or Roller (``tiletune.construct``), with their choice knobs swept if asked, or
  a configuration given by hand.
- ``require_torch``: PyTorch, or an error that says how to install it (N-A2C, RNN controller).
- ``unvisited_sample``: k configurations not visited yet, uniformly (N-A2C, RNN controller).
- ``topk_option`` / ``after_topk_option``: the top-k options of the constructive strategies (Gensor,
  Roller).
- ``prior_options``: the analytic prior of the learned cost models (xgb, evo, dgd).
- ``SurrogateStrategy`` / ``feature_options``: the base of the searches steered by a learned surrogate
  (``tiletune.cost_model.surrogate``; evo, dgd): the options, the model, what ``tell`` does with results,
  ``timing`` and ``close``.
"""
from __future__ import annotations

import json
import math
import warnings
from typing import Any, Sequence

import numpy as np

from ..construct import choice_sweep, constructions, is_direct
from ..cost_model.prior import PRIORS
from ..cost_model.surrogate import FEATURES, Surrogate
from ..errors import TiletuneError
from ..space import Config, Space
from .base import Option, Strategy, Trial, TuneContext

POSITIVE = dict(check=lambda v: v >= 1, check_help="must be >= 1")
NONNEGATIVE = dict(check=lambda v: v >= 0, check_help="must be >= 0")


# ---- the start: s0, or the seeds of a population ------------------------------------------------------
STARTS = ("untiled", "random", "gensor", "roller", "construct")
CONSTRUCTIVE_STARTS = ("gensor", "roller", "construct")
#: the default start of every local search (gbfs, na2c, dgd, xgb, evo, ga), chosen by measurement
#: (benchmarks/construct_refine.py; README): construct, then refine, from Gensor's and Roller's tops. At 16,
#: 48 and 128 trials on the seven construct-refine workloads it was 1.06-1.08x ahead of Roller's tops alone
#: (geometric mean over workloads and strategies, znver5): 2x on the ResNet C7 conv, where Roller's tops
#: are poor. Behind on the depthwise conv for DGD and N-A2C in that run, not in an idle re-run with GA's 16
#: genes (5 seeds: 57 and 60 GFLOPS at 48 trials against Roller's start's 57)
DEFAULT_START = "construct"
#: the default prior of the learned cost models xgb and dgd, chosen by measurement (README); evo's is
#: "analytic" (``EVO_PRIOR``): its model gives random scores until 100 results without one
DEFAULT_PRIOR = "none"
EVO_PRIOR = "analytic"


def parse_start(raw: Any) -> str:
    """A start value: one of STARTS or a JSON object of knob values (checked against the space later)."""
    spec = str(raw).strip()
    if spec in STARTS:
        return spec
    try:
        d = json.loads(spec)
    except json.JSONDecodeError:
        raise ValueError(spec) from None
    if not isinstance(d, dict):
        raise ValueError(spec)
    return spec


parse_start.__name__ = "start: untiled, random, gensor, roller, construct or a JSON object of knob values"


def start_option(default: str, paper: str) -> Option:
    """``start``: where a local search begins; ``paper`` says what its paper does."""
    return Option("start", default, "where the search begins: 'untiled' ([[m,1,1,1],[k,1],[n,1,1,1]]), "
                  "'random', 'gensor' / 'roller' (their top start_k constructions, measured first), 'construct' "
                  "(both tops, alternating: Gensor's first, Roller's first, Gensor's second, ...; on a CPU, for "
                  "convolutions, the constructions in the direct loop orders third, for NCHW depthwise convs and "
                  "pooling the row order's), or a JSON "
                  f"object of knob values; {paper}", parse_start)


START_K_OPTION = Option("start_k", 4, "constructions measured first with start=gensor|roller|construct", int,
                        check=lambda v: 1 <= v <= 10, check_help="must be 1..10")


#: the default of ``start_sweep``, chosen by measurement (benchmarks/construct_refine.py, settings ``sweep2`` and
#: ``control``, the same period; benchmarks/README.md): at 16 / 48 / 128 trials, 3 seeds on the seven
#: construct-refine workloads, the six local searches with the top two constructions swept were 1.07 / 1.03 /
#: 1.02x ahead of the same searches without (geometric mean; the Inception conv 1.56 / 1.21 / 1.11x, where every
#: local search then passed random search at 48 trials; the GEMMs 1.02-1.06x; C7 level when re-run in the
#: control's period)
DEFAULT_START_SWEEP = 2
START_SWEEP_OPTION = Option("start_sweep", DEFAULT_START_SWEEP, "with start=gensor|roller|construct: the first "
                            "start_sweep constructions are also measured at every other value of each choice knob "
                            "(unroll, pack, ...), one knob at a time, after the constructions; 0: off", int,
                            check=lambda v: 0 <= v <= 10, check_help="must be 0..10")


def start_states(space: Space, spec: str, rng: np.random.Generator, context: Any = None,
                 k: int = 4, *, fallback: str | None = None, sweep: int = 0) -> list[Config]:
    """The start of a local search, as a list of configurations measured first (s0 is its first member):
    'untiled' -> [the untiled state]; 'random' -> [one uniform state]; 'gensor' / 'roller' -> the top ``k``
    configurations that construction builds for this space (``tiletune.construct.constructions``, best
    first by the analytic model; Gensor's walks draw from ``rng``; 'construct': both, alternating); a JSON object {knob: value} -> [that
    configuration]. What does not fit the space is a one-line TiletuneError, except that a construction
    that cannot apply (a space without tile knobs, a workload without an affine access model) falls back
    on the start ``fallback``, with a warning, when one is given (the strategies give their paper's start
    when ``start`` was left at its default).

    ``sweep`` (constructive starts only): after the constructions, the first ``sweep`` of them at every other
    value of each choice knob, one knob at a time (``tiletune.construct.choice_sweep``: the analytic model does
    not rank unroll depths or packing, so they are measured rather than predicted), and so are the direct loop
    orders' constructions wherever they stand (``tiletune.construct.is_direct``: with a whole reduction axis in R1
    the unroll rule always picks the deepest unroll, which was the worst depth on one conv and the best on
    another, 79 against 140 and 254 against 17 GFLOPS; the row order's too, whose best depth was 64 on one
    depthwise conv and 0 on another); configurations already in the list count once."""
    spec = (spec or "untiled").strip()
    if spec == "untiled":
        return [space.untiled()]
    if spec == "random":
        return [space.sample(rng)]
    if spec in CONSTRUCTIVE_STARTS:
        ctx = context if context is not None else TuneContext()
        try:
            out = constructions(spec, space, workload=ctx.workload, hardware=ctx.hardware, target=ctx.target, k=k,
                                rng=rng)
        except TiletuneError as e:
            if fallback is None:
                raise
            warnings.warn(f"{e}; the default start falls back on start={fallback}", stacklevel=2)
            return start_states(space, fallback, rng, context, k, sweep=sweep)
        if not out:
            raise TiletuneError(f"option start={spec}: the construction found no legal configuration of this space")
        swept = out[:sweep] + [c for c in out[sweep:] if is_direct(space, c)] if sweep else []
        for c in swept:
            out += [v for v in choice_sweep(space, c) if v not in out]
        return out
    try:
        d = json.loads(spec)
    except json.JSONDecodeError:
        raise TiletuneError(f"option start={spec!r}: expected {', '.join(STARTS)} or a JSON object such as "
                            + json.dumps(space.to_dict(space.untiled()))) from None
    if not isinstance(d, dict):
        raise TiletuneError(f"option start={spec!r}: expected a JSON object of knob values such as "
                            + json.dumps(space.to_dict(space.untiled())))
    try:
        s0 = space.from_dict(d)
    except TiletuneError as e:
        raise TiletuneError(f"option start={spec!r}: {e}") from None
    if not space.is_legal(s0):
        raise TiletuneError(f"option start={spec!r} is not a legitimate configuration of this space")
    return [s0]


def strategy_starts(strategy: Strategy, paper: str) -> list[Config]:
    """``start_states`` with the strategy's ``start`` and ``start_k`` options; a default start whose
    construction cannot apply falls back on ``paper``, the paper's start."""
    o = strategy.opts
    fallback = None if "start" in strategy.given_options else paper
    return start_states(strategy.space, o["start"], strategy.rng, strategy.context, o["start_k"], fallback=fallback,
                        sweep=o["start_sweep"])


def start_seeds(strategy: Strategy) -> list[Config]:
    """The seeds of a population search (xgb's SA, evo, ga, dgd), whose papers start from random points:
    [] for start=random (the paper's random initial points, also where a default start's construction
    cannot apply, with a warning), else ``start_states`` with the strategy's ``start`` and ``start_k``."""
    o = strategy.opts
    if o["start"] == "random":
        return []
    try:
        return start_states(strategy.space, o["start"], strategy.rng, strategy.context, o["start_k"],
                            sweep=o["start_sweep"])
    except TiletuneError as e:
        if "start" in strategy.given_options or o["start"] not in CONSTRUCTIVE_STARTS:
            raise
        warnings.warn(f"{e}; the default start falls back on start=random", stacklevel=2)
        return []


# ---- constructive strategies: top-k first, then more or stop -----------------------------------------
def topk_option(default: int) -> Option:
    """``k``: how many constructed configurations a constructive strategy measures first (Gensor, Roller)."""
    return Option("k", default, "how many constructed configurations to measure first (top-k)", int,
                  check=lambda v: 1 <= v <= 10, check_help="must be 1..10")


def after_topk_option(rest: str) -> Option:
    """``after_topk``: after the top-k, go on with ``rest`` (what the strategy has next) or stop."""
    return Option("after_topk", "continue", f"after the top-k: continue with {rest}, or stop", str,
                  choices=("continue", "stop"))


# ---- torch, random unvisited states -------------------------------------------------------------------
def require_torch() -> tuple[Any, Any]:
    """(torch, torch.nn), or a TiletuneError that says how to install it."""
    try:
        import torch
        from torch import nn
    except ImportError:
        raise TiletuneError("strategies na2c and rnn need PyTorch (CPU build is enough): "
                            "pip install 'tiletune[torch]'") from None
    return torch, nn


def unvisited_sample(space: Space, rng: np.random.Generator, k: int, visited: set[Config]) -> list[Config]:
    """k distinct configurations not in ``visited``, uniformly (exactly, from the complement, when the
    space is small or nearly exhausted)."""
    if k <= 0:
        return []
    out = space.sample_unique(rng, k, exclude=visited)
    if len(out) < k and space.size <= 1_000_000:
        taken = visited | set(out)
        rest = space.remaining(taken)
        pick = rng.permutation(len(rest))[: k - len(out)]
        out += [rest[int(i)] for i in pick]
    return out


# ---- searches steered by a surrogate model -------------------------------------------------------------
def feature_options(default: str) -> tuple[Option, ...]:
    """The options of a surrogate-steered search, with ``default`` features."""
    return (
        Option("feature", default, "cost-model features: program (itervar with a workload), analytical (the seven "
               "TVM-AF-DS features), knob, itervar, curve, curve1; knob features without a workload", str,
               choices=FEATURES),
        Option("workers", 2, "feature worker processes for the TVM features", int, **NONNEGATIVE),
        Option("nthread", 1, "XGBoost threads", int, **POSITIVE),
    )


def prior_options(default: str) -> tuple[Option, ...]:
    """``prior`` / ``prior_decay``: the analytic prior of a learned cost model (``tiletune.cost_model.prior``)."""
    return (
        Option("prior", default, "cost-model prior before measurements: none, or analytic (pseudo-measurements "
               "from Gensor's analytic model, weight 1/2^(n/prior_decay) with n measured)", str, choices=PRIORS),
        Option("prior_decay", 16.0, "analytic prior weight 1/2^(n/decay) with n measured results (0: constant)",
               float, **NONNEGATIVE),
    )


TRANSFER_DECAY_OPTION = Option("transfer_decay", 64.0, "transfer data (--transfer) weight 1/2^(n/decay) with n "
                               "local results (0: constant)", float, **NONNEGATIVE)


class SurrogateStrategy(Strategy):
    """Base of a search steered by a ``Surrogate`` in ``self.model`` (subclasses add ``feature_options``,
    ``prior_options`` and ``TRANSFER_DECAY_OPTION`` to their options; records of other workloads in
    TuneContext.transfer warm-start the model as in the xgb tuner). Every told result goes to the model and to ``self.measured`` (cost in seconds,
    inf for a failure)."""

    def __init__(self, space: Space, **kw: Any):
        super().__init__(space, **kw)
        o = self.opts
        self.model = Surrogate(space, self.context, o["feature"], seed=self.seed, workers=o["workers"],
                               nthread=o["nthread"], prior=o["prior"], prior_decay=o["prior_decay"],
                               transfer_decay=o["transfer_decay"], prior_given="prior" in self.given_options)
        self.measured: dict[Config, float] = {}

    def tell(self, trials: Sequence[Trial]) -> None:
        self.model.add(trials)
        for t in trials:
            self.measured[t.config] = t.cost if t.ok else math.inf

    def timing(self) -> dict[str, float]:
        return self.model.timing()

    def close(self) -> None:
        self.model.close()
