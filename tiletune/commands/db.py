"""tiletune db [list | export FILE | import FILE]: the tuning database (``tiletune.db.store``).

``tiletune tune``, ``tiletune model tune`` and ``tiletune model build`` add their records file (``-o`` / ``-r``) to the
database when they end (``absorb_records``, called by ``tiletune.cli``); ``model build`` and the PyTorch backend take
a kernel from the database for every task the records file leaves without one.
"""
from __future__ import annotations

import os

from ..db.store import CACHE_ENV, Database, cache_root
from ..errors import TiletuneError
from ..torch_backend.cache import GraphCache
from ..workloads import parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "db", help="list, export or import the tuning database",
        description="The tuning database (by default ~/.cache/tiletune/db; TILETUNE_CACHE_DIR moves it) holds the "
        "records of every kernel tuned on this machine, one records file per target. 'tiletune db' lists it; "
        "'tiletune db export FILE' writes it to one records file; 'tiletune db import FILE' adds a records file "
        "(an export of another machine, or any records file) to it.")
    p.add_argument("action", nargs="?", default="list", choices=["list", "export", "import"],
                   help="what to do (default: list)")
    p.add_argument("file", nargs="?", default=None, metavar="FILE", help="export: the file to write; import: the "
                   "records file to add")
    p.set_defaults(func=run)


def run(args) -> int:
    db = Database()
    if args.action in ("export", "import") and not args.file:
        raise TiletuneError(f"tiletune db {args.action} FILE: give the file")
    if args.action == "list" and args.file:
        raise TiletuneError("tiletune db takes no file (did you mean 'tiletune db export FILE'?)")
    if args.action == "export":
        n = db.export(args.file)
        print(f"wrote {n} records to {args.file} (tiletune db import {args.file} adds them to another database)")
        return 0
    if args.action == "import":
        if not os.path.isfile(args.file):
            raise TiletuneError(f"records file {args.file!r} does not exist")
        n = db.absorb(args.file)
        print(f"added {n} records from {args.file} to {db.dir} (records already there are not added twice)")
        return 0
    print(f"tuning database {db.dir}" + (f" (from {CACHE_ENV})" if os.environ.get(CACHE_ENV) else ""))
    rows = db.summary()
    if not rows:
        print("  empty: tiletune tune, tiletune model tune and torch.compile(backend='tiletune', "
              "options={'mode': 'tune', ...}) fill it")
    for s in rows:
        print(f"  {s.target}: {s.records} records, {s.workloads} kernels ({s.tuned} with a successful record)")
        print(f"    {s.path}")
    graphs = GraphCache(cache_root() / "graphs").entries()
    if graphs:
        size = sum(os.path.getsize(p) for e in graphs for p in GraphCache().paths(e["key"]) if os.path.exists(p))
        print(f"compiled graphs {cache_root() / 'graphs'}: {len(graphs)} ({size / 2**20:.1f} MiB)")
    return 0


def absorb_records(args) -> int | None:
    """Add the records file of a finished ``tune``, ``model tune`` or ``model build`` (``args.records``) to the
    database; the number added, or None when the command has no records file."""
    command = getattr(args, "command", None)
    sub = getattr(args, "model_command", None) or getattr(args, "action", None)
    wanted = command == "tune" or (command == "model" and sub in ("tune", "build"))
    path = getattr(args, "records", None)
    if not wanted:
        return None
    if command == "tune" and path is None and getattr(args, "workload", None):
        path = f"tiletune-{parse(args.workload).op}.jsonl"  # the command's default (tiletune.commands.tune)
    if not path or not os.path.isfile(path):
        return None
    return Database().absorb(path)
