"""Confirmation before a model build (tiletune.model.tuning.confirm): which candidates are re-measured, how, and
which kernel the build then takes; the tuning loop never recalls a confirmation."""
from __future__ import annotations

import pytest

from tiletune.errors import TiletuneError
from tiletune.measure import FunctionMeasurer
from tiletune.model.tuning.confirm import check_top, confirm_settings, confirm_task
from tiletune.records import candidates, chosen, confirmed
from tiletune.records import CONFIRM, Record, RecordWriter, load, same_kernel
from tiletune.tune import known_from_records, tune
from tiletune.strategies import create

from .conftest import bowl_space

WL = "gemm:M=8,N=8,K=8"


def rec(config, median, *, strategy="xgb", trial=1, costs=None, error=None, workload=WL):
    return Record(workload=workload, target="t", config=config, costs=tuple(costs or ([median] if median else [])),
                  median_s=median, gflops=(1e-3 / median if median else 0.0), error=error, strategy=strategy,
                  trial=trial)


A, B, C, D = ({"x": i} for i in range(4))


def test_candidates_are_the_fastest_distinct_configurations_without_confirmations():
    rows = [rec(A, 3.0), rec(B, 2.0), rec(A, 1.5), rec(C, 4.0), rec(D, 0.5, strategy=CONFIRM),
            rec(D, None, error="run-error"), rec(B, 0.1, workload="other")]
    got = candidates(rows, WL, 2)
    assert [r.config for r in got] == [A, B] and got[0].median_s == 1.5


def test_the_build_takes_the_fastest_of_the_latest_pass_pooled():
    rows = [rec(A, 1.0), rec(B, 2.0), rec(C, 3.0),
            # pass 1 (older): C looked best
            rec(C, 0.5, strategy=CONFIRM, trial=1), rec(A, 2.0, strategy=CONFIRM, trial=1),
            # pass 2: two rounds each; B's samples pool to the lowest median, A failed once
            rec(A, 0.1, strategy=CONFIRM, trial=2), rec(B, 1.2, strategy=CONFIRM, trial=2, costs=[1.2, 1.3]),
            rec(A, None, strategy=CONFIRM, trial=2, error="run-timeout"),
            rec(B, 1.1, strategy=CONFIRM, trial=2, costs=[1.1, 1.4]),
            rec(C, 1.6, strategy=CONFIRM, trial=2), rec(C, 1.0, strategy=CONFIRM, trial=2)]
    assert confirmed(rows, WL) == {'{"x": 1}': 1.25, '{"x": 2}': 1.3}
    config, seconds, gflops = chosen(rows, WL)
    assert config == B and seconds == 1.25 and gflops == pytest.approx(1e-3 / 1.25)
    # without a confirmation: the best recorded median, as before
    assert chosen(rows[:3], WL)[0] == A
    assert chosen([rec(A, None, error="build-error")], WL) is None


