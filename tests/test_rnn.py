"""RNN controller baseline: knob-by-knob sampling, REINFORCE learning on a synthetic cost, determinism."""
import math

import numpy as np
import pytest
import torch

from tiletune.measure import FunctionMeasurer
from tiletune.strategies import Trial, create
from tiletune.tune import tune

from .conftest import bowl_cost, bowl_space
from .test_na2c import gemm_cost, gemm_space


def test_rnn_learns_to_propose_cheaper_configurations():
    space = gemm_space()
    cost = gemm_cost(space)
    m = FunctionMeasurer(cost)
    r = tune(space=space, strategy=create("rnn", space, seed=1), measurer=m, workload="synthetic", flops=1,
             trials=400, batch_size=8)
    costs = np.array([cost(c) for c in m.calls])
    assert costs[-80:].mean() < 0.7 * costs[:80].mean()  # the controller moved towards cheap tilings
    assert r.best.median_s < 2e-3  # optimum 1e-3; a random configuration costs ~12e-3 on average


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_samples_are_legal_distinct_and_cover_every_knob(cell):
    space = bowl_space()
    s = create("rnn", space, seed=0, options={"cell": cell})
    seen = []
    for _ in range(5):
        batch = s.ask(16)
        assert len(batch) == 16
        seen += batch
        s.tell([Trial(c, bowl_cost(space)(c)) for c in batch])
    assert len(set(seen)) == len(seen) and all(space.is_legal(c) for c in seen)


def test_reinforce_raises_the_probability_of_rewarded_choices():
    space = bowl_space()
    s = create("rnn", space, seed=0, options={"lr": 0.05, "entropy": 0.0})
    good = space.get(0)
    bad = [space.get(i) for i in range(150, 157)]

    def logp(c):
        choices = np.asarray([s._choices(c)])
        with torch.no_grad():
            x, state = s.controller._init(1)
            total = 0.0
            for k, head in enumerate(s.controller.heads):
                h, state = s.controller._step(x, state)
                total += float(torch.log_softmax(head(h), 1)[0, choices[0, k]])
                x = s.controller.embed[k](torch.from_numpy(choices[:, k]))
        return total

    before = logp(good)
    for _ in range(10):
        s.tell([Trial(good, 1e-3)] + [Trial(c, 1e-2) for c in bad])
    assert logp(good) > before + 1.0
    assert s.baseline is not None and 0 < s.baseline < 1


def test_failures_only_give_no_update_and_no_crash():
    space = bowl_space()
    s = create("rnn", space, seed=0)
    batch = s.ask(8)
    s.tell([Trial(c, math.inf, "build-error") for c in batch])
    assert s.baseline is None
    assert len(s.ask(8)) == 8


def test_falls_back_to_random_unvisited_when_the_space_is_nearly_exhausted():
    space = bowl_space()
    s = create("rnn", space, seed=0, options={"tries": 1})
    got = []
    while True:
        b = s.ask(50)
        if not b:
            break
        got += b
        s.tell([Trial(c, 1.0) for c in b])
    assert sorted(got) == sorted(space.get(i) for i in range(space.size))
    assert s.fallbacks > 0
