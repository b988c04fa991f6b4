"""Compiled graphs kept on disk, so that a second process compiles nothing.

A graph's entry is ``$TILETUNE_CACHE_DIR/graphs/<key>.so`` (the Relax executable, ``export_library``) and
``<key>.json`` (the graph's tasks, the tuning database's state for them when it was built, which kernel got which
schedule). The key (``graph_key``) is a digest of the graph's code, its inputs' shapes and dtypes, its symbolic
sizes' values, its weights' contents (they are constants of the library), the target, the layout, the compute dtype,
the construction method, and the versions of tiletune and TVM. The database state is checked when an entry is
loaded (``GraphCompiler.cached``): an entry built before the database gave one of its tasks another kernel is
built again and replaced.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..version import __version__
from ..api import c_compiler
from ..db.store import cache_root
from ..quiet import quiet_tvm

#: bumped when what an entry holds changes meaning
CACHE_VERSION = 2


def graph_key(code: str, shapes: list, ints: list[int], weights: str, target: str, layout: str, dtype: str,
              construct: str) -> str:
    import tvm

    parts = [CACHE_VERSION, __version__, tvm.__version__, code, [[list(s), d] for s, d in shapes], ints, weights,
             target, layout, dtype, construct]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


class GraphCache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.dir = Path(root) if root is not None else cache_root() / "graphs"

    def paths(self, key: str) -> tuple[Path, Path]:
        return self.dir / f"{key}.so", self.dir / f"{key}.json"

    def load(self, key: str):
        """(loaded module, description) of ``key``'s entry, or None when there is none (or it does not load)."""
        import tvm

        so, meta = self.paths(key)
        if not (so.is_file() and meta.is_file()):
            return None
        try:
            return tvm.runtime.load_module(str(so)), json.loads(meta.read_text())
        except Exception:  # noqa: BLE001  (a damaged or foreign entry: built again)
            return None

    def store(self, key: str, executable, meta: dict):
        """Write ``executable`` and ``meta`` as ``key``'s entry (each file under a temporary name, then moved into
        place, the description last); returns the module to run (the executable's own)."""
        so, desc = self.paths(key)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = so.with_name(f".{so.name}.{os.getpid()}.tmp.so")
        c_compiler()
        with quiet_tvm():
            executable.export_library(str(tmp))
        os.replace(tmp, so)
        tmp = desc.with_name(f".{desc.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, desc)
        return executable.mod

    def entries(self) -> list[dict]:
        out = []
        for p in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            try:
                out.append({"key": p.stem, **json.loads(p.read_text())})
            except (OSError, ValueError):
                continue
        return out
