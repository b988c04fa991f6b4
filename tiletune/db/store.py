"""The tuning database: one place on this machine where every entry point keeps the kernels it measured, so that
what ``tiletune tune`` or ``tiletune model tune`` found is what ``tiletune model build`` and the PyTorch backend
(``torch.compile(model, backend="tiletune")``) use.

It is a thin layer over the records format (``tiletune.records``), not a second format: a directory of records
files, one per target (``records/<target>-<hash>.jsonl``, the target's JSON in the record lines themselves), so the
database is keyed by target (the file) and workload (the records' ``workload`` key). Each file is an ordinary
records file: ``tiletune model tune`` and the backend's ``tune`` mode append to it directly (it is their resume
state), ``tiletune best`` and ``-r`` read it.

- Where: ``$TILETUNE_CACHE_DIR/db``; without the variable ``~/.cache/tiletune/db`` (``cache_root``).
- ``add(records)`` appends the records the database does not hold yet (a record is the same when its workload,
  target, configuration, strategy, seed, trial and start time are), under a lock, so that two processes (a
  background tuner and the model it tunes for) never write one line twice; ``absorb(path)`` adds a records file
  (``-r FILE`` of ``tune``, ``model tune``, ``model build``; ``tiletune db import``).
- ``chosen(workload, target)``: the kernel a build takes for a workload (``tiletune.records.chosen``:
  the fastest of its last confirmation, else the best record); ``state(workloads, target)`` is a digest of those
  choices, which the compiled-graph cache keys on (a new best kernel makes a new state).
- ``export(path)`` writes every record to one records file, ``import`` is ``absorb``: a database moves between
  machines as one file (``tiletune db export`` / ``tiletune db import``).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import TiletuneError
from ..records import Record, RecordWriter, chosen, config_key, iter_records, kernel_identity
from ..target import target_key

CACHE_ENV = "TILETUNE_CACHE_DIR"


def cache_root() -> Path:
    """``$TILETUNE_CACHE_DIR``, else ``~/.cache/tiletune``: the tuning database (``db/``) and the compiled-graph
    cache of the PyTorch backend (``graphs/``) live under it."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tiletune"


def identity(r: Record) -> tuple:
    """What makes two records one measurement (the database keeps one of them)."""
    return (r.workload, r.target, config_key(r.config), r.strategy, r.seed, r.trial, r.started, r.median_s)


def _slug(tkey: str) -> str:
    t = json.loads(tkey)
    words = [str(t.get("kind", "target"))] + [str(t[k]) for k in ("mcpu", "arch", "num-cores") if k in t]
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(words))
    return f"{base}-{hashlib.sha1(tkey.encode()).hexdigest()[:10]}"


@dataclass
class Summary:
    target: str  # the target's JSON
    path: str
    records: int
    workloads: int
    tuned: int  # workloads with a successful record


class Database:
    def __init__(self, root: str | os.PathLike | None = None):
        self.dir = Path(root) if root is not None else cache_root() / "db"
        self._read: dict[str, tuple[tuple, list[Record]]] = {}  # path -> ((size, mtime), records)

    # -- files ------------------------------------------------------------------------------------------------
    def path(self, target: dict | str) -> Path:
        """The records file of ``target`` (a dict or its ``target_key``); it may not exist yet."""
        tkey = target if isinstance(target, str) else target_key(target)
        return self.dir / "records" / f"{_slug(tkey)}.jsonl"

    def files(self) -> list[Path]:
        d = self.dir / "records"
        return sorted(d.glob("*.jsonl")) if d.is_dir() else []

    @contextmanager
    def _lock(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- reading ----------------------------------------------------------------------------------------------
    def records(self, target: dict | str | None = None) -> list[Record]:
        """Every record of ``target`` (None: of every target), read again only when its file changed."""
        paths = [self.path(target)] if target is not None else self.files()
        out: list[Record] = []
        for p in paths:
            out += self._file(p)
        return out

    def _file(self, p: Path) -> list[Record]:
        try:
            st = p.stat()
        except FileNotFoundError:
            return []
        stamp = (st.st_size, st.st_mtime_ns)
        hit = self._read.get(str(p))
        if hit is not None and hit[0] == stamp:
            return hit[1]
        recs = list(iter_records(p, warn=False))
        self._read[str(p)] = (stamp, recs)
        return recs

    def chosen(self, workload: str, target: dict | str) -> tuple[dict, float, float] | None:
        """(config, seconds per call, GFLOPS) the database gives ``workload`` on ``target``, or None."""
        recs = [r for r in self.records(target) if kernel_identity(r.workload) == kernel_identity(workload)]
        return chosen(recs, workload) if recs else None

    def state(self, workloads: Iterable[str], target: dict | str) -> str:
        """A digest of the kernels the database gives ``workloads`` on ``target`` (``chosen``): it changes when
        one of them gets another kernel."""
        by_id: dict[str, list[Record]] = {}
        ids = {kernel_identity(w): w for w in workloads}
        for r in self.records(target):
            i = kernel_identity(r.workload)
            if i in ids:
                by_id.setdefault(i, []).append(r)
        parts = []
        for i in sorted(ids):
            pick = chosen(by_id[i], ids[i]) if i in by_id else None
            parts.append(f"{i}={config_key(pick[0]) if pick else '-'}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    # -- writing ----------------------------------------------------------------------------------------------
    def add(self, records: Iterable[Record]) -> int:
        """Append the records the database does not hold yet, each to its target's file; returns how many."""
        by_target: dict[str, list[Record]] = {}
        for r in records:
            by_target.setdefault(r.target, []).append(r)
        n = 0
        with self._lock():
            for tkey, recs in by_target.items():
                p = self.path(tkey)
                seen = {identity(r) for r in self._file(p)}
                new = []
                for r in recs:
                    i = identity(r)
                    if i not in seen:
                        seen.add(i)
                        new.append(r)
                if new:
                    with RecordWriter(p) as w:
                        for r in new:
                            w.write(r)
                    n += len(new)
        return n

    def absorb(self, path: str | os.PathLike) -> int:
        """``add`` every readable record of the records file ``path`` (a TiletuneError when it does not exist)."""
        return self.add(iter_records(path, warn=False))

    def export(self, path: str | os.PathLike) -> int:
        """Write every record of the database to the records file ``path`` (replaced); returns how many."""
        recs = self.records()
        p = Path(path)
        if p.exists() and p.is_dir():
            raise TiletuneError(f"{path} is a directory; give a file name (e.g. tiletune-db.jsonl)")
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(r.to_json() + "\n")
        os.replace(tmp, p)
        return len(recs)

    def summary(self) -> list[Summary]:
        out = []
        for p in self.files():
            recs = self._file(p)
            if not recs:
                continue
            wls = {kernel_identity(r.workload) for r in recs}
            ok = {kernel_identity(r.workload) for r in recs if r.ok}
            out.append(Summary(recs[0].target, str(p), len(recs), len(wls), len(ok)))
        return out
