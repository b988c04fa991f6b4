"""The strategy interface: batched ask/tell over Configs.

A strategy sees the Space and the results it is told, nothing else (no TVM). Options are declared
as data (``tiletune.strategies.options.Option``) with defaults and help; unknown options and bad values
raise TiletuneError.
Randomness comes from an explicit numpy Generator seeded by ``seed``.

Contract with the tuning loop (``tiletune.tune``):
- ``ask(n)`` returns at most n configurations the strategy wants measured next. It may return fewer,
  and an empty list means "nothing more to propose" (the loop then stops).
- The loop skips configurations it already knows (measured earlier in this run or in the records file)
  and tells the strategy their known results instead of measuring again.
- ``tell(trials)`` gives the results of (some of) the asked configurations, in ask order. A failed
  configuration has ``cost = inf`` and an ``error`` kind; strategies must tolerate it.
- ``timing()`` reports seconds spent inside the strategy (``{}`` when it keeps no account) and
  ``close()`` releases what it holds (feature worker pools); the session calls ``close`` at the end of
  every run, also after an error.
- ``constructive`` strategies (Gensor, Roller) build a few configurations from a model and measure only
  those; the conformance suite holds them to finishing within budget, not to finding the optimum.

A strategy whose algorithm is one loop is best written as a ``GeneratorStrategy``: a ``search()``
generator that yields the configurations it wants measured and receives their results, so that it reads
top to bottom like its paper's pseudo-code.
"""
from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generator, Sequence

import numpy as np

from ..errors import TiletuneError
from ..space import Config, Space
from .options import Option


@dataclass(frozen=True)
class Trial:
    """What a strategy learns about one configuration: median cost in seconds (inf on error)."""

    config: Config
    cost: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and math.isfinite(self.cost)


@dataclass
class TuneContext:
    """What a strategy may know beyond the space, all optional.

    ``workload`` (a Workload), ``target`` (a target dict) and ``hardware`` (a HardwareSpec) let model-based
    strategies lower or model configurations; ``transfer`` lists records files of other workloads whose
    results a cost model may learn from (xgb, evo, dgd), and ``levels`` is the tiling levels the space was
    built with (``space.parse_levels``), so that transferred records map into the same kind of space.
    ``seeds``: configurations (knob dicts) from elsewhere, such as the best of the same kernel at a neighbouring
    shape (``tiletune.model.dynamic.shape_transfer``), that a local search measures first, before its own start."""

    workload: Any = None
    target: dict | None = None
    hardware: Any = None
    transfer: tuple[str, ...] = ()
    levels: tuple[int, int] | dict[str, int] | None = None
    seeds: tuple[dict, ...] = ()


