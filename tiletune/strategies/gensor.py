"""Gensor (Liu et al., 2025): graph-based construction with Markov analysis, as a strategy.

The construction (Algorithm 1, the annealed Markov walk over ETIR states, and Algorithm 2, the policy from
the paper's benefit formulas, with the formulas chosen for the symbols lost in our copy of the paper) is
``tiletune.construct.gensor.GensorWalk``; the local searches share it through their ``start=gensor``
option. This strategy measures only the best ``k`` constructed configurations (by the analytic performance
of the state) of its first construction, the top results of ``walks`` (default 4) independent walks.

A row reduction (softmax, layer norm: a space of choice knobs only, no tiles for the walk to describe) gets
its template's own starts instead of a construction (``tiletune.schedules.starts``, in their order: the rule
by which ``model build --construct gensor`` schedules these tasks without measuring;
docs/decisions/row-reductions.md), so that ``model tune -s gensor`` measures their top k as it does the
constructions', rather than leaving them at the default schedule.

Ablations: ``cache_moves=off`` replaces the annealed cache action by a fixed schedule (the level advances
every steps/n iterations); ``vthread=off``. After its top-k, ``after_topk=continue`` (default) keeps
proposing the next-best constructed states, then the results of further independent walks, until the
budget or until 5 walks in a row find nothing new; ``after_topk=stop`` returns [] after the top-k.
"""
from __future__ import annotations

from typing import Sequence

from ..analytic.etir import Model
from ..analytic.mma import MmaModel
from ..analytic.wgmma import WgmmaModel
from ..construct import row_starts
from ..construct.gensor import MAX_VTHREAD, T0, THRESHOLD, WALKS, GensorWalk
from ..construct.mma import MmaGensorWalk
from ..construct.wgmma import WgmmaGensorWalk
from ..schedules import cuda_mma, cuda_wgmma
from ..space import Config, Space
from .base import Strategy, Trial, register
from .options import GREATER_THAN_ZERO, POSITIVE, Option, after_topk_option, between, topk_option


def _vthread_mode(v: str) -> str:
    v = str(v).strip().lower()
    if v not in ("auto", "on", "off"):
        raise ValueError(v)
    return v


def _onoff(v: str) -> str:
    v = str(v).strip().lower()
    if v not in ("on", "off"):
        raise ValueError(v)
    return v


@register
class Gensor(Strategy):
    name = "gensor"
    summary = "Gensor: annealed Markov walk over ETIR states (tile/cache/vthread), measures the top-k constructed"
    constructive = True
    options = (
        topk_option(1),
        Option("t0", T0, "initial temperature T0", float, **GREATER_THAN_ZERO),
        Option("threshold", THRESHOLD, "stop when T falls to the threshold (T halves per step: 1e-30 -> 100 steps)",
               float, **GREATER_THAN_ZERO),
        Option("vthread", "auto", "setVthread action: auto (on for GPU hardware only), on, off", _vthread_mode),
        Option("cache_moves", "on", "annealed cache action (on) or a fixed level schedule (off)", _onoff),
        Option("walks", WALKS, "independent annealed walks pooled into the first construction", int,
               **between(1, 64)),
        Option("max_vthread", MAX_VTHREAD, "largest virtual-thread count", int, **POSITIVE),
        after_topk_option("next-best constructed states"),
    )

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        o = self.opts
        ctx = self.context
        if cuda_wgmma.owns(space):  # Hopper: the walk over the wgmma template's knobs (tiletune.construct.wgmma)
            self.model = WgmmaModel(space, ctx.workload, ctx.hardware, ctx.target)
            self.walker = WgmmaGensorWalk(space, self.model, self.rng, t0=o["t0"], threshold=o["threshold"])
        elif cuda_mma.owns(space):  # tensor cores: the walk over the template's knobs (tiletune.construct.mma)
            self.model = MmaModel(space, ctx.workload, ctx.hardware, ctx.target)
            self.walker = MmaGensorWalk(space, self.model, self.rng, t0=o["t0"], threshold=o["threshold"])
        elif (rows := row_starts(space, ctx.workload, ctx.target)) is not None:  # a row reduction: its starts
            self.model, self.walker, self._rows = None, None, rows
        else:
            self.model = Model(space, ctx.workload, ctx.hardware, ctx.target)
            self.walker = GensorWalk(space, self.model, self.rng, t0=o["t0"], threshold=o["threshold"],
                                     vthread=o["vthread"], cache_moves=o["cache_moves"],
                                     max_vthread=o["max_vthread"])
        self._pool: list[tuple[float, Config]] = []  # (analytic time, config), best first
        self._proposed: set[Config] = set()
        self._served = 0
        self._fruitless = 0
        self._built = False

    # ---- ask / tell ------------------------------------------------------------------------------
    def _build(self) -> None:
        """The first construction, once: the pool of ``walks`` walks, or a row reduction's template starts."""
        if not self._built:
            self._built = True
            self._pool = list(self._rows) if self.walker is None else self.walker.pool(self.opts["walks"])

    def _add_walk(self) -> int:
        """Run one more walk; add its configurations not seen before to the pool. Returns how many."""
        if self.walker is None:
            return 0
        fresh = self.walker.add_walk(self._proposed | {c for _, c in self._pool})
        self._pool.extend((t, c) for c, t in fresh.items())
        self._pool.sort(key=lambda tc: (tc[0], tc[1]))
        return len(fresh)

    def ask(self, n: int) -> list[Config]:
        self._build()
        k = self.opts["k"]
        if self._served >= k and self.opts["after_topk"] == "stop":
            return []
        want = min(n, k - self._served) if self._served < k else n
        out: list[Config] = []
        while len(out) < want:
            if not self._pool:
                if self._fruitless >= 5:
                    break
                added = self._add_walk()
                self._fruitless = 0 if added else self._fruitless + 1
                continue
            _, c = self._pool.pop(0)
            if c in self._proposed:
                continue
            self._proposed.add(c)
            out.append(c)
        self._served += len(out)
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        pass  # construction uses the analytic model only; measurements just rank what was asked

    def exhausted_reason(self) -> str:
        k, n = self.opts["k"], len(self._proposed)
        if self.opts["after_topk"] == "stop" and n >= k:
            return f"gensor measured its top {k} constructed configuration(s) and stops there (after_topk=stop)"
        if self.walker is None:
            return f"gensor measured all {n} of this row reduction's template starts"
        more = "" if self.opts["after_topk"] == "stop" else " (after_topk=continue: further walks found no more)"
        return f"gensor's annealed walks constructed only {n} distinct configuration(s) of this space{more}"

    # ---- for inspection and tests ----------------------------------------------------------------
    def construct(self) -> list[tuple[float, Config]]:
        """The first construction's pool (analytic time, config), best first, without proposing anything."""
        self._build()
        return list(self._pool)
