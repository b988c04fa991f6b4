"""The one timing rule (tiletune.measure.timing), for kernels and vendor callables alike."""
from __future__ import annotations

import time

import pytest

from tiletune.measure.base import MeasureSettings
from tiletune.measure.timing import (SamplePlan, cut_off, plan_samples, time_callable, time_loop, warm_and_plan,
                                     warm_runs, warm_runs_timed)


class FakeClock:
    """A clock that moves only when the timed callable runs: ``step`` seconds per call."""

    def __init__(self, step: float):
        self.now, self.step, self.calls = 0.0, step, 0

    def __call__(self) -> float:
        return self.now

    def run(self) -> None:
        self.now += self.step
        self.calls += 1


def test_number_makes_a_sample_last_min_repeat_ms():
    clock = FakeClock(1e-4)
    settings = MeasureSettings(number=1, repeat=3, min_repeat_ms=5, warmup=1)
    costs = time_callable(clock.run, settings, clock=clock)
    assert len(costs) == 3
    assert costs == pytest.approx([1e-4] * 3)
    plan = plan_samples(1e-4, settings)
    assert plan.number == 50 and plan.number * 1e-4 * 1e3 >= settings.min_repeat_ms
    # warm-up lasted min_repeat_ms (50 calls, 51 after float round-off), then 3 samples of 50 calls
    assert clock.calls - 3 * 50 in (50, 51)


@pytest.mark.parametrize("run_s, min_ms, number", [(3e-3, 25, 9), (1e-6, 1, 1000), (0.05, 25, 1), (1e-4, 0, 1)])
def test_plan_number(run_s, min_ms, number):
    plan = plan_samples(run_s, MeasureSettings(number=1, repeat=3, min_repeat_ms=min_ms))
    assert plan.number == number and plan.repeat == 3
    assert plan.number * run_s * 1e3 >= min_ms


def test_plan_keeps_settings_number_and_fits_the_run_timeout():
    assert plan_samples(1e-3, MeasureSettings(number=40, min_repeat_ms=5)).number == 40
    # 1 s per run, 5 samples asked: only as many as fit in a third of the 6 s run timeout
    assert plan_samples(1.0, MeasureSettings(repeat=5, min_repeat_ms=0, run_timeout=6.0)) == SamplePlan(1, 2)
    assert plan_samples(100.0, MeasureSettings(repeat=5, run_timeout=6.0)).repeat == 1


def test_warm_up_calls_at_least_warmup_times_and_returns_the_fastest():
    durations = iter([5e-3, 1e-3, 2e-3, 2e-3, 2e-3])
    clock = FakeClock(0.0)

    def call():
        clock.now += next(durations)

    assert warm_runs(call, MeasureSettings(warmup=4, min_repeat_ms=0), clock=clock).fastest == pytest.approx(1e-3)
    assert clock.now == pytest.approx(10e-3)  # exactly 4 calls


def test_time_loop_returns_repeat_samples_per_run():
    clock = FakeClock(2e-3)
    assert time_loop(clock.run, SamplePlan(number=4, repeat=2), clock=clock) == pytest.approx([2e-3, 2e-3])
    assert clock.calls == 8


def test_time_callable_on_the_real_clock():
    costs = time_callable(lambda: time.sleep(1e-3), MeasureSettings(repeat=2, min_repeat_ms=5))
    assert len(costs) == 2 and all(1e-3 <= c < 0.1 for c in costs)


