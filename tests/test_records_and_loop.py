import json
import math
import warnings

import pytest

from tiletune.errors import TiletuneError
from tiletune.measure import FunctionMeasurer
from tiletune.records import Record, RecordWriter, best, load
from tiletune.strategies import create
from tiletune.tune import tune

from .conftest import bowl_cost, bowl_space


def _run(tmp_path, trials, seed=0, strategy="random", records=None, **kw):
    space = bowl_space()
    m = FunctionMeasurer(bowl_cost(space))
    st = create(strategy, space, seed=seed)
    r = tune(space=space, strategy=st, measurer=m, workload="synthetic", flops=10**9, trials=trials,
             records=records or tmp_path / "r.jsonl", batch_size=4, **kw)
    return r, m


def test_records_roundtrip_and_best(tmp_path):
    p = tmp_path / "r.jsonl"
    with RecordWriter(p) as w:
        w.write(Record("w", "t", {"a": [1, 2]}, costs=(0.2, 0.1, 0.3), median_s=0.2, gflops=5.0))
        w.write(Record("w", "t", {"a": [2, 1]}, error="build-error", message="boom"))
        w.write(Record("v", "t", {"a": [2, 1]}, costs=(0.1,), median_s=0.1, gflops=10.0))
    recs = load(p)
    assert len(recs) == 3 and recs[0].costs == (0.2, 0.1, 0.3)
    assert best(recs, "w").config == {"a": [1, 2]}
    assert load(p, workload="v")[0].gflops == 10.0
    for line in open(p):
        d = json.loads(line)
        assert d["schema"] == 1 and "host" in d and "finished" in d


def test_corrupt_and_truncated_lines_are_skipped_with_a_warning(tmp_path):
    p = tmp_path / "r.jsonl"
    with RecordWriter(p) as w:
        w.write(Record("w", "t", {"a": 1}, costs=(0.1,), median_s=0.1))
    with open(p, "a") as f:
        f.write("{not json}\n")
        f.write('{"schema": 1, "workload": "w"}\n')
        f.write('{"schema": 1, "workload": "w", "target": "t", "config": {"a": 2}, "costs": [0.1], "med')  # truncated
    with pytest.warns(UserWarning, match="skipping"):
        recs = load(p)
    assert len(recs) == 1
    # appending after a truncated line starts a new line
    with RecordWriter(p) as w:
        w.write(Record("w", "t", {"a": 3}, costs=(0.1,), median_s=0.1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [r.config["a"] for r in load(p)] == [1, 3]


def test_missing_records_file_is_a_clear_error(tmp_path):
    with pytest.raises(TiletuneError, match="does not exist"):
        load(tmp_path / "nope.jsonl")


def test_resume_measures_nothing_twice_and_counts_the_budget(tmp_path):
    rec = tmp_path / "r.jsonl"
    r1, m1 = _run(tmp_path, 20, records=rec)
    assert r1.measured == 20 and len(load(rec)) == 20
    r2, m2 = _run(tmp_path, 30, records=rec)  # same command with a bigger budget
    assert r2.trials == 30 and r2.recalled == 20 and r2.measured == 10
    assert not set(m1.calls) & set(m2.calls)
    r3, m3 = _run(tmp_path, 30, records=rec)  # nothing left to do
    assert r3.measured == 0 and m3.calls == []
    assert r3.best.median_s == min(r.median_s for r in load(rec))


def test_interrupted_run_resumes_to_the_same_result(tmp_path):
    full, _ = _run(tmp_path / "a", 24, records=tmp_path / "a.jsonl")
    part, _ = _run(tmp_path, 10, records=tmp_path / "b.jsonl")
    rest, m = _run(tmp_path, 24, records=tmp_path / "b.jsonl")
    assert len(m.calls) == 14
    assert [r.config for r in rest.history] == [r.config for r in full.history]


def test_budgets_seconds_and_early_stop(tmp_path):
    r, _ = _run(tmp_path, None, records=tmp_path / "s.jsonl", early_stop=5)
    assert r.stopped == "early-stop" and r.since_improvement >= 5
    r, _ = _run(tmp_path, None, records=tmp_path / "t.jsonl", seconds=0.2)
    assert r.stopped in ("seconds", "exhausted")
    with pytest.raises(TiletuneError, match="budget"):
        _run(tmp_path, None)


def test_exhausted_space_stops(tmp_path):
    r, m = _run(tmp_path, 10_000, strategy="grid")
    assert r.stopped == "exhausted" and r.trials == bowl_space().size == len(set(m.calls))


@pytest.mark.parametrize("strategy, batch, first", [("random", None, 16), ("grid", None, 16), ("ga", None, 8),
                                                    ("random", 4, 4)])
def test_the_batch_size_defaults_to_the_strategys(strategy, batch, first):
    """Strategies that do not learn from results (random, grid) measure 16 configurations per batch, the others
    8, unless the run sets it."""
    from tiletune.measure import FunctionMeasurer
    from tiletune.session import RunSpec, run

    sizes = []

    class Counting(FunctionMeasurer):
        def measure(self, configs):
            sizes.append(len(configs))
            return super().measure(configs)

    m = Counting(lambda c: 1e-3)
    r = run(RunSpec(workload="gemm:M=16,N=16,K=16", strategy=strategy, trials=20, batch_size=batch), measurer=m)
    assert r.trials == 20 and sizes[0] == first and all(s <= first for s in sizes)
