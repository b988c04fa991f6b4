"""The one timing rule, for our kernels and for the vendor baselines alike.

Given a callable that runs the operator once (its first, checked run already done by the caller) and the
``MeasureSettings``:

1. **Warm-up**: call it at least ``warmup`` times (at least once) and until the warm calls together have
   lasted ``min(warmup_ms, min_repeat_ms)``, so that thread pools, caches and clocks are awake before
   timing (microsecond kernels ran 2x slower in their first samples without this). The fastest warm call
   is the estimate ``t`` of one run.
2. **Runs per sample**: ``number = max(settings.number, ceil(min_repeat_ms / t))`` (at least 1), so
   that one sample lasts at least ``min_repeat_ms`` at the warm speed.
3. **Early cut-off** (tinygrad's BEAM search stops timing slow kernels early too): when the caller
   knows the best median ``best_s`` measured so far for the workload and ``t > settings.cutoff *
   best_s`` (``t`` is the *fastest* warm call, so only a kernel slower than that even at its best is
   cut), the kernel is not timed further: its one sample is the warm-up itself, seconds per run = the
   warm calls' total time / their number. That sample is a real measurement of at least ``warmup``
   calls lasting at least ``min(warmup_ms, min_repeat_ms)``; it includes the calls that woke the
   caches, so if anything it is slow, never making a cut kernel look faster. On a random search most
   kernels are several times slower than the best, and their samples were most of the run phase.
   **Samples** otherwise: ``repeat`` of them, fewer (down to 1) while ``repeat * number * t`` would take
   more than a third of ``run_timeout``, so that one measurement stays well inside its timeout.
4. **A sample** is the time of ``number`` back-to-back calls divided by ``number`` (seconds per run);
   every sample is returned.

``time_callable`` applies the rule with a Python loop (vendor libraries). A TVM kernel goes through the
same steps 1-3 (``warm_and_plan``) and then, unless cut off, is timed by TVM's ``time_evaluator`` with the
decided ``number`` and ``repeat``
and ``min_repeat_ms=0`` (``tiletune.measure.local.run_kernel``): the evaluator makes one extra untimed
call, then times ``repeat`` samples of ``number`` calls each in C++, which is step 4 without the Python
call overhead; its own adaptive ``min_repeat_ms`` loop (which re-runs a whole sample with a larger
``number`` when one was too short) is not used, since ``number`` is already decided here.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from .base import MeasureSettings

Clock = Callable[[], float]


@dataclass(frozen=True)
class SamplePlan:
    """How one measurement is taken: ``repeat`` samples of ``number`` runs each."""

    number: int
    repeat: int


@dataclass(frozen=True)
class WarmUp:
    """Step 1's warm calls: the fastest one, and all of them together (seconds)."""

    fastest: float
    total: float
    calls: int

    @property
    def mean(self) -> float:
        return self.total / self.calls


def warm_runs(call: Callable[[], Any], settings: MeasureSettings, clock: Clock = time.perf_counter) -> WarmUp:
    """Step 1: warm calls (at least ``warmup``, lasting at least ``min(warmup_ms, min_repeat_ms)``)."""
    fastest, total, calls, start = math.inf, 0.0, 0, clock()
    while calls < max(1, settings.warmup) or (clock() - start) * 1e3 < warm_ms(settings):
        t0 = clock()
        call()
        took = clock() - t0
        fastest, total, calls = min(fastest, took), total + took, calls + 1
    return WarmUp(fastest, total, calls)


def warm_ms(settings: MeasureSettings) -> float:
    """How long step 1's warm calls last together, at least (milliseconds)."""
    return min(settings.warmup_ms, settings.min_repeat_ms)


def cut_off(run_s: float, settings: MeasureSettings, best_s: float = math.inf) -> bool:
    """Step 3's early cut-off: is a kernel whose fastest warm call took ``run_s`` more than
    ``settings.cutoff`` times slower than the best median ``best_s`` so far (0: never cut)?"""
    return settings.cutoff > 0 and 0 < best_s < math.inf and run_s > settings.cutoff * best_s


def plan_samples(run_s: float, settings: MeasureSettings) -> SamplePlan:
    """Steps 2 and 3: runs per sample and samples, given ``run_s`` seconds for one warm run."""
    run_s = max(run_s, 1e-7)
    # rounded first, so that a float quotient such as 50.000000001 asks for 50 runs, not 51
    number = max(1, settings.number, math.ceil(round(settings.min_repeat_ms / 1e3 / run_s, 6)))
    repeat = max(1, settings.repeat)
    while repeat > 1 and run_s * number * repeat > settings.run_timeout / 3:
        repeat -= 1
    return SamplePlan(number=number, repeat=repeat)


def time_loop(call: Callable[[], Any], plan: SamplePlan, clock: Clock = time.perf_counter) -> list[float]:
    """Step 4 with a Python loop: seconds per run for each of ``plan.repeat`` samples."""
    out = []
    for _ in range(plan.repeat):
        t0 = clock()
        for _ in range(plan.number):
            call()
        out.append((clock() - t0) / plan.number)
    return out


def warm_and_plan(call: Callable[[], Any], settings: MeasureSettings, best_s: float = math.inf,
                  clock: Clock = time.perf_counter) -> SamplePlan | list[float]:
    """Steps 1-3: the plan of the samples still to take or, for a kernel cut off (``best_s``: the best
    median known for the workload, ``inf`` if none), its one sample, already taken (seconds per run)."""
    return plan_after(warm_runs(call, settings, clock), settings, best_s)


def plan_after(warm: WarmUp, settings: MeasureSettings, best_s: float = math.inf) -> SamplePlan | list[float]:
    """Steps 2 and 3 once the warm calls are made (here, or on a device: ``warm_runs_timed``): the
    kernel's one sample (the warm calls' mean) when it is cut off, else the plan of its samples."""
    if cut_off(warm.fastest, settings, best_s):
        return [warm.mean]
    return plan_samples(warm.fastest, settings)


def time_callable(call: Callable[[], Any], settings: MeasureSettings, clock: Clock = time.perf_counter,
                  best_s: float = math.inf) -> list[float]:
    """The whole rule (warm-up, plan or cut-off, samples) with a Python loop; seconds per run for every
    sample."""
    plan = warm_and_plan(call, settings, best_s, clock)
    return plan if isinstance(plan, list) else time_loop(call, plan, clock)


def warm_runs_timed(timed: Callable[[int], list[float]], settings: MeasureSettings) -> WarmUp:
    """Step 1 for calls timed where they run: ``timed(n)`` makes ``n`` calls and returns each one's seconds
    (a remote device's ``time_evaluator`` with ``number=1, repeat=n``: one round trip for many calls, and no
    network latency in the times). The same rule as ``warm_runs``: at least ``warmup`` calls, together
    lasting at least ``min(warmup_ms, min_repeat_ms)``; each further round asks for the calls still needed at the fastest
    speed seen (at most 10,000 per round)."""
    times: list[float] = []
    n = max(1, settings.warmup)
    while True:
        times += [float(x) for x in timed(n)]
        total = sum(times)
        if len(times) >= max(1, settings.warmup) and total * 1e3 >= warm_ms(settings):
            return WarmUp(min(times), total, len(times))
        left = warm_ms(settings) / 1e3 - total
        n = int(min(10_000, max(1, math.ceil(left / max(min(times), 1e-7)))))
