"""Shared search across shapes (DietCode-like; Zheng et al., MLSys'22): one search per symbolic kernel of a dynamic
model for all its tuned shapes, instead of one search per shape. Opt-in: ``tiletune model tune MODEL --shapes ...
--shared-search``; measured against tuning each shape alone: [shared-search](../../docs/decisions/shared-search.md).

- Groups: the merged tasks (``tiletune.model.dynamic.shapes.DynamicTasks.merged``) that are the same symbolic kernel at
  different shapes (``tiletune.model.dynamic.shape_rule.matches`` against the fused symbolic module's kernels, as
  ``tiletune.model.dynamic.shape_transfer`` does) and whose spaces have the same knobs (``tiletune.features.knob.signature``)
  form one group; every other task (a kernel whose shapes do not depend on the dimension, shared by all shapes, or
  one without a signature) is a group of one and is tuned by ``tune_model`` as usual.
- Candidates are shape-independent micro-kernels: a configuration as knob values (tile factors and choice knobs),
  which ``shape_transfer.adapt`` maps onto each shape's space (the inner tile factors kept where they divide, the
  outermost takes the rest; a configuration of shape S maps back onto S unchanged). The pool: every shape's start
  (the constructions a task of ``tune_model`` measures first: ``start=construct``, ``start_k=MODEL_START_K``, the
  default sweep), the neighbours (``Space.neighbours``) of the best candidates measured so far in the space of the
  group's largest shape, and ``RANDOM`` uniform samples of that space.
- One search per group, in rounds of measurements at ONE shape: the shape with the fewest measurements so far (ties:
  the larger calls x FLOPs), so that every shape gets data. A shape's first round measures its own top constructions
  in order (half its share of the search, at most ``batch_size``): the analytic constructions are
  the strongest start a shape has, and a model trained on another shape's few points picked worse ones (measured:
  docs/decisions/shared-search.md). Then rounds of ``ceil(batch_size / shapes)`` measurements (so that they rotate
  over the shapes) take the pool's candidates with the best predicted score at that shape that were not measured
  there (one slot in ``EPSILON`` uniform random from the pool, as xgb); before the model exists (``MIN_TRAIN``
  successful results), the shape's next constructions, then the other shapes'.
- The cost model: AutoTVM's XGBoost model (``tiletune.cost_model.xgb.XGBCostModel``, rank loss, one query group per
  shape) over (candidate, shape): the knob features of the candidate adapted to the shape (``tiletune.features.knob``)
  followed by log2 of the shape's anchor loop extents; labels min_cost / cost within the shape (0 for a failure).
  Trained on every measurement of the group at every shape, so a candidate measured at one shape informs the
  prediction at the others and need not be measured at each.
- Confirmation (dispatch): the last ``CONFIRM`` x shapes measurements of a group's budget go, per shape, to the
  ``CONFIRM`` candidates with the best predicted score there among those that ran successfully at another shape and
  were not measured at this one (where fewer are left, the round's usual proposals), so every shape chooses among
  measured kernels (its fastest record, as ``model build`` always does). A budget under 3 measurements per shape
  confirms fewer.
- Budget: ``trials`` is the whole model's, split over the groups in proportion to their tasks (a group of 3 shapes
  gets 3 tasks' share); the groups of one share theirs in one ``tune_model`` run. Every measurement goes through
  the one tuning loop (``tiletune.tune.tune``) with that shape's task's workload key, measurer and space, so the
  records are ordinary records of that task (``model build`` reads them unchanged), and a re-run of the same command
  recalls them instead of measuring again (the search is seeded and its decisions depend only on the results).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ...cost_model.xgb import XGBCostModel
from ...errors import TiletuneError
from ...features.knob import knob_vector, signature as knob_signature
from ...measure.base import MeasureSettings
from ...measure.factory import make_measurer, shared_pool
from ...schedules import make_space
from ...space import Config, Space
from ...strategies.base import Strategy, Trial, TuneContext
from ...strategies.starts import DEFAULT_START_SWEEP, start_states
from ...target import target_key
from ...tune import tune
from .shape_rule import matches, signature
from .shape_transfer import adapt
from ..kernels.tasks import ModelTasks, fuse
from ..tuning.tuner import DEFAULT_STRATEGY, MODEL_START_K, ModelTuneResult, TaskState, tune_model

CONFIRM = 2  # candidates measured per shape at the end (the dispatch's confirmation)
RANDOM = 256  # uniform samples of the largest shape's space in the pool
NEIGHBOURS_OF = 4  # best candidates whose neighbours join the pool each round
EPSILON = 0.05  # a slot of a round filled with a random candidate of the pool
MIN_TRAIN = 8  # successful measurements before the first model


class _Given(Strategy):
    """The configurations of one round of the shared search, handed to the tuning loop once."""

    name = "shared-search"
    summary = "one round of the shared search across shapes (tiletune.model.dynamic.shared_search)"

    def __init__(self, space: Space, configs: Sequence[Config], seed: int = 0):
        super().__init__(space, seed=seed)
        self.todo = list(configs)

    def ask(self, n: int) -> list[Config]:
        out, self.todo = self.todo[:n], self.todo[n:]
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        pass


def _key(values: dict) -> str:
    return json.dumps(values, sort_keys=True, default=list)


@dataclass
class _Shape:
    state: TaskState
    space: Space
    extents: tuple[int, ...]
    measurer: object = None
    starts: list[dict] = field(default_factory=list)
    results: dict = field(default_factory=dict)  # Config of this space -> seconds (inf: failed)
    by_candidate: dict = field(default_factory=dict)  # candidate key -> Config here (None: does not map)


@dataclass
class Group:
    """Tasks that are one symbolic kernel at several shapes (``states``: TaskState of each, largest FLOPs last)."""

    states: list[TaskState]
    extents: list[tuple[int, ...]]


def groups_of(dyn, states: list[TaskState]) -> tuple[list[Group], list[TaskState]]:
    """(the groups of two or more shapes, the tasks in no such group); see the module docstring."""
    import tvm

    fused = fuse(dyn.symbolic, dyn.target, static=False)
    templates = [signature(f, {}, partial=True) for f in fused.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    templates = [t for t in templates if t is not None]
    buckets: dict[tuple, list[tuple[TaskState, tuple]]] = {}
    alone: list[TaskState] = []
    for st in states:
        sg = signature(st.kernel.func, {})
        ti = next((i for i, t in enumerate(templates) if sg is not None and matches(t, sg)), None)
        if ti is None or st.space is None:
            alone.append(st)
            continue
        buckets.setdefault((ti, knob_signature(st.space)), []).append((st, sg))
    groups: list[Group] = []
    for members in buckets.values():
        if len(members) < 2:
            alone += [st for st, _ in members]
            continue
        members.sort(key=lambda m: (m[0].kernel.flops, m[0].key))
        groups.append(Group([m[0] for m in members], [tuple(int(x) for x in m[1][2]) for m in members]))
    return groups, alone


def _shares(total: int, sizes: list[int]) -> list[int]:
    """``total`` split in proportion to ``sizes`` (largest remainders)."""
    n = sum(sizes)
    raw = [total * s / n for s in sizes]
    out = [int(r) for r in raw]
    for i in sorted(range(len(sizes)), key=lambda i: -(raw[i] - out[i]))[: total - sum(out)]:
        out[i] += 1
    return out


class SharedSearch:
    """The search of one group (see the module docstring). ``run()`` spends ``budget`` measurements."""

    def __init__(self, group: Group, *, budget: int, records: str, target: dict, pool, settings, seed: int,
                 batch_size: int, on_round: Callable | None = None, callbacks: tuple = ()):
        self.budget = budget
        self.records = records
        self.target = target
        self.tkey = target_key(target)
        self.pool = pool
        self.settings = settings
        self.batch_size = max(1, batch_size)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.on_round = on_round
        self.callbacks = callbacks
        self.shapes = [_Shape(st, st.space, ext) for st, ext in zip(group.states, group.extents)]
        self.all = list(self.shapes)  # self.shapes: those still searched (a shape whose round crashed leaves)
        self.ref = self.shapes[-1].space  # the largest shape's space: neighbours and random samples
        self.pool_keys: dict[str, dict] = {}  # candidate key -> knob values
        self.model: XGBCostModel | None = None
        self.total = 0
        for sh in self.shapes:
            ctx = TuneContext(workload=sh.state.kernel.workload, target=target)
            try:
                cs = start_states(sh.space, "construct", np.random.default_rng(seed), ctx, MODEL_START_K,
                                  fallback="random", sweep=DEFAULT_START_SWEEP)
            except TiletuneError:
                cs = [sh.space.sample(self.rng)]
            sh.starts = [sh.space.to_dict(c) for c in cs]
            for d in sh.starts:
                self._add(d)
        for c in self.ref.sample_unique(self.rng, RANDOM):
            self._add(self.ref.to_dict(c))

    # ---- candidates ------------------------------------------------------------------------------
    def _add(self, values: dict) -> str:
        k = _key(values)
        self.pool_keys.setdefault(k, values)
        return k

    def _at(self, sh: _Shape, key: str) -> Config | None:
        """The candidate ``key`` in shape ``sh``'s space (None: it does not map there)."""
        if key not in sh.by_candidate:
            c = adapt(sh.space, self.pool_keys[key])
            sh.by_candidate[key] = c if c is not None and sh.space.is_legal(c) else None
        return sh.by_candidate[key]

    def _features(self, sh: _Shape, configs: Sequence[Config]) -> np.ndarray:
        ext = np.log2(np.maximum(1, np.asarray(sh.extents, dtype=np.float64))).astype(np.float32)
        return np.stack([np.concatenate([knob_vector(sh.space, c), ext]) for c in configs])

    # ---- the cost model --------------------------------------------------------------------------
    def _fit(self) -> None:
        X, y, groups = [], [], []
        for sh in self.shapes:
            if not sh.results:
                continue
            configs = list(sh.results)
            costs = np.asarray([sh.results[c] for c in configs])
            ok = np.isfinite(costs)
            best = costs[ok].min() if ok.any() else 1.0
            X.append(self._features(sh, configs))
            y.append(np.where(ok, best / np.where(ok, costs, 1.0), 0.0))
            groups.append(len(configs))
        if sum(int(np.isfinite(list(sh.results.values())).sum()) for sh in self.shapes) < MIN_TRAIN:
            return
        self.model = XGBCostModel("rank", nthread=1, seed=self.seed).fit(
            np.concatenate(X), np.concatenate(y), groups=groups, rng=np.random.default_rng(self.seed))

    def _predict(self, sh: _Shape, keys: list[str]) -> dict[Config, float]:
        """Predicted score at ``sh`` of the candidates ``keys`` that map there (one entry per distinct Config)."""
        configs = list(dict.fromkeys(c for c in (self._at(sh, k) for k in keys) if c is not None))
        if not configs:
            return {}
        return dict(zip(configs, self.model.predict(self._features(sh, configs)).tolist()))

    def _grow(self) -> None:
        """The neighbours (in the largest shape's space) of the ``NEIGHBOURS_OF`` best measured candidates (by
        their cost over the best cost at their shape) join the pool."""
        best: list[tuple[float, Config]] = []
        for sh in self.shapes:
            ok = sorted((s, i, c) for i, (c, s) in enumerate(sh.results.items()) if math.isfinite(s))
            for s, _, c in ok[:NEIGHBOURS_OF]:
                r = c if sh.space is self.ref else adapt(self.ref, sh.space.to_dict(c))
                if r is not None and self.ref.is_legal(r):
                    best.append((s / ok[0][0], r))
        best.sort(key=lambda x: x[0])
        for _, c in best[:NEIGHBOURS_OF]:
            for n in self.ref.neighbours(c):
                self._add(self.ref.to_dict(n))

    # ---- rounds ----------------------------------------------------------------------------------
    def _measure(self, sh: _Shape, configs: list[Config]) -> None:
        st = sh.state
        if sh.measurer is None:
            sh.measurer = make_measurer(st.kernel.workload, sh.space, self.target, settings=self.settings,
                                        pool=self.pool)
        try:
            run = tune(space=sh.space, strategy=_Given(sh.space, configs, self.seed), measurer=sh.measurer,
                       workload=st.key, flops=st.kernel.flops, target=self.tkey, trials=len(configs),
                       batch_size=len(configs), records=self.records, callbacks=self.callbacks)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001  (as in tune_model: one task's crash costs that task only)
            text = str(e).strip()
            st.done = f"failed: {type(e).__name__}: {text.splitlines()[-1][:200] if text else ''}"
            st.rounds += 1
            self.shapes.remove(sh)
            if sh.measurer is not None:
                sh.measurer.close()
                sh.measurer = None
            return
        for rec, c in zip(run.history, configs):
            sh.results[c] = rec.median_s if rec.ok else math.inf
        st.rounds += 1
        st.note_failures(run.history)
        st.trials += run.trials
        st.measured += run.measured
        st.recalled += run.recalled
        st.errors += run.errors
        self.total += run.trials
        if run.best is not None and run.best.median_s < st.best_s:
            st.best_s, st.best_gflops = run.best.median_s, run.best.gflops
        st.history.append(st.best_s)
        if self.on_round is not None:
            self.on_round(st, run, self.total)

    def _next_shape(self) -> _Shape:
        return min(self.shapes, key=lambda sh: (len(sh.results), -sh.state.kernel.flops * sh.state.calls))

    def _propose(self, sh: _Shape, n: int, taken: Sequence[Config] = (), start: bool = False) -> list[Config]:
        """``n`` candidates for a round at ``sh`` (see the module docstring), none of ``taken``; ``start``: the
        shape's own start first, whether or not there is a model."""
        out: list[Config] = []
        skip = set(taken)
        if self.model is None or start:  # this shape's own start, then the other shapes' starts
            for d in sh.starts + [d for o in self.shapes if o is not sh for d in o.starts]:
                c = self._at(sh, _key(d))
                if c is not None and c not in sh.results and c not in skip and c not in out:
                    out.append(c)
                if len(out) == n:
                    return out
        else:
            keys = list(self.pool_keys)
            scored = sorted(self._predict(sh, keys).items(), key=lambda x: -x[1])
            ranked = [c for c, _ in scored if c not in sh.results and c not in skip]
            while len(out) < n and ranked:
                if self.rng.random() < EPSILON and len(ranked) > 1:
                    c = ranked.pop(int(self.rng.integers(1, len(ranked))))
                else:
                    c = ranked.pop(0)
                out.append(c)
        while len(out) < n:  # the pool is spent at this shape: uniform samples of its space
            more = sh.space.sample_unique(self.rng, n - len(out), exclude=list(sh.results) + list(skip) + out)
            if not more:
                break
            out += more
        return out

    def _confirm_picks(self, sh: _Shape, k: int) -> list[Config]:
        """The ``k`` candidates predicted best at ``sh`` among those that ran at another shape, not measured here."""
        keys = []
        for o in self.shapes:
            if o is sh:
                continue
            for c, s in o.results.items():
                if math.isfinite(s):
                    keys.append(self._add(o.space.to_dict(c)))
        keys = list(dict.fromkeys(keys))
        if self.model is None:
            ranked = list(dict.fromkeys(c for c in (self._at(sh, x) for x in keys) if c is not None))
        else:
            ranked = [c for c, _ in sorted(self._predict(sh, keys).items(), key=lambda x: -x[1])]
        return [c for c in ranked if c not in sh.results][:k]

    def run(self) -> None:
        n_shapes = len(self.shapes)
        confirm = CONFIRM if self.budget >= n_shapes * (CONFIRM + 1) else max(0, (self.budget - n_shapes) // n_shapes)
        search = self.budget - confirm * n_shapes
        start_n = max(1, min(self.batch_size, search // (2 * n_shapes)))  # each shape's own start, measured first
        step = max(1, math.ceil(self.batch_size / n_shapes))  # the model's rounds: small, so that they rotate
        try:
            while self.total < search and self.shapes:
                sh = self._next_shape()
                start = len(sh.results) < start_n
                size = start_n - len(sh.results) if start else (step if self.model is not None else self.batch_size)
                batch = self._propose(sh, min(size, search - self.total), start=start)
                if not batch:
                    break
                self._measure(sh, batch)
                self._fit()
                self._grow()
            for sh in list(self.shapes):
                if not confirm or self.total >= self.budget:
                    break
                k = min(confirm, self.budget - self.total)
                picks = self._confirm_picks(sh, k)
                picks += self._propose(sh, k - len(picks), picks) if len(picks) < k else []
                if picks:
                    self._measure(sh, picks)
        finally:
            for sh in self.all:
                if sh.measurer is not None:
                    sh.measurer.close()
                    sh.measurer = None


@dataclass
class SharedResult(ModelTuneResult):
    groups: int = 0  # groups searched together
    shared_tasks: int = 0  # tasks in these groups


def shared_search(dyn, *, trials: int, records: str, strategy: str = DEFAULT_STRATEGY, scheduler: str = "gradient",
                  round_trials: int = 8, batch_size: int = 8, settings: MeasureSettings | None = None, seed: int = 0,
                  options: dict | None = None, hardware: str | None = None,
                  on_round: Callable | None = None, callbacks: tuple = ()) -> SharedResult:
    """Tune the merged tasks of ``dyn`` (``tiletune.model.dynamic.shapes.DynamicTasks``) with ``trials`` measurements in
    all: one shared search per group of shapes of one kernel, ``tune_model`` (with ``strategy``, ``scheduler``,
    ``options``...) for the rest; see the module docstring. ``on_round(state, run, total)`` after every round."""
    if trials is None or trials < 1:
        raise TiletuneError("--shared-search needs a trial budget: --trials N (the whole model's)")
    if dyn is None or len(dyn.shapes) < 2:
        raise TiletuneError("--shared-search needs two or more shapes (--shapes NAME=V1,V2,...)")
    tasks: ModelTasks = dyn.merged
    target = tasks.target
    states = [TaskState(k) for k in tasks.tasks]
    if not states:
        return SharedResult([], 0, 0.0, "no tunable task")
    for st in states:
        try:
            st.space = make_space(st.kernel.workload, None, target)
        except TiletuneError:
            st.space = None
    groups, alone = groups_of(dyn, states)
    sizes = [len(g.states) for g in groups] + ([len(alone)] if alone else [])
    shares = _shares(trials, sizes)
    started = time.monotonic()
    total = 0
    pool = shared_pool(target)
    done_states: dict[str, TaskState] = {}
    try:
        def note(st, run, group_total):
            if on_round is not None:
                on_round(st, run, total + group_total)

        for g, share in zip(groups, shares):
            if share < 1:
                continue
            s = SharedSearch(g, budget=share, records=records, target=target, pool=pool, settings=settings, seed=seed,
                             batch_size=min(batch_size, round_trials), on_round=note, callbacks=callbacks)
            s.run()
            total += s.total
        if alone and shares[-1] >= 1:
            sub = ModelTasks(tasks.fused, target, [st.kernel for st in alone], tasks.layout, list(tasks.notes),
                             tasks.dtype)
            base = total

            def note_alone(st, run, t):
                if on_round is not None:
                    on_round(st, run, base + t)

            res = tune_model(sub, strategy=strategy, trials=shares[-1], records=records, scheduler=scheduler,
                             round_trials=round_trials, batch_size=batch_size, settings=settings, seed=seed,
                             options=options, hardware=hardware, on_round=note_alone, callbacks=callbacks, pool=pool,
                             confirm=0)
            for st in res.states:
                done_states[st.key] = st
            total += res.trials
    finally:
        if pool is not None:
            pool.close()
    out = [done_states.get(st.key, st) for st in states]
    return SharedResult(out, total, time.monotonic() - started, "trials", groups=len(groups),
                        shared_tasks=sum(len(g.states) for g in groups))

