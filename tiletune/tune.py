"""The one tuning loop: ask -> skip known -> measure -> record -> tell -> callbacks.

Budgets: ``trials`` (results the run obtains, whether measured now or recalled from the records file),
``seconds`` (wall time; a batch in flight finishes), and ``early_stop`` (stop after that many trials
without improving the best cost). Resuming = running the same command again: with the same seed a
strategy proposes the same configurations, which the loop answers from the records file without
measuring, so the run continues where it stopped.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol, Sequence

from .errors import TiletuneError
from .measure.base import MeasureResult, Measurer
from .records import CONFIRM, Record, RecordWriter, load, now, same_kernel
from .space import Config, Space
from .strategies.base import Strategy, Trial


class Callback(Protocol):
    def on_start(self, run: "TuneRun") -> None: ...
    def on_trial(self, run: "TuneRun", record: Record, measured: bool) -> None: ...
    def on_end(self, run: "TuneRun") -> None: ...


@dataclass
class TuneRun:
    """State of a run, visible to callbacks and returned at the end."""

    workload: str
    target: str
    strategy: str
    budget_trials: int | None
    budget_seconds: float | None
    trials: int = 0
    measured: int = 0
    recalled: int = 0
    errors: int = 0
    best: Record | None = None
    since_improvement: int = 0
    started: float = field(default_factory=time.monotonic)
    stopped: str = ""  # why the run stopped: trials, seconds, early-stop, exhausted, stalled
    stop_reason: str = ""  # the same in words, for the summary
    skipped: int = 0  # of the errors: configurations the template refused ("invalid"; never built)
    history: list[Record] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def best_gflops(self) -> float:
        return self.best.gflops if self.best else 0.0


def measured_record(result: MeasureResult, *, space: Space, workload: str, target: str, flops: int,
                    strategy: str, seed: int | None, trial: int, started: float, measurer: str) -> Record:
    """The record of one measurement (also the model path's confirmations, ``tiletune.model.tuning.confirm``)."""
    return Record(
        workload=workload, target=target, config=space.to_dict(result.config), costs=tuple(result.costs),
        median_s=result.median if result.ok else None, gflops=result.gflops(flops), error=result.error,
        message=result.message[:2000], strategy=strategy, seed=seed, trial=trial, build_s=result.build_s,
        run_s=result.run_s, started=started, finished=now(), measurer=measurer,
        device=result.extra.get("device"),
    )


def known_from_records(path: str | Path | None, space: Space, workload: str, target: str,
                       measurer: str | None = None, rows: Iterable[Record] | None = None) -> dict[Config, Record]:
    """Configurations of this workload/target already in a records file (the last record wins), or in ``rows``
    (records read elsewhere) where ``path`` is None.

    With ``measurer``, only records produced by that kind of measurer count: a simulated (replay) cost
    is never recalled as a hardware measurement, nor the other way round. Confirmation records
    (``tiletune.model.tuning.confirm``) are never recalled."""
    if rows is None:
        if path is None or not Path(path).exists():
            return {}
        rows = load(path, workload=workload, target=target)
    else:
        rows = [r for r in rows if same_kernel(r.workload, workload) and r.target == target]
    known: dict[Config, Record] = {}
    for r in rows:
        if measurer is not None and r.measurer != measurer:
            continue
        if r.strategy == CONFIRM:
            continue  # a re-measurement before a model build: recalled, it could change a replayed decision
        try:
            known[space.from_dict(r.config)] = r
        except TiletuneError:
            continue  # recorded with another space (e.g. other --levels)
    return known


def check_budget(trials: int | None, seconds: float | None, early_stop: int | None, batch_size: int) -> None:
    """TiletuneError unless the budget is usable: at least one of ``trials`` (>= 1), ``seconds`` (> 0) and
    ``early_stop`` (>= 1) given, and ``batch_size`` >= 1. ``tune`` checks it; ``tiletune.session.run``
    checks it first, before anything starts."""
    if trials is None and seconds is None and early_stop is None:
        raise TiletuneError("give a budget: trials (--trials), seconds (--seconds) or early_stop (--early-stop)")
    if trials is not None and trials < 1:
        raise TiletuneError(f"trials (--trials) must be >= 1, got {trials}")
    if seconds is not None and not seconds > 0:
        raise TiletuneError(f"seconds (--seconds) must be > 0, got {seconds:g}")
    if early_stop is not None and early_stop < 1:
        raise TiletuneError(f"early_stop (--early-stop) must be >= 1 trial without improvement, got {early_stop}")
    if batch_size < 1:
        raise TiletuneError(f"batch size (--batch-size) must be >= 1, got {batch_size}")


def _stop(run: TuneRun, why: str, words: str) -> None:
    run.stopped, run.stop_reason = why, words


def tune(
    *,
    space: Space,
    strategy: Strategy,
    measurer: Measurer,
    workload: str,
    flops: int,
    target: str = "",
    trials: int | None = None,
    seconds: float | None = None,
    early_stop: int | None = None,
    batch_size: int = 8,
    records: str | Path | None = None,
    callbacks: Sequence[Callback] = (),
    recall: Iterable[Record] = (),
) -> TuneRun:
    """Ask, measure, tell until the budget is spent (``trials``, ``seconds``, ``early_stop``), each result
    appended to ``records``. A configuration already measured is recalled rather than measured again (a trial all
    the same, told to the strategy): from ``records`` (a run resumes), then from ``recall`` (the tuning database's
    records, ``tiletune.db``); one recalled from ``recall`` is copied into ``records``, so the file holds every
    trial of its run."""
    check_budget(trials, seconds, early_stop, batch_size)
    known = known_from_records(records, space, workload, target, measurer.kind)
    elsewhere = {c: r for c, r in known_from_records(None, space, workload, target, measurer.kind,
                                                     rows=recall).items() if c not in known}
    known.update(elsewhere)
    try:
        writer = RecordWriter(records) if records is not None else None
    except OSError as e:  # what tiletune.paths.check_output cannot foresee (a special file system)
        raise TiletuneError(f"cannot write records file {str(records)!r}: {e.strerror or e}") from None
    run = TuneRun(workload, target, strategy.name, trials, seconds)
    for cb in callbacks:
        cb.on_start(run)
    stalls = 0
    try:
        while True:
            if trials is not None and run.trials >= trials:
                _stop(run, "trials", f"the trial budget ({trials}) is spent")
                break
            if seconds is not None and run.elapsed >= seconds:
                _stop(run, "seconds", f"the time budget ({seconds:g} s) is spent")
                break
            if early_stop is not None and run.since_improvement >= early_stop:
                _stop(run, "early-stop", f"{run.since_improvement} trials in a row without improvement "
                      f"(--early-stop {early_stop})")
                break
            n = batch_size if trials is None else min(batch_size, trials - run.trials)
            asked = list(strategy.ask(n))
            if len(asked) > n:
                raise TiletuneError(f"strategy {strategy.name} returned {len(asked)} configurations when asked "
                                    f"for at most {n}")
            if not asked:
                _stop(run, "exhausted", strategy.exhausted_reason())
                break
            fresh: list[Config] = []
            for c in asked:
                if c not in known and c not in fresh:
                    fresh.append(c)
            illegal = [c for c in fresh if not space.is_legal(c)]
            if illegal:
                raise TiletuneError(f"strategy {strategy.name} proposed configurations outside the space: "
                                    f"{illegal[:3]}")
            started = now()
            results = measurer.measure(fresh) if fresh else []
            new_records: dict[Config, Record] = {}
            for res in results:
                rec = measured_record(res, space=space, workload=workload, target=target, flops=flops,
                                      strategy=strategy.name, seed=strategy.seed,
                                      trial=run.trials + 1 + len(new_records), started=started,
                                      measurer=measurer.kind)
                new_records[res.config] = rec
                known[res.config] = rec
                if writer is not None:
                    writer.write(rec)
            told = []
            for c in asked:
                rec = known[c]
                if c in elsewhere and writer is not None:
                    writer.write(elsewhere.pop(c))  # the file holds every trial of its run
                measured = c in new_records and new_records.pop(c) is rec
                run.trials += 1
                run.measured += measured
                run.recalled += not measured
                run.errors += not rec.ok
                run.skipped += rec.error == "invalid"
                if rec.ok and (run.best is None or rec.median_s < run.best.median_s):
                    run.best = rec
                    run.since_improvement = 0
                else:
                    run.since_improvement += 1
                run.history.append(rec)
                told.append(Trial(c, rec.median_s if rec.ok else math.inf, rec.error))
                for cb in callbacks:
                    cb.on_trial(run, rec, measured)
            strategy.tell(told)
            stalls = stalls + 1 if not fresh else 0
            if trials is None and stalls > 1000:
                _stop(run, "stalled", "for 1000 batches the strategy proposed only configurations already "
                      "in the records file")
                break
    finally:
        if writer is not None:
            writer.close()
        for cb in callbacks:
            cb.on_end(run)
    return run
