"""Gensor (Liu et al.) Table IV / Table V and the ablation of Table VI, on this machine's CPU.

Not a test: it prints figures. For every workload of the ``gensor`` suite (conv2d C1-C3, GEMM M1-M3,
GEMV V1-V3, AvgPool2d P1-P3 and the unbalanced GEMMs of Table V, scaled to a 2-core CPU as the suite's
notes say), in one process and one measurer per workload:

- vendor: numpy (OpenBLAS) for GEMM/GEMV, torch's CPU kernels (oneDNN) for conv2d and pooling (numpy
  im2col / window sums without torch), output checked, timed like our kernels, before anything else;
- gensor: construction time (the annealed walks, ``walks`` of them, pooled) and the GFLOPS of its top-1
  (the paper's default) and of the best of its top-10, over ``--seeds`` seeds (the walk is random);
- gensor -cache: the CPU ablation (``cache_moves=off``: the level advances on a fixed schedule instead of
  the annealed cache action), top-1, same seeds;
- roller: Roller-style tree construction (deterministic), construction time and the best of its top-10;
- tuned: the AutoTVM-style ``xgb`` strategy after ``--tuned-trials`` measurements (the paper compares with
  the best tuned result at 1000 trials; on 2 cores that is ~1 h per workload, hence the option).

Construction time is the wall time of ``construct()`` (model set-up included), measurement excluded.
Results go to ``--out`` (default benchmarks/out/gensor/): ``summary.json`` (rewritten
after every workload, so an interrupted run keeps what it measured), ``gensor.png`` (GFLOPS per workload
and method, relative to the vendor library) and the xgb records (``tuned-<label>.jsonl``: re-running
resumes them).

    python benchmarks/papers/gensor_table4.py                          # all 14 workloads, xgb 100 trials
    python benchmarks/papers/gensor_table4.py --only M1,V1 --tuned-trials 0   # construction only, two workloads
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

LABELS = ["C1", "C2", "C3", "M1", "M2", "M3", "V1", "V2", "V3", "P1", "P2", "P3", "T2", "T3"]
# M2 is also Table V's first shape [65536,4,1024] (scaled); T2, T3 are its other two.


def suite_workloads() -> list[tuple[str, str]]:
    from tiletune.bench.suites import load

    suite = load("gensor")
    return list(zip(LABELS, suite.workloads))


def construct_and_measure(name: str, space, ctx, measurer, flops: int, seed: int, k: int, options: dict):
    """Construct with strategy ``name``, measure its top-k; (construction s, [GFLOPS of the k, in rank
    order])."""
    from tiletune.strategies import create

    t0 = time.perf_counter()
    strat = create(name, space, seed=seed, context=ctx, options={"k": k, "after_topk": "stop", **options})
    pool = strat.construct()
    t_construct = time.perf_counter() - t0
    configs = [c for _, c in pool[:k]]
    results = measurer.measure(configs) if configs else []
    return t_construct, [r.gflops(flops) if r.ok else 0.0 for r in results]


def tuned(wl, space, ctx, measurer, target, trials: int, records: Path, seed: int) -> tuple[float, float]:
    """xgb for ``trials`` trials (resumed from ``records``); (best GFLOPS, wall s)."""
    from tiletune.strategies import create
    from tiletune.target import target_key
    from tiletune.tune import tune

    strat = create("xgb", space, seed=seed, context=ctx, options={"start": "random"})  # AutoTVM's start
    t0 = time.perf_counter()
    try:
        run = tune(space=space, strategy=strat, measurer=measurer, workload=wl.key, flops=wl.flops,
                   target=target_key(target), trials=trials, batch_size=8, records=records)
    finally:
        strat.close()  # xgb holds feature-extraction workers
    return run.best_gflops, time.perf_counter() - t0


def plot(path: Path, rows: list[dict]) -> None:
    import numpy as np

    from tiletune.bench.plots import agg_pyplot

    plt = agg_pyplot()
    methods = [("gensor top-1", "gensor_top1"), ("gensor top-10", "gensor_top10"),
               ("gensor -cache", "ablation_top1"), ("roller top-10", "roller_top10"), ("xgb tuned", "tuned")]
    labels = [r["label"] for r in rows]
    x = np.arange(len(rows))
    w = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6.4, 0.75 * len(rows)), 4.2))
    for j, (title, key) in enumerate(methods):
        vals = []
        for r in rows:
            v = value(r.get(key))
            vals.append((v or 0.0) / r["vendor_gflops"] if r.get("vendor_gflops") else 0.0)
        ax.bar(x + (j - len(methods) / 2 + 0.5) * w, vals, w, label=title)
    ax.axhline(1.0, color="k", lw=1, ls=":", label="vendor (same run)")
    ax.set_xticks(x, labels)
    ax.set_yscale("log")  # pooling runs far from the vendor library in both directions
    ax.set_ylabel("GFLOPS / vendor GFLOPS (log)")
    ax.set_title("Gensor Table IV/V on this CPU (gensor: mean over seeds)", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def value(v) -> float | None:
    """A row's figure: the mean over seeds for per-seed lists."""
    if isinstance(v, list):
        return statistics.mean(v) if v else None
    return v


