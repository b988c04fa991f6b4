"""tiletune tune WORKLOAD --strategy NAME --trials N -o RECORDS.jsonl"""
from __future__ import annotations

from ..progress import Progress, summary
from ..session import RunSpec
from ..session import run as run_session
from ..space import parse_levels
from ..workloads import parse
from .common import (HelpFormatter, add_measure_arguments, add_option_argument, add_output_argument, measure_settings,
                     options_for)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune", help="tune one workload", formatter_class=HelpFormatter,
        description="Search the tiling space of WORKLOAD with a strategy, measuring each configuration on this "
        "machine (built and run in warm worker processes, checked against numpy). Every result is appended "
        "to the records file as it arrives; re-running the same command resumes.",
    )
    p.add_argument("workload", help="workload spec, e.g. gemm:M=512,N=512,K=512")
    p.add_argument("--strategy", "-s", default="random", help="strategy name (see 'tiletune strategies')")
    add_option_argument(p, "an option of the strategy, e.g. rho=0.5 or gbfs.rho=0.5 (repeatable)")
    p.add_argument("--trials", "-n", type=int, default=64, help="trial budget (0 = no trial limit)")
    p.add_argument("--seconds", type=float, default=None, help="wall-time budget in seconds")
    p.add_argument("--early-stop", type=int, default=None, help="stop after N trials without improvement")
    add_output_argument(p, records=True, dest="records", default=None, metavar="RECORDS.jsonl",
                        help="records file to append to (default: tiletune-<op>.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="seed of the strategy's random choices")
    p.add_argument("--target", default=None, help="'host' (default), 'llvm', 'cuda[:sm_XX]' or a JSON target")
    p.add_argument("--levels", default=None, help="tiling levels 'Ls,Lr' (default 4,2) or per axis 'm=4,n=4,k=2'")
    p.add_argument("--replay", default=None, metavar="TABLE.jsonl",
                   help="answer from a table of measured configurations instead of the hardware")
    p.add_argument("--transfer", action="append", default=[], metavar="OTHER.jsonl",
                   help="records of other workloads to warm-start a cost model (xgb strategies)")
    p.add_argument("--hardware", default=None, metavar="SPEC.json",
                   help="HardwareSpec for model-based strategies (gensor, roller, *-af); default: detected "
                   "(see 'tiletune hardware')")
    p.add_argument("--transport", default=None, metavar="CMD",
                   help="for GPU targets measured elsewhere: a shell command that runs the batch directory {dir} "
                   "with the GPU runner on the GPU machine and puts results.json back into {dir} "
                   "(see tiletune/measure/remote.py)")
    add_measure_arguments(p, batch_size=8)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    wl = parse(args.workload)
    records = args.records or f"tiletune-{wl.op}.jsonl"
    spec = RunSpec(workload=wl.key, strategy=args.strategy, trials=args.trials or None, seconds=args.seconds,
                   early_stop=args.early_stop, seed=args.seed, target=args.target, levels=parse_levels(args.levels),
                   options=options_for(args.option, args.strategy), records=records, replay=args.replay,
                   batch_size=args.batch_size, transfer=args.transfer, settings=measure_settings(args),
                   hardware=args.hardware, transport=args.transport)
    callbacks = [] if args.quiet else [Progress()]
    result = run_session(spec, callbacks)
    print(summary(result))
    print(f"records   {records}")
    return 0 if result.best is not None else 1
