"""The benchmark harness: every strategy on every workload of a suite, N seeds each, plus baselines.

Each (workload, strategy, seed) is one ordinary tuning run through ``tiletune.session.run`` (so
through ``tiletune.tune.tune``, the loop ``tiletune tune`` uses) with the suite's trial budget and
optional wall-time budget. One measurer per workload (LocalMeasurer with warm workers, or the
replay measurer with ``replay=TABLE.jsonl``) serves all its runs. Runs do not share results: each
starts from an empty history (no records file is read), so seeds are independent repetitions.

Everything lands in ``out_dir``:
- ``records.jsonl``: every trial of every run (the usual Record lines, with strategy and seed), written
  as they arrive;
- ``traces.jsonl``: per run, (trial, seconds since the run started, GFLOPS, best so far) for the plots;
- ``baselines.jsonl``: each baseline result (vendor library, MetaSchedule);
- ``summary.json`` and ``summary.csv``: per workload and method, statistics over seeds;
- ``report.md`` and PNG plots (see ``plots.py``, ``report.py``).
The summary, report and plots are rewritten after every workload, so a long run that is interrupted
still leaves a readable report of what finished.

Resuming (``resume=True``, ``tiletune bench --resume``): the settings that decide what a run means
(budget, wall-time budget, levels, target, replay table, strategy options, measurement
settings) are kept in ``bench.json``; a resumed directory must have been made with the same settings
(else an error says which differ). Runs found in ``traces.jsonl`` are kept and not repeated; the records
of runs that were cut off (in ``records.jsonl`` without a trace) are dropped and those runs start again
from trial 1, so every kept run is a whole, uninterrupted run; baselines found in ``baselines.jsonl``
are kept. Workloads, strategies and seeds may differ between the pieces (runs are keyed by workload,
strategy and seed): a multi-hour suite can so be run piecewise (``--workloads``, ``--seeds``), across
sessions.
"""
from __future__ import annotations

import csv
import json
import math
import statistics
import time
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import TiletuneError
from ..measure.base import MeasureSettings, Measurer
from ..progress import Progress
from ..records import Record, RecordWriter
from ..measure.factory import check_sources, make_measurer, shared_pool
from ..schedules import make_space
from ..session import RunSpec
from ..session import run as run_session
from ..space import Space, parse_levels
from ..strategies import get
from ..target import parse_target
from ..tune import TuneRun
from ..workloads import parse
from ..workloads.base import Workload
from . import machine, metaschedule, report, vendor
from . import plots as plot_mod
from .report import last_line
from .results import BASELINES, BaselineResult, BenchResult, RunResult, jsonl_lines
from .suites import Suite

MeasurerFactory = Callable[[Workload, Space, dict], Measurer]


class _Trace:
    """Tuning-loop callback: keeps the per-trial trace and appends every record to records.jsonl."""

    def __init__(self, writer: RecordWriter):
        self.writer = writer
        self.trace: list[tuple[int, float, float, float]] = []

    def on_start(self, run: TuneRun) -> None:
        self.trace = []

    def on_trial(self, run: TuneRun, record: Record, measured: bool) -> None:
        self.writer.write(record)
        self.trace.append((run.trials, round(run.elapsed, 4), record.gflops, run.best_gflops))

    def on_end(self, run: TuneRun) -> None:
        pass


