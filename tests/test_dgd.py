"""DGD (TVM-AF-DS Ansor-DS): windows of 3, hop order, moves, thresholds, restarts at local minima."""
import math

import numpy as np
import pytest

from tiletune.measure import FunctionMeasurer
from tiletune.space import Space
from tiletune.strategies import Trial, TuneContext, create
from tiletune.strategies.dgd import DGD
from tiletune.tune import tune
from tiletune.workloads import parse
from tiletune.workloads.base import Axis

from .conftest import bowl_cost, bowl_space


def line_space():
    """Two split knobs of 2 levels over 64 (inner tile in 1..64): 7 x 7 = 49 points, 2 coordinates."""
    return Space.from_axes([Axis("m", 64, "S"), Axis("n", 64, "S")], levels=(2, 2))


def inner(space, c):
    d = c if isinstance(c, dict) else space.to_dict(c)
    return int(math.log2(d["tile_m"][-1])), int(math.log2(d["tile_n"][-1]))


class Oracle:
    """Stands in for the XGBoost model: predicts the true performance (1 / cost) exactly."""

    def __init__(self, space, cost):
        self.space, self.cost = space, cost
        self.fitted = True

    def add(self, trials):
        pass

    def fit(self):
        pass

    def predict(self, configs):
        return np.array([1.0 / self.cost(c) for c in configs])

    def close(self):
        pass


def run(strategy, space, cost, trials, batch_size=8):
    m = FunctionMeasurer(cost)
    r = tune(space=space, strategy=strategy, measurer=m, workload="synthetic", flops=1, trials=trials,
             batch_size=batch_size)
    return r, m


def test_hop_neighbour_counts_as_in_paper():
    space = Space.from_axes([Axis("a", 32, "S"), Axis("b", 32, "S"), Axis("c", 32, "S")], levels=(2, 2))
    c = space.from_dict({"tile_a": [4, 8], "tile_b": [4, 8], "tile_c": [4, 8]})
    assert [len(space.hop_neighbours(c, n)) for n in (1, 2, 3)] == [6, 12, 8]
    assert {space.to_dict(x)["tile_a"][1] for x in space.hop_neighbours(c, 1)} == {4, 8, 16}


def test_windows_of_three_in_predicted_order_and_batches():
    space = line_space()
    cost = lambda c: 1.0 + sum((x - 3) ** 2 for x in inner(space, c))  # one optimum at (8, 8)
    s = DGD(space, seed=1, start="random", sample_size=4)
    s.model = Oracle(space, cost)
    r, m = run(s, space, cost, trials=40)
    sizes = []
    # every batch after the initial samples is one window (<= 3) or a start point (1)
    windows = [e[1] for e in s.events if e[0] == "window"]
    assert windows and all(1 <= len(w) <= 3 for w in windows)
    for w in windows:  # inside a window, best predicted first
        perf = [1 / cost(c) for c in w]
        assert perf == sorted(perf, reverse=True)
    assert r.best is not None and inner(space, r.best.config) == (3, 3)
    assert len(set(m.calls)) == len(m.calls)


def test_batches_are_the_windows():
    space = line_space()
    cost = lambda c: 1.0 + sum((x - 3) ** 2 for x in inner(space, c))
    s = DGD(space, seed=2, start="random", sample_size=5)
    s.model = Oracle(space, cost)
    sizes = []
    first = s.ask(8)
    assert len(first) == 5  # the initial samples
    s.tell([Trial(c, cost(c)) for c in first])
    for _ in range(10):
        got = s.ask(8)
        if not got:
            break
        sizes.append(len(got))
        s.tell([Trial(c, cost(c)) for c in got])
    assert sizes and max(sizes) <= 3
    # n smaller than a window: the window goes out over two asks, nothing lost or repeated
    s2 = DGD(space, seed=2, start="random", sample_size=0)
    s2.model = Oracle(space, cost)
    seen = []
    for _ in range(12):
        got = s2.ask(1)
        assert len(got) <= 1
        seen += got
        s2.tell([Trial(c, cost(c)) for c in got])
    assert len(seen) == len(set(seen)) == 12


def test_hop_order_one_hop_before_two_hops():
    """A point whose 1-hop neighbours are all worse but a 2-hop (diagonal) neighbour is better: the
    search scans n = 1 first, then n = 2, and moves there."""
    space = line_space()

    def cost(c):
        x, y = inner(space, c)
        if (x, y) == (4, 4):
            return 0.5
        return 1.0 + abs(x - 3) + abs(y - 3) if (x, y) != (3, 3) else 1.0

    start = space.from_dict({"tile_m": [8, 8], "tile_n": [8, 8]})  # inner (3, 3)
    s = DGD(space, seed=0, start="random", sample_size=0, hop_threshold=2, search_budget=1)
    s.model = Oracle(space, cost)
    s.random_sample_point = lambda: start if not s.events else None
    run(s, space, cost, trials=30)
    ev = [e for e in s.events if e[0] in ("window", "move")]
    one_hop = set(space.hop_neighbours(start, 1))
    two_hop = set(space.hop_neighbours(start, 2))
    assert set(ev[0][1]) <= one_hop  # first window: 1-hop
    first_two = next(i for i, e in enumerate(ev) if e[0] == "window" and set(e[1]) <= two_hop)
    assert all(set(e[1]) <= one_hop for e in ev[:first_two] if e[0] == "window")
    moves = [e[1] for e in s.events if e[0] == "move"]
    assert inner(space, moves[0]) == (4, 4)


