"""Tune every task of a model under one trial budget: a task scheduler picks the task of each round, and
the one tuning loop (``tiletune.tune.tune``) runs that round with the task's own strategy and measurer.

- Each task keeps its strategy (made once, with the run's seed) and its measurer (``make_measurer``; on
  this machine all tasks share one pool of warm workers) for the whole run, so a task's search continues
  where its last round stopped.
- Strategies with worker processes (the TVM feature pools of xgb, evo, dgd) hold them only while their
  task is being tuned: when the next round goes to another task, the previous task's strategy is closed,
  which stops its workers (their ``close`` is reversible: the pool starts again at its next use), so a model
  of many tasks never has more than one task's feature workers alive.
- A round is ``round_trials`` trials of one task (fewer at the end of the budget; when ``trials`` is less than
  a round per task, rounds of ``trials // tasks``, so that the first rounds still reach every task). ``trials`` counts the
  whole model's trials; ``seconds`` bounds the wall time (a round in flight finishes).
- Records of every task go to one JSONL file, keyed by the task's workload key; every result is written as
  it arrives.
- Resume: re-running the same command replays the same decisions (the strategies and the scheduler are
  seeded, and recalled results equal the measured ones), answering from the records file what was
  measured before; nothing is measured twice.
- Each task is built as ``session.run`` builds a workload (``tiletune.session.build_task``: space, context,
  strategy), its measurer comes from ``tiletune.measure.factory`` in one shared pool of warm workers.
- Construct, then refine: the default strategy is ``DEFAULT_STRATEGY`` and every local search starts from the
  task's top ``MODEL_START_K`` constructions (``start=MODEL_START``: Gensor's and Roller's alternating, the
  direct- or row-order ones third where they apply; ``tiletune.construct``), measured before the cost model
  proposes anything; the scheduler gives every task a round first. ``-O start=...`` / ``-O start_k=N`` change
  it. Why: docs/decisions/model-start.md.
- Sibling seeds (opt-in, ``siblings=N``; off by default: docs/decisions/sibling-seeds.md): tasks with the same
  main computation in the same space (a convolution fused with two epilogues, ``sibling_key``) share their best
  configurations. At the start of each of a task's rounds, the N best configurations of every sibling that the
  task has not measured are measured first (``Strategy.add_seeds``; the xgb search takes them, strategies
  without a seed queue ignore them), inside the round's trials: the budget is unchanged.
- Confirmation (``tiletune.model.tuning.confirm``; K = 5 by default: docs/decisions/model-confirm.md): with ``confirm=K``,
  after the budget each task's K fastest configurations are measured again side by side, in 2 interleaved rounds
  without the early cut-off, and the build takes the fastest of these measurements instead of the luckiest
  single one. It costs ``2 x K`` measurements per task on top of the budget (its time is part of
  ``elapsed``); a task whose top candidates are already confirmed is not measured again.
- A task whose round raises (a strategy or a TVM failure that the measurer does not turn into a failed
  trial) is finished with the reason; the other tasks go on and their records are kept. So is a row reduction
  (``tiletune.workloads.rows``) that the strategy cannot search (gensor and roller need tile knobs), before
  the first round.
"""
from __future__ import annotations

import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import TiletuneError
from ...hardware import for_target, load as load_hardware
from ...measure.base import MeasureSettings, Measurer
from ...measure.factory import WorkerPool, make_measurer, shared_pool
from ...records import chosen, failures, kernel_identity, load, same_kernel
from ...session import build_task
from ...strategies import get as get_strategy
from ...target import is_cuda, target_key
from ...tune import TuneRun, tune
from ...workloads.rows import RowWorkload
from .confirm import CONFIRM_DEFAULT, check_top, confirm_settings, confirm_task
from .scheduler import make_scheduler
from ..kernels.tasks import Kernel, ModelTasks


DEFAULT_STRATEGY = "xgb"
#: best configurations of each sibling task measured first in a round (0: off): docs/decisions/sibling-seeds.md
SIBLING_SEEDS = 0
MODEL_START = "construct"  # docs/decisions/model-start.md
MODEL_START_K = 10


