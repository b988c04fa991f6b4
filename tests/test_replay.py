"""Replay measurer (simulation from a records table) and the 'tiletune table' command."""
import json
import math

import pytest

from tiletune import cli
from tiletune.errors import TiletuneError
from tiletune.measure import FunctionMeasurer
from tiletune.measure.replay import ReplayMeasurer
from tiletune.records import Record, RecordWriter, load
from tiletune.strategies import create
from tiletune.tune import tune

from .conftest import bowl_cost, bowl_space

WL = "synthetic:bowl"
TARGET = '{"kind": "llvm"}'


def write_table(path, space, cost, indices=None):
    """A replay table written by the ordinary loop with a FunctionMeasurer (every config, or some)."""
    indices = range(space.size) if indices is None else indices
    configs = [space.get(i) for i in indices]
    it = iter(configs)

    class Listed:  # a strategy that asks exactly these configurations
        name, seed = "listed", 0

        def ask(self, n):
            return [c for _, c in zip(range(n), it)]

        def tell(self, trials):
            pass

    tune(space=space, strategy=Listed(), measurer=FunctionMeasurer(cost), workload=WL, flops=1, target=TARGET,
         trials=len(configs), batch_size=16, records=path)
    return configs


def test_replay_answers_from_the_table_deterministically(tmp_path):
    space = bowl_space()
    cost = bowl_cost(space)
    path = tmp_path / "table.jsonl"
    write_table(path, space, cost)
    rm = ReplayMeasurer(path, WL, space)
    assert rm.kind == "replay" and len(rm) == space.size and rm.target_key == TARGET
    configs = [space.get(i) for i in (5, 17, 5, 299)]
    a, b = rm.measure(configs), rm.measure(configs)
    assert [r.costs for r in a] == [r.costs for r in b]
    assert all(r.ok and math.isclose(r.median, cost(r.config)) for r in a)


def test_first_ok_record_wins_and_its_median_is_used(tmp_path):
    space = bowl_space()
    c = space.get(7)
    path = tmp_path / "t.jsonl"
    with RecordWriter(path) as w:
        w.write(Record(WL, TARGET, space.to_dict(c), error="run-error", message="flaky"))
        w.write(Record(WL, TARGET, space.to_dict(c), costs=(3.0, 1.0, 2.0), median_s=2.0))
        w.write(Record(WL, TARGET, space.to_dict(c), costs=(0.5,), median_s=0.5))
        w.write(Record(WL, TARGET, space.to_dict(space.get(8)), error="wrong-answer", message="max abs error 3"))
        w.write(Record("other:op", TARGET, {"x": 1}, costs=(1.0,), median_s=1.0))
    rm = ReplayMeasurer(path, WL, space)
    ok, failed = rm.measure([c, space.get(8)])
    assert ok.median == 2.0 and rm.cost(c) == 2.0
    assert failed.error == "wrong-answer" and "max abs error" in failed.message


def test_not_in_table_is_reported_clearly(tmp_path):
    space = bowl_space()
    path = tmp_path / "t.jsonl"
    write_table(path, space, bowl_cost(space), indices=range(0, 300, 2))
    rm = ReplayMeasurer(path, WL, space)
    (res,) = rm.measure([space.get(1)])
    assert res.error == "not-in-table" and not res.ok and math.isinf(res.median)
    assert "not in replay table" in res.message and str(path) in res.message
    assert json.dumps(space.to_dict(space.get(1))) in res.message


def test_bad_tables_raise_tiletune_errors(tmp_path):
    space = bowl_space()
    with pytest.raises(TiletuneError, match="does not exist"):
        ReplayMeasurer(tmp_path / "missing.jsonl", WL, space)
    path = tmp_path / "t.jsonl"
    write_table(path, space, bowl_cost(space), indices=range(3))
    with pytest.raises(TiletuneError, match="no records of workload 'gemm:M=1'.*synthetic:bowl"):
        ReplayMeasurer(path, "gemm:M=1", space)
    with pytest.raises(TiletuneError, match="for target"):
        ReplayMeasurer(path, WL, space, target={"kind": "cuda"})
    from tiletune.space import Space
    from tiletune.workloads.base import Axis

    other = Space.from_axes([Axis("m", 16, "S")], levels=(3, 2))
    with pytest.raises(TiletuneError, match="levels"):
        ReplayMeasurer(path, WL, other)


