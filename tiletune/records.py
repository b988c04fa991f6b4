"""Append-only JSON Lines records.

One line per measured configuration (schema ``SCHEMA``): workload key, target, config, every timing
sample, median, GFLOPS, error kind and message, strategy, seed, trial number, timestamps, host, measurer
and the device that measured it (``device``, added later: records without it load with None). Each
line is flushed and fsync'ed as it is written, so a crash loses at most the line being written. On
load, a truncated or corrupt line is skipped with a warning, never a crash. A file named ``*.gz`` is read
through gzip (loading only; the writer appends to plain files).
"""
from __future__ import annotations

import gzip
import json
import math
import os
import socket
import statistics
import time
import typing
import warnings
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import TiletuneError, one_line

SCHEMA = 1
#: the ``strategy`` of a record that re-measures a candidate before a model is built
#: (``tiletune.model.tuning.confirm``); the tuning loop never recalls such a record
CONFIRM = "confirm"


@dataclass(frozen=True)
class Record:
    workload: str
    target: str
    config: dict
    costs: tuple[float, ...] = ()
    median_s: float | None = None
    gflops: float = 0.0
    error: str | None = None
    message: str = ""
    strategy: str = ""
    seed: int | None = None
    trial: int = 0
    build_s: float = 0.0
    run_s: float = 0.0
    started: float = 0.0
    finished: float = 0.0
    host: str = field(default_factory=socket.gethostname)
    measurer: str = "local"
    device: str | None = None  # the device that measured it, for RPC devices "KEY@HOST:PORT" (older records: None)
    schema: int = SCHEMA

    @property
    def ok(self) -> bool:
        return self.error is None and self.median_s is not None and math.isfinite(self.median_s)

    def to_json(self) -> str:
        d = asdict(self)
        d["costs"] = list(self.costs)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> "Record":
        d = json.loads(line)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        if d.get("schema") != SCHEMA:
            raise ValueError(f"schema {d.get('schema')!r}, expected {SCHEMA}")
        known = {f for f in cls.__dataclass_fields__}
        d = {k: v for k, v in d.items() if k in known}
        for req in ("workload", "target", "config"):
            if req not in d:
                raise ValueError(f"missing field {req}")
        hints = _field_types()
        return cls(**{k: _typed(k, v, hints[k]) for k, v in d.items()})


@lru_cache(maxsize=None)
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(Record)


def _typed(name: str, value: Any, hint: Any) -> Any:
    """``value`` as the declared type ``hint`` of field ``name`` (a whole number is a float where a float is
    declared; a JSON list is a tuple); ValueError where it is not of that type."""
    args = typing.get_args(hint)
    if type(None) in args:  # X | None
        if value is None:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:  # tuple[float, ...]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"field {name}: expected a list, got {value!r}"[:200])
        return tuple(_typed(name, x, args[0]) for x in value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, hint) or (isinstance(value, bool) and hint is not bool):
        raise ValueError(f"field {name}: expected {hint.__name__}, got {value!r}"[:200])
    return value


def config_key(config: dict) -> str:
    """A canonical string for a config dict (used to match records to configurations)."""
    return json.dumps(config, sort_keys=True)


