"""tiletune tune WORKLOAD --strategy NAME --trials N -o RECORDS.jsonl"""
from __future__ import annotations

import os

from ..bench.machine import optional_torch
from ..bench.results import BaselineResult
from ..bench.vendor import NUMPY_OPS, TORCH_OPS, vendor
from ..db.store import Database
from ..errors import TiletuneError
from ..measure.base import MeasureSettings
from ..measure.cluster import CLUSTER_HELP, cluster_address
from ..measure.factory import measured_here
from ..progress import Progress, failures
from ..session import DEFAULT_STRATEGY, RunSpec
from ..session import run as run_session
from ..space import parse_levels
from ..target import parse_target
from ..tune import TuneRun
from ..workloads import parse
from ..workloads.base import Workload
from .common import (HelpFormatter, add_measure_arguments, add_option_argument, add_output_argument, measure_settings,
                     options_for, rpc_address)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune", help="tune one workload", formatter_class=HelpFormatter,
        description="Search the tiling space of WORKLOAD with a strategy, measuring each configuration on this "
        "machine (built and run in warm worker processes, checked against numpy), with --cluster on the nodes of a "
        "Ray cluster, or with --rpc on the devices of a TVM RPC tracker. Every result is appended to the records file as it arrives; re-running the same "
        "command resumes.",
    )
    p.add_argument("workload", help="workload spec, e.g. gemm:M=512,N=512,K=512")
    p.add_argument("--strategy", "-s", default=DEFAULT_STRATEGY,
                   help="strategy name (see 'tiletune strategies'; default: %(default)s)")
    add_option_argument(p, "an option of the strategy, e.g. rho=0.5 or gbfs.rho=0.5 (repeatable)")
    p.add_argument("--trials", "-n", type=int, default=64, help="trial budget; 0 = no trial limit, only with --seconds or --early-stop (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=None, help="wall-time budget in seconds (> 0)")
    p.add_argument("--early-stop", type=int, default=None, help="stop after N (>= 1) trials without improvement")
    add_output_argument(p, records=True, dest="records", default=None, metavar="RECORDS.jsonl",
                        help="records file to append to (default: tiletune-<op>.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="seed of the strategy's random choices")
    p.add_argument("--target", default=None, help="'host' (default), 'llvm', 'cuda[:sm_XX]' or a JSON target")
    p.add_argument("--levels", default=None, help="tiling levels 'Ls,Lr' (default 4,2) or per axis 'm=4,n=4,k=2'")
    p.add_argument("--replay", default=None, metavar="TABLE.jsonl",
                   help="answer from a table of measured configurations instead of the hardware")
    p.add_argument("--transfer", action="append", default=[], metavar="OTHER.jsonl",
                   help="records of other workloads to warm-start a cost model (xgb, evo, dgd)")
    p.add_argument("--hardware", default=None, metavar="SPEC.json",
                   help="HardwareSpec for model-based strategies (gensor, roller, *-af); default: detected "
                   "(see 'tiletune hardware')")
    add_measure_arguments(p, batch_size=None)
    p.add_argument("--cluster", default=None, metavar="ADDRESS", help=CLUSTER_HELP)
    p.add_argument("--no-vendor", action="store_true",
                   help="skip timing the vendor library (numpy/OpenBLAS for GEMM-like operators, torch for "
                   "convolutions and pooling) on the workload at the end, for comparison")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def trial_budget(trials: int, seconds: float | None, early_stop: int | None) -> int | None:
    """--trials as the run's trial budget: 0 is no trial limit (None), given another budget."""
    if trials == 0:
        if seconds is None and early_stop is None:
            raise TiletuneError("--trials 0 means no trial limit: give --seconds or --early-stop as well, "
                                "or a number of trials >= 1")
        return None
    return trials


def vendor_baseline(wl: Workload, settings: MeasureSettings, threads: int | None) -> BaselineResult | None:
    """The vendor library timed on ``wl`` (``tiletune.bench.vendor``), or None when the library is not
    installed (torch, for the operators numpy's BLAS does not compute) or has no such operator."""
    if not (wl.op in NUMPY_OPS or (wl.op in TORCH_OPS and optional_torch() is not None)):
        return None  # numpy's stand-ins for the torch operators are no vendor library
    result = vendor(wl, settings, threads=threads)
    return None if result.error == "unsupported" else result


def run(args) -> int:
    wl = parse(args.workload)
    records = args.records or f"tiletune-{wl.op}.jsonl"
    settings = measure_settings(args)
    rpc = rpc_address(args)
    cluster = cluster_address(args.cluster, os.environ, elsewhere=args.replay is not None or rpc is not None)
    spec = RunSpec(workload=wl, strategy=args.strategy,
                   trials=trial_budget(args.trials, args.seconds, args.early_stop), seconds=args.seconds,
                   early_stop=args.early_stop, seed=args.seed, target=args.target, levels=parse_levels(args.levels),
                   options=options_for(args.option, args.strategy), records=records, replay=args.replay,
                   batch_size=args.batch_size, transfer=args.transfer, settings=settings,
                   hardware=args.hardware, rpc=rpc, cluster=cluster,
                   recall=() if args.replay else Database().records(parse_target(args.target)))
    callbacks = [] if args.quiet else [Progress()]
    result = run_session(spec, callbacks)  # returns once its workers are closed: the vendor timing has the cores
    target = parse_target(args.target)
    base = None
    here = measured_here(target, replay=spec.replay, rpc=spec.rpc, cluster=spec.cluster)
    if not args.no_vendor and result.best is not None and here:
        base = vendor_baseline(wl, settings, int(target.get("num-cores") or 0) or None)
    print(summary(result, vendor=base, flops=wl.flops, records=records))
    return 0 if result.best is not None else 1


def summary(run: TuneRun, *, vendor: BaselineResult | None = None, flops: int = 0, records: str | None = None) -> str:
    """The text ``tiletune tune`` prints at the end: the run, its best result, why it stopped, what failed;
    with ``vendor`` (and the workload's ``flops``), the vendor library's figure and our ratio to it; with
    ``records``, the records file and how to build the best kernel from it."""
    lines = [f"workload  {run.workload}", f"strategy  {run.strategy}",
             f"trials    {run.trials} ({run.measured} measured, {run.recalled} from records, {failures(run)})",
             f"time      {run.elapsed:.1f} s ({run.trials / max(run.elapsed, 1e-9):.2f} trials/s)",
             f"stopped   {run.stopped}" + (f": {run.stop_reason}" if run.stop_reason else "")]
    if run.best is not None:
        b = run.best
        lines += [f"best      {b.gflops:.2f} GFLOPS, {b.median_s * 1e3:.4f} ms (trial {b.trial})",
                  f"config    {b.config}"]
    else:
        lines.append("best      none: every trial failed")
    if vendor is not None:
        lines.append(_vendor_line(run, vendor, flops))
    if run.skipped:
        lines.append(f"skipped   {run.skipped} configuration{'s' * (run.skipped > 1)} invalid for this template "
                     "(refused before building: not failures)")
    errs: dict[str, int] = {}
    for r in run.history:
        if r.error and r.error != "invalid":
            errs[r.error] = errs.get(r.error, 0) + 1
    if errs:
        lines.append("failed    " + ", ".join(f"{k}: {v}" for k, v in sorted(errs.items())))
        first = next(r for r in run.history if r.error and r.error != "invalid")
        lines.append(f"first failure message: {first.message[:300]}")
    if records is not None:
        lines.append(f"records   {records}")
        if run.best is not None:
            lines.append(f"next      tiletune build {records} -o kernel.so  (the best kernel as a shared library; "
                         "needs a C compiler)")
    return "\n".join(lines)


def _vendor_line(run: TuneRun, vendor: BaselineResult, flops: int) -> str:
    if not vendor.ok:
        return f"vendor    {vendor.label or 'vendor library'}: not timed ({vendor.error}: {vendor.message[:200]})"
    g = vendor.gflops(flops)
    line = f"vendor    {g:.2f} GFLOPS, {vendor.median_s * 1e3:.4f} ms: {vendor.label}"
    if run.best is not None and g > 0:
        line += f"; ours is {run.best.gflops / g:.2f}x its speed"
    return line