def task_defaults(strategy: str) -> dict:
    """The model path's defaults of a task's strategy: ``start=MODEL_START`` and ``start_k=MODEL_START_K`` for
    a strategy with these options. Defaults, not options: a start the caller leaves alone still falls back
    on the paper's start, with a warning, on a task that cannot be constructed (no affine access model)."""
    cls = get_strategy(strategy)
    return {k: v for k, v in (("start", MODEL_START), ("start_k", MODEL_START_K)) if cls.has_option(k)}


def group_of(kernel: Kernel) -> str:
    """The operator group of a task (similar tasks for the gradient scheduler): conv2d, depthwise conv2d,
    matmul / dense / batch matmul, or the anchor block's name."""
    n = kernel.name.lower()
    for g in ("conv2d", "matmul", "dense"):
        if g in n:
            return g
    return kernel.workload.anchor_name() if kernel.workload is not None else n


@dataclass
class TaskState:
    kernel: Kernel
    space: Any = None
    strategy: Any = None
    measurer: Measurer | None = None
    rounds: int = 0
    trials: int = 0
    measured: int = 0
    recalled: int = 0
    errors: int = 0
    best_s: float = math.inf
    best_gflops: float = 0.0
    history: list[float] = field(default_factory=list)  # best seconds per call after each round
    done: str = ""
    failures: Counter = field(default_factory=Counter)  # (error kind, its message in one line) -> trials
    top: list = field(default_factory=list)  # (seconds, Config) of its fastest results in this run, fastest first
    siblings: list = field(default_factory=list)  # the other TaskStates of its sibling_key

    def note_top(self, records, keep: int) -> None:
        """Keep the ``keep`` fastest configurations of this task's results (``records`` of one round)."""
        for r in records:
            if keep and r.ok and self.space is not None:
                try:
                    c = self.space.from_dict(r.config)
                except TiletuneError:
                    continue
                if all(c != old for _, old in self.top):
                    self.top = sorted(self.top + [(r.median_s, c)], key=lambda t: t[0])[:keep]

    def note_failures(self, records) -> None:
        """Count the failed trials of ``records`` (``tiletune.records.failures``)."""
        self.failures.update(failures(records))

    @property
    def failure(self) -> str:
        """The most frequent failure in one line, with how many trials failed so ("" when none did)."""
        if not self.failures:
            return ""
        (kind, msg), n = self.failures.most_common(1)[0]
        total = sum(self.failures.values())
        more = f" ({total - n} more failed otherwise)" if total > n else ""
        return f"{n} of {self.trials} trials failed: {kind}: {msg}{more}"

    @property
    def calls(self) -> int:
        return self.kernel.calls

    @property
    def flops(self) -> int:
        return self.kernel.flops

    @property
    def group(self) -> str:
        return group_of(self.kernel)

    @property
    def key(self) -> str:
        return self.kernel.workload.key


def sibling_key(st: TaskState) -> tuple | None:
    """What sibling tasks share: the main computation's input shapes (the workload key's ``[...]``) and the space
    (every knob's name, extent or choices), so that one task's configurations are configurations of the
    other's; None for a task without a space or a row reduction."""
    if st.space is None or isinstance(st.kernel.workload, RowWorkload):
        return None
    key = st.key.split("@")[0]
    shapes = key[key.find("["):] if "[" in key else key
    return shapes, tuple((k.name, getattr(k, "extent", None), getattr(k, "levels", None),
                          tuple(map(str, getattr(k, "values", ())))) for k in st.space.knobs)


@dataclass
class ModelTuneResult:
    states: list[TaskState]
    trials: int
    elapsed: float
    stopped: str
    confirmed: int = 0  # re-measurements of the tasks' top candidates (tiletune.model.tuning.confirm)
    confirm_s: float = 0.0  # their wall time, included in ``elapsed``

    @property
    def measured(self) -> int:
        return sum(s.measured for s in self.states)

    @property
    def recalled(self) -> int:
        return sum(s.recalled for s in self.states)