class RecordWriter:
    """Appends records to a JSONL file, one flushed + fsync'ed line each."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._needs_newline = self.path.exists() and self.path.stat().st_size > 0 and not self._ends_with_newline()
        self._f = open(self.path, "a", encoding="utf-8")

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def write(self, record: Record) -> None:
        if self._needs_newline:  # a previous run died mid-line: keep that line separate (it is skipped)
            self._f.write("\n")
            self._needs_newline = False
        self._f.write(record.to_json() + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def iter_records(path: str | os.PathLike, *, warn: bool = True) -> Iterator[Record]:
    p = Path(path)
    if not p.exists():
        raise TiletuneError(f"records file {str(p)!r} does not exist")
    opener = gzip.open if p.suffix == ".gz" else open  # FILE.jsonl.gz: committed results keep records compressed
    with opener(p, "rt", encoding="utf-8", errors="replace") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield Record.from_json(line)
                except (ValueError, TypeError, KeyError) as e:
                    if warn:
                        warnings.warn(f"{p}:{lineno}: skipping unreadable record ({e})", stacklevel=2)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:  # a truncated or damaged compressed file
            if warn:
                warnings.warn(f"{p}: unreadable after line {lineno} ({e})", stacklevel=2)


def kernel_identity(key: str) -> str:
    """What names one kernel in a workload key: a model kernel's ``[KIND:]NAME[SHAPES]@HASH`` without its ``NAME``
    (the fused module's numbering, which another operator of the model shifts: a rewritten convolution renumbers the
    kernels after it; the kind, e.g. ``rows:``, the shapes and the structural hash are the kernel's); any other key
    whole."""
    i = key.find("[")
    if i <= 0 or "@" not in key[i:]:
        return key
    kind, colon, _ = key[:i].rpartition(":")
    return kind + colon + key[i:]


def same_kernel(a: str, b: str) -> bool:
    """Whether two workload keys name one kernel (``kernel_identity``)."""
    return a == b or kernel_identity(a) == kernel_identity(b)


def load(path: str | os.PathLike, *, workload: str | None = None, target: str | None = None,
         warn: bool = True) -> list[Record]:
    """All readable records of a file, optionally only one kernel (``same_kernel`` as ``workload``: a model's
    records made when its kernel had another name count) / target."""
    out = []
    for r in iter_records(path, warn=warn):
        if workload is not None and not same_kernel(r.workload, workload):
            continue
        if target is not None and r.target != target:
            continue
        out.append(r)
    return out


def best(records: Iterable[Record], workload: str | None = None) -> Record | None:
    good = [r for r in records if r.ok and (workload is None or same_kernel(r.workload, workload))]
    return min(good, key=lambda r: r.median_s) if good else None


def failures(records: Iterable[Record]) -> Counter:
    """The failed trials of ``records`` counted by (error kind, message in one line); configurations the template
    refused (``invalid``) are not failures: they were never built."""
    return Counter((r.error, one_line(r.message)) for r in records if r.error and r.error != "invalid")


def candidates(records: Iterable[Record], workload: str, top: int) -> list[Record]:
    """The best tuning record of each of the ``top`` fastest configurations of ``workload`` (confirmation
    records excluded), fastest first."""
    by_config: dict[str, Record] = {}
    for r in records:
        if not same_kernel(r.workload, workload) or r.strategy == CONFIRM or not r.ok:
            continue
        k = config_key(r.config)
        if k not in by_config or r.median_s < by_config[k].median_s:
            by_config[k] = r
    return sorted(by_config.values(), key=lambda r: r.median_s)[:top]


def latest_pass(records: Iterable[Record], workload: str) -> tuple[int, list[Record]]:
    """(number, records) of the latest confirmation pass of ``workload``; (0, []) when it has none."""
    mine = [r for r in records if same_kernel(r.workload, workload) and r.strategy == CONFIRM]
    if not mine:
        return 0, []
    n = max(r.trial for r in mine)
    return n, [r for r in mine if r.trial == n]


def confirmed(records: Iterable[Record], workload: str) -> dict[str, float]:
    """{config key: median of its pooled samples} of the latest pass, failed configurations left out."""
    _, rows = latest_pass(records, workload)
    samples: dict[str, list[float]] = {}
    failed: set[str] = set()
    for r in rows:
        k = config_key(r.config)
        if r.ok and r.costs:
            samples.setdefault(k, []).extend(r.costs)
        else:
            failed.add(k)
    return {k: float(statistics.median(v)) for k, v in samples.items() if k not in failed}


def chosen(records: list[Record], workload: str) -> tuple[dict, float, float] | None:
    """(config, seconds per call, GFLOPS) of the kernel a build takes for ``workload``: the configuration of the
    latest confirmation pass (``CONFIRM``, ``tiletune.model.tuning.confirm``) with the lowest median of its samples
    pooled over the rounds (a configuration that failed in any round of the pass is out); without a pass, the best
    recorded median. None when it has no successful record."""
    conf = confirmed(records, workload)
    if conf:
        key = min(conf, key=conf.get)
        rec = next(r for r in records if same_kernel(r.workload, workload) and r.ok and config_key(r.config) == key)
        flops = rec.gflops * rec.median_s * 1e9  # the workload's FLOPs, from any successful record
        return rec.config, conf[key], flops / conf[key] / 1e9
    b = best(records, workload)
    return None if b is None else (b.config, b.median_s, b.gflops)


def now() -> float:
    return time.time()
