"""tiletune table WORKLOAD -o TABLE.jsonl [--exhaustive | --sample N] [--seed S] [--levels ...]

Builds a replay table: measures every configuration of a (small) space, or a uniform sample without
replacement, on this machine and appends the results to an ordinary records file. ``tiletune tune ...
--replay TABLE.jsonl`` then answers from it instead of the hardware (``tiletune.measure.replay``).

It runs the ordinary tuning loop (``tiletune.tune``) with the ``grid`` strategy (exhaustive, index
order) or the ``random`` strategy (sample, seeded), so an interrupted build resumes where it stopped
when the same command is run again: configurations already in the file are not measured twice.
"""
from __future__ import annotations


from ..errors import TiletuneError
from ..measure.factory import make_measurer
from ..paths import check_output
from ..progress import Progress, failures
from ..schedules import make_space
from ..space import parse_levels
from ..strategies import create
from ..target import parse_target, target_key
from ..tune import tune
from ..workloads import parse
from .common import HelpFormatter, add_measure_arguments, add_output_argument, measure_settings

MAX_EXHAUSTIVE = 20_000


def add_parser(sub) -> None:
    p = sub.add_parser(
        "table", help="measure a space exhaustively or a uniform sample of it, as a replay table",
        formatter_class=HelpFormatter,
        description="Measure every configuration of WORKLOAD's tiling space (--exhaustive, refused above "
        f"{MAX_EXHAUSTIVE} configurations) or a uniform random sample of N of them (--sample N) and append "
        "the results to a records file, for 'tiletune tune ... --replay TABLE.jsonl'. Re-running the same "
        "command resumes.",
    )
    p.add_argument("workload", help="workload spec, e.g. gemm:M=64,N=64,K=64")
    add_output_argument(p, records=True, required=True, metavar="TABLE.jsonl", help="records file to append to")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--exhaustive", action="store_true", help="measure every configuration")
    how.add_argument("--sample", type=int, metavar="N", help="measure N configurations drawn uniformly")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument("--levels", default=None, help="tiling levels 'Ls,Lr' (default 4,2) or per axis 'm=4,n=4,k=2'")
    p.add_argument("--target", default=None, help="'host' (default), 'llvm' or a JSON target")
    add_measure_arguments(p, batch_size=16, rpc=False)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def plan(space_size: int, exhaustive: bool, sample: int | None) -> tuple[str, int]:
    """(strategy, trials) for the table, or a TiletuneError saying why not."""
    if exhaustive:
        if space_size > MAX_EXHAUSTIVE:
            raise TiletuneError(f"--exhaustive refused: the space has {space_size} configurations, more than "
                                f"{MAX_EXHAUSTIVE}; use --sample N, a smaller workload, or fewer --levels")
        return "grid", space_size
    if sample is None or sample < 1:
        raise TiletuneError(f"--sample needs a positive number of configurations, got {sample}")
    return "random", min(sample, space_size)


def build_table(workload, space, target: dict, output: str, measurer, *, exhaustive: bool = False,
                sample: int | None = None, seed: int = 0, batch_size: int = 16, callbacks=()):
    """Measure the planned configurations with ``measurer`` into ``output``; returns the TuneRun."""
    strategy, trials = plan(space.size, exhaustive, sample)
    strat = create(strategy, space, seed=seed)
    return tune(space=space, strategy=strat, measurer=measurer, workload=workload.key, flops=workload.flops,
                target=target_key(target), trials=trials, batch_size=batch_size, records=output,
                callbacks=callbacks)


def run(args) -> int:
    wl = parse(args.workload)
    target = parse_target(args.target)
    if target.get("kind") != "llvm":
        raise TiletuneError("tiletune table measures on this machine: give an llvm target (or none for the host)")
    space = make_space(wl, parse_levels(args.levels), target)
    settings = measure_settings(args)  # refuse bad values before starting workers
    _, trials = plan(space.size, args.exhaustive, args.sample)
    check_output(args.output, "table file")
    measurer = make_measurer(wl, space, target, settings=settings)
    callbacks = [] if args.quiet else [Progress()]
    try:
        result = build_table(wl, space, target, args.output, measurer, exhaustive=args.exhaustive,
                             sample=args.sample, seed=args.seed, batch_size=args.batch_size, callbacks=callbacks)
    finally:
        measurer.close()
    ok = sum(r.ok for r in result.history)
    print(f"table {args.output}: {wl.key}, {result.trials} of {space.size} configurations "
          f"({result.measured} measured now, {result.recalled} already there), {ok} ok, {failures(result)}")
    if result.best is not None:
        print(f"best {result.best.gflops:.2f} GFLOPS  {result.best.config}")
    return 0 if result.best is not None else 1