def run_bench(
    suite: Suite,
    out_dir: str | Path,
    *,
    strategies: Sequence[str] | None = None,
    seeds: int | None = None,
    budget: int | None = None,
    budget_seconds: float | None = None,
    baselines: Sequence[str] = BASELINES,
    target: Any = None,
    levels: str | None = None,
    replay: str | None = None,
    settings: MeasureSettings | None = None,
    batch_size: int = 8,
    measurer_factory: MeasurerFactory | None = None,
    metaschedule_timeout: float = 3600.0,
    options: dict[str, dict] | None = None,
    hardware: str | None = None,
    progress: bool = True,
    plots: bool = True,
    console=None,
    resume: bool = False,
    rpc: str | None = None,
    transfer: dict[str, Sequence[str]] | None = None,
    cluster: str | None = None,
) -> BenchResult:
    """Run the suite; arguments left as None take the suite's values (``budget_seconds=0``: no wall-time
    limit even if the suite has one). ``options`` maps a strategy name to
    its options (merged over the suite's ``options``); ``hardware`` is a HardwareSpec JSON file for the
    strategies that use one. ``resume``: keep the finished runs and baselines of ``out_dir`` (made with
    the same settings) and do only the rest. ``rpc`` (``HOST:PORT:KEY``): measure on the devices of that TVM
    RPC tracker; the baselines, measured on this machine, are refused with it. ``cluster``: the address of a Ray
    cluster whose nodes build and measure every run (``tiletune.measure.cluster``: one pool of its workers for the
    whole bench; the baselines refused with it as with ``rpc``). ``transfer``: workload key ->
    records files of other workloads that warm-start the learned cost models of that workload's runs
    (``--transfer`` of ``tiletune tune``; a workload not in it runs without)."""
    strategies = suite.check_strategies(list(strategies) if strategies else None)
    # the suite's options of strategies not run this time are dropped (a suite pins, e.g., its paper's starts)
    suite_options = {k: v for k, v in suite.options.items() if k in strategies}
    strat_options = check_options(strategies, suite_options, options or {})
    seeds = suite.seeds if seeds is None else seeds
    budget = suite.budget if budget is None else budget
    budget_seconds = suite.budget_seconds if budget_seconds is None else budget_seconds
    if seeds < 1:
        raise TiletuneError(f"--seeds must be >= 1, got {seeds}")
    if budget < 1:
        raise TiletuneError(f"--budget must be >= 1, got {budget}")
    if budget_seconds is not None and budget_seconds < 0:
        raise TiletuneError(f"--budget-seconds must be >= 0 (0 = no wall-time limit), got {budget_seconds}")
    if budget_seconds == 0:
        budget_seconds = None  # explicitly no wall-time limit, whatever the suite says
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise TiletuneError(f"unknown baseline(s) {', '.join(unknown)}; accepted: {', '.join(BASELINES)}, none")
    check_sources(replay=replay, rpc=rpc, cluster=cluster)
    remote = "--rpc" if rpc is not None else "--cluster" if cluster is not None else None
    if remote and baselines:
        raise TiletuneError(f"{remote} measures on other machines, but the baselines {', '.join(baselines)} are "
                            "measured on this one: give --baselines none")
    if replay is not None and not Path(replay).exists():
        raise TiletuneError(f"--replay table {replay!r} does not exist")
    levels_text = levels if levels is not None else suite.levels
    lv = parse_levels(levels_text)
    tgt = parse_target(target)
    settings = settings or MeasureSettings()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"budget": budget,
                "budget_seconds": budget_seconds, "levels": levels_text, "target": tgt, "replay": replay,
                "options": strat_options, "batch_size": batch_size, "hardware": hardware,
                "settings": asdict(settings), **({"rpc": rpc} if rpc is not None else {}),
                **({"cluster": cluster} if cluster is not None else {}),
                **({"transfer": {k: list(v) for k, v in transfer.items()}} if transfer else {})}
    done_runs: dict[tuple[str, str, int], RunResult] = {}
    done_baselines: dict[str, dict[str, BaselineResult]] = {}
    kept_span: tuple[float, float] | None = None
    if resume:
        done_runs, done_baselines, kept_span = _load_previous(out, manifest)
    else:
        for name in ("records.jsonl", "traces.jsonl", "baselines.jsonl"):
            (out / name).unlink(missing_ok=True)  # a bench directory describes one run
            (out / f"{name}.gz").unlink(missing_ok=True)  # a committed study's compressed copy (jsonl_lines)
    (out / "bench.json").write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")

    res = BenchResult(suite=suite, strategies=list(strategies), seeds=seeds, budget=budget,
                      budget_seconds=budget_seconds, target=tgt, baselines=list(baselines), out_dir=out,
                      replay=replay, machine=machine.machine_info(tgt))
    if kept_span:  # a resumed bench started when its first kept trial did, not when this piece did
        res.started = min(res.started, kept_span[0])
    if "peak" in baselines and tgt.get("kind") == "llvm":
        res.peak = machine.peak(tgt)
    workloads = [parse(w) for w in suite.workloads]
    todo = sum(1 for wl in workloads for st in strategies for sd in range(seeds)
               if (wl.key, st, sd) not in done_runs)
    prog = Progress(runs=todo, console=console) if progress else None
    if prog and done_runs:
        prog.note(f"resuming {out}: {len(workloads) * len(strategies) * seeds - todo} runs kept, {todo} to do")
    wanted = [b for b in res.baselines if b != "peak"]  # per-workload baselines (peak is per machine)
    writer = RecordWriter(out / "records.jsonl")
    tracer = _Trace(writer)
    callbacks = [tracer, prog] if prog else [tracer]
    pool = shared_pool(tgt, cluster=cluster) if cluster is not None and measurer_factory is None else None
    try:
        for wl in workloads:
            space = make_space(wl, lv, tgt)
            res.flops[wl.key] = wl.flops
            res.space_sizes[wl.key] = space.size
            kept = [done_runs[(wl.key, st, sd)] for st in strategies for sd in range(seeds)
                    if (wl.key, st, sd) in done_runs]
            res.runs.extend(kept)
            prev = done_baselines.get(wl.key, {})
            kept_baselines = {b: prev[b] for b in wanted} if all(b in prev for b in wanted) else None
            if len(kept) == len(strategies) * seeds and kept_baselines is not None:
                res.baseline_results[wl.key] = kept_baselines
                res.workloads_done.append(wl.key)
                continue
            if measurer_factory is not None:
                measurer = measurer_factory(wl, space, tgt)
            else:
                measurer = make_measurer(wl, space, tgt, replay=replay, settings=settings, rpc=rpc, pool=pool,
                                         cluster=cluster)
            try:
                measurer.warm_up()  # start the workers before the first run's clock starts
                for strat in strategies:
                    for seed in range(seeds):
                        if (wl.key, strat, seed) in done_runs:
                            continue
                        if prog:
                            prog.label = f"seed {seed}"
                        spec = RunSpec(workload=wl.key, strategy=strat, trials=budget, seconds=budget_seconds,
                                       seed=seed, target=tgt, levels=lv, records=None, replay=replay, rpc=rpc,
                                       batch_size=batch_size, settings=settings,
                                       options=dict(strat_options.get(strat, {})), hardware=hardware,
                                       transfer=tuple((transfer or {}).get(wl.key, ())))
                        run = run_session(spec, callbacks, measurer=measurer)
                        rr = _run_result(run, wl, seed, space.size, tracer.trace)
                        res.runs.append(rr)
                        with open(out / "traces.jsonl", "a", encoding="utf-8") as f:
                            f.write(json.dumps({k: v for k, v in asdict(rr).items()}) + "\n")
            finally:
                measurer.close()
            res.baseline_results[wl.key] = (kept_baselines if kept_baselines is not None
                                            else _baselines(wl, res, settings, metaschedule_timeout, prog))
            res.workloads_done.append(wl.key)
            res.finished = time.time()
            if wl is not workloads[-1]:
                write_outputs(res, plots=plots, final=False)
    finally:
        writer.close()
        if pool is not None:
            pool.close()
        if prog:
            prog.close()
    res.finished = time.time()
    if todo == 0 and kept_span:  # only re-rendered: the bench finished with its last kept trial
        res.finished = kept_span[1]
    write_outputs(res, plots=plots)
    return res


