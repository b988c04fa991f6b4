import math
import os

import numpy as np
import pytest

from tiletune.space import Space
from tiletune.workloads.base import Axis


def bowl_space() -> Space:
    """A small GEMM-like space (m=16, n=16 in 2 levels; k=8 in 2 levels; unroll choice): 5*5*4*3 = 300."""
    axes = [Axis("m", 16, "S"), Axis("n", 16, "S"), Axis("k", 8, "R")]
    return Space.from_axes(axes, levels=(2, 2), choices={"unroll": (0, 16, 64)})


def bowl_cost(space: Space):
    """A smooth cost with one optimum: inner tiles m=4, n=8, k=2, unroll=16."""
    target = {"tile_m": 4, "tile_n": 8, "tile_k": 2}

    def cost(c):
        d = space.to_dict(c)
        s = 1.0
        for name, t in target.items():
            s += (math.log2(d[name][-1]) - math.log2(t)) ** 2
        s += 0.5 * abs(space.knobs[3].index(d["unroll"]) - 1)
        return s * 1e-3

    return cost


@pytest.fixture
def space():
    return bowl_space()


@pytest.fixture(autouse=True, scope="session")
def _session_tuning_database(tmp_path_factory):
    """The tuning database and compiled-graph cache (TILETUNE_CACHE_DIR, ``tiletune.db``) of the whole run, for
    the fixtures of wider scope, in a temporary directory: no test writes into ~/.cache/tiletune."""
    old = os.environ.get("TILETUNE_CACHE_DIR")
    os.environ["TILETUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("tiletune-cache-session"))
    yield
    if old is None:
        os.environ.pop("TILETUNE_CACHE_DIR", None)
    else:
        os.environ["TILETUNE_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _own_tuning_database(_session_tuning_database, tmp_path_factory, monkeypatch):
    """Each test's own tuning database (a fresh temporary TILETUNE_CACHE_DIR): none sees another test's kernels."""
    monkeypatch.setenv("TILETUNE_CACHE_DIR", str(tmp_path_factory.mktemp("tiletune-cache")))


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A fresh HOME for a test module (so the PrimFunc cache, ~/.cache/tiletune/primfuncs, is the module's own),
    set before its workers start: they find PrimFunc workloads by key through it."""
    old = os.environ.get("HOME")
    new = tmp_path_factory.mktemp("home")
    os.environ["HOME"] = str(new)
    yield new
    if old is None:
        del os.environ["HOME"]
    else:
        os.environ["HOME"] = old
