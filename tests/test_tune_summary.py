"""What a user reads at the end of `tiletune tune`: why the run stopped, invalid configurations apart from
failures, the vendor library's figure and our ratio to it (timed after the workers are closed), and how to
build the kernel."""
import pytest

import tiletune.commands.tune as tune_cmd
import tiletune.session as session
from tests.conftest import bowl_cost, bowl_space
from tests.test_gensor import make
from tiletune.bench.results import BaselineResult
from tiletune.cli import main
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.commands.tune import summary
from tiletune.measure.factory import measured_here
from tiletune.strategies import create
from tiletune.tune import tune
from tiletune.workloads import parse


def _run(strategy="random", trials=40, cost=None, **options):
    space = bowl_space()
    cost = cost or bowl_cost(space)
    return tune(space=space, strategy=create(strategy, space, options=options), measurer=FunctionMeasurer(cost),
                workload="synthetic", flops=10**9, trials=trials, batch_size=4)


def test_invalid_configurations_are_skipped_not_failures():
    space = bowl_space()
    base = bowl_cost(space)
    calls = []

    def cost(c):
        calls.append(c)
        if len(calls) == 5:
            return "run-error"
        return "invalid" if len(calls) % 4 == 0 else base(c)

    run = _run(trials=20, cost=cost)
    assert run.errors == 6 and run.skipped == 5
    text = summary(run)
    assert "trials    20 (20 measured, 0 from records, 1 failed, 5 invalid skipped)" in text
    assert "skipped   5 configurations invalid for this template (refused before building: not failures)" in text
    assert "failed    run-error: 1" in text and "invalid:" not in text
    assert "first failure message: synthetic failure" in text
    assert "errors" not in text


def test_a_good_run_with_invalid_configurations_shows_no_failure():
    space = bowl_space()
    base = bowl_cost(space)
    run = _run(trials=12, cost=lambda c: "invalid" if space.to_dict(c)["unroll"] == 64 else base(c))
    text = summary(run)
    assert run.skipped and "0 failed" in text and "failed    " not in text


def test_the_summary_says_why_the_run_stopped():
    assert "stopped   trials: the trial budget (8) is spent" in summary(_run(trials=8))
    grid = _run("grid", trials=1000)
    assert grid.stopped == "exhausted"
    assert f"stopped   exhausted: grid enumerated every one of the space's {bowl_space().size} configurations" \
        in summary(grid)
    space = bowl_space()
    r = tune(space=space, strategy=create("random", space), measurer=FunctionMeasurer(bowl_cost(space)),
             workload="synthetic", flops=1, early_stop=3, batch_size=1)
    assert r.stop_reason == "3 trials in a row without improvement (--early-stop 3)"


def test_gensor_says_how_many_configurations_it_constructed():
    wl, sp, g = make("gemv:M=8,K=4")
    r = tune(space=sp, strategy=g, measurer=FunctionMeasurer(lambda c: 1e-3), workload=wl.key, flops=wl.flops,
             trials=1000)
    assert r.stopped == "exhausted" and r.trials < 1000
    assert (f"stopped   exhausted: gensor's annealed walks constructed only {r.trials} distinct configuration(s) of "
            "this space (after_topk=continue: further walks found no more)") in summary(r)
    wl, sp, g = make("gemm:M=64,N=48,K=32", k=2, after_topk="stop")
    r = tune(space=sp, strategy=g, measurer=FunctionMeasurer(lambda c: 1e-3), workload=wl.key, flops=wl.flops,
             trials=50)
    assert r.stop_reason == "gensor measured its top 2 constructed configuration(s) and stops there (after_topk=stop)"


def test_a_strategy_without_its_own_reason_says_it_has_nothing_more():
    r = _run("random", trials=10_000)
    assert r.stopped == "exhausted" and r.stop_reason == "the strategy has no more configurations to propose"


def test_vendor_line_and_ratio():
    run = _run(trials=8)
    vend = BaselineResult("vendor", "synthetic", label="numpy matmul (openblas)", costs=(run.best.median_s / 2,))
    text = summary(run, vendor=vend, flops=10**9, records="r.jsonl")
    line = next(l for l in text.splitlines() if l.startswith("vendor"))
    assert f"{2 * run.best.gflops:.2f} GFLOPS" in line and "numpy matmul (openblas)" in line
    assert line.endswith("ours is 0.50x its speed")
    assert "records   r.jsonl" in text and "next      tiletune build r.jsonl -o kernel.so" in text
    failed = BaselineResult("vendor", "synthetic", label="torch conv2d", error="wrong-answer", message="differs")
    assert "vendor    torch conv2d: not timed (wrong-answer: differs)" in summary(run, vendor=failed, flops=1)


class _Closing(FunctionMeasurer):
    closed = False

    def close(self) -> None:
        type(self).closed = True


@pytest.fixture
def synthetic_session(monkeypatch):
    """`tiletune tune` through the real session with a synthetic measurer instead of the workers."""
    _Closing.closed = False
    monkeypatch.setattr(session, "make_measurer", lambda wl, *a, **k: _Closing(lambda c: 1e-4))
    timed = []

    def fake_vendor(wl, settings, threads=None):
        assert _Closing.closed, "the vendor library was timed while the workers were still running"
        timed.append((wl.key, settings.repeat))
        return BaselineResult("vendor", wl.key, label="numpy matmul (fake)", costs=(2e-4,))

    monkeypatch.setattr(tune_cmd, "vendor", fake_vendor)
    return timed


def test_tune_ends_with_the_vendor_figure_after_closing_the_workers(synthetic_session, capsys, tmp_path):
    rec = str(tmp_path / "r.jsonl")
    assert main(["tune", "gemm:M=8,N=8,K=8", "-q", "-n", "4", "-o", rec, "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert synthetic_session == [("gemm:M=8,N=8,K=8", 2)]
    assert "vendor    " in out and "numpy matmul (fake)" in out and "ours is 2.00x its speed" in out
    assert f"next      tiletune build {rec} -o kernel.so" in out
    assert out.index("vendor    ") < out.index("records   ")


def test_no_vendor_skips_it(synthetic_session, capsys, tmp_path):
    assert main(["tune", "gemm:M=8,N=8,K=8", "-q", "-n", "4", "-o", str(tmp_path / "r.jsonl"), "--no-vendor"]) == 0
    assert synthetic_session == [] and "vendor    " not in capsys.readouterr().out


def test_vendor_only_where_measured_here_and_the_library_is_installed(monkeypatch):
    llvm = {"kind": "llvm"}
    assert measured_here(llvm)
    assert not measured_here(llvm, replay="t.jsonl")
    assert not measured_here(llvm, rpc="127.0.0.1:9190:board")
    assert not measured_here({"kind": "cuda", "arch": "sm_90"})
    called = []
    monkeypatch.setattr(tune_cmd, "vendor", lambda wl, s, threads=None: called.append(wl.op) or
                        BaselineResult("vendor", wl.key, error="unsupported"))
    monkeypatch.setattr(tune_cmd, "optional_torch", lambda: None)
    conv = parse("conv2d:N=1,C=4,H=8,W=8,K=4,R=3,S=3")
    assert tune_cmd.vendor_baseline(conv, None, None) is None and called == []  # no torch: no vendor for convs
    assert tune_cmd.vendor_baseline(parse("gemv:M=8,K=4"), None, None) is None  # unsupported: said nothing
    assert called == ["gemv"]