def test_restart_at_local_minimum():
    """Two basins (inner tiles (1,1) and (5,5), the second deeper) separated by a ridge: from a start in
    the first basin the descent stops at its local minimum and restarts from a new random point."""
    space = line_space()

    def cost(c):
        x, y = inner(space, c)
        a = 1.0 + (x - 1) ** 2 + (y - 1) ** 2
        b = 0.5 + (x - 5) ** 2 + (y - 5) ** 2
        return min(a, b)

    s = DGD(space, seed=0, start="random", sample_size=0, hop_threshold=1)
    s.model = Oracle(space, cost)
    starts = iter([space.from_dict({"tile_m": [32, 2], "tile_n": [16, 4]}),  # (1, 2): basin a
                   space.from_dict({"tile_m": [4, 16], "tile_n": [2, 32]})])  # (4, 5): basin b
    s.random_sample_point = lambda: next(starts, None)
    r, m = run(s, space, cost, trials=49)
    kinds = [e[0] for e in s.events]
    mins = [inner(space, e[1]) for e in s.events if e[0] == "local_min"]
    assert kinds.count("start") == 2
    assert mins[0] == (1, 1) and mins[1] == (5, 5)  # the first descent ends in the local minimum
    assert kinds.index("local_min") < [i for i, k in enumerate(kinds) if k == "start"][1]
    assert inner(space, r.best.config) == (5, 5)


def test_early_stop_below_measured_threshold():
    """With measure_ratio = 1 a window worse than the best measured stops the n-hop scan at once."""
    space = line_space()
    cost = lambda c: 1.0 + sum((x - 3) ** 2 for x in inner(space, c))
    start = space.from_dict({"tile_m": [8, 8], "tile_n": [8, 8]})  # the optimum: nothing is better
    s = DGD(space, seed=0, start="random", sample_size=0, hop_threshold=1, measure_ratio=1.0, search_budget=1)
    s.model = Oracle(space, cost)
    s.random_sample_point = lambda: start if not s.events else None
    r, m = run(s, space, cost, trials=20)
    assert [e[0] for e in s.events].count("window") == 1 and len(m.calls) == 1 + 3
    # neighbours at half the best performance: below 0.6 too; with measure_ratio 0 the scan goes on
    # through the four 1-hop neighbours (window 3 + 1)
    s = DGD(space, seed=0, start="random", sample_size=0, hop_threshold=1, search_budget=1, measure_ratio=0.0)
    s.model = Oracle(space, cost)
    s.random_sample_point = lambda: start if not s.events else None
    r, m = run(s, space, cost, trials=20)
    assert len(m.calls) == 1 + 4


def test_score_threshold_cuts_the_window():
    space = line_space()
    cost = lambda c: 1.0 + 10 * sum((x - 3) ** 2 for x in inner(space, c))
    start = space.from_dict({"tile_m": [8, 8], "tile_n": [8, 8]})
    s = DGD(space, seed=0, start="random", sample_size=0, hop_threshold=1, search_budget=1, measure_ratio=0.0)
    s.model = Oracle(space, cost)
    s.random_sample_point = lambda: start if not s.events else None
    run(s, space, cost, trials=20)
    # all 1-hop neighbours predict 1/11 = the best score, so the whole window passes; none is better
    w = [e[1] for e in s.events if e[0] == "window"]
    assert len(w) == 2 and len(w[0]) == 3 and len(w[1]) == 1


def test_xgb_model_finds_optimum_on_bowl():
    space = bowl_space()
    cost = bowl_cost(space)
    s = create("dgd", space, seed=0, options={"sample_size": 16})
    r, m = run(s, space, cost, trials=120)
    best = min(cost(space.get(i)) for i in range(space.size))
    assert s.model.kind == "knob" and r.best.median_s == pytest.approx(best)


def test_dgd_af_with_a_workload_uses_the_analytical_features():
    wl = parse("gemm:M=32,N=32,K=16")
    space = Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16)})

    def cost(c):  # a stand-in for hardware: larger register tiles and fewer tasks than 2 cores cost time
        d = space.to_dict(c)
        reg = d["tile_m"][3] * d["tile_n"][3]
        return 1e-3 * (1 + abs(math.log2(reg) - 4)) * (2 if d["tile_m"][0] * d["tile_n"][0] < 2 else 1)

    s = create("dgd-af", space, seed=0, context=TuneContext(workload=wl, target={"kind": "llvm"}),
               options={"sample_size": 16})
    assert s.model.kind == "analytical" and s.model.features.dim == 7
    r, m = run(s, space, cost, trials=60)
    assert r.trials == 60 and s.model.fitted and r.best.median_s == pytest.approx(1e-3)
    # without a workload: the documented knob fallback, no error
    s2 = create("dgd-af", space, seed=0)
    assert s2.model.kind == "knob"
