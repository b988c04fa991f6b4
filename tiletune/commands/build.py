"""tiletune build RECORDS -o kernel.so"""
from __future__ import annotations

from ..api import export_best
from .common import add_output_argument


def add_parser(sub) -> None:
    p = sub.add_parser("build", help="export the best kernel of a records file as a shared library",
                       description="Compile the best configuration in RECORDS and export it as a library that "
                       "tiletune.api.load_kernel() loads and calls on numpy arrays. A JSON sidecar "
                       "(<output>.json) keeps the workload, target and config. Needs a C compiler (g++, gcc, "
                       "clang or cc on PATH, or named by $CXX / $CC) to link the library.")
    p.add_argument("records", help="records file (JSONL) written by 'tiletune tune'")
    add_output_argument(p, required=True, metavar="KERNEL.so", help="the library to write")
    p.add_argument("--workload", "-w", default=None, help="which workload when the file holds several")
    p.set_defaults(func=run)


def run(args) -> int:
    meta = export_best(args.records, args.output, workload=args.workload)
    print(f"wrote {args.output} ({meta['workload']}, {meta['gflops']:.2f} GFLOPS when tuned)")
    return 0
