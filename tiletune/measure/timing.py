"""The one timing rule, for our kernels and for the vendor baselines alike.

Given a callable that runs the operator once (its first, checked run already done by the caller) and the
``MeasureSettings``:

1. **Warm-up**: call it at least ``warmup`` times (at least once) and until the warm calls together have
   lasted ``min_repeat_ms``, so that thread pools, caches and clocks are awake before timing (microsecond
   kernels ran 2x slower in their first samples without this). The fastest warm call is the estimate
   ``t`` of one run.
2. **Runs per sample**: ``number = max(settings.number, ceil(min_repeat_ms / t))`` (at least 1), so
   that one sample lasts at least ``min_repeat_ms`` at the warm speed.
3. **Samples**: ``repeat`` of them, fewer (down to 1) while ``repeat * number * t`` would take more than
   a third of ``run_timeout``, so that one measurement stays well inside its timeout.
4. **A sample** is the time of ``number`` back-to-back calls divided by ``number`` (seconds per run);
   every sample is returned.

``time_callable`` applies the rule with a Python loop (vendor libraries). A TVM kernel is warmed up by the
same ``warm_up`` and then timed by TVM's ``time_evaluator`` with the decided ``number`` and ``repeat``
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


def warm_up(call: Callable[[], Any], settings: MeasureSettings, clock: Clock = time.perf_counter) -> float:
    """Step 1: warm calls (at least ``warmup``, lasting at least ``min_repeat_ms``); returns the fastest
    warm call in seconds."""
    fastest, calls, start = math.inf, 0, clock()
    while calls < max(1, settings.warmup) or (clock() - start) * 1e3 < settings.min_repeat_ms:
        t0 = clock()
        call()
        fastest = min(fastest, clock() - t0)
        calls += 1
    return fastest


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


def time_callable(call: Callable[[], Any], settings: MeasureSettings, clock: Clock = time.perf_counter
                  ) -> list[float]:
    """The whole rule (warm-up, plan, samples) with a Python loop; seconds per run for every sample."""
    plan = plan_samples(warm_up(call, settings, clock), settings)
    return time_loop(call, plan, clock)
