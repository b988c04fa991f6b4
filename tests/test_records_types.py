"""A record line of the current schema whose fields have the wrong types is skipped on load, like a corrupt
line, so that tune (resume) and best never meet it."""
import json
import warnings

import pytest

from tiletune.measure import FunctionMeasurer
from tiletune.records import Record, RecordWriter, best, load
from tiletune.strategies import create
from tiletune.tune import tune

from .conftest import bowl_cost, bowl_space

GOOD = Record("w", "t", {"a": [1, 2]}, costs=(0.2, 0.1, 0.3), median_s=0.2, gflops=5.0, seed=3, trial=1)


def _line(**changes) -> str:
    d = json.loads(GOOD.to_json())
    d.update(changes)
    return json.dumps(d)


BAD = [
    {"median_s": "fast"}, {"costs": ["a"]}, {"costs": 0.1}, {"gflops": None}, {"seed": "x"}, {"trial": 1.5},
    {"trial": True}, {"error": 5}, {"config": [1, 2]}, {"workload": 7}, {"message": None}, {"started": "now"},
]


@pytest.mark.parametrize("change", BAD, ids=lambda c: "-".join(f"{k}={v!r}" for k, v in c.items()))
def test_a_wrong_typed_field_is_skipped_with_a_warning(tmp_path, change):
    p = tmp_path / "r.jsonl"
    p.write_text(GOOD.to_json() + "\n" + _line(**change) + "\n")
    with pytest.warns(UserWarning, match=f"{p.name}:2: skipping unreadable record \\(field {next(iter(change))}"):
        recs = load(p)
    assert recs == [GOOD]
    assert best(recs) == GOOD


def test_whole_numbers_and_nulls_load_where_declared(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(_line(median_s=1, gflops=2, costs=[1, 2.5], seed=None, error=None, build_s=0) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (r,) = load(p)
    assert r.median_s == 1.0 and isinstance(r.median_s, float) and r.costs == (1.0, 2.5)
    assert isinstance(r.gflops, float) and r.seed is None


def test_tune_resumes_over_a_wrong_typed_line(tmp_path):
    space = bowl_space()
    rec = tmp_path / "r.jsonl"
    cfg = space.to_dict(space.get(0))
    bad = Record("synthetic", "", cfg, costs=(0.1,), median_s=0.1, gflops=1.0)
    d = json.loads(bad.to_json())
    d["median_s"] = "fast"
    rec.write_text(json.dumps(d) + "\n")
    with pytest.warns(UserWarning, match="skipping unreadable record"):
        run = tune(space=space, strategy=create("random", space, seed=0), measurer=FunctionMeasurer(bowl_cost(space)),
                   workload="synthetic", flops=10**9, trials=4, batch_size=2, records=rec)
        recs = load(rec)
    assert run.trials == 4 and len(recs) == 4
    assert best(recs) is not None
