"""Search strategies, one module each, registered by name.

To add one: write ``tiletune/strategies/<name>.py`` with a ``@register`` Strategy subclass and add the
module name to ``_MODULES``. The conformance suite (tests/test_strategy_conformance.py) then runs on it.
"""
from __future__ import annotations

import importlib

from .base import Option, Strategy, Trial, TuneContext, create, get, parse_options, register, registry

_MODULES = ["random_search", "grid", "gensor", "roller", "gbfs", "na2c", "rnn", "xgb", "ga", "dgd", "evo"]
_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for m in _MODULES:
        importlib.import_module(f"{__name__}.{m}")


__all__ = ["Option", "Strategy", "Trial", "TuneContext", "create", "get", "parse_options", "register", "registry"]
