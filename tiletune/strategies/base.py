"""The strategy interface: batched ask/tell over Configs.

A strategy sees the Space and the results it is told, nothing else (no TVM). Options are declared
as data (``Option``) with defaults and help; unknown options and bad values raise TiletuneError.
Randomness comes from an explicit numpy Generator seeded by ``seed``.

Contract with the tuning loop (``tiletune.tune``):
- ``ask(n)`` returns at most n configurations the strategy wants measured next. It may return fewer,
  and an empty list means "nothing more to propose" (the loop then stops).
- The loop skips configurations it already knows (measured earlier in this run or in the records file)
  and tells the strategy their known results instead of measuring again.
- ``tell(trials)`` gives the results of (some of) the asked configurations, in ask order. A failed
  configuration has ``cost = inf`` and an ``error`` kind; strategies must tolerate it.
"""
from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ..errors import TiletuneError
from ..space import Config, Space


@dataclass(frozen=True)
class Trial:
    """What a strategy learns about one configuration: median cost in seconds (inf on error)."""

    config: Config
    cost: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and math.isfinite(self.cost)


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str
    type: Callable[[Any], Any] = float
    choices: tuple | None = None
    check: Callable[[Any], bool] | None = None  # extra validity test
    check_help: str = ""

    def parse(self, raw: Any, strategy: str) -> Any:
        try:
            if self.type is bool and isinstance(raw, str):
                low = raw.strip().lower()
                if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                value = low in ("1", "true", "yes", "on")
            else:
                value = self.type(raw)
        except (TypeError, ValueError):
            raise TiletuneError(
                f"strategy {strategy}: option {self.name}={raw!r} is not a valid {self.type.__name__}"
            ) from None
        if self.choices is not None and value not in self.choices:
            raise TiletuneError(
                f"strategy {strategy}: option {self.name}={value!r} not in {list(self.choices)}"
            )
        if self.check is not None and not self.check(value):
            raise TiletuneError(f"strategy {strategy}: option {self.name}={value!r}: {self.check_help}")
        return value


def with_default(options: tuple[Option, ...], name: str, default: Any) -> tuple[Option, ...]:
    """The same options with a different default for ``name`` (for a variant of a strategy)."""
    if name not in {o.name for o in options}:
        raise ValueError(f"no option {name!r}")
    return tuple(dataclasses.replace(o, default=default) if o.name == name else o for o in options)


@dataclass
class TuneContext:
    """What a strategy may know beyond the space, all optional: the workload, the target, a
    HardwareSpec, and a feature extractor (config list -> 2-D array) that the loop provides."""

    workload: Any = None
    target: Any = None
    hardware: Any = None
    featurize: Callable[[str, Sequence[Config]], np.ndarray] | None = None
    extras: dict = field(default_factory=dict)


class Strategy(ABC):
    """Base class. Subclasses set ``name``, ``summary`` and ``options``; implement ask/tell."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    options: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, space: Space, *, seed: int = 0, context: TuneContext | None = None, **options: Any):
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.context = context or TuneContext()
        declared = {o.name: o for o in self.options}
        unknown = sorted(set(options) - set(declared))
        if unknown:
            raise TiletuneError(
                f"strategy {self.name}: unknown option(s) {', '.join(unknown)}; accepted: "
                + (", ".join(f"{o.name} (default {o.default})" for o in self.options) or "none")
            )
        self.opts: dict[str, Any] = {}
        for o in self.options:
            self.opts[o.name] = o.parse(options[o.name], self.name) if o.name in options else o.default

    @abstractmethod
    def ask(self, n: int) -> list[Config]:
        """Up to n configurations to measure next; [] when the strategy has nothing more."""

    @abstractmethod
    def tell(self, trials: Sequence[Trial]) -> None:
        """Results for configurations asked before."""


_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    if not cls.name:
        raise ValueError(f"{cls} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def registry() -> dict[str, type[Strategy]]:
    from . import _load_all

    _load_all()
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> type[Strategy]:
    reg = registry()
    if name not in reg:
        raise TiletuneError(f"unknown strategy {name!r}; registered: {', '.join(reg)}")
    return reg[name]


def create(name: str, space: Space, *, seed: int = 0, context: TuneContext | None = None,
           options: dict[str, Any] | None = None) -> Strategy:
    return get(name)(space, seed=seed, context=context, **(options or {}))


def parse_options(items: Sequence[str]) -> dict[str, str]:
    """``--option name=value`` (repeatable) -> dict."""
    out = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise TiletuneError(f"bad --option {item!r}: expected name=value")
        out[name.strip()] = value.strip()
    return out
