"""tiletune bench SUITE --strategies a,b --seeds N --budget T -o DIR"""
from __future__ import annotations

import os

from ..bench.results import BASELINES
from ..bench.run import run_bench
from ..bench.suites import list_suites, load
from ..errors import TiletuneError
from ..measure.cluster import CLUSTER_HELP, cluster_address
from ..paths import check_output
from .common import (HelpFormatter, add_measure_arguments, add_option_argument, add_output_argument, measure_settings,
                     options_by_strategy, rpc_address)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="run a benchmark suite: strategies x seeds x workloads, with baselines",
        formatter_class=HelpFormatter,
        description="Run every strategy on every workload of SUITE (a shipped suite name or a JSON file), "
        "N seeds each, through the normal tuning loop; measure the baselines (vendor library, TVM's "
        "MetaSchedule with the same trial budget, the fp32 peak) in the same run; write records.jsonl, "
        "summary.json, summary.csv, report.md and PNG plots into --output. Options left out take the suite's "
        "values. 'tiletune bench --list' lists the shipped suites.",
    )
    p.add_argument("suite", nargs="?", help="suite name (see --list) or path to a suite JSON file")
    p.add_argument("--list", action="store_true", help="list the shipped suites and exit")
    p.add_argument("--workloads", default=None,
                   help="run only these of the suite's workloads: 1-based positions ('1,3') or specs, items "
                        "separated by ';' (specs contain commas)")
    p.add_argument("--strategies", default=None, help="comma-separated strategy names (default: the suite's)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per strategy and workload (0..N-1)")
    p.add_argument("--budget", type=int, default=None, help="trials per run")
    p.add_argument("--budget-seconds", type=float, default=None, help="wall-time limit per run in seconds (0 = none, even if the suite sets one)")
    add_option_argument(p, "a strategy option, e.g. gbfs.rho=0.5; rho=0.5 sets it for every strategy of the run "
                        "that has it (repeatable; over the suite's 'options')")
    p.add_argument("--hardware", default=None, metavar="SPEC.json",
                   help="a HardwareSpec file for strategies that model the hardware (default: detected)")
    p.add_argument("--baselines", default=None,
                   help="comma-separated: vendor, metaschedule, peak, or 'none' (default: all; none with --rpc or "
                   "--cluster, as they are measured on this machine)")
    add_output_argument(p, "--out", default=None, metavar="DIR", help="output directory (default: bench-<suite>)")
    p.add_argument("--replay", default=None, metavar="TABLE.jsonl",
                   help="answer the strategies from a table of measured configurations instead of measuring")
    p.add_argument("--target", default=None, help="'host' (default), 'llvm' or a JSON target")
    p.add_argument("--levels", default=None, help="tiling levels 'Ls,Lr' (default: the suite's, else 4,2)")
    add_measure_arguments(p, batch_size=8)
    p.add_argument("--cluster", default=None, metavar="ADDRESS", help=CLUSTER_HELP + "; one pool of its workers "
                   "for every run of the bench")
    p.add_argument("--metaschedule-timeout", type=float, default=3600.0,
                   help="wall-clock limit of one MetaSchedule tuning in seconds (default: 3600)")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished runs and baselines already in --output (made with the same "
                        "settings) and do only the rest; without it --output is started afresh")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def parse_baselines(text: str | None) -> list[str]:
    if text is None:
        return list(BASELINES)
    items = [x.strip() for x in text.split(",") if x.strip()]
    if items == ["none"] or not items:
        return []
    unknown = [x for x in items if x not in BASELINES]
    if unknown:
        raise TiletuneError(f"unknown baseline(s) {', '.join(unknown)}; accepted: {', '.join(BASELINES)}, none")
    return list(dict.fromkeys(items))


def parse_strategy_options(items: list[str], strategies: list[str] | None = None) -> dict[str, dict]:
    """['gbfs.rho=0.5', ...] -> {'gbfs': {'rho': '0.5'}}; NAME=VALUE items need the run's ``strategies``
    (see ``tiletune.commands.common.options_by_strategy``)."""
    return options_by_strategy(items, strategies)


def _list() -> int:
    for s in list_suites():
        if isinstance(s, tuple):
            print(f"{s[0]:14s} (broken: {s[1]})")
            continue
        budget = f"{s.budget} trials" + (f"/{s.budget_seconds:g} s" if s.budget_seconds else "")
        print(f"{s.name:14s} {len(s.workloads):3d} workloads, strategies {','.join(s.strategies)}, "
              f"{s.seeds} seeds, {budget}")
        print(f"{'':14s} {s.description}")
    return 0


def run(args) -> int:
    if args.list:
        return _list()
    if not args.suite:
        raise TiletuneError("give a SUITE (a name from 'tiletune bench --list' or a JSON file)")
    suite = load(args.suite).select(args.workloads)
    strategies = [x.strip() for x in args.strategies.split(",") if x.strip()] if args.strategies else None
    if args.strategies is not None and not strategies:
        raise TiletuneError("--strategies is empty")
    out = args.output or f"bench-{suite.name}"
    options = parse_strategy_options(args.option, strategies or list(suite.strategies))
    settings = measure_settings(args)
    rpc = rpc_address(args)
    cluster = cluster_address(args.cluster, os.environ, elsewhere=args.replay is not None or rpc is not None)
    remote = rpc is not None or cluster is not None
    baselines = parse_baselines(args.baselines) if args.baselines is not None or not remote else []
    check_output(out, "--output directory", directory=True)
    res = run_bench(suite, out, strategies=strategies, seeds=args.seeds, budget=args.budget,
                    budget_seconds=args.budget_seconds, baselines=baselines, rpc=rpc,
                    target=args.target, levels=args.levels, replay=args.replay, settings=settings,
                    batch_size=args.batch_size, metaschedule_timeout=args.metaschedule_timeout,
                    options=options, hardware=args.hardware, cluster=cluster,
                    progress=not args.quiet, plots=not args.no_plots, resume=args.resume)
    n_ok = sum(1 for r in res.runs if r.best_gflops > 0)
    print(f"{len(res.runs)} runs ({n_ok} with a valid kernel) on {len(res.flops)} workloads")
    print(f"report    {res.out_dir / 'report.md'}")
    print(f"summary   {res.out_dir / 'summary.csv'}")
    return 0 if n_ok == len(res.runs) else 1
