"""Which task of a model gets the next round of trials.

Both schedulers see the tasks' ``TaskState`` (``tiletune.model.tuning.tuner``): rounds given so far, the best
latency of the task's kernel after each round (``history``, seconds per call; ``inf`` while nothing
succeeded), its calls per inference (``calls``), FLOPs per call (``flops``), operator group (``group``, e.g.
"conv2d", "matmul") and whether it is finished (``done``: exhausted space or a crash).

- ``GradientScheduler``: Ansor's gradient-based task scheduler (Zheng et al., OSDI'20, Sec. 6). The
  objective is the model's latency f = sum_i w_i g_i(t_i) (w_i = calls, g_i = best latency of task i
  after t_i rounds); each round goes to the task with the largest expected decrease of f,

      dg_i/dt ~ alpha * (g_i(t_i) - g_i(t_i - dt)) / dt + (1 - alpha) * min(-g_i(t_i) / t_i,
                                                                      beta * C_i / max_{k in N(i)} V_k - g_i(t_i))

  i.e. argmax_i w_i * (alpha * back_i + (1 - alpha) * max(g_i / t_i, g_i - beta * C_i / V_max)), where
  ``back_i`` is the decrease over the last ``window`` rounds (dt), C_i the task's FLOPs and V_k the best
  FLOP/s reached by a task of the same operator group N(i) (the "similar tasks" term: a task much slower
  than its siblings can probably be made faster). Like Ansor, every task first gets one round (round
  robin) and an epsilon-greedy choice (probability ``eps``) keeps exploring. Constants: Ansor's alpha=0.2,
  beta=2, window=3, eps=0.05. A task without any successful trial is chosen first until it has had
  ``max_failing_rounds`` rounds; then it is finished (its kernel keeps the default schedule).
- ``FlopsScheduler``: the simple alternative: rounds in proportion to each task's share of the model's
  FLOPs (FLOPs x calls): the next round goes to the task furthest below its share.
"""
from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from ...errors import TiletuneError


class TaskView(Protocol):
    rounds: int
    history: list[float]
    calls: int
    flops: int
    group: str
    done: str


class GradientScheduler:
    name = "gradient"

    def __init__(self, rng: np.random.Generator, *, alpha: float = 0.2, beta: float = 2.0, window: int = 3,
                 eps: float = 0.05, max_failing_rounds: int = 2):
        self.rng, self.alpha, self.beta, self.window, self.eps = rng, alpha, beta, window, eps
        self.max_failing_rounds = max_failing_rounds

    def next(self, tasks: Sequence[TaskView]) -> int | None:
        alive = [i for i, t in enumerate(tasks) if not t.done]
        if not alive:
            return None
        for i in alive:  # round robin first
            if tasks[i].rounds == 0:
                return i
        failing = [i for i in alive if not math.isfinite(tasks[i].history[-1])]
        for i in failing:
            if tasks[i].rounds < self.max_failing_rounds:
                return i
            tasks[i].done = tasks[i].done or "no successful trial"
        alive = [i for i in alive if i not in failing]
        if not alive:
            return None
        if self.rng.random() < self.eps:
            return int(self.rng.choice(alive))
        vmax: dict[str, float] = {}
        for t in tasks:
            if t.history and math.isfinite(t.history[-1]) and t.history[-1] > 0:
                vmax[t.group] = max(vmax.get(t.group, 0.0), t.flops / t.history[-1])
        best_i, best_score = alive[0], -math.inf
        for i in alive:
            t = tasks[i]
            g = t.history[-1]
            w = self.window
            back = (t.history[-1 - w] - g) / w if len(t.history) > w and math.isfinite(t.history[-1 - w]) else 0.0
            optimistic = g / t.rounds
            similar = g - self.beta * t.flops / vmax[t.group] if vmax.get(t.group) else 0.0
            score = t.calls * (self.alpha * back + (1 - self.alpha) * max(optimistic, similar))
            if score > best_score:
                best_i, best_score = i, score
        return best_i


class FlopsScheduler:
    name = "flops"

    def __init__(self, rng: np.random.Generator | None = None):
        self.rng = rng

    def next(self, tasks: Sequence[TaskView]) -> int | None:
        alive = [i for i, t in enumerate(tasks) if not t.done]
        if not alive:
            return None
        total = sum(max(1, t.flops * t.calls) for t in tasks)
        return min(alive, key=lambda i: (tasks[i].rounds / (max(1, tasks[i].flops * tasks[i].calls) / total), i))


SCHEDULERS = {"gradient": GradientScheduler, "flops": FlopsScheduler}


def make_scheduler(name: str, seed: int = 0):
    if name not in SCHEDULERS:
        raise TiletuneError(f"unknown task scheduler {name!r}; accepted: {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name](np.random.default_rng(seed))
