"""session.build_task (one workload -> space, context, strategy, measurer; the model tuner's tasks use it too),
session.run on top of it, and measure.factory's door for the callers above tiletune.measure."""
import pytest

import tiletune.session as session
from tiletune.errors import TiletuneError
from tiletune.measure.factory import shared_pool
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.session import RunSpec, build_task, run
from tiletune.target import has_gpu, parse_target

SPEC = "gemm:M=32,N=32,K=16"


class Closing(FunctionMeasurer):
    def __init__(self):
        super().__init__(lambda c: 1e-3)
        self.closed = 0

    def close(self):
        self.closed += 1


def test_a_task_without_a_measurer_keeps_the_callers_defaults_as_defaults():
    """The model tuner's use: its task-specific start and start_k are defaults (a start that cannot apply
    still falls back), and it makes the measurers itself, round by round."""
    task = build_task(SPEC, "gbfs", seed=1, defaults={"start": "construct", "start_k": 10}, measure=False)
    try:
        assert task.measurer is None and not task.owns_measurer
        assert task.strategy.opts["start_k"] == 10 and not task.strategy.given_options
        assert task.context.workload is task.workload and task.context.target == task.target
        assert task.strategy.space is task.space and task.space.size > 1
    finally:
        task.close()


def test_the_measurer_made_for_a_task_is_closed_when_its_strategy_fails(monkeypatch):
    made = []
    monkeypatch.setattr(session, "make_measurer", lambda *a, **k: made.append(Closing()) or made[-1])
    with pytest.raises(TiletuneError, match="start"):
        build_task(SPEC, "gbfs", options={"start": '{"tile_m": [5, 1, 1, 1]}'})  # no such split of 32
    assert len(made) == 1 and made[0].closed == 1


def test_options_are_checked_before_a_measurer_starts(monkeypatch):
    made = []
    monkeypatch.setattr(session, "make_measurer", lambda *a, **k: made.append(Closing()) or made[-1])
    with pytest.raises(TiletuneError, match="unknown option"):
        build_task(SPEC, "gbfs", options={"bogus": 1})
    with pytest.raises(TiletuneError, match="does not exist"):
        build_task(SPEC, "gbfs", transfer=("no-such-records.jsonl",))
    assert made == []


def test_run_closes_what_it_made_and_leaves_a_given_measurer_open(monkeypatch):
    given = Closing()
    r = run(RunSpec(workload=SPEC, strategy="random", trials=5, batch_size=2), measurer=given)
    assert r.trials == 5 and len(given.calls) == 5 and given.closed == 0
    made = []
    monkeypatch.setattr(session, "make_measurer", lambda *a, **k: made.append(Closing()) or made[-1])
    r = run(RunSpec(workload=SPEC, strategy="random", trials=3))
    assert r.trials == 3 and made[0].closed == 1


def test_a_shared_pool_only_where_kernels_are_built_here():
    if not has_gpu():  # measured on the device that has it, via --rpc
        assert shared_pool(parse_target("cuda:sm_90")) is None
    pool = shared_pool({**parse_target(None), "num-cores": 1})
    try:
        assert pool.size == 1 and pool.threads == 1
    finally:
        pool.close()
