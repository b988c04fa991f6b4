"""Benchmark suites as data: JSON files shipped in ``tiletune/suites/`` (or any path).

Format (every helper writes to it)::

    {"name": str, "description": str, "workloads": [spec strings], "strategies": [names],
     "seeds": int, "budget": int, "budget_seconds": optional number, "levels": optional "Ls,Lr",
     "notes": str, "options": optional {strategy: {option: value}}}

``load(name_or_path)`` returns a validated ``Suite``; every mistake (unreadable JSON, a missing key, a
wrong type, a bad workload spec, bad levels) raises TiletuneError naming the file and the key.
Strategy names are checked against the registry when a run starts (``Suite.check_strategies``), so
that a suite can be listed and inspected even when a strategy module is not installed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import TiletuneError
from ..space import parse_levels
from ..strategies import registry
from ..workloads import parse

REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "description": str,
    "workloads": list,
    "strategies": list,
    "seeds": int,
    "budget": int,
}
OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "budget_seconds": (int, float, type(None)),
    "levels": (str, type(None)),
    "notes": str,
    "options": dict,  # {strategy: {option: value}}, passed to that strategy in every run
}


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    workloads: tuple[str, ...]
    strategies: tuple[str, ...]
    seeds: int
    budget: int
    budget_seconds: float | None = None
    levels: str | None = None
    notes: str = ""
    source: str = ""
    options: dict = field(default_factory=dict, compare=False)  # strategy -> {option: value}

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "workloads": list(self.workloads),
                "strategies": list(self.strategies), "seeds": self.seeds, "budget": self.budget,
                "budget_seconds": self.budget_seconds, "levels": self.levels, "notes": self.notes,
                "options": self.options}

    def select(self, which: str | None) -> "Suite":
        """The suite restricted to some workloads: ``which`` holds 1-based positions in ``workloads``
        (comma-separated) and/or workload specs, the items separated by ';' (specs contain commas):
        '1,3', 'gemm:M=512,N=512,K=512', '2;gemv:M=16,K=16'. None or '': all."""
        if not which:
            return self
        keys = [parse(w).key for w in self.workloads]
        picked: list[str] = []
        items = []
        for part in (x.strip() for x in which.split(";")):
            if part.replace(",", "").replace(" ", "").isdigit():
                items.extend(x.strip() for x in part.split(",") if x.strip())
            elif part:
                items.append(part)
        for item in items:
            if item.isdigit():
                i = int(item)
                if not 1 <= i <= len(self.workloads):
                    raise TiletuneError(f"--workloads: position {i} is out of range 1..{len(self.workloads)}")
                w = self.workloads[i - 1]
            else:
                try:
                    key = parse(item).key
                except TiletuneError as e:
                    raise TiletuneError(f"--workloads: {item!r} is neither a position nor a workload spec: {e}") from None
                if key not in keys:
                    raise TiletuneError(f"--workloads: {item!r} is not in suite {self.name!r}; its workloads: "
                                        + ", ".join(f"{i + 1}={w}" for i, w in enumerate(self.workloads)))
                w = self.workloads[keys.index(key)]
            if w not in picked:
                picked.append(w)
        if not picked:
            raise TiletuneError("--workloads is empty")
        return replace(self, workloads=tuple(picked))

    def check_strategies(self, names: list[str] | tuple[str, ...] | None = None) -> list[str]:
        """The names (default: the suite's) if all are registered, else a TiletuneError listing them."""
        names = list(self.strategies if names is None else names)
        reg = registry()
        unknown = [n for n in names if n not in reg]
        if unknown:
            raise TiletuneError(f"unknown strateg{'y' if len(unknown) == 1 else 'ies'} "
                                f"{', '.join(map(repr, unknown))}; registered: {', '.join(reg)}")
        return names


def _suite_dir():
    return resources.files("tiletune") / "suites"


def shipped() -> dict[str, str]:
    """Names of the suites shipped with tiletune -> their file path."""
    out = {}
    d = _suite_dir()
    try:
        entries = list(d.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return {}
    for p in sorted(entries, key=lambda e: e.name):
        if p.name.endswith(".json"):
            out[p.name[:-5]] = str(p)
    return out


def _type_name(t) -> str:
    ts = t if isinstance(t, tuple) else (t,)
    names = {int: "integer", float: "number", str: "string", list: "list", type(None): "null"}
    return " or ".join(names.get(x, x.__name__) for x in ts)


def validate(data: Any, source: str = "<suite>") -> Suite:
    """Check a parsed suite object and return the Suite (TiletuneError on any problem)."""
    where = f"suite {source}"
    if not isinstance(data, dict):
        raise TiletuneError(f"{where}: expected a JSON object with keys {', '.join(REQUIRED)}, "
                            f"got {type(data).__name__}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise TiletuneError(f"{where}: missing key(s) {', '.join(missing)}; a suite needs "
                            f"{', '.join(REQUIRED)} and may have {', '.join(OPTIONAL)}")
    for key, t in {**REQUIRED, **OPTIONAL}.items():
        if key not in data:
            continue
        v = data[key]
        # bool is an int in Python; never accept it where a count is meant
        if isinstance(v, bool) or not isinstance(v, t):
            raise TiletuneError(f"{where}: key {key!r} must be a {_type_name(t)}, got {v!r}")
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if unknown:  # most likely a typo (budget_second, seed): say so rather than ignore it
        raise TiletuneError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; accepted: "
                            f"{', '.join(REQUIRED)} (required), {', '.join(OPTIONAL)} (optional)")
    if not data["workloads"]:
        raise TiletuneError(f"{where}: 'workloads' is empty")
    if not data["strategies"]:
        raise TiletuneError(f"{where}: 'strategies' is empty")
    for key in ("workloads", "strategies"):
        bad = [x for x in data[key] if not isinstance(x, str) or not x.strip()]
        if bad:
            raise TiletuneError(f"{where}: every item of {key!r} must be a non-empty string, got {bad[0]!r}")
    if data["seeds"] < 1:
        raise TiletuneError(f"{where}: 'seeds' must be >= 1, got {data['seeds']}")
    if data["budget"] < 1:
        raise TiletuneError(f"{where}: 'budget' must be >= 1, got {data['budget']}")
    bs = data.get("budget_seconds")
    if bs is not None and bs <= 0:
        raise TiletuneError(f"{where}: 'budget_seconds' must be > 0, got {bs}")
    options = data.get("options") or {}
    for strat, opts in options.items():
        if not isinstance(opts, dict):
            raise TiletuneError(f"{where}: 'options' maps a strategy name to an object of options; "
                                f"got {strat!r}: {opts!r}")
    levels = data.get("levels")
    if levels is not None:
        try:
            parse_levels(levels)
        except TiletuneError as e:
            raise TiletuneError(f"{where}: key 'levels': {e}") from None
    keys = []
    for spec in data["workloads"]:
        try:
            keys.append(parse(spec).key)
        except TiletuneError as e:
            raise TiletuneError(f"{where}: bad workload {spec!r}: {e}") from None
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise TiletuneError(f"{where}: workload(s) listed twice: {', '.join(dup)}")
    return Suite(
        name=data["name"], description=data["description"], workloads=tuple(keys),
        strategies=tuple(s.strip() for s in data["strategies"]), seeds=data["seeds"], budget=data["budget"],
        budget_seconds=float(bs) if bs is not None else None, levels=levels, notes=data.get("notes", ""),
        source=source, options={k: dict(v) for k, v in options.items()},
    )


def load(name_or_path: str | Path) -> Suite:
    """A shipped suite by name ("tiny", "tvm-af-ds", ...) or a JSON file by path."""
    text_ref = str(name_or_path)
    table = shipped()
    if text_ref in table and not Path(text_ref).exists():
        path = table[text_ref]
    else:
        p = Path(text_ref)
        if not p.exists():
            raise TiletuneError(f"no suite {text_ref!r}: not a shipped suite ({', '.join(table) or 'none'}) "
                                "and no such file")
        path = str(p)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise TiletuneError(f"suite {path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except OSError as e:
        raise TiletuneError(f"suite {path}: cannot read ({e.strerror})") from None
    return validate(data, source=path)


def list_suites() -> list[Suite | tuple[str, str]]:
    """Every shipped suite, loaded; a suite file that fails to load appears as (name, error message)."""
    out: list[Suite | tuple[str, str]] = []
    for name, path in shipped().items():
        try:
            out.append(load(path))
        except TiletuneError as e:
            out.append((name, str(e)))
    return out
