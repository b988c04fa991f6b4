"""The documented worked example of a new strategy (docs/strategies.md, "Writing a strategy") is real code:
it is executed here as a strategy module and put through the conformance checks every registered strategy
passes."""
import re
import sys
import types
from pathlib import Path

import pytest

from tiletune.strategies import base

from . import test_strategy_conformance as conformance

DOC = Path(__file__).resolve().parent.parent / "docs" / "strategies.md"


def _example_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    hill = [b for b in blocks if b.startswith("# tiletune/strategies/hill.py")]
    assert len(hill) == 1, f"the worked example (tiletune/strategies/hill.py) is missing from {DOC}"
    return hill[0]


@pytest.fixture()
def hill():
    """The example, loaded as tiletune.strategies.hill and registered for the test only."""
    mod = types.ModuleType("tiletune.strategies.hill")
    mod.__package__ = "tiletune.strategies"
    sys.modules[mod.__name__] = mod
    try:
        exec(compile(_example_source(), "docs/strategies.md:hill.py", "exec"), mod.__dict__)
        yield "hill"
    finally:
        base._REGISTRY.pop("hill", None)
        sys.modules.pop(mod.__name__, None)


@pytest.mark.parametrize("check", ["test_budget_kept_and_nothing_measured_twice", "test_errors_tolerated",
                                   "test_all_errors_do_not_crash", "test_seed_reproduces_run",
                                   "test_easy_optimum_found"])
def test_readme_strategy_passes_the_conformance_checks(hill, check):
    assert hill in base.registry()
    getattr(conformance, check)(hill)


def test_readme_strategy_options_are_checked(hill):
    from tiletune.errors import TiletuneError

    cls = base.get(hill)
    assert cls.check_options({"window": "8"}) == {"window": 8}
    with pytest.raises(TiletuneError, match="window"):
        cls.check_options({"window": "0"})
