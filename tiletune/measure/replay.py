"""Replay (simulation) measurer: answers from a table of measured configurations instead of hardware.

A table is an ordinary records file (JSONL, ``tiletune.records``), e.g. one built by ``tiletune table``
or any earlier tuning run. Replaying is deterministic: a configuration always gets the same answer.

- A configuration with an ok record gets the costs of its *first* ok record in file order (so its
  median is the median of that record's costs); later records of the same configuration are ignored.
- A configuration recorded only with errors replays its first error (kind and message).
- A configuration not in the table gets ``error="not-in-table"`` with a message that says so.

Only records of ``workload_key`` are used, and of one target: ``target`` when given (a target dict or
its JSON key), otherwise the target of the workload's first record in the file (``target_key``
reports which). Records whose configuration does not fit ``space`` (another ``--levels``) are skipped.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Sequence

from ..errors import TiletuneError
from ..records import Record, load
from ..space import Config, Space
from ..target import target_key
from .base import MeasureResult, Measurer


class ReplayMeasurer(Measurer):
    kind = "replay"

    def __init__(self, table_path: str | Path, workload_key: str, space: Space, target: Any = None):
        self.path = str(table_path)
        self.workload_key = workload_key
        self.space = space
        if not Path(self.path).exists():
            raise TiletuneError(f"replay table {self.path!r} does not exist; build one with "
                                f"'tiletune table WORKLOAD -o {self.path}'")
        records = load(self.path, workload=workload_key)
        if not records:
            held = sorted({r.workload for r in load(self.path, warn=False)})
            raise TiletuneError(f"replay table {self.path!r} has no records of workload {workload_key!r}; "
                                f"it holds: {', '.join(held) or 'nothing readable'}")
        if target is None:
            self.target_key = records[0].target
        elif isinstance(target, dict):
            self.target_key = target_key(target)
        else:
            self.target_key = str(target)
        records = [r for r in records if r.target == self.target_key]
        if not records:
            raise TiletuneError(f"replay table {self.path!r} has no records of {workload_key!r} for target "
                                f"{self.target_key}")
        self.table: dict[Config, Record] = {}
        self.skipped = 0
        for r in records:
            try:
                c = space.from_dict(r.config)
            except TiletuneError:
                self.skipped += 1  # recorded in another space (e.g. other --levels)
                continue
            prev = self.table.get(c)
            if prev is None or (not prev.ok and r.ok):  # the first ok record wins, else the first record
                self.table[c] = r
        if not self.table:
            raise TiletuneError(f"none of the {len(records)} records of {workload_key!r} in {self.path!r} fits "
                                f"this space (knobs {space.names}); was the table built with other --levels?")

    def __len__(self) -> int:
        return len(self.table)

    def __contains__(self, config: object) -> bool:
        return config in self.table

    def cost(self, config: Config) -> float | None:
        """The replayed median cost in seconds, None when the table has no ok record of it."""
        r = self.table.get(config)
        if r is None or not r.ok:
            return None
        return statistics.median(r.costs) if r.costs else float(r.median_s)

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        out = []
        for c in configs:
            r = self.table.get(c)
            if r is None:
                out.append(MeasureResult(
                    c, error="not-in-table",
                    message=f"configuration {json.dumps(self.space.to_dict(c))} is not in replay table "
                            f"{self.path} ({len(self.table)} configurations of {self.workload_key}); "
                            "extend it with 'tiletune table' or measure without --replay"))
            elif r.ok:
                costs = tuple(r.costs) if r.costs else (float(r.median_s),)
                out.append(MeasureResult(c, costs=costs, build_s=r.build_s, run_s=r.run_s,
                                         extra={"replayed": True}))
            else:
                out.append(MeasureResult(c, error=r.error or "run-error", message=r.message,
                                         build_s=r.build_s, run_s=r.run_s, extra={"replayed": True}))
        return out
