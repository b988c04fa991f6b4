"""tiletune best RECORDS [--workload W]"""
from __future__ import annotations

import json

from ..errors import TiletuneError
from ..records import best, load
from ..workloads import parse


def add_parser(sub) -> None:
    p = sub.add_parser("best", help="print the best configuration in a records file")
    p.add_argument("records", help="records file (JSONL) written by 'tiletune tune'")
    p.add_argument("--workload", "-w", default=None, help="only this workload (spec or key)")
    p.add_argument("--json", action="store_true", help="print the whole record as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    key = parse(args.workload).key if args.workload else None
    recs = load(args.records, workload=key)
    keys = sorted({r.workload for r in recs})
    if key is None and len(keys) > 1:
        for k in keys:
            b = best(recs, k)
            print(f"{k}: " + (f"{b.gflops:.2f} GFLOPS {json.dumps(b.config)}" if b else "no successful trial"))
        return 0
    b = best(recs)
    if b is None:
        raise TiletuneError(f"no successful trial in {args.records}" + (f" for {key}" if key else ""))
    if args.json:
        print(b.to_json())
    else:
        print(f"workload {b.workload}\ntarget   {b.target}\nGFLOPS   {b.gflops:.2f}\nmedian   {b.median_s * 1e3:.4f} ms"
              f"\nconfig   {json.dumps(b.config)}\nstrategy {b.strategy} (trial {b.trial})")
    return 0
