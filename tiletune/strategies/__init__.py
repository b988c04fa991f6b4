"""Search strategies, one module each, registered by name.

To add one: write ``tiletune/strategies/<name>.py`` with a ``@register`` Strategy subclass and add the
module name to ``base.MODULES``. The conformance suite (tests/test_strategy_conformance.py) then runs on it.
Pieces that several strategies share live outside the strategy modules: ``options`` (``Option``, the value
checks, the top-k options of the constructive strategies), ``starts`` (the start of the local searches),
``sampling`` (uniform samples of unvisited configurations), ``learned`` (the options and base of the searches
steered by a learned cost model), ``surrogate`` (their model: features + XGBoost + background rows for xgb, evo
and dgd), ``prior`` (the analytic prior among those background rows), ``torch_support``; below the strategies,
``tiletune.construct`` (Gensor's walk and Roller's tree: the constructions of the strategies gensor and roller and
of the constructive starts), ``tiletune.analytic`` (Gensor's eTIR state and analytic model, also Roller's, and
the tensor-core kernel's) and ``tiletune.cost_model`` (XGBoost, simulated annealing, transfer).
"""
from __future__ import annotations

from .base import GeneratorStrategy, Strategy, Trial, TuneContext, create, get, parse_options, register, registry
from .options import Option

__all__ = ["GeneratorStrategy", "Option", "Strategy", "Trial", "TuneContext", "create", "get", "parse_options",
           "register", "registry"]