def tune_model(tasks: ModelTasks, *, strategy: str = DEFAULT_STRATEGY, trials: int | None = None,
               seconds: float | None = None, records: str, scheduler: str = "gradient",
               round_trials: int = 8, batch_size: int = 8, settings: MeasureSettings | None = None, seed: int = 0,
               options: dict | None = None, hardware: str | None = None, rpc: str | None = None,
               on_round: Callable[[TaskState, TuneRun | None, int], None] | None = None,
               callbacks: tuple = (), confirm: int = CONFIRM_DEFAULT,
               on_confirm: Callable[[TaskState, int], None] | None = None, pool=None,
               transfer: dict | None = None, siblings: int = SIBLING_SEEDS,
               recall: list | None = None) -> ModelTuneResult:
    """Tune ``tasks`` (see the module docstring); ``on_round(state, run, total_trials)`` after each round
    (``run`` None when the round failed), ``callbacks`` go to every round's tuning loop. ``rpc``
    (``HOST:PORT:KEY``): measure on the devices of that TVM RPC tracker (``tiletune.measure.rpc``); the
    kernels are still built here in the one shared pool, and a task's measurer (which holds sessions on the
    devices) is closed when the next round goes to another task, so two tasks never wait for the same
    devices. ``confirm``: after the budget, re-measure every task's ``confirm`` fastest candidates
    (``tiletune.model.tuning.confirm``; 0: off), ``on_confirm(state, measurements)`` after each task. ``pool``: warm
    workers to measure in, shared with other runs and closed by the caller (else the run starts its own).
    ``transfer``: by task key, what a task takes from other shapes' records (``tiletune.model.dynamic.shape_transfer``:
    ``paths`` for its cost model, ``seeds`` measured first). ``siblings``: best configurations of each sibling
    task measured first in a round (module docstring; 0: off). ``recall``: records read elsewhere (the tuning
    database's, ``tiletune.db``) whose configurations are recalled rather than measured again (``tiletune.tune.tune``)."""
    if trials is None and seconds is None:
        raise TiletuneError("give a budget: --trials (the whole model's) or --seconds")
    if round_trials < 1:
        raise TiletuneError(f"--round must be >= 1 trial, got {round_trials}")
    check_top(confirm)
    target = tasks.target
    tkey = target_key(target)
    hw = load_hardware(hardware) if hardware else None
    states = [TaskState(k) for k in tasks.tasks]
    if not states:
        return ModelTuneResult([], 0, 0.0, "no tunable task")
    recalled_by: dict[str, list] = {}  # ``recall`` by kernel, grouped once for the rounds of every task
    for r in recall or ():
        if r.target == tkey:
            recalled_by.setdefault(kernel_identity(r.workload), []).append(r)
    if trials is not None and trials < round_trials * len(states):
        # a budget of less than a round per task: rounds of an equal share, so that every task gets its first
        # round (at rounds of 8, gensor with 4 trials per task reached 15 of ResNet-50's 29 tasks)
        round_trials = max(1, trials // len(states))
    for st in states:  # built as session.run builds a workload; strategies and options checked before measuring
        tr = (transfer or {}).get(st.key)
        try:
            task = build_task(st.kernel.workload, strategy, target=target, seed=seed, options=options,
                              defaults=task_defaults(strategy), hardware=hw, measure=False,
                              transfer=tr.paths if tr else (), seeds=tr.seeds if tr else ())
        except TiletuneError as e:  # a strategy that needs tile knobs on a row reduction (gensor and roller
            # take the template's starts there: construct.row_starts)
            if not isinstance(st.kernel.workload, RowWorkload):
                raise
            st.done = f"not tuned: {e}"
            continue
        st.space, st.strategy = task.space, task.strategy
    groups: dict[tuple, list[TaskState]] = {}
    for st in states:
        if siblings and (key := sibling_key(st)) is not None:
            groups.setdefault(key, []).append(st)
    for group in groups.values():
        for st in group:
            st.siblings = [o for o in group if o is not st]
    sched = make_scheduler(scheduler, seed)
    own_pool = pool is None
    if own_pool:
        pool = shared_pool(target, rpc=rpc)
    started = time.monotonic()
    total = 0
    stopped = "trials"
    prev = None
    confirmed, confirm_s = 0, 0.0
    try:
        while True:
            if trials is not None and total >= trials:
                stopped = "trials"
                break
            if seconds is not None and time.monotonic() - started >= seconds:
                stopped = "seconds"
                break
            i = sched.next(states)
            if i is None:
                stopped = "every task finished"
                break
            st = states[i]
            if prev is not None and prev is not st:
                prev.strategy.close()  # its feature workers, if any; started again when it is next chosen
                if rpc is not None and prev.measurer is not None:
                    prev.measurer.close()  # its device sessions; the build pool is shared and stays
                    prev.measurer = None
            prev = st
            n = round_trials if trials is None else min(round_trials, trials - total)
            run = None
            try:
                if st.measurer is None:
                    st.measurer = make_measurer(st.kernel.workload, st.space, target, settings=settings, pool=pool,
                                                rpc=rpc)
                left = None if seconds is None else max(1e-3, seconds - (time.monotonic() - started))
                st.strategy.add_seeds([c for o in st.siblings for _, c in o.top])
                run = tune(space=st.space, strategy=st.strategy, measurer=st.measurer, workload=st.key,
                           flops=st.kernel.flops, target=tkey, trials=n, seconds=left,
                           batch_size=min(batch_size, n), records=records, callbacks=callbacks,
                           recall=recalled_by.get(kernel_identity(st.key), ()))
            except KeyboardInterrupt:
                raise
            except TiletuneError as e:
                st.done = f"failed: {e}"
            except Exception as e:  # noqa: BLE001  (one task's crash costs that task only)
                st.done = f"failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"
            st.rounds += 1
            if run is not None:
                st.note_failures(run.history)
                st.note_top(run.history, siblings if st.siblings else 0)
                st.trials += run.trials
                st.measured += run.measured
                st.recalled += run.recalled
                st.errors += run.errors
                total += run.trials
                if run.best is not None and run.best.median_s < st.best_s:
                    st.best_s, st.best_gflops = run.best.median_s, run.best.gflops
                if run.stopped == "exhausted":
                    st.done = "exhausted"
                elif run.trials == 0:
                    st.done = st.done or "no trial"
            st.history.append(st.best_s)
            if on_round is not None:
                on_round(st, run, total)
        if prev is not None:  # the last task's feature workers and device sessions are not needed any more
            prev.strategy.close()
            if rpc is not None and prev.measurer is not None:
                prev.measurer.close()
                prev.measurer = None
        if confirm and pool is not None:
            t0 = time.monotonic()
            confirmed = _confirm(states, records, tkey, target, settings, pool, rpc, confirm, on_confirm)
            confirm_s = time.monotonic() - t0
    finally:
        for st in states:
            if st.measurer is not None:
                st.measurer.close()
            if st.strategy is not None:
                st.strategy.close()
        if own_pool and pool is not None:
            pool.close()
    return ModelTuneResult(states, total, time.monotonic() - started, stopped, confirmed, confirm_s)


def _confirm(states: list[TaskState], records: str, tkey: str, target: dict, settings: MeasureSettings | None,
             pool: WorkerPool | None, rpc: str | None, top: int,
             on_confirm: Callable[[TaskState, int], None] | None) -> int:
    """Confirm every task with results (``tiletune.model.tuning.confirm``); a task's best becomes its confirmed
    kernel. Returns the number of measurements."""
    if not os.path.exists(records):
        return 0
    recs = load(records, target=tkey, warn=False)
    cores = 0 if is_cuda(target) else for_target(target, measure_bandwidth=False).cores
    made = 0
    for st in states:
        if not math.isfinite(st.best_s):
            continue
        mine = [r for r in recs if same_kernel(r.workload, st.key)]
        measurer = make_measurer(st.kernel.workload, st.space, target, settings=confirm_settings(settings), pool=pool,
                                 rpc=rpc)
        try:
            new = confirm_task(records=mine, records_path=records, workload=st.key, target=tkey, space=st.space,
                               measurer=measurer, flops=st.kernel.flops, top=top, task=st.kernel.workload,
                               cores=cores)
        except TiletuneError as e:
            new = []
            st.done = st.done or f"confirmation failed: {e}"
        finally:
            measurer.close()
        pick = chosen(mine + new, st.key)
        if pick is not None:
            st.best_s, st.best_gflops = pick[1], pick[2]
        made += len(new)
        if on_confirm is not None:
            on_confirm(st, len(new))
    return made