class Strategy(ABC):
    """Base class. Subclasses set ``name``, ``summary`` and ``options``; implement ask/tell; override
    ``timing``, ``close``, ``exhausted_reason`` and ``constructive`` where they apply."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()
    #: builds a few configurations from a model and measures only those (no search to an optimum)
    constructive: ClassVar[bool] = False
    #: configurations per measured batch when the run does not set one (``--batch-size``): 8, so that a strategy
    #: that learns from results learns often; 16 for one whose proposals do not depend on results (random,
    #: grid). Decision: docs/decisions/batch-size.md
    batch_size: ClassVar[int] = 8

    def __init__(self, space: Space, *, seed: int = 0, context: TuneContext | None = None,
                 defaults: dict[str, Any] | None = None, **options: Any):
        """``options``: set by the caller; ``defaults``: replace declared defaults (a caller's own defaults,
        such as the model path's start) without counting as set, so that what a default does where it
        cannot apply (a constructive start's fallback) still happens."""
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.context = context or TuneContext()
        self.opts: dict[str, Any] = self.check_options({**(defaults or {}), **options})
        self.given_options = frozenset(options)  # the options set by the caller (the rest are defaults)

    @classmethod
    def has_option(cls, name: str) -> bool:
        """Whether the strategy declares an option ``name``."""
        return any(o.name == name for o in cls.options)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Every declared option's value: the given ones parsed by ``Option.parse``, the others at their
        defaults; a TiletuneError names an unknown option and lists the accepted ones. The constructor and
        the benchmark harness (which checks a suite's options before any run starts) both use it."""
        unknown = sorted(set(options) - {o.name for o in cls.options})
        if unknown:
            raise TiletuneError(f"strategy {cls.name}: unknown option{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(map(repr, unknown))}; accepted: "
                                + (", ".join(f"{o.name} (default {o.default})" for o in cls.options) or "none"))
        return {o.name: o.parse(options[o.name], cls.name) if o.name in options else o.default
                for o in cls.options}

    @abstractmethod
    def ask(self, n: int) -> list[Config]:
        """Up to n configurations to measure next; [] when the strategy has nothing more."""

    @abstractmethod
    def tell(self, trials: Sequence[Trial]) -> None:
        """Results for configurations asked before."""

    def add_seeds(self, configs: Sequence[Config]) -> int:
        """Configurations learned elsewhere during a run (the best of a sibling task, ``tiletune.model.tuning.tuner``)
        to measure next, before the strategy's own proposals; returns how many it took. A strategy without a
        queue of seeds takes none."""
        return 0

    def timing(self) -> dict[str, float]:
        """Seconds spent so far in the strategy's own work, by part (features, model fit, ...)."""
        return {}

    def close(self) -> None:
        """Release what the strategy holds (worker processes); called once, at the end of a run."""

    def exhausted_reason(self) -> str:
        """Why ``ask`` returned nothing, in words for the run's summary (the loop then stops: "exhausted").
        Strategies that stop by design (constructive ones, a finished enumeration) say what they did."""
        return "the strategy has no more configurations to propose"


Search = Generator[list[Config], list[Trial], None]


class GeneratorStrategy(Strategy):
    """A strategy written as one generator, ``search()``, that reads top to bottom like its paper.

    ``told = yield configs`` proposes ``configs`` (duplicates within one yield are dropped) and suspends
    the search. It resumes in one of two situations, told apart by ``told``:

    - a non-empty list of Trials: results arrived (``tell``), in the order they were told;
    - ``[]``: the loop asks for more and everything yielded so far has been handed out. A search that
      can propose more before it has the results yields them; one that cannot yields ``[]`` again, which
      ends the current ``ask`` (when that ask got nothing at all, the loop stops: "exhausted").

    So a search may run ahead of its results (G-BFS expands its next-best states while the previous
    batch is measured) or wait for them: ``trials = yield from self.measure(configs)`` proposes configs
    and returns their Trials once all of them are told. When ``search`` returns, ``ask`` returns [].
    """

    def __init__(self, space: Space, **kw: Any):
        super().__init__(space, **kw)
        self._search: Search | None = None
        self._queue: list[Config] = []  # yielded, not yet handed out
        self._finished = False

    @abstractmethod
    def search(self) -> Search:
        """The algorithm: yield lists of configurations to measure, receive lists of Trials."""

    def measure(self, configs: Sequence[Config]) -> Generator[list[Config], list[Trial], list[Trial]]:
        """``trials = yield from self.measure(configs)``: propose configs and wait until every one of
        them is told; their Trials in the order of ``configs`` (duplicates dropped)."""
        want = list(dict.fromkeys(configs))
        waiting = set(want)
        got: dict[Config, Trial] = {}
        batch = want
        while waiting:
            told = yield batch
            batch = []
            for t in told:
                if t.config in waiting:
                    waiting.discard(t.config)
                    got[t.config] = t
        return [got[c] for c in want]

    def _resume(self, told: list[Trial]) -> bool:
        """Run the search to its next yield and queue what it yields; False once it has returned."""
        if self._finished:
            return False
        try:
            if self._search is None:  # the first resume starts the search
                self._search = self.search()
                self._enqueue(next(self._search))
                if not told:
                    return True
            self._enqueue(self._search.send(told))
        except StopIteration:
            self._finished = True
            return False
        return True

    def _enqueue(self, batch: Sequence[Config]) -> None:
        self._queue += [c for c in dict.fromkeys(batch) if c not in self._queue]

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n:
            if self._queue:
                out.append(self._queue.pop(0))
            elif not self._resume([]) or not self._queue:
                break  # finished, or nothing to propose before more results arrive
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        if trials:
            self._resume(list(trials))


#: strategy modules, loaded on first use of the registry (options, starts, sampling, learned, surrogate, prior and
#: torch_support are shared pieces, not strategies)
MODULES = ("random_search", "grid", "gensor", "roller", "gbfs", "na2c", "rnn", "xgb", "ga", "dgd", "evo")
_REGISTRY: dict[str, type[Strategy]] = {}
_loaded = False


def _load_all() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for m in MODULES:
            importlib.import_module(f"{__package__}.{m}")


def register(cls: type[Strategy]) -> type[Strategy]:
    if not cls.name:
        raise ValueError(f"{cls} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def registry() -> dict[str, type[Strategy]]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> type[Strategy]:
    reg = registry()
    if name not in reg:
        raise TiletuneError(f"unknown strategy {name!r}; registered: {', '.join(reg)}")
    return reg[name]


def create(name: str, space: Space, *, seed: int = 0, context: TuneContext | None = None,
           options: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None) -> Strategy:
    """Strategy ``name`` on ``space`` with the caller's ``options`` and its own ``defaults`` (see
    ``Strategy.__init__``)."""
    return get(name)(space, seed=seed, context=context, defaults=defaults, **(options or {}))


def parse_options(items: Sequence[str]) -> dict[str, str]:
    """``--option name=value`` (repeatable) -> dict."""
    out = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise TiletuneError(f"bad --option {item!r}: expected name=value")
        out[name.strip()] = value.strip()
    return out