def test_confirm_task_measures_the_top_in_interleaved_rounds_once(tmp_path):
    space = bowl_space()
    configs = [space.sample(__import__("numpy").random.default_rng(i)) for i in range(6)]
    configs = list(dict.fromkeys(configs))[:4]
    truth = {c: 1.0 + i for i, c in enumerate(configs)}  # configs[0] is the fastest
    noisy = {configs[0]: 2.5, configs[1]: 0.9, configs[2]: 3.5, configs[3]: 3.9}  # configs[1] got lucky
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        for c in configs:
            w.write(rec(space.to_dict(c), noisy[c]))
    m = FunctionMeasurer(lambda c: truth[c])
    written = confirm_task(records=load(path), records_path=str(path), workload=WL, target="t", space=space,
                           measurer=m, flops=10**6, top=3, rounds=2)
    top3 = [configs[1], configs[0], configs[2]]  # by the recorded medians
    assert len(written) == 6 and m.calls == top3 + top3
    rows = load(path)
    new = [r for r in rows if r.strategy == CONFIRM]
    assert new == written and len(new) == 6 and {r.trial for r in new} == {1} and all(r.measurer == "synthetic" for r in new)
    assert chosen(rows, WL)[0] == space.to_dict(configs[0])  # the truly fastest, not the lucky one
    # the same candidates again: nothing measured
    assert confirm_task(records=rows, records_path=str(path), workload=WL, target="t", space=space, measurer=m,
                        flops=10**6, top=3) == [] and len(m.calls) == 6
    # a new candidate (tuned further): a second pass
    with RecordWriter(path) as w:
        w.write(rec(space.to_dict(configs[3]), 0.2))
    assert len(confirm_task(records=load(path), records_path=str(path), workload=WL, target="t", space=space,
                            measurer=m, flops=10**6, top=3, rounds=1)) == 3
    assert {r.trial for r in load(path) if r.strategy == CONFIRM} == {1, 2}
    assert chosen(load(path), WL)[0] == space.to_dict(configs[0])
    # fewer than two candidates: nothing to choose between
    assert confirm_task(records=[rec(A, 1.0)], records_path=str(path), workload=WL, target="t", space=space,
                        measurer=m, flops=1, top=3) == []


def test_the_tuning_loop_never_recalls_a_confirmation(tmp_path):
    space = bowl_space()
    path = tmp_path / "r.jsonl"
    first = tune(space=space, strategy=create("random", space, seed=0), measurer=FunctionMeasurer(lambda c: 1.0),
                 workload=WL, flops=1, target="t", trials=4, records=path)
    c = first.history[0].config
    with RecordWriter(path) as w:
        w.write(rec(c, 0.001, strategy=CONFIRM))
        w.write(Record(workload=WL, target="t", config=c, costs=(0.001,), median_s=0.001, strategy=CONFIRM,
                       measurer="synthetic"))
    known = known_from_records(path, space, WL, "t", "synthetic")
    assert known[space.from_dict(c)].median_s == 1.0 and len(known) == 4


def test_confirm_settings_turn_the_cutoff_off_and_bad_top_is_one_line():
    assert confirm_settings(None).cutoff == 0
    check_top(0)
    check_top(3)
    for bad in (-1, 1):
        with pytest.raises(TiletuneError, match="--confirm must be 0"):
            check_top(bad)


def test_records_made_under_the_kernels_old_name_are_recalled_and_confirmed(tmp_path):
    """A rewritten operator renumbers a model's fused kernels: the tuning loop recalls (does not measure again) and
    confirmation ranks the records of a kernel whose key differs in the name alone; another kernel's are not its."""
    space = bowl_space()
    old = "fused_conv2d15_add[1x14,1x1]@0123456789abcdef"
    new = "fused_conv2d13_add[1x14,1x1]@0123456789abcdef"
    other = "fused_conv2d13_add[1x14,1x1]@fedcba9876543210"
    path = tmp_path / "r.jsonl"
    first = tune(space=space, strategy=create("random", space, seed=0), measurer=FunctionMeasurer(lambda c: 1.0),
                 workload=old, flops=1, target="t", trials=4, records=path)
    assert first.measured == 4
    m = FunctionMeasurer(lambda c: 1.0)
    again = tune(space=space, strategy=create("random", space, seed=0), measurer=m, workload=new, flops=1,
                 target="t", trials=4, records=path)
    assert again.recalled == 4 and again.measured == 0 and m.calls == []
    assert len(known_from_records(path, space, new, "t")) == 4 and known_from_records(path, space, other, "t") == {}
    assert len(candidates(load(path), new, 3)) == 3 and candidates(load(path), other, 3) == []
    assert [r.workload for r in load(path, workload=new)] == [old] * 4
    # keys that are not a model kernel's match whole; a kind (rows:) is part of a kernel's identity
    assert load(path, workload="gemm:M=8,N=8,K=8") == []
    assert load(path, workload="rows:" + new) == []
    assert same_kernel("rows:fused_softmax1[1x8]@0123456789abcdef", "rows:fused_softmax3[1x8]@0123456789abcdef")
