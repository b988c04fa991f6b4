"""AutoTVM's GA tuner: generations of unmeasured configurations, elitism, evolution toward better
configurations, small spaces exhausted cleanly. (The conformance suite covers the common contract.)"""
import numpy as np

from tiletune.measure import FunctionMeasurer
from tiletune.strategies import Trial, create
from tiletune.tune import tune

from .conftest import bowl_cost, bowl_space


def test_generations_are_new_and_evolve():
    space = bowl_space()
    cost = bowl_cost(space)
    s = create("ga", space, seed=1, options={"pop_size": 20, "elite_num": 2})
    seen, gen_means = set(), []
    for _ in range(4):
        gen = []
        while True:
            batch = s.ask(6)
            assert batch
            gen += batch
            s.tell([Trial(c, cost(c)) for c in batch])
            if s.next == 0:  # the generation was scored and a new one bred
                break
        assert len(gen) == 20 and not (set(gen) & seen)
        seen.update(gen)
        gen_means.append(np.mean([cost(c) for c in gen]))
    assert len(s.elites) == 2
    assert min(gen_means[1:]) < gen_means[0]  # selection pressure improves the population


def test_failures_and_small_space():
    space = bowl_space()
    m = FunctionMeasurer(lambda c: "run-error" if space.index(c) % 2 else bowl_cost(space)(c))
    s = create("ga", space, seed=0, options={"pop_size": 64})
    r = tune(space=space, strategy=s, measurer=m, workload="synthetic", flops=1, trials=10_000, batch_size=16)
    assert r.stopped == "exhausted" and r.trials == space.size
    assert len(set(m.calls)) == space.size


def test_ga_beats_its_first_generation_on_bowl():
    space = bowl_space()
    cost = bowl_cost(space)
    m = FunctionMeasurer(cost)
    s = create("ga", space, seed=2, options={"pop_size": 16})
    tune(space=space, strategy=s, measurer=m, workload="synthetic", flops=1, trials=96, batch_size=8)
    first, rest = m.calls[:16], m.calls[16:]
    assert min(cost(c) for c in rest) <= min(cost(c) for c in first)
    assert np.mean(sorted(cost(c) for c in rest)[:16]) < np.mean([cost(c) for c in first])
