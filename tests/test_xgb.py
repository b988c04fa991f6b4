"""AutoTVM-style XGBoost tuner: cost model losses, simulated annealing, model-guided search beats
random on a synthetic cost, transfer learning warm start. Knob features only (no TVM here)."""
import json
import math
import warnings

import numpy as np
import pytest

from tiletune.cost_model.sa import SimulatedAnnealing
from tiletune.cost_model.xgb import XGBCostModel, average_recall
from tiletune.errors import TiletuneError
from tiletune.features.knob import KnobTable
from tiletune.measure import FunctionMeasurer
from tiletune.records import Record, RecordWriter
from tiletune.space import Space
from tiletune.strategies import TuneContext, create
from tiletune.strategies.base import Trial
from tiletune.tune import tune
from tiletune.workloads import parse
from tiletune.workloads.base import Axis


def spearman(a, b):
    ra = np.argsort(np.argsort(a))
    rb = np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def gemm_space(m=64, n=64, k=64):
    axes = [Axis("m", m, "S"), Axis("n", n, "S"), Axis("k", k, "R")]
    return Space.from_axes(axes, levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})


def tile_cost(space):
    """Smooth synthetic cost on absolute tile sizes (so it means the same for every shape): best with
    register tile m3=4, n3=16, cache tile m2=2, n2=2, k1=8, unroll=64."""
    want = {"tile_m": (None, None, 2, 4), "tile_n": (None, None, 2, 16), "tile_k": (None, 8)}

    def cost(c):
        d = space.to_dict(c)
        s = 1.0
        for name, t in want.items():
            for f, w in zip(d[name], t):
                if w is not None:
                    s += 0.3 * (math.log2(f) - math.log2(w)) ** 2
        s += 0.2 * abs(math.log2(1 + d["unroll"]) - math.log2(65))
        return s * 1e-3

    return cost


def run(name, space, cost, seed, trials, options=None, context=None, batch=8):
    m = FunctionMeasurer(cost)
    s = create(name, space, seed=seed, context=context, options=options)
    r = tune(space=space, strategy=s, measurer=m, workload="synthetic", flops=1, trials=trials, batch_size=batch)
    return r, s


def test_average_recall():
    y = np.arange(20.0)
    assert average_recall(y, y, 8) == 1.0
    assert average_recall(-y, y, 8) == 0.0


@pytest.mark.parametrize("loss", ["reg", "rank", "rank-binary"])
def test_cost_model_learns_ranking(loss):
    space = gemm_space()
    cost = tile_cost(space)
    rng = np.random.default_rng(0)
    table = KnobTable(space)
    train = space.sample_unique(rng, 200)
    test = space.sample_unique(rng, 200, exclude=train)
    y = np.array([1 / cost(c) for c in train])
    model = XGBCostModel(loss, plan_size=32).fit(table.rows(train), y / y.max())
    pred = model.predict(table.rows(test))
    truth = np.array([1 / cost(c) for c in test])
    assert spearman(pred, truth) > 0.6, loss
    assert model.stats["fits"] == 1 and model.stats["rounds"] >= 1


def test_cost_model_rejects_bad_input():
    with pytest.raises(TiletuneError):
        XGBCostModel("hinge")
    with pytest.raises(TiletuneError):
        XGBCostModel().predict(np.zeros((2, 3)))
    with pytest.raises(TiletuneError):
        XGBCostModel().fit(np.zeros((3, 2)), np.zeros(4))


@pytest.mark.parametrize("cooling,restarts", [("linear", 0), ("exp", 0), ("linear", 2)])
def test_simulated_annealing_finds_maximum(cooling, restarts):
    space = gemm_space(16, 16, 16)
    cost = tile_cost(space)
    best = min(range(space.size), key=lambda i: cost(space.get(i)))
    sa = SimulatedAnnealing(space, np.random.default_rng(1), chains=32, iters=200, cooling=cooling,
                            restarts=restarts)

    best_cost = cost(space.get(best))

    def score(rows):  # normalised throughput, as the cost model predicts
        return np.array([best_cost / cost(sa.to_config(r)) for r in rows])

    found = sa.find_maximums(score, 10, exclude=set())
    keys = [k for _, k in found]
    assert len(keys) == len(set(keys)) == 10
    assert found[0][0] > 0.97  # the optimum or a point within 3% of it
    assert [s for s, _ in found] == sorted((s for s, _ in found), reverse=True)
    # excluded points are never proposed
    again = sa.find_maximums(score, 10, exclude=set(keys))
    assert not set(k for _, k in again) & set(keys)
    if restarts:
        assert sa.stats["restarts"] >= 1