#: MeasureSettings fields that older bench directories lack, with the value that measured as they did
#: (before the early cut-off, every kernel got all its samples)
OLDER_SETTINGS = {"cutoff": 0.0}


def _load_previous(out: Path, manifest: dict) -> tuple[dict, dict, tuple[float, float] | None]:
    """For ``resume``: the finished runs (traces.jsonl) and baselines (baselines.jsonl) of ``out``, after
    checking that ``bench.json`` has the same settings, and the (first start, last finish) of their
    records (None without timed records); drops the records of unfinished runs."""
    mpath = out / "bench.json"
    if not mpath.exists():
        if any((out / n).exists() for n in ("traces.jsonl", "records.jsonl")):
            raise TiletuneError(f"--resume: {out} has results but no bench.json (made by an older tiletune?); "
                                "use another --out")
        return {}, {}, None
    old = json.loads(mpath.read_text(encoding="utf-8"))
    new = json.loads(json.dumps(manifest, default=str))
    # settings added since a directory was made take the value that reproduces how it was measured
    for k, v in OLDER_SETTINGS.items():
        old.get("settings", {}).setdefault(k, v)
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        raise TiletuneError(f"--resume: {out} was made with other settings ({', '.join(diff)} differ); "
                            "run without --resume to start over, or use another --out")
    runs: dict[tuple[str, str, int], RunResult] = {}
    names = {f.name for f in dataclass_fields(RunResult)}
    for _, d in jsonl_lines(out / "traces.jsonl"):
        rr = RunResult(**{k: v for k, v in d.items() if k in names})
        rr.trace = [tuple(t) for t in rr.trace]
        runs[(rr.workload, rr.strategy, rr.seed)] = rr
    base: dict[str, dict[str, BaselineResult]] = {}
    names = {f.name for f in dataclass_fields(BaselineResult)}
    for _, d in jsonl_lines(out / "baselines.jsonl"):
        b = BaselineResult(**{k: v for k, v in d.items() if k in names})
        b.costs = tuple(b.costs)
        base.setdefault(b.workload, {})[b.name] = b
    rpath = out / "records.jsonl"
    packed = out / "records.jsonl.gz"  # a committed study's records (jsonl_lines reads it first)
    starts, finishes = [], []
    if rpath.exists() or packed.exists():  # keep the records of finished runs only: cut-off runs start again
        keep = []
        for line, d in jsonl_lines(rpath):
            if (d.get("workload"), d.get("strategy"), d.get("seed")) in runs:
                keep.append(line)
                starts += [d["started"]] if isinstance(d.get("started"), (int, float)) else []
                finishes += [d["finished"]] if isinstance(d.get("finished"), (int, float)) else []
        tmp = rpath.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
        tmp.replace(rpath)
        packed.unlink(missing_ok=True)  # its kept lines are in the plain file now
    return runs, base, ((min(starts), max(finishes)) if starts and finishes else None)


