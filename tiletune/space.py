"""Tiling spaces derived from a compute's axes.

Every spatial axis is split into ``Ls`` levels and every reduction axis into ``Lr`` levels with perfect
factors (product = extent); a few categorical knobs (unroll depth) may be added. A point is a
``Config``: a frozen, hashable tuple with one value per knob (a tuple of factors, outermost level first,
for split knobs; a value for choice knobs).

The space gives what the strategies need and nothing TVM: exact size, a bijection Config <-> integer
index (mixed radix, first knob most significant), uniform sampling, the G-BFS/N-A2C actions (move one
prime factor p of an axis from level j to level i: s[i] <- p s[i], s[j] <- s[j] / p; on powers of two
these are exactly the paper's x2 / /2 actions) and the n-hop neighbours of TVM-AF-DS (change n
coordinates to the adjacent allowed value; a split knob of L levels has L-1 coordinates, the tile sizes
of its inner levels, each ranging over the divisors of the extent, and its outermost level absorbs the
rest; a choice knob is one coordinate).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .errors import TiletuneError
from .workloads.base import Axis

DEFAULT_LEVELS = (4, 2)  # (Ls, Lr): Ansor's CPU structure S S R S R S
DEFAULT_UNROLL = (0, 16, 64, 512)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            out.append(p)
            while n % p == 0:
                n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def factorizations(n: int, levels: int) -> list[tuple[int, ...]]:
    """All ordered tuples of ``levels`` positive integers whose product is n, sorted."""
    if levels == 1:
        return [(n,)]
    out = []
    for d in divisors(n):
        for rest in factorizations(n // d, levels - 1):
            out.append((d,) + rest)
    return sorted(out)


@dataclass(frozen=True)
class SplitKnob:
    name: str
    axis: str
    extent: int
    levels: int
    kind: str  # 'S' or 'R'

    @cached_property
    def options(self) -> tuple[tuple[int, ...], ...]:
        return tuple(factorizations(self.extent, self.levels))

    @cached_property
    def _pos(self) -> dict[tuple[int, ...], int]:
        return {o: i for i, o in enumerate(self.options)}

    @cached_property
    def divisors(self) -> tuple[int, ...]:
        return tuple(divisors(self.extent))

    @cached_property
    def primes(self) -> tuple[int, ...]:
        return tuple(prime_factors(self.extent))

    def index(self, value: Any) -> int:
        try:
            return self._pos[tuple(value)]
        except (KeyError, TypeError):
            raise TiletuneError(
                f"knob {self.name}: {value!r} is not a {self.levels}-level split of {self.extent}"
            ) from None

    def __len__(self) -> int:
        return len(self.options)

    def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
        return self.options[int(rng.integers(len(self.options)))]


@dataclass(frozen=True)
class ChoiceKnob:
    name: str
    values: tuple

    def index(self, value: Any) -> int:
        try:
            return self.values.index(value)
        except ValueError:
            raise TiletuneError(f"knob {self.name}: {value!r} is not one of {list(self.values)}") from None

    @property
    def options(self) -> tuple:
        return self.values

    def __len__(self) -> int:
        return len(self.values)

    def sample(self, rng: np.random.Generator):
        return self.values[int(rng.integers(len(self.values)))]


Knob = SplitKnob | ChoiceKnob


@dataclass(frozen=True, order=True)
class Config:
    """One point of a space: one value per knob, in the space's knob order."""

    values: tuple

    def __iter__(self):
        return iter(self.values)

    def __getitem__(self, i: int):
        return self.values[i]


@dataclass(frozen=True)
class Action:
    """A G-BFS / N-A2C action. For a split knob: s[grow] <- p s[grow], s[shrink] <- s[shrink] / p.
    For a choice knob: move to the value ``grow`` positions away (+1 or -1); shrink and p are unused."""

    knob: int
    grow: int
    shrink: int
    p: int


