"""Where a local search begins (G-BFS, N-A2C, DGD, xgb's simulated annealing, evo, GA): the options ``start``,
``start_k`` and ``start_sweep`` (``start_options``), and the configurations they give (``start_states``).

``start`` takes one of:

- ``untiled``: the untiled state s0 = [[m,1,1,1],[k,1],[n,1,1,1]] (choice knobs at their first value), the
  start of G-BFS and N-A2C in their paper;
- ``random``: one uniform state, the start of the other papers (their random initial points);
- ``gensor`` / ``roller``: the top ``start_k`` configurations that construction builds for the space
  (``tiletune.construct.constructions``, best first by the analytic model);
- ``construct`` (the default; docs/decisions/default-start.md): both tops alternating, Gensor's first; on a CPU
  the constructions in the direct loop orders of convolutions (docs/decisions/direct-order.md) and, for NCHW
  depthwise convs and pooling, in the row order (docs/decisions/row-order.md) come third; for a space without
  tile knobs whose template has start points of its own (row reductions: ``tiletune.schedules.rows.starts``,
  docs/decisions/row-reductions.md), its first ``start_k`` of those;
- a JSON object of knob values: that configuration.

With a constructive start, ``start_sweep`` measures the first constructions (and the direct and row orders'
ones) at every other value of each choice knob too, after the constructions (``tiletune.construct.choice_sweep``).
Every search measures its start first; how it goes on from there is in its own docstring. A start given
explicitly that does not fit the space is a one-line TiletuneError; a default constructive start that cannot
apply (a space without tile knobs, a workload without an affine access model) falls back on the paper's
start, with a warning.
"""
from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np

from ..construct import choice_sweep, constructions, is_direct
from ..errors import TiletuneError
from ..schedules import starts as template_starts
from ..space import Config, Space
from .base import Strategy, TuneContext
from .options import Option, between

STARTS = ("untiled", "random", "gensor", "roller", "construct")
CONSTRUCTIVE_STARTS = ("gensor", "roller", "construct")
DEFAULT_START = "construct"  # docs/decisions/default-start.md
DEFAULT_START_K = 4  # docs/decisions/start-k.md
DEFAULT_START_SWEEP = 2  # docs/decisions/start-sweep.md


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


def start_options(paper: str) -> tuple[Option, ...]:
    """``start``, ``start_k`` and ``start_sweep`` of a local search (see the module docstring); ``paper``
    says what its paper does."""
    return (
        Option("start", DEFAULT_START, "where the search begins: 'untiled' ([[m,1,1,1],[k,1],[n,1,1,1]]), "
               "'random', 'gensor' / 'roller' (their top start_k constructions, measured first), 'construct' "
               "(both tops, alternating: Gensor's first, Roller's first, Gensor's second, ...; on a CPU, for "
               "convolutions, the constructions in the direct loop orders third, for NCHW depthwise convs and "
               f"pooling the row order's), or a JSON object of knob values; {paper}", parse_start),
        Option("start_k", DEFAULT_START_K, "constructions measured first with start=gensor|roller|construct", int,
               **between(1, 10)),
        Option("start_sweep", DEFAULT_START_SWEEP, "with start=gensor|roller|construct: the first start_sweep "
               "constructions are also measured at every other value of each choice knob (unroll, pack, ...), "
               "one knob at a time, after the constructions; 0: off", int, **between(0, 10)),
    )


def start_states(space: Space, spec: str, rng: np.random.Generator, context: Any = None,
                 k: int = DEFAULT_START_K, *, fallback: str | None = None, sweep: int = 0) -> list[Config]:
    """The configurations of start ``spec`` (see the module docstring), measured first; s0 is the first.
    Gensor's walks draw from ``rng``. What does not fit the space is a one-line TiletuneError, except that a
    construction that cannot apply falls back on the start ``fallback``, with a warning, when one is given.

    ``sweep`` (constructive starts only): after the constructions, the first ``sweep`` of them, and the direct
    and row orders' ones wherever they stand (``tiletune.construct.is_direct``: their unroll rule always picks
    the deepest unroll, docs/decisions/start-sweep.md), at every other value of each choice knob, one knob at a
    time; configurations already in the list count once."""
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
            if spec == "construct":  # a template's own starts first (the int8 template's register tiles)
                own = template_starts(ctx.workload, space, ctx.target)[:k] if ctx.workload is not None else []
                out = own + [c for c in out if c not in own]
        except TiletuneError as e:
            # a space without tile knobs whose template has starts of its own (row reductions)
            out = template_starts(ctx.workload, space, ctx.target)[:k] if spec == "construct" else []
            if not out:
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


def given_seeds(strategy: Strategy) -> list[Config]:
    """The context's ``seeds`` (``TuneContext.seeds``) that are configurations of the space, in order."""
    out: list[Config] = []
    for d in getattr(strategy.context, "seeds", ()) or ():
        try:
            c = strategy.space.from_dict(d)
        except TiletuneError:
            continue
        if strategy.space.is_legal(c) and c not in out:
            out.append(c)
    return out


def _first(given: list[Config], rest: list[Config]) -> list[Config]:
    return given + [c for c in rest if c not in given]


def strategy_starts(strategy: Strategy, paper: str) -> list[Config]:
    """``start_states`` with the strategy's start options, after the context's seeds (``given_seeds``); a default
    start whose construction cannot apply falls back on ``paper``, the paper's start (G-BFS, N-A2C: a search that
    needs a state s0)."""
    o = strategy.opts
    fallback = None if "start" in strategy.given_options else paper
    return _first(given_seeds(strategy), start_states(strategy.space, o["start"], strategy.rng, strategy.context,
                                                      o["start_k"], fallback=fallback, sweep=o["start_sweep"]))


def start_seeds(strategy: Strategy) -> list[Config]:
    """The seeds of a search whose paper starts from random points (xgb's SA, evo, GA, DGD): the context's seeds
    (``given_seeds``), then nothing more for start=random (the paper's random initial points, also where a
    default start's construction cannot apply, with a warning), else ``start_states`` with the strategy's start
    options."""
    o = strategy.opts
    given = given_seeds(strategy)
    if o["start"] == "random":
        return given
    try:
        return _first(given, start_states(strategy.space, o["start"], strategy.rng, strategy.context, o["start_k"],
                                          sweep=o["start_sweep"]))
    except TiletuneError as e:
        if "start" in strategy.given_options or o["start"] not in CONSTRUCTIVE_STARTS:
            raise
        warnings.warn(f"{e}; the default start falls back on start=random", stacklevel=2)
        return given