def fmt(v) -> str:
    v = value(v)
    return f"{v:7.1f}" if v else f"{'-':>7s}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tuned-trials", type=int, default=100, help="xgb trials per workload (0: skip)")
    ap.add_argument("--seeds", type=int, default=3, help="Gensor walks are random: seeds 0..N-1")
    ap.add_argument("--only", default="", help="comma-separated labels (C1..C3, M1..M3, V1..V3, P1..P3, T2, T3)")
    ap.add_argument("--out", default="benchmarks/out/gensor", help="output directory")
    ap.add_argument("--plot-only", action="store_true", help="redraw gensor.png from --out's summary.json")
    args = ap.parse_args()
    if args.plot_only:
        plot(Path(args.out) / "gensor.png", json.loads((Path(args.out) / "summary.json").read_text())["rows"])
        return

    from tiletune.bench.vendor import vendor
    from tiletune.hardware import for_target
    from tiletune.measure.factory import make_measurer
    from tiletune.schedules import make_space
    from tiletune.strategies import TuneContext
    from tiletune.target import host_target
    from tiletune.workloads import parse

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    target = host_target()
    hw = for_target(target)
    rows: list[dict] = []
    print(f"target {json.dumps(target)}; tuned = xgb {args.tuned_trials} trials; gensor seeds {args.seeds}")
    head = (f"{'':4s}{'vendor':>8s}{'gensor1':>8s}{'gensor10':>9s}{'-cache':>8s}{'roller10':>9s}{'xgb':>8s}"
            f"{'t_gensor':>9s}{'t_roller':>9s}  GFLOPS; construction s")
    print(head)
    for label, spec in suite_workloads():
        if only and label not in only:
            continue
        wl = parse(spec)
        space = make_space(wl, None, target)  # (4, 2) levels, the suite's
        ctx = TuneContext(workload=wl, target=target, hardware=hw)
        v = vendor(spec)
        row = {"label": label, "workload": wl.key, "gflop": wl.flops / 1e9, "space_size": space.size,
               "vendor": v.label, "vendor_gflops": v.gflops(wl.flops) if v.ok else None,
               "vendor_error": None if v.ok else f"{v.error}: {v.message}"}
        measurer = make_measurer(wl, space, target)
        try:
            g1, g10, ab, tg, tab = [], [], [], [], []
            for seed in range(args.seeds):
                t, gf = construct_and_measure("gensor", space, ctx, measurer, wl.flops, seed, 10, {})
                tg.append(t)
                g1.append(gf[0] if gf else 0.0)
                g10.append(max(gf, default=0.0))
                t, gf = construct_and_measure("gensor", space, ctx, measurer, wl.flops, seed, 1,
                                                 {"cache_moves": "off"})
                tab.append(t)
                ab.append(gf[0] if gf else 0.0)
            tr, rf = construct_and_measure("roller", space, ctx, measurer, wl.flops, 0, 10, {})
            row.update(gensor_top1=g1, gensor_top10=g10, ablation_top1=ab, gensor_construct_s=tg,
                       ablation_construct_s=tab, roller_top10=max(rf, default=0.0), roller_top1=rf[0] if rf else 0.0,
                       roller_construct_s=tr, roller_leaves=len(rf))
            if args.tuned_trials > 0:
                best, wall = tuned(wl, space, ctx, measurer, target, args.tuned_trials,
                                   out / f"tuned-{label}.jsonl", 0)
                row.update(tuned=best, tuned_trials=args.tuned_trials, tuned_wall_s=wall)
        finally:
            measurer.close()
        rows.append(row)
        (out / "summary.json").write_text(json.dumps({"target": target, "tuned_trials": args.tuned_trials,
                                                      "seeds": args.seeds, "rows": rows}, indent=1))
        print(f"{label:4s}{fmt(row['vendor_gflops']):>8s}{fmt(row['gensor_top1']):>8s}"
              f"{fmt(row['gensor_top10']):>9s}{fmt(row['ablation_top1']):>8s}{fmt(row['roller_top10']):>9s}"
              f"{fmt(row.get('tuned')):>8s}{statistics.mean(tg):9.3f}{tr:9.3f}", flush=True)

    if not rows:
        return
    plot(out / "gensor.png", rows)

    def ratios(key: str, ref: str) -> list[float]:
        out_ = []
        for r in rows:
            a, b = value(r.get(key)), value(r.get(ref))
            if a and b:
                out_.append(a / b)
        return out_

    print("\nRatios (geometric mean over workloads; min..max)")
    for title, key, ref in [("gensor top-1 / roller top-10", "gensor_top1", "roller_top10"),
                            ("gensor top-10 / roller top-10", "gensor_top10", "roller_top10"),
                            ("gensor top-1 / vendor", "gensor_top1", "vendor_gflops"),
                            ("roller top-10 / vendor", "roller_top10", "vendor_gflops"),
                            ("gensor top-1 / xgb tuned", "gensor_top1", "tuned"),
                            ("xgb tuned / vendor", "tuned", "vendor_gflops"),
                            ("gensor -cache / gensor (ablation)", "ablation_top1", "gensor_top1")]:
        rs = ratios(key, ref)
        if rs:
            gm = statistics.geometric_mean(rs)
            print(f"  {title:36s} {gm:6.2f}  ({min(rs):.2f}..{max(rs):.2f}, {len(rs)} workloads)")
    print(f"\nconstruction time: gensor {statistics.mean(t for r in rows for t in r['gensor_construct_s']):.2f} s "
          f"mean (max {max(t for r in rows for t in r['gensor_construct_s']):.2f}), roller "
          f"{statistics.mean(r['roller_construct_s'] for r in rows):.2f} s mean")
    print(f"wrote {out / 'summary.json'} and {out / 'gensor.png'}")


if __name__ == "__main__":
    main()
