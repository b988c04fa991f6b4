"""tiletune space WORKLOAD [--levels ...]"""
from __future__ import annotations

from ..schedules import make_space
from ..space import parse_levels
from ..target import parse_target
from ..workloads import parse


def add_parser(sub) -> None:
    p = sub.add_parser("space", help="print the knobs and the exact size of a workload's tiling space",
                       description="Print the knobs of WORKLOAD's tiling space and its exact size.")
    p.add_argument("workload")
    p.add_argument("--levels", default=None, help="'Ls,Lr' (default 4,2) or per axis 'm=4,n=4,k=2'")
    p.add_argument("--target", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    wl = parse(args.workload)
    sp = make_space(wl, parse_levels(args.levels), parse_target(args.target))
    print(f"workload {wl.key}  ({wl.flops} FLOPs)")
    print(sp.describe())
    return 0