class Space:
    """The tiling space of a workload: split knobs (one per axis) and choice knobs."""

    def __init__(self, knobs: Sequence[Knob], constraint: Callable[["Space", Config], bool] | None = None):
        if not knobs:
            raise TiletuneError("a space needs at least one knob")
        names = [k.name for k in knobs]
        if len(set(names)) != len(names):
            raise TiletuneError(f"duplicate knob names: {names}")
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self.constraint = constraint
        self._radix = [len(k) for k in self.knobs]

    # ---- construction ------------------------------------------------------------------------------
    @classmethod
    def from_axes(
        cls,
        axes: Sequence[Axis],
        levels: tuple[int, int] | dict[str, int] | None = None,
        choices: dict[str, Sequence] | None = None,
    ) -> "Space":
        """Split every spatial axis into Ls levels and every reduction axis into Lr levels.

        ``levels`` is (Ls, Lr) or a per-axis dict; ``choices`` adds categorical knobs, e.g.
        {"unroll": (0, 16, 64, 512)}.
        """
        levels = DEFAULT_LEVELS if levels is None else levels
        knobs: list[Knob] = []
        for a in axes:
            if isinstance(levels, dict):
                if a.name not in levels:
                    raise TiletuneError(f"--levels gives no level count for axis {a.name!r}; axes: "
                                        + ", ".join(x.name for x in axes))
                L = levels[a.name]
            else:
                L = levels[0] if a.kind == "S" else levels[1]
            if not isinstance(L, int) or L < 1:
                raise TiletuneError(f"levels for axis {a.name} must be a positive integer, got {L!r}")
            knobs.append(SplitKnob(f"tile_{a.name}", a.name, a.extent, L, a.kind))
        if isinstance(levels, dict):
            unknown = set(levels) - {a.name for a in axes}
            if unknown:
                raise TiletuneError(f"--levels names unknown axes {sorted(unknown)}; axes: "
                                    + ", ".join(x.name for x in axes))
        for name, vals in (choices or {}).items():
            knobs.append(ChoiceKnob(name, tuple(vals)))
        return cls(knobs)

    # ---- size and bijection -------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return math.prod(self._radix)

    def __len__(self) -> int:
        return self.size

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    @property
    def split_knobs(self) -> list[tuple[int, SplitKnob]]:
        return [(i, k) for i, k in enumerate(self.knobs) if isinstance(k, SplitKnob)]

    def index(self, config: Config) -> int:
        idx = 0
        for k, v, r in zip(self.knobs, config.values, self._radix):
            idx = idx * r + k.index(v)
        return idx

    def get(self, index: int) -> Config:
        if not 0 <= index < self.size:
            raise TiletuneError(f"index {index} outside the space [0, {self.size})")
        vals = []
        for k, r in zip(reversed(self.knobs), reversed(self._radix)):
            index, i = divmod(index, r)
            vals.append(k.options[i])
        return Config(tuple(reversed(vals)))

    def __contains__(self, config: object) -> bool:
        return isinstance(config, Config) and self.is_legal(config)

    def is_legal(self, config: Config) -> bool:
        """The paper's legitimacy J: every value allowed, every split exact, constraints met."""
        if len(config.values) != len(self.knobs):
            return False
        for k, v in zip(self.knobs, config.values):
            try:
                k.index(v)
            except TiletuneError:
                return False
        return self.allows(config)

    def allows(self, config: Config) -> bool:
        """The space's constraint alone (True without one), for configurations made of the knobs' own values
        (``get``, ``sample``, moves)."""
        return self.constraint is None or bool(self.constraint(self, config))

    def remaining(self, exclude: Iterable[Config]) -> list[Config]:
        """Every configuration not in ``exclude`` that the constraint allows, in index order (it enumerates
        the whole space: for small ones)."""
        excluded = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
        return [c for c in map(self.get, range(self.size)) if c not in excluded and self.allows(c)]

    # ---- sampling ---------------------------------------------------------------------------------
    def sample(self, rng: np.random.Generator) -> Config:
        """Uniform over the space (independent uniform knobs), honouring the constraint by rejection."""
        for _ in range(1000):
            c = Config(tuple(k.sample(rng) for k in self.knobs))
            if self.allows(c):
                return c
        raise TiletuneError("could not sample a configuration that meets the space's constraint")

    def sample_unique(self, rng: np.random.Generator, n: int, exclude: Iterable[Config] = ()) -> list[Config]:
        seen = set(exclude)
        out: list[Config] = []
        tries = 0
        while len(out) < n and tries < 50 * n + 100:
            tries += 1
            c = self.sample(rng)
            if c not in seen:
                seen.add(c)
                out.append(c)
        return out

    # ---- G-BFS / N-A2C actions ---------------------------------------------------------------------
    @cached_property
    def actions(self) -> tuple[Action, ...]:
        """The fixed action set: for every split knob, every ordered pair of levels i != j and every
        prime p of the extent; for every choice knob, +1 and -1."""
        acts: list[Action] = []
        for ki, k in enumerate(self.knobs):
            if isinstance(k, SplitKnob):
                for p in k.primes:
                    for i in range(k.levels):
                        for j in range(k.levels):
                            if i != j:
                                acts.append(Action(ki, i, j, p))
            else:
                acts += [Action(ki, +1, -1, 0), Action(ki, -1, -1, 0)]
        return tuple(acts)

    def step(self, config: Config, action: Action) -> Config | None:
        """s' = step(s, a); None when s' is not legitimate."""
        k = self.knobs[action.knob]
        vals = list(config.values)
        if isinstance(k, SplitKnob):
            f = list(vals[action.knob])
            if f[action.shrink] % action.p:
                return None
            f[action.grow] *= action.p
            f[action.shrink] //= action.p
            vals[action.knob] = tuple(f)
        else:
            i = k.index(vals[action.knob]) + action.grow
            if not 0 <= i < len(k):
                return None
            vals[action.knob] = k.values[i]
        new = Config(tuple(vals))
        return new if self.allows(new) else None

    def neighbours(self, config: Config) -> list[Config]:
        """g(s): the legitimate states one action away (distinct, in action order)."""
        out, seen = [], set()
        for a in self.actions:
            n = self.step(config, a)
            if n is not None and n not in seen:
                seen.add(n)
                out.append(n)
        return out

    def untiled(self) -> Config:
        """The paper's s0 = [[m,1,1,1],[k,1],[n,1,1,1]]: every extent in the outermost level, choice
        knobs at their first value."""
        vals = []
        for k in self.knobs:
            if isinstance(k, SplitKnob):
                vals.append((k.extent,) + (1,) * (k.levels - 1))
            else:
                vals.append(k.values[0])
        return Config(tuple(vals))

    # ---- TVM-AF-DS hop neighbours ------------------------------------------------------------------
    @cached_property
    def coordinates(self) -> tuple[tuple[int, int], ...]:
        """(knob, level) pairs that a hop can change; level -1 for a choice knob."""
        out = []
        for ki, k in enumerate(self.knobs):
            if isinstance(k, SplitKnob):
                out += [(ki, lv) for lv in range(1, k.levels)]
            else:
                out.append((ki, -1))
        return tuple(out)

    def _shift(self, vals: list, coord: tuple[int, int], d: int) -> bool:
        ki, lv = coord
        k = self.knobs[ki]
        if lv < 0:
            i = k.index(vals[ki]) + d
            if not 0 <= i < len(k):
                return False
            vals[ki] = k.values[i]
            return True
        f = list(vals[ki])
        divs = k.divisors
        i = divs.index(f[lv]) + d
        if not 0 <= i < len(divs):
            return False
        f[lv] = divs[i]
        inner = math.prod(f[1:])
        if k.extent % inner:
            return False
        f[0] = k.extent // inner
        vals[ki] = tuple(f)
        return True

    def hop_neighbours(self, config: Config, n: int) -> list[Config]:
        """Configurations that differ from ``config`` in exactly n coordinates, each moved to the
        adjacent allowed value (e.g. 6 one-hop, 12 two-hop and 8 three-hop for 3 coordinates with room
        on both sides)."""
        out, seen = [], {config}
        for coords in itertools.combinations(self.coordinates, n):
            for dirs in itertools.product((-1, 1), repeat=n):
                vals = list(config.values)
                if all(self._shift(vals, c, d) for c, d in zip(coords, dirs)):
                    new = Config(tuple(vals))
                    if new not in seen and self.allows(new):
                        seen.add(new)
                        out.append(new)
        return out

    # ---- encodings and serialisation -------------------------------------------------------------
    def encode(self, config: Config) -> np.ndarray:
        """A fixed-length float vector for any space: log(factor)/log(extent) per split level, the
        normalised position for a choice knob."""
        feats: list[float] = []
        for k, v in zip(self.knobs, config.values):
            if isinstance(k, SplitKnob):
                denom = math.log(k.extent) if k.extent > 1 else 1.0
                feats += [math.log(f) / denom for f in v]
            else:
                feats.append(k.index(v) / max(1, len(k) - 1))
        return np.asarray(feats, dtype=np.float32)

    @property
    def encoding_size(self) -> int:
        return sum(k.levels if isinstance(k, SplitKnob) else 1 for k in self.knobs)

    def to_dict(self, config: Config) -> dict[str, Any]:
        return {k.name: (list(v) if isinstance(k, SplitKnob) else v) for k, v in zip(self.knobs, config.values)}

    def from_dict(self, d: dict[str, Any]) -> Config:
        if not isinstance(d, dict):
            raise TiletuneError(f"a configuration must be a JSON object, got {d!r}")
        missing = [k.name for k in self.knobs if k.name not in d]
        extra = sorted(set(d) - set(self.names))
        if missing or extra:
            raise TiletuneError(f"configuration {d} does not fit the space: missing {missing}, unknown {extra}; "
                                f"knobs: {self.names}")
        vals = []
        for k in self.knobs:
            v = d[k.name]
            v = tuple(v) if isinstance(k, SplitKnob) else v
            k.index(v)
            vals.append(v)
        return Config(tuple(vals))

    def describe(self) -> str:
        lines = []
        for k in self.knobs:
            if isinstance(k, SplitKnob):
                lines.append(f"{k.name:12s} split {k.axis}={k.extent} ({'spatial' if k.kind == 'S' else 'reduction'}) "
                             f"into {k.levels} levels: {len(k)} options")
            else:
                lines.append(f"{k.name:12s} choice {list(k.values)}: {len(k)} options")
        factor = math.prod(len(k) for k in self.knobs if isinstance(k, SplitKnob))
        lines.append(f"size: {self.size} configurations ({factor} from the tile factors alone)")
        if self.constraint is not None and hasattr(self.constraint, "describe"):
            lines.append(self.constraint.describe())
        return "\n".join(lines)


def parse_levels(text: str | None) -> tuple[int, int] | dict[str, int] | None:
    """``--levels``: 'Ls,Lr' (e.g. '4,2') or per axis 'm=4,n=4,k=2'."""
    if text is None:
        return None
    try:
        if "=" in text:
            out = {}
            for item in text.split(","):
                name, _, v = item.partition("=")
                out[name.strip()] = int(v)
            return out
        a, b = (int(x) for x in text.split(","))
        return (a, b)
    except ValueError:
        raise TiletuneError(f"bad --levels {text!r}: expected 'Ls,Lr' such as '4,2' or per axis such as "
                            "'m=4,n=4,k=2'") from None
