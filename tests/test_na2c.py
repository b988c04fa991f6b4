"""N-A2C (Zhang et al., Algorithm 2): episodes from the centre, epsilon = probability of following pi,
memory of transitions, the loop guard, T schedules, determinism, improvement on a synthetic cost."""
import math

import numpy as np
import pytest
import torch

from tiletune.measure import FunctionMeasurer
from tiletune.space import Space
from tiletune.strategies import Trial, create
from tiletune.strategies.na2c import inverse_actions
from tiletune.tune import tune
from tiletune.workloads.base import Axis

from .conftest import bowl_cost, bowl_space


def gemm_space() -> Space:
    """64^3 GEMM-like space with the paper's 4/2/4 levels: 84 * 84 * 7 = 49392 states."""
    return Space.from_axes([Axis("m", 64, "S"), Axis("n", 64, "S"), Axis("k", 64, "R")], levels=(4, 2))


def gemm_cost(space: Space):
    """A smooth synthetic cost: register tile m3 = 4, n3 = 8; L1 tiles m2 = n2 = 2; k1 = 8; m0 = 2."""

    def cost(c):
        d = space.to_dict(c)
        m, n, k = d["tile_m"], d["tile_n"], d["tile_k"]
        s = 1.0 + (math.log2(m[3]) - 2) ** 2 + (math.log2(n[3]) - 3) ** 2
        s += 0.5 * (math.log2(m[2]) - 1) ** 2 + 0.5 * (math.log2(n[2]) - 1) ** 2
        s += 0.3 * (math.log2(k[1]) - 3) ** 2 + 0.2 * (math.log2(m[0]) - 1) ** 2
        return s * 1e-3

    return cost


def test_na2c_improves_on_a_synthetic_cost():
    space = gemm_space()
    cost = gemm_cost(space)
    s0_cost = cost(space.untiled())
    bests, random_bests = [], []
    for seed in range(2):
        m = FunctionMeasurer(cost)
        r = tune(space=space, strategy=create("na2c", space, seed=seed, options={"start": "untiled"}), measurer=m,
                 workload="synthetic", flops=1, trials=120, batch_size=8)
        bests.append(r.best.median_s)
        m2 = FunctionMeasurer(cost)
        r2 = tune(space=space, strategy=create("random", space, seed=seed), measurer=m2, workload="synthetic",
                  flops=1, trials=120, batch_size=8)
        random_bests.append(r2.best.median_s)
    assert max(bests) < s0_cost / 10  # from the untiled start to within 1.5x of the optimum (1e-3)
    assert max(bests) <= 1.5e-3
    assert np.mean(bests) < np.mean(random_bests)


def test_epsilon_is_the_probability_of_following_the_policy(monkeypatch):
    space = bowl_space()
    cost = bowl_cost(space)
    for eps, expect_policy in ((0.0, False), (1.0, True)):
        s = create("na2c", space, seed=0, options={"epsilon": eps, "start_sweep": 0})  # 4 starts, then walks
        calls = []
        real = s.nets.logits
        monkeypatch.setattr(s.nets, "logits", lambda x: calls.append(1) or real(x))
        s.tell([Trial(c, cost(c)) for c in s.ask(4)])
        s.ask(6)
        assert bool(calls) == expect_policy


def test_first_batch_is_s0_and_walks_stay_within_T_steps_of_the_centre():
    space = bowl_space()
    cost = bowl_cost(space)
    s = create("na2c", space, seed=2, options={"T": 2, "start": "untiled"})
    s0 = space.untiled()
    assert s.ask(8) == [s0]
    s.tell([Trial(s0, cost(s0))])
    batch = s.ask(8)
    within = {s0}
    for _ in range(2):
        within |= {n for c in within for n in space.neighbours(c)}
    assert len(batch) == 8 and set(batch) <= within and s0 not in batch
    assert all(len(w) == 3 for w in s.walked)  # (s, a, s') with s' = step(s, a)
    assert all(space.step(a, space.actions[i]) == b for a, i, b in s.walked)


def test_centre_moves_to_the_best_state():
    space = bowl_space()
    s = create("na2c", space, seed=0)
    s0 = space.untiled()
    s.ask(4)
    s.tell([Trial(s0, 5.0)])
    batch = s.ask(4)
    s.tell([Trial(c, 4.0 - 0.5 * i) for i, c in enumerate(batch)])
    assert s.s0 == batch[-1] == s.s_star and s.cost_min == 4.0 - 0.5 * (len(batch) - 1)
    assert s.H_v[s0] == 5.0 and all(c in s.H_v for c in batch)


def test_memory_stores_every_predecessor_of_a_measured_state():
    space = bowl_space()
    s = create("na2c", space, seed=0, options={"memory": 10_000, "train_steps": 0, "start": "untiled"})
    s0 = space.untiled()
    s.ask(1)
    s.tell([Trial(s0, 2.0)])
    assert len(s.M) == len(s.space.neighbours(s0)) == 4
    # reward r(s, a) = 1 / cost(s'); s' = step(s, a) for every stored (s, a)
    assert all(m[2] == 0.5 for m in s.M)
    inv = inverse_actions(space)
    assert all(inv[inv[i]] == i for i in range(len(inv)))
    w = create("na2c", space, seed=0, options={"predecessors": "walked", "train_steps": 0, "start": "untiled"})
    w.ask(1)
    w.tell([Trial(s0, 2.0)])
    assert len(w.M) == 0  # s0 was not reached by a walked transition
    batch = w.ask(4)
    w.tell([Trial(c, 1.0) for c in batch])
    assert 4 <= len(w.M) <= len(w.walked)


def test_loop_guard_falls_back_to_random_unvisited_states_and_covers_the_space():
    axes = [Axis("m", 4, "S"), Axis("k", 2, "R")]
    space = Space.from_axes(axes, levels=(2, 2), choices={"unroll": (0, 16)})  # 3 * 2 * 2 = 12 states
    m = FunctionMeasurer(lambda c: 1.0 + space.index(c))
    s = create("na2c", space, seed=0, options={"T": 1, "max_walks": 5})
    r = tune(space=space, strategy=s, measurer=m, workload="synthetic", flops=1, trials=100, batch_size=5)
    assert r.stopped == "exhausted"
    assert sorted(m.calls) == sorted(space.get(i) for i in range(space.size))
    assert s.fallbacks > 0


def test_T_schedules():
    space = bowl_space()
    d = create("na2c", space, options={"T": 5, "T_mode": "decay", "T_min": 2, "T_every": 2})
    seen = []
    for ep in range(10):
        d.episode = ep
        seen.append(d._current_T())
    assert seen == [5, 5, 4, 4, 3, 3, 2, 2, 2, 2]
    g = create("na2c", space, options={"T": 2, "T_mode": "grow", "T_max": 4, "T_every": 1})
    seen = []
    for k in range(5):
        g.since_improvement = k
        seen.append(g._current_T())
    assert seen == [2, 3, 4, 4, 4]
    m = FunctionMeasurer(bowl_cost(space))
    r = tune(space=space, strategy=g, measurer=m, workload="synthetic", flops=1, trials=40, batch_size=4)
    assert r.trials == 40


def test_deterministic_and_leaves_torch_threads_alone():
    space = gemm_space()
    cost = gemm_cost(space)
    threads = torch.get_num_threads()
    runs = []
    for _ in range(2):
        m = FunctionMeasurer(cost)
        tune(space=space, strategy=create("na2c", space, seed=5), measurer=m, workload="synthetic", flops=1,
             trials=40, batch_size=8)
        runs.append(m.calls)
    assert runs[0] == runs[1]
    assert torch.get_num_threads() == threads
