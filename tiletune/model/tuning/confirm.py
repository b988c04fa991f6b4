"""Confirm each task's best kernel before the model is built: re-measure the few fastest candidates of the
tuning, side by side, and let the build choose by these measurements.

Why: a tuning run measures every configuration once, a few samples each, so the kernel it calls best is the
fastest of many noisy single measurements, and on microsecond kernels two measurements of one
configuration differ between runs by more than the candidates do (docs/decisions/model-confirm.md): the minimum
favours a lucky sample over a faster kernel. Confirming re-measures the top ``top`` configurations of a
task (by their best recorded median), in ``rounds`` interleaved rounds (A B C, A B C: each round is one
measurement of every candidate, so a slow spell of the machine falls on all of them), with the early
cut-off off, so every candidate gets all its samples.

- Records: every confirmation is an ordinary record of its workload with ``strategy = CONFIRM`` and
  ``trial`` = the number of the confirmation pass of that workload (1, 2, ... : a task tuned further
  after a confirmation is confirmed again, in a new pass, among its new top candidates). The tuning loop
  never recalls them (``tiletune.tune.known_from_records``), so a resumed run replays its decisions
  exactly.
- ``chosen(records, workload)`` (``tiletune.records``, with ``candidates``, ``confirmed`` and ``latest_pass``: they
  read records, and every reader of records takes them from there): the kernel the build takes: the configuration of the latest pass with the
  lowest median of all its samples pooled over the rounds (a configuration that failed in any round of the
  pass is out); without a pass (confirmation off, or a records file of an older version), the best
  recorded median, as before.
- A pass whose candidates are already those of the latest pass is not measured again, so re-running a
  finished ``tiletune model tune`` command measures nothing.

The top 5 by default (``CONFIRM_DEFAULT``): docs/decisions/model-confirm.md.
"""
from __future__ import annotations

import dataclasses

from ...construct import panel_constructions
from ...errors import TiletuneError
from ...measure.base import MeasureSettings, Measurer
from ...records import CONFIRM, Record, RecordWriter, candidates, config_key, latest_pass, now
from ...tune import measured_record

#: candidates re-measured per task: the default of ``tune_model`` and ``model tune --confirm``
#: (docs/decisions/model-confirm.md)
CONFIRM_DEFAULT = 5
#: interleaved rounds of a confirmation
CONFIRM_ROUNDS = 2


def confirm_task(*, records: list[Record], records_path: str, workload: str, target: str, space, measurer: Measurer,
                 flops: int, top: int = CONFIRM_DEFAULT, rounds: int = CONFIRM_ROUNDS, task=None,
                 cores: int = 0) -> list[Record]:
    """Confirm one task: re-measure its ``top`` candidates in ``rounds`` interleaved rounds with
    ``measurer`` (whose settings should have ``cutoff=0``), appending the results to ``records_path``.
    With ``task`` (the task's workload) and ``cores``, the panel orders of the candidates not among them join them,
    each once, where they apply (``tiletune.construct.panel_constructions``; docs/decisions/panel-order.md),
    measured or not during the tuning.
    Returns the records written ([]: nothing to confirm, or this pass exists already)."""
    cands = candidates(records, workload, top)
    if len(cands) < (1 if task is not None else 2):
        return []  # nothing to choose between
    configs = [space.from_dict(r.config) for r in cands]
    if task is not None:
        configs += panel_constructions(space, configs, task, cores)
    if len(configs) < 2:
        return []  # nothing to choose between
    n, rows = latest_pass(records, workload)
    if {config_key(r.config) for r in rows} == {config_key(space.to_dict(c)) for c in configs}:
        return []
    written = []
    with RecordWriter(records_path) as w:
        for _ in range(rounds):
            started = now()
            for res in measurer.measure(configs):
                rec = measured_record(res, space=space, workload=workload, target=target, flops=flops,
                                      strategy=CONFIRM, seed=None, trial=n + 1, started=started,
                                      measurer=measurer.kind)
                w.write(rec)
                written.append(rec)
    return written


def confirm_settings(settings: MeasureSettings | None) -> MeasureSettings:
    """The run's settings with the early cut-off off (every candidate gets all its samples)."""
    return dataclasses.replace(settings or MeasureSettings(), cutoff=0.0)


def check_top(top: int) -> None:
    """A one-line TiletuneError unless ``top`` is 0 (off) or at least 2."""
    if top < 0 or top == 1:
        raise TiletuneError(f"--confirm must be 0 (off) or >= 2 candidates per task, got {top}")