@pytest.mark.parametrize("name", ["gbfs", "na2c", "rnn", "random"])
def test_strategies_run_against_the_replay_measurer(tmp_path, name):
    space = bowl_space()
    cost = bowl_cost(space)
    path = tmp_path / "t.jsonl"
    write_table(path, space, cost)
    best = min(cost(space.get(i)) for i in range(space.size))
    runs = []
    for _ in range(2):
        rm = ReplayMeasurer(path, WL, space)
        out = tmp_path / f"run-{name}-{len(runs)}.jsonl"
        r = tune(space=space, strategy=create(name, space, seed=3), measurer=rm, workload=WL, flops=1,
                 target=rm.target_key, trials=60, batch_size=8, records=out)
        assert r.errors == 0 and r.best is not None
        recs = load(out)
        assert all(x.measurer == "replay" for x in recs)
        runs.append([(json.dumps(x.config, sort_keys=True), x.median_s) for x in recs])
    assert runs[0] == runs[1]  # the whole simulated run is reproducible
    if name == "gbfs":
        assert math.isclose(r.best.median_s, best)


# ---- tiletune table ---------------------------------------------------------------------------------

class FakeLocal:
    """Stands in for tiletune.measure.local.LocalMeasurer: a cost from the configuration's index."""

    instances = []

    def __init__(self, workload, space, target, settings=None, **kw):
        self.space = space
        self.inner = FunctionMeasurer(lambda c: 1e-3 * (1 + space.index(c) % 17))
        self.kind = "local"
        self.closed = False
        FakeLocal.instances.append(self)

    def measure(self, configs):
        return self.inner.measure(configs)

    def close(self):
        self.closed = True


@pytest.fixture
def fake_local(monkeypatch):
    import tiletune.measure.factory as factory

    FakeLocal.instances = []
    monkeypatch.setattr(factory, "LocalMeasurer", FakeLocal)  # what make_measurer makes for an llvm target
    return FakeLocal


SMALL = "gemm:M=8,N=8,K=8"


def test_table_exhaustive_then_resume_then_replay(tmp_path, fake_local, capsys):
    from tiletune.schedules import make_space
    from tiletune.workloads import parse

    out = str(tmp_path / "table.jsonl")
    args = ["table", SMALL, "--levels", "2,2", "--exhaustive", "-o", out, "-q"]
    assert cli.main(args) == 0
    wl = parse(SMALL)
    space = make_space(wl, (2, 2))
    recs = load(out)
    assert len(recs) == space.size and fake_local.instances[0].closed
    assert {space.from_dict(r.config) for r in recs} == {space.get(i) for i in range(space.size)}
    assert cli.main(args) == 0  # resume: everything is already there, nothing measured again
    assert len(load(out)) == space.size and fake_local.instances[1].inner.calls == []
    rm = ReplayMeasurer(out, wl.key, space)
    assert len(rm) == space.size and rm.cost(space.get(3)) == pytest.approx(1e-3 * 4)
    assert f"{space.size} of {space.size} configurations" in capsys.readouterr().out


def test_table_sample_is_uniform_without_replacement_and_seeded(tmp_path, fake_local):
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    assert cli.main(["table", SMALL, "--sample", "40", "--seed", "2", "-o", a, "-q"]) == 0
    assert cli.main(["table", SMALL, "--sample", "40", "--seed", "2", "-o", b, "-q"]) == 0
    ca = [json.dumps(r.config, sort_keys=True) for r in load(a)]
    cb = [json.dumps(r.config, sort_keys=True) for r in load(b)]
    assert len(ca) == 40 == len(set(ca)) and ca == cb


def test_table_refuses_large_exhaustive_and_bad_sample(tmp_path, fake_local, capsys):
    from tiletune.schedules import make_space
    from tiletune.workloads import parse

    out = str(tmp_path / "t.jsonl")
    big = "gemm:M=64,N=64,K=64"
    assert cli.main(["table", big, "--exhaustive", "-o", out]) == 2
    err = capsys.readouterr().err
    size = make_space(parse(big)).size
    assert size > 20000 and "--exhaustive refused" in err and str(size) in err and "--sample" in err
    assert fake_local.instances == []  # refused before any worker started
    assert cli.main(["table", SMALL, "--sample", "0", "-o", out]) == 2
    assert "--sample needs a positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["table", SMALL, "-o", out])  # one of --exhaustive / --sample is required


def test_tune_replay_flag_uses_the_table(tmp_path, fake_local, capsys):
    out = str(tmp_path / "table.jsonl")
    assert cli.main(["table", SMALL, "--levels", "2,2", "--exhaustive", "-o", out, "-q"]) == 0
    runs = str(tmp_path / "runs.jsonl")
    rc = cli.main(["tune", SMALL, "--levels", "2,2", "-s", "gbfs", "-n", "30", "--replay", out, "-r", runs, "-q"])
    assert rc == 0
    recs = load(runs)
    assert len(recs) == 30 and all(r.measurer == "replay" and r.ok for r in recs)