def check_options(strategies: Sequence[str], *layers: dict[str, dict]) -> dict[str, dict]:
    """Merge per-strategy options (later layers win) and check them against each strategy's declared
    options, so that a typo fails before hours of measuring rather than at that strategy's first run."""
    merged: dict[str, dict] = {}
    for layer in layers:
        for name, opts in (layer or {}).items():
            merged.setdefault(name, {}).update(opts)
    for name, opts in merged.items():
        if name not in strategies:
            raise TiletuneError(f"options given for strategy {name!r}, which is not run "
                                f"(strategies: {', '.join(strategies)})")
        get(name).check_options(opts)
    return merged


def _run_result(run: TuneRun, wl: Workload, seed: int, space_size: int, trace: list) -> RunResult:
    kinds: dict[str, int] = {}
    samples: dict[str, str] = {}
    for r in run.history:
        if r.error:
            kinds[r.error] = kinds.get(r.error, 0) + 1
            samples.setdefault(r.error, last_line(r.message)[:300])
    b = run.best
    return RunResult(workload=wl.key, strategy=run.strategy, seed=seed, trials=run.trials, measured=run.measured,
                     errors=run.errors, best_gflops=run.best_gflops, best_median_s=b.median_s if b else None,
                     best_trial=b.trial if b else None, best_config=b.config if b else None,
                     elapsed_s=run.elapsed, stopped=run.stopped, space_size=space_size, trace=list(trace),
                     error_kinds=kinds, error_samples=samples)


def _baselines(wl: Workload, res: BenchResult, settings: MeasureSettings, ms_timeout: float,
               prog: Progress | None) -> dict[str, BaselineResult]:
    out: dict[str, BaselineResult] = {}
    if "vendor" in res.baselines:
        if prog:
            prog.note(f"{wl.key}: vendor baseline")
        out["vendor"] = vendor.vendor(wl, settings, threads=res.target.get("num-cores"))
    if "metaschedule" in res.baselines:
        if res.target.get("kind") != "llvm":
            out["metaschedule"] = BaselineResult("metaschedule", wl.key, error="unsupported",
                                                    message="MetaSchedule baseline runs on CPU targets only")
        else:
            if prog:
                prog.note(f"{wl.key}: MetaSchedule, {res.budget} trials (log: metaschedule.log)")
            out["metaschedule"] = metaschedule.metaschedule(wl, res.target, res.budget, settings=settings,
                                                  timeout=ms_timeout, log_path=res.out_dir / "metaschedule.log")
    with open(res.out_dir / "baselines.jsonl", "a", encoding="utf-8") as f:
        for b in out.values():
            f.write(json.dumps(b.to_dict(wl.flops)) + "\n")
    if prog:
        for b in out.values():
            txt = f"{b.gflops(wl.flops):.2f} GFLOPS" if b.ok else f"failed ({b.error}: {b.message[:120]})"
            prog.note(f"{wl.key}: {b.name} ({b.label}) {txt}, {b.wall_s:.1f} s")
    return out


# ---- summary ------------------------------------------------------------------------------------------

def _stats(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "std": None, "min": None, "median": None, "max": None}
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "min": min(xs),
            "median": statistics.median(xs), "max": max(xs)}


