"""Zhang et al. (G-BFS / N-A2C), Fig. 7(a)/7(b)/8 on a replay table: best cost found vs. fraction of the
space explored and vs. (simulated) search time, for gbfs, na2c, rnn, random (and xgb when registered),
several seeds each. Not a test: it prints a table and saves PNGs.

    tiletune table gemm:M=32,N=32,K=32 --levels 4,2 --sample 4000 -o t32.jsonl      # or --exhaustive
    python benchmarks/papers/gbfs_figures.py t32.jsonl gemm:M=32,N=32,K=32 --levels 4,2 --out figs/

Each run is the ordinary tuning loop against ``ReplayMeasurer`` (deterministic), with a trial budget of
``--fraction`` of the space (default 0.1%, the paper's Fig. 8(a)) or ``--trials``. A configuration the
table does not hold counts as a failed trial (error "not-in-table"): it costs a trial, as a failed
measurement would, but shows the table is too small for the comparison; the coverage is printed. The
simulated search time of a run is the sum of the table's build and run seconds of the configurations it
visited (Fig. 7(b)); strategy overhead (network training, model fitting) is added as measured here.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tiletune.measure.replay import ReplayMeasurer  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import parse_levels  # noqa: E402
from tiletune.strategies import create, registry  # noqa: E402
from tiletune.tune import tune  # noqa: E402
from tiletune.workloads import parse  # noqa: E402

DEFAULT_STRATEGIES = ["gbfs", "na2c", "rnn", "random", "xgb"]
#: the papers' starts (the user-facing default is a constructive start): G-BFS/N-A2C from the untiled s0
PAPER_START = {"gbfs": {"start": "untiled"}, "na2c": {"start": "untiled"}, "xgb": {"start": "random"}}


def one_run(rm: ReplayMeasurer, wl, space, name: str, seed: int, trials: int, batch: int):
    strat = create(name, space, seed=seed, options=PAPER_START.get(name))
    t0 = time.perf_counter()
    run = tune(space=space, strategy=strat, measurer=rm, workload=wl.key, flops=wl.flops, target=rm.target_key,
               trials=trials, batch_size=batch)
    overhead = time.perf_counter() - t0
    best, sim, curve, times, missing = math.inf, 0.0, [], [], 0
    per_trial_overhead = overhead / max(1, run.trials)
    for rec in run.history:
        if rec.ok:
            best = min(best, rec.median_s)
        missing += rec.error == "not-in-table"
        sim += rec.build_s + rec.run_s + per_trial_overhead
        curve.append(best)
        times.append(sim)
    return np.asarray(curve), np.asarray(times), missing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("table", help="replay table (records JSONL built with 'tiletune table')")
    p.add_argument("workload", help="workload spec the table was built for")
    p.add_argument("--levels", default=None, help="levels the table was built with (default 4,2)")
    p.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES))
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--fraction", type=float, default=0.001, help="trial budget as a fraction of the space")
    p.add_argument("--trials", type=int, default=None, help="trial budget (overrides --fraction)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out", default="gbfs-figures", help="folder for the PNGs")
    args = p.parse_args(argv)

    wl = parse(args.workload)
    space = make_space(wl, parse_levels(args.levels))
    rm = ReplayMeasurer(args.table, wl.key, space)
    trials = args.trials or max(1, round(args.fraction * space.size))
    names = [n for n in args.strategies.split(",") if n]
    known = registry()
    skipped = [n for n in names if n not in known]
    names = [n for n in names if n in known]
    table_best = min((rm.cost(c) for c in rm.table if rm.cost(c) is not None), default=math.nan)
    print(f"workload {wl.key}: space {space.size} configurations, table holds {len(rm)} "
          f"({100 * len(rm) / space.size:.2f}%), best in table {table_best * 1e3:.4f} ms")
    print(f"budget {trials} trials ({100 * trials / space.size:.3f}% of the space), {args.seeds} seeds, "
          f"batch {args.batch_size}" + (f"; not registered, skipped: {', '.join(skipped)}" if skipped else ""))

    curves: dict[str, list[np.ndarray]] = {}
    times: dict[str, list[np.ndarray]] = {}
    for name in names:
        curves[name], times[name] = [], []
        missing = 0
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            c, t, miss = one_run(rm, wl, space, name, seed, trials, args.batch_size)
            curves[name].append(c)
            times[name].append(t)
            missing += miss
        print(f"  {name:8s} done in {time.perf_counter() - t0:.1f} s"
              + (f"  ({missing} trials not in the table)" if missing else ""), flush=True)

    marks = [f for f in (0.1, 0.25, 0.5, 1.0)]
    header = "strategy  " + "".join(f"{int(100 * m):>4d}% budget " for m in marks) + "  final mean +- std (ms)"
    print("\nmedian best cost (ms) over seeds at a fraction of the budget")
    print(header)
    for name in names:
        cols = []
        for m in marks:
            i = max(0, min(trials, math.ceil(m * trials)) - 1)
            vals = [c[min(i, len(c) - 1)] for c in curves[name] if len(c)]
            cols.append(statistics.median(vals) * 1e3 if vals else math.nan)
        final = np.asarray([c[-1] for c in curves[name] if len(c)]) * 1e3
        print(f"{name:8s}  " + "".join(f"{v:12.4f} " for v in cols)
              + f"  {final.mean():.4f} +- {final.std():.4f}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in names:
        n = min(len(c) for c in curves[name])
        arr = np.stack([c[:n] for c in curves[name]]) * 1e3
        x = np.arange(1, n + 1) / space.size * 100
        ax.plot(x, np.median(arr, 0), label=name)
        ax.fill_between(x, np.quantile(arr, 0.25, 0), np.quantile(arr, 0.75, 0), alpha=0.2)
    ax.set_xlabel("fraction of the space explored (%)")
    ax.set_ylabel("best cost found (ms), median and quartiles")
    ax.set_yscale("log")
    ax.set_title(f"{wl.key}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "best_vs_fraction.png", dpi=120)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in names:
        for k, (c, t) in enumerate(zip(curves[name], times[name])):
            ax.plot(t, c * 1e3, color=f"C{names.index(name)}", alpha=0.4, label=name if k == 0 else None)
    ax.set_xlabel("simulated search time (s): build + run from the table, plus strategy time")
    ax.set_ylabel("best cost found (ms)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "best_vs_time.png", dpi=120)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.boxplot([[c[-1] * 1e3 for c in curves[n]] for n in names], showmeans=True)
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_ylabel(f"best cost after {trials} trials (ms)")
    fig.tight_layout()
    fig.savefig(out / "final_box.png", dpi=120)
    print(f"\nsaved {out / 'best_vs_fraction.png'}, {out / 'best_vs_time.png'}, {out / 'final_box.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
