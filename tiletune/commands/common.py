"""Command-line pieces shared by the commands that measure (``tune``, ``table``, ``bench``): the
measurement flags, the strategy ``--option`` flag and the output flag, each defined once.

``--option`` takes ``STRATEGY.NAME=VALUE`` everywhere; ``NAME=VALUE`` (no strategy) applies to the one
strategy of a ``tune`` run, and in ``bench`` to every strategy of the run that declares an option NAME.
"""
from __future__ import annotations

import argparse
from typing import Sequence

from ..errors import TiletuneError
from ..measure.base import MeasureSettings
from ..measure.rpc import Tracker, check_tracker
from ..strategies import get

_DEFAULT = MeasureSettings()
OPTION_FORM = "[STRATEGY.]NAME=VALUE"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help unless the help already says its default, or there is
    none to say (None, False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def add_measure_arguments(p: argparse.ArgumentParser, *, batch_size: int | None = 8, rpc: bool = True) -> None:
    """--batch-size, --repeat, --min-repeat-ms, --build-timeout, --run-timeout, --cutoff (defaults:
    MeasureSettings') and, with ``rpc``, --rpc HOST:PORT:KEY (read with ``rpc_address``). ``batch_size``
    None: the strategy's own default."""
    p.add_argument("--batch-size", type=int, default=batch_size,
                   help="configurations measured per batch, built in parallel (default: " + (
                       "%(default)s)" if batch_size is not None else
                       "the strategy's: 16 for random and grid, which do not learn from results, else 8)"))
    p.add_argument("--repeat", type=int, default=_DEFAULT.repeat,
                   help="timing samples per configuration (default: %(default)s)")
    p.add_argument("--min-repeat-ms", type=int, default=_DEFAULT.min_repeat_ms,
                   help="minimum duration of one timing sample in ms (default: %(default)s)")
    p.add_argument("--build-timeout", type=float, default=_DEFAULT.build_timeout,
                   help="seconds per build (default: %(default)g)")
    p.add_argument("--run-timeout", type=float, default=_DEFAULT.run_timeout,
                   help="seconds per run (default: %(default)g)")
    p.add_argument("--cutoff", type=float, default=_DEFAULT.cutoff,
                   help="a checked kernel whose warm-up runs more than this many times slower than the best "
                        "measured so far keeps its warm-up as its only sample instead of --repeat samples; "
                        "0 = always take every sample (default: %(default)g)")
    if rpc:
        p.add_argument("--rpc", default=None, metavar="HOST:PORT:KEY",
                       help="measure on the devices registered with this TVM RPC tracker under KEY (kernels are "
                            "built here for --target, the device's target; see 'tiletune rpc')")


def measure_settings(args: argparse.Namespace) -> MeasureSettings:
    """The MeasureSettings of the flags added by ``add_measure_arguments``; a TiletuneError names a flag
    out of range (``--batch-size`` included), so commands call it before starting anything."""
    for flag, value, ok, accepted in (
            ("--batch-size", args.batch_size, args.batch_size is None or args.batch_size >= 1, ">= 1"),
            ("--repeat", args.repeat, args.repeat >= 1, ">= 1"),
            ("--min-repeat-ms", args.min_repeat_ms, args.min_repeat_ms >= 0, ">= 0"),
            ("--build-timeout", args.build_timeout, args.build_timeout > 0, "> 0 seconds"),
            ("--run-timeout", args.run_timeout, args.run_timeout > 0, "> 0 seconds"),
            ("--cutoff", args.cutoff, args.cutoff == 0 or args.cutoff > 1, "0 (off) or > 1")):
        if not ok:
            raise TiletuneError(f"{flag} must be {accepted}, got {value:g}")
    return MeasureSettings(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                           build_timeout=args.build_timeout, run_timeout=args.run_timeout, cutoff=args.cutoff)


def rpc_address(args: argparse.Namespace) -> str | None:
    """``--rpc`` checked (``HOST:PORT:KEY``, a tracker there that lists servers with KEY; a TiletuneError
    otherwise), or None."""
    text = getattr(args, "rpc", None)
    if text is None:
        return None
    tracker = Tracker.parse(text)
    check_tracker(tracker)
    return str(tracker)


def add_option_argument(p: argparse.ArgumentParser, help: str) -> None:
    """The repeatable ``--option/-O [STRATEGY.]NAME=VALUE`` flag (``args.option``: the raw items)."""
    p.add_argument("--option", "-O", action="append", default=[], metavar=OPTION_FORM, help=help)


def add_output_argument(p: argparse.ArgumentParser, *aliases: str, records: bool = False, **kwargs) -> None:
    """``-o/--output``, what the command writes; ``records=True`` (the output is a records file) also
    accepts ``-r/--records``; ``aliases``: older spellings kept working. ``kwargs`` go to ``add_argument``
    (dest, default, required, metavar, help)."""
    names = ["-o", "--output", *(["-r", "--records"] if records else []), *aliases]
    p.add_argument(*names, **kwargs)


def split_option(item: str) -> tuple[str | None, str, str]:
    """``'gbfs.rho=0.5'`` -> ``('gbfs', 'rho', '0.5')``; ``'rho=0.5'`` -> ``(None, 'rho', '0.5')``."""
    key, eq, value = item.partition("=")
    strategy, dot, name = key.strip().partition(".")
    if not dot:
        strategy, name = "", strategy
    if not eq or not name.strip() or (dot and not strategy):
        raise TiletuneError(f"bad --option {item!r}: expected {OPTION_FORM}, e.g. rho=0.5 or gbfs.rho=0.5")
    return (strategy or None), name.strip(), value.strip()


def options_for(items: Sequence[str], strategy: str) -> dict[str, str]:
    """The options of a run of ``strategy`` (``tune``): NAME=VALUE, or STRATEGY.NAME=VALUE naming it."""
    out: dict[str, str] = {}
    for item in items or ():
        owner, name, value = split_option(item)
        if owner is not None and owner != strategy:
            raise TiletuneError(f"--option {item!r} is for strategy {owner!r}, but this run uses {strategy!r}")
        out[name] = value
    return out


def options_by_strategy(items: Sequence[str], strategies: Sequence[str] | None = None) -> dict[str, dict]:
    """The options per strategy of a run of several (``bench``): STRATEGY.NAME=VALUE for that strategy;
    NAME=VALUE for the only strategy of ``strategies``, or for each of them that declares NAME (without
    ``strategies`` it is an error). Values are checked later, against each strategy's declared options."""
    out: dict[str, dict] = {}
    for item in items or ():
        owner, name, value = split_option(item)
        if owner is not None:
            owners = [owner]
        elif strategies is None:
            raise TiletuneError(f"bad --option {item!r}: expected STRATEGY.NAME=VALUE, e.g. gbfs.rho=0.5")
        elif len(strategies) == 1:
            owners = list(strategies)
        else:
            owners = [s for s in strategies if get(s).has_option(name)]
            if not owners:
                raise TiletuneError(f"--option {item!r}: none of the strategies {', '.join(strategies)} has an "
                                    f"option {name!r} (see 'tiletune strategies')")
        for s in owners:
            out.setdefault(s, {})[name] = value
    return out