def summarize(res: BenchResult) -> dict[str, Any]:
    peak = res.peak.gflops if res.peak else None
    wls: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for key in res.flops:
        flops = res.flops[key]
        base = res.baseline_results.get(key, {})
        vendor = base.get("vendor")
        v_g = vendor.gflops(flops) if vendor is not None and vendor.ok else None
        entry: dict[str, Any] = {"flops": flops, "space_size": res.space_sizes.get(key), "strategies": {},
                                 "baselines": {n: b.to_dict(flops) for n, b in base.items()}}
        for s in res.strategies:
            runs = res.runs_of(key, s)
            if not runs:
                continue
            g = [r.best_gflops for r in runs]
            st = _stats(g)
            d = {"seeds": len(runs), "best_gflops": st, "trials_mean": statistics.fmean(r.trials for r in runs),
                 "elapsed_s_mean": statistics.fmean(r.elapsed_s for r in runs),
                 "errors_mean": statistics.fmean(r.errors for r in runs),
                 "explored_fraction_mean": statistics.fmean(r.trials / max(1, r.space_size) for r in runs),
                 "vs_vendor": st["mean"] / v_g if v_g else None,
                 "pct_peak": 100 * st["mean"] / peak if peak else None,
                 "best_config": max(runs, key=lambda r: r.best_gflops).best_config,
                 "runs": [{"seed": r.seed, "best_gflops": r.best_gflops, "trials": r.trials, "elapsed_s": r.elapsed_s,
                           "errors": r.errors, "best_trial": r.best_trial, "stopped": r.stopped,
                           "error_kinds": r.error_kinds, "error_samples": r.error_samples} for r in runs]}
            entry["strategies"][s] = d
            rows.append({"workload": key, "method": s, "kind": "strategy", "label": s, "seeds": len(runs),
                         "trials_mean": d["trials_mean"], "gflops_mean": st["mean"], "gflops_std": st["std"],
                         "gflops_min": st["min"], "gflops_median": st["median"], "gflops_max": st["max"],
                         "vs_vendor": d["vs_vendor"], "pct_peak": d["pct_peak"], "wall_s_mean": d["elapsed_s_mean"],
                         "errors_mean": d["errors_mean"], "error": ""})
        for n, b in base.items():
            gf = b.gflops(flops) if b.ok else None
            rows.append({"workload": key, "method": n, "kind": "baseline", "label": b.label, "seeds": 1,
                         "trials_mean": b.trials or None, "gflops_mean": gf, "gflops_std": None, "gflops_min": gf,
                         "gflops_median": gf, "gflops_max": gf,
                         "vs_vendor": (gf / v_g) if (gf and v_g) else None,
                         "pct_peak": 100 * gf / peak if (gf and peak) else None, "wall_s_mean": b.wall_s,
                         "errors_mean": None, "error": "" if b.ok else f"{b.error}: {last_line(b.message)[:200]}"})
        if peak:
            rows.append({"workload": key, "method": "peak", "kind": "baseline", "label": res.peak.source,
                         "seeds": None, "trials_mean": None, "gflops_mean": peak, "gflops_std": None,
                         "gflops_min": peak, "gflops_median": peak, "gflops_max": peak,
                         "vs_vendor": peak / v_g if v_g else None, "pct_peak": 100.0, "wall_s_mean": None,
                         "errors_mean": None, "error": ""})
        wls[key] = entry
    return {
        "suite": res.suite.to_dict() | {"source": res.suite.source},
        "strategies": res.strategies, "seeds": res.seeds, "budget": res.budget,
        "budget_seconds": res.budget_seconds, "target": res.target, "replay": res.replay,
        "baselines": res.baselines, "machine": res.machine,
        "peak": asdict(res.peak) if res.peak else None,
        "started": res.started, "finished": res.finished,
        "complete": len(res.workloads_done) == len(res.suite.workloads),
        "workloads": wls, "rows": rows,
    }


CSV_COLUMNS = ["workload", "method", "kind", "label", "seeds", "trials_mean", "gflops_mean", "gflops_std",
               "gflops_min", "gflops_median", "gflops_max", "vs_vendor", "pct_peak", "wall_s_mean", "errors_mean",
               "error"]


def _fmt_csv(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    return "" if v is None else v


def write_outputs(res: BenchResult, plots: bool = True, final: bool = True) -> dict[str, Any]:
    """Summary, CSV, report and figures. ``final=False`` (after each workload of a long run) draws only
    the curves not drawn yet, not the figures over all workloads."""
    summary = summarize(res)
    out = res.out_dir
    files = ["records.jsonl", "traces.jsonl", "baselines.jsonl", "summary.json", "summary.csv", "report.md"]
    if plots:
        summary["plots"] = plot_mod.make_plots(res, out, final=final, drawn=res.drawn)
    else:
        summary["plots"] = []
    summary["files"] = files + summary["plots"]
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for row in summary["rows"]:
            w.writerow({k: _fmt_csv(row.get(k)) for k in CSV_COLUMNS})
    (out / "report.md").write_text(report.render(res, summary))
    return summary