def test_xgb_beats_random_on_synthetic_cost():
    space = gemm_space()
    cost = tile_cost(space)
    xgb_best, rnd_best = [], []
    for seed in range(2):
        r, s = run("xgb", space, cost, seed, 64)
        xgb_best.append(r.best.median_s)
        rnd_best.append(run("random", space, cost, seed, 64)[0].best.median_s)
        t = s.timing()
        assert t["model_fit"] > 0 and t["sa"] > 0 and s.model.model.stats["fits"] >= 5
    assert np.mean(xgb_best) < np.mean(rnd_best), (xgb_best, rnd_best)


def test_reg_loss_and_sa_options_run():
    space = gemm_space()
    cost = tile_cost(space)
    r, s = run("xgb", space, cost, 0, 40, options={"loss": "reg", "cooling": "exp", "restarts": 1, "start": "random",
                                                    "retrain": "plan", "plan_size": 16})
    assert r.trials == 40 and r.best is not None
    assert s.model.model.stats["fits"] == 3  # AutoTVM schedule: min_train (8) results, then every 16


def test_tvm_features_need_a_workload():
    with pytest.raises(TiletuneError, match="workload"):
        create("xgb", gemm_space(), options={"feature": "itervar"})
    with pytest.raises(TiletuneError):
        create("xgb", gemm_space(), options={"feature": "nope"})


def write_records(path, key, space, cost, n, seed):
    rng = np.random.default_rng(seed)
    with RecordWriter(path) as w:
        for c in space.sample_unique(rng, n):
            v = cost(c)
            w.write(Record(workload=key, target="t", config=space.to_dict(c), costs=(v,), median_s=v, gflops=1 / v))
        # a failed one
        c = space.sample(rng)
        w.write(Record(workload=key, target="t", config=space.to_dict(c), error="run-error"))


def test_transfer_warm_start_ranks_held_out_configs(tmp_path):
    src = parse("gemm:M=64,N=64,K=64")
    dst = parse("gemm:M=128,N=64,K=128")
    src_space = Space.from_axes(src.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    dst_space = Space.from_axes(dst.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    path = tmp_path / "src.jsonl"
    write_records(path, src.key, src_space, tile_cost(src_space), 300, 0)
    ctx = TuneContext(workload=dst, transfer=(str(path),))
    with pytest.warns(UserWarning, match="extents"):
        s = create("xgb", dst_space, seed=0, context=ctx)
    assert s.model.fitted and [(b.name, b.groups) for b in s.model.background] == [("transfer", [301])]
    held = dst_space.sample_unique(np.random.default_rng(5), 200)
    truth = np.array([1 / tile_cost(dst_space)(c) for c in held])
    pred = s.model.predict(held)
    untrained = np.zeros(len(held))  # no model: every configuration ties
    assert spearman(pred, truth) > 0.5 > abs(np.nan_to_num(spearman(untrained + 1e-12 * np.arange(len(held)), truth)))
    # the very first batch already comes from the model: better than random on average
    first = s.ask(8)
    rnd = dst_space.sample_unique(np.random.default_rng(9), 8)
    cost = tile_cost(dst_space)
    assert np.mean([cost(c) for c in first]) < np.mean([cost(c) for c in rnd])


def test_knob_transfer_across_operators_is_an_error(tmp_path):
    conv = parse("conv2d:C=4,H=6,W=6,K=8,R=3,S=3")
    conv_space = Space.from_axes(conv.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    path = tmp_path / "conv.jsonl"
    write_records(path, conv.key, conv_space, lambda c: 1e-3, 20, 0)
    gemm = parse("gemm:M=64,N=64,K=64")
    ctx = TuneContext(workload=gemm, transfer=(str(path),))
    with pytest.raises(TiletuneError, match="knob features"):
        create("xgb", gemm_space(), context=ctx)


def test_added_seeds_are_measured_next_and_visited_ones_refused():
    """Strategy.add_seeds (a sibling task's best, tiletune.model.tuning.tuner): xgb measures them before its own
    proposals, once; a strategy without a seed queue takes none."""
    space = gemm_space()
    s = create("xgb", space, seed=0, options={"start": "random"})
    first = s.ask(4)
    s.tell([Trial(c, 1e-3) for c in first])
    rng = np.random.default_rng(1)
    fresh = [c for c in space.sample_unique(rng, 8) if c not in first][:3]
    assert s.add_seeds([first[0], *fresh, fresh[0]]) == 3  # the measured one and the repeat refused
    assert s.ask(2) == fresh[:2] and s.ask(2)[0] == fresh[2]
    assert create("random", space, seed=0).add_seeds(fresh) == 0