@pytest.mark.tvm
def test_run_kernel_times_with_the_decided_plan():
    """run_kernel passes the plan of the rule to TVM's time_evaluator (with TVM's own min_repeat_ms off)."""
    from tiletune.measure.local import WrongAnswer, run_kernel
    from tiletune.workloads import parse

    wl = parse("gemm:M=8,N=8,K=8")
    asked = {}

    class FakeLib:
        def __getitem__(self, name):
            def main(a, b, out):
                time.sleep(1e-3)
                out.copyfrom(wl.reference(a.numpy(), b.numpy()).astype(wl.dtype))
            return main

        def time_evaluator(self, name, dev, number, repeat, min_repeat_ms):
            asked.update(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)

            class Result:
                results = [1e-3] * repeat
            return lambda *args: Result()

    class WrongLib(FakeLib):
        def __getitem__(self, name):
            return lambda a, b, out: time.sleep(1e-3)

    costs = run_kernel(wl, FakeLib(), MeasureSettings(number=1, repeat=4, min_repeat_ms=5))
    assert costs == [1e-3] * 4
    assert asked["min_repeat_ms"] == 0 and asked["repeat"] == 4
    assert 1 <= asked["number"] <= 5  # a run of >= 1 ms: at most 5 runs make 5 ms

    # checked, then cut off after its warm-up: 100x slower than the best so far, the evaluator never runs
    asked.clear()
    costs = run_kernel(wl, FakeLib(), MeasureSettings(number=1, repeat=4, min_repeat_ms=5), best_s=1e-5)
    assert len(costs) == 1 and 1e-3 <= costs[0] < 0.1 and not asked
    with pytest.raises(WrongAnswer):  # the check still comes first
        run_kernel(wl, WrongLib(), MeasureSettings(repeat=4, min_repeat_ms=5), best_s=1e-5)


def test_cut_off_needs_a_known_best_and_a_clearly_slower_kernel():
    s = MeasureSettings(cutoff=2.0)
    assert cut_off(2.1e-3, s, best_s=1e-3)
    assert not cut_off(1.9e-3, s, best_s=1e-3)  # within the factor: all samples
    assert not cut_off(1.0, s)  # no best known yet
    assert not cut_off(1.0, MeasureSettings(cutoff=0), best_s=1e-3)  # 0 turns it off


def test_warm_runs_keep_the_fastest_and_the_total():
    durations = iter([5e-3, 1e-3, 2e-3])
    clock = FakeClock(0.0)

    def call():
        clock.now += next(durations)

    w = warm_runs(call, MeasureSettings(warmup=3, min_repeat_ms=0), clock=clock)
    assert (w.fastest, w.calls) == (pytest.approx(1e-3), 3) and w.mean == pytest.approx(8e-3 / 3)


def test_a_slow_kernel_is_cut_off_after_its_warm_up():
    """Clearly slower than the best so far: its one sample is the warm-up (>= min_repeat_ms of calls)."""
    clock = FakeClock(1e-3)
    settings = MeasureSettings(repeat=3, min_repeat_ms=5, cutoff=2.0)
    costs = time_callable(clock.run, settings, clock=clock, best_s=1e-4)
    assert costs == pytest.approx([1e-3])
    assert clock.calls == 5  # the warm-up's 5 ms only, no further samples


@pytest.mark.parametrize("best_s, cutoff", [(6e-4, 2.0), (1e-4, 0.0), (float("inf"), 2.0)])
def test_a_kernel_near_the_best_or_without_cut_off_gets_every_sample(best_s, cutoff):
    clock = FakeClock(1e-3)
    settings = MeasureSettings(repeat=3, min_repeat_ms=5, cutoff=cutoff)
    plan = warm_and_plan(clock.run, settings, best_s, clock=clock)
    assert plan == SamplePlan(number=5, repeat=3)
    other = FakeClock(1e-3)
    assert time_callable(other.run, settings, clock=other, best_s=best_s) == pytest.approx([1e-3] * 3)


@pytest.mark.parametrize("warmup_ms, min_ms, calls", [(10, 25, 10), (10, 4, 4), (0, 25, 1)])
def test_the_warm_up_lasts_the_shorter_of_warmup_ms_and_min_repeat_ms(warmup_ms, min_ms, calls):
    """1 ms calls: the warm-up makes as many calls as its duration asks (at least one), and the samples
    after it still last min_repeat_ms each."""
    clock = FakeClock(1e-3)
    settings = MeasureSettings(repeat=2, min_repeat_ms=min_ms, warmup_ms=warmup_ms, warmup=1)
    w = warm_runs(clock.run, settings, clock=clock)
    assert w.calls == calls
    assert plan_samples(w.fastest, settings) == SamplePlan(number=max(1, min_ms), repeat=2)
    # a device's warm-up (calls timed where they run) follows the same rule
    remote = FakeClock(1e-3)
    assert warm_runs_timed(lambda n: [remote.run() or 1e-3 for _ in range(n)], settings).calls == calls
