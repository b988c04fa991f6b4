"""Strategy options as data: ``Option`` (name, default, help, type, checks), the value checks every strategy
shares, ``with_default`` for a variant of a strategy, and the options of the constructive strategies
(Gensor, Roller)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import TiletuneError


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


# ---- value checks: ``Option(..., **POSITIVE)`` ----------------------------------------------------------
def at_least(low: float) -> dict[str, Any]:
    """The check of an option whose value must be >= ``low``."""
    return dict(check=lambda v: v >= low, check_help=f"must be >= {low}")


def between(low: float, high: float) -> dict[str, Any]:
    """The check of an option whose value must lie in ``low``..``high`` (both included)."""
    return dict(check=lambda v: low <= v <= high, check_help=f"must be {low}..{high}")


POSITIVE = at_least(1)  # counts
NONNEGATIVE = at_least(0)
GREATER_THAN_ZERO = dict(check=lambda v: v > 0, check_help="must be > 0")  # real values (rates, temperatures)
PROBABILITY = dict(check=lambda v: 0 <= v <= 1, check_help="must be in [0, 1]")
DISCOUNT = dict(check=lambda v: 0 <= v < 1, check_help="must be in [0, 1)")


# ---- constructive strategies: top-k first, then more or stop --------------------------------------------
def topk_option(default: int) -> Option:
    """``k``: how many constructed configurations a constructive strategy measures first (Gensor, Roller)."""
    return Option("k", default, "how many constructed configurations to measure first (top-k)", int,
                  **between(1, 10))


def after_topk_option(rest: str) -> Option:
    """``after_topk``: after the top-k, go on with ``rest`` (what the strategy has next) or stop."""
    return Option("after_topk", "continue", f"after the top-k: continue with {rest}, or stop", str,
                  choices=("continue", "stop"))
