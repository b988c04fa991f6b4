"""G-BFS (Zhang et al., Algorithm 1): best-first order, rho random neighbours, visited set, exhaustiveness."""
import json
import math

import pytest

from tiletune.errors import TiletuneError
from tiletune.measure import FunctionMeasurer
from tiletune.space import Space
from tiletune.strategies import Trial, create
from tiletune.strategies.gbfs import parse_rho
from tiletune.tune import tune
from tiletune.workloads.base import Axis

from .conftest import bowl_cost, bowl_space


def small_space(constraint=None) -> Space:
    sp = Space.from_axes([Axis("m", 8, "S"), Axis("k", 12, "R")], levels=(3, 2), choices={"unroll": (0, 16)})
    sp.constraint = constraint
    return sp


def reachable(space: Space, s0) -> set:
    seen, todo = {s0}, [s0]
    while todo:
        for n in space.neighbours(todo.pop()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def run_all(space, cost, **options):
    m = FunctionMeasurer(cost)
    r = tune(space=space, strategy=create("gbfs", space, seed=1, options=options), measurer=m,
             workload="synthetic", flops=1, trials=10 * space.size, batch_size=3)
    return r, m


@pytest.mark.parametrize("rho", ["all", "0"])
def test_rho_all_visits_every_reachable_state(rho):
    space = small_space()
    cost = lambda c: 1.0 + space.index(c) % 7  # noqa: E731 - bumpy, so the order is not trivial
    r, m = run_all(space, cost, rho=rho)
    assert r.stopped == "exhausted"  # the priority queue ran empty
    assert len(m.calls) == len(set(m.calls))
    assert set(m.calls) == reachable(space, space.untiled()) == {space.get(i) for i in range(space.size)}


def test_rho_all_with_a_constraint_visits_exactly_the_reachable_states():
    # legitimacy J: inner m tile at most 2 -> some legal states are only reachable through others
    space = small_space(lambda sp, c: c[0][1] * c[0][2] <= 2 or c[0][0] == 1)
    r, m = run_all(space, lambda c: 1.0, rho="all", start="untiled")
    legal = {space.get(i) for i in range(space.size) if space.is_legal(space.get(i))}
    reach = reachable(space, space.untiled())
    assert set(m.calls) == reach
    assert reach < legal  # the constraint leaves some legal states unreachable from s0


def test_first_ask_is_s0_then_best_first_expansion():
    space = bowl_space()
    s0 = space.untiled()
    g = create("gbfs", space, seed=0, options={"rho": "all", "start": "untiled"})
    assert g.ask(3) == [s0]
    g.tell([Trial(s0, 10.0)])
    first = g.ask(100)  # rho = all: B is every neighbour of s0
    assert sorted(first) == sorted(space.neighbours(s0))
    # make one of them clearly the best: it is popped next
    costs = {c: 5.0 + i for i, c in enumerate(first)}
    best = first[len(first) // 2]
    costs[best] = 1.0
    g.tell([Trial(c, costs[c]) for c in first])
    nxt = g.ask(100)
    expected = [c for c in space.neighbours(best) if c != s0 and c not in costs]
    assert set(nxt[:len(expected)]) == set(expected)  # B of the best state, whole, before any other pop
    assert not set(nxt) & ({s0} | set(first))  # visited states are never proposed again
    assert g.s_star == best and g.cost_min == 1.0


def test_rho_random_neighbours_and_carry_over_of_B():
    space = bowl_space()
    s0 = space.untiled()  # 4 neighbours: one move per split knob, unroll +1

    def first_B(seed, n):
        g = create("gbfs", space, seed=seed, options={"rho": 2, "start": "untiled"})
        g.ask(8)
        g.tell([Trial(s0, 1.0)])
        return g, g.ask(n)

    g, B = first_B(0, 1)  # one pop: B holds 2 random neighbours of s0, 1 handed out now
    assert len(B) == 1 and B[0] in space.neighbours(s0)
    g.tell([Trial(B[0], 0.5)])  # a better state is known now, but B is finished first
    rest = g.ask(1)
    assert len(rest) == 1 and rest[0] in space.neighbours(s0) and rest != B
    draws = {frozenset(first_B(seed, 2)[1]) for seed in range(8)}
    assert len(draws) > 1 and all(len(d) == 2 for d in draws)  # rho neighbours drawn at random (seeded)


def test_failed_states_are_expanded_last():
    space = bowl_space()
    s0 = space.untiled()
    g = create("gbfs", space, seed=0, options={"rho": "all", "start": "untiled"})
    g.ask(1)
    g.tell([Trial(s0, 1.0)])
    first = g.ask(100)
    failed = first[0]
    g.tell([Trial(failed, math.inf, "build-error")] + [Trial(c, 2.0 + i) for i, c in enumerate(first[1:])])
    order = [s for _, _, s in sorted(g.Q)]
    assert order[-1] == failed and order[0] == first[1]
    assert set(g.ask(1)) <= set(space.neighbours(first[1]))


def test_queue_empty_stops_search():
    space = bowl_space()
    g = create("gbfs", space, seed=0, options={"rho": 1, "start": "untiled"})
    m = FunctionMeasurer(bowl_cost(space))
    r = tune(space=space, strategy=g, measurer=m, workload="synthetic", flops=1, trials=1000, batch_size=4)
    # rho=1: each pop tests at most one new neighbour; the queue runs dry well before the space is covered
    assert r.stopped == "exhausted" and len(m.calls) < space.size


def test_start_options():
    space = bowl_space()
    s = space.get(17)
    g = create("gbfs", space, options={"start": json.dumps(space.to_dict(s))})
    assert g.ask(1) == [s]
    g = create("gbfs", space, seed=4, options={"start": "random"})
    assert space.is_legal(g.ask(1)[0])
    with pytest.raises(TiletuneError, match="untiled"):
        create("gbfs", space, options={"start": "nonsense"})
    with pytest.raises(TiletuneError, match="does not fit"):
        create("gbfs", space, options={"start": '{"tile_m": [4, 4]}'})


def test_rho_option_parsing():
    assert parse_rho("all") == 0 and parse_rho("ALL") == 0 and parse_rho("7") == 7
    with pytest.raises(TiletuneError, match="rho"):
        create("gbfs", bowl_space(), options={"rho": "-2"})
    with pytest.raises(TiletuneError, match="rho"):
        create("gbfs", bowl_space(), options={"rho": "many"})


def test_gbfs_finds_the_bowl_optimum_from_the_untiled_state():
    space = bowl_space()
    cost = bowl_cost(space)
    best = min(cost(space.get(i)) for i in range(space.size))
    m = FunctionMeasurer(cost)
    r = tune(space=space, strategy=create("gbfs", space, seed=0), measurer=m, workload="synthetic", flops=1,
             trials=80, batch_size=5)
    assert math.isclose(r.best.median_s, best)
