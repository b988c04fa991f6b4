"""AutoTVM feature types and transfer learning (Zheng, "Automated linear algebra program optimization
using ML", figures 3-5 and table 3) on this machine's CPU.

Not a test: it prints figures. Three parts:

1. Feature types: the ``xgb`` strategy with feature = knob, itervar, curve1 (AutoTVM's one-point curve)
   and curve (Zheng's 30-point fix) on C7 and C12 of ResNet-18; best GFLOPS after 8, 16, 32, ... trials.
2. Tuning-time split per run (Zheng's table 3): wall time, of which feature extraction, model
   (XGBoost fit + predict) and the rest of the search (SA bookkeeping), and measurement (build + run,
   everything outside the strategy); plus the per-configuration feature cost.
3. Transfer C12 -> C7 (Zheng 4.3): a model warm-started from the C12 records of part 1 vs tuning C7 from
   scratch, ``--transfer-trials`` (100) trials each, per feature type.

Usage (the full run is long: ~200 trials x 4 features x 2 workloads + transfer; hours on 2 cores):

    python benchmarks/autotvm_features.py                       # C7 and C12, 200 trials, all features
    python benchmarks/autotvm_features.py --features knob,curve --trials 100
    python benchmarks/autotvm_features.py --smoke               # small convolutions, 16 trials: minutes

Records go to ``--out`` (default benchmarks/out/autotvm/), one JSONL file per run, rewritten each time.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

WORKLOADS = {
    "C7": "conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1",
    "C12": "conv2d:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1",
}
SMOKE = {
    "C7": "conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=2,pad=1",
    "C12": "conv2d:N=1,C=32,H=7,W=7,K=32,R=3,S=3,stride=1,pad=1",
}
FEATURES = ("knob", "itervar", "curve1", "curve")


class BestCurve:
    """Callback: best GFLOPS after every trial."""

    def __init__(self):
        self.best: list[float] = []

    def on_start(self, run):
        pass

    def on_trial(self, run, record, measured):
        self.best.append(run.best_gflops)

    def on_end(self, run):
        pass


def tune_one(spec: str, feature: str, trials: int, seed: int, records: Path, batch: int,
             transfer: list[str] = (), options: dict | None = None):
    from tiletune.session import make_measurer, make_space
    from tiletune.strategies import TuneContext, create
    from tiletune.target import host_target, target_key
    from tiletune.tune import tune
    from tiletune.workloads import parse

    wl = parse(spec)
    target = host_target()
    space = make_space(wl, None, target)
    ctx = TuneContext(workload=wl, target=target, extras={"transfer": list(transfer), "levels": None})
    t_start = time.perf_counter()
    strat = create("xgb", space, seed=seed, context=ctx, options={"feature": feature, **(options or {})})
    t_setup = time.perf_counter() - t_start  # includes loading + featurising transfer records
    curve = BestCurve()
    if records.exists():
        records.unlink()
    measurer = make_measurer(wl, space, target)
    try:
        t0 = time.perf_counter()
        run = tune(space=space, strategy=strat, measurer=measurer, workload=wl.key, flops=wl.flops,
                   target=target_key(target), trials=trials, batch_size=batch, records=records,
                   callbacks=[curve])
        wall = time.perf_counter() - t0
    finally:
        measurer.close()
    t = strat.timing()
    split = {
        "wall": wall,
        "setup": t_setup,
        "features": t["features"],
        "model": t["model_fit"] + t["model_predict"],
        "search": t["ask"] + t["tell"] - t["features"] - t["model_fit"] - t["model_predict"],
        "measure": wall - t["ask"] - t["tell"],
        "feature_ms": 1e3 * t["features"] / max(1.0, t["feature_configs"]),
        "feature_configs": t["feature_configs"],
    }
    summary = strat.extractor.summary()
    strat.close()
    return run, curve.best, split, summary


def checkpoints(n: int) -> list[int]:
    out, k = [], 8
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


def print_curves(title: str, curves: dict[str, list[float]], n: int) -> None:
    cps = checkpoints(n)
    print(f"\n{title}: best GFLOPS after N trials")
    print(f"{'':24s}" + "".join(f"{c:>8d}" for c in cps))
    for name, best in curves.items():
        row = [best[min(c, len(best)) - 1] if best else 0.0 for c in cps]
        print(f"{name:24s}" + "".join(f"{v:8.1f}" for v in row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200, help="trials per feature-type run")
    ap.add_argument("--transfer-trials", type=int, default=100, help="trials of the C12 -> C7 runs (0: skip)")
    ap.add_argument("--features", default=",".join(FEATURES), help="comma-separated feature types")
    ap.add_argument("--workloads", default="C7,C12", help="comma-separated names among C7, C12")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8, help="measurement batch size")
    ap.add_argument("--option", action="append", default=[], help="extra xgb option name=value")
    ap.add_argument("--out", default="benchmarks/out/autotvm", help="records directory")
    ap.add_argument("--smoke", action="store_true", help="small convolutions, 16 trials, 8 transfer trials")
    args = ap.parse_args()

    from tiletune.strategies import parse_options

    table = SMOKE if args.smoke else WORKLOADS
    trials = 16 if args.smoke else args.trials
    ttrials = (8 if args.smoke else args.transfer_trials)
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    options = parse_options(args.option)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    splits: dict[str, dict] = {}
    for name in names:
        spec = table[name]
        curves = {}
        for f in features:
            rec = out / f"{name}-{f}.jsonl"
            run, best, split, summary = tune_one(spec, f, trials, args.seed, rec, args.batch, options=options)
            curves[f] = best
            splits[f"{name} {f}"] = split
            print(f"{name} {f:8s}: best {run.best_gflops:7.1f} GFLOPS after {run.trials} trials "
                  f"({run.errors} errors), {split['wall']:.0f} s; {summary}", flush=True)
        print_curves(f"{name} = {spec}", curves, trials)

    print("\nTuning-time split (seconds; Zheng's table 3 for 1000 trials on a GPU)")
    print(f"{'run':18s}{'wall':>8s}{'measure':>9s}{'features':>10s}{'model':>8s}{'search':>8s}"
          f"{'feat/cfg':>10s}{'#feat':>8s}")
    for k, s in splits.items():
        print(f"{k:18s}{s['wall']:8.0f}{s['measure']:9.0f}{s['features']:10.1f}{s['model']:8.1f}"
              f"{s['search']:8.1f}{s['feature_ms']:8.1f}ms{int(s['feature_configs']):8d}")

    if ttrials > 0 and "C7" in table and "C12" in table:
        curves = {}
        for f in features:
            src = out / f"C12-{f}.jsonl"
            if not src.exists():
                print(f"(transfer {f}: run C12 first; {src} is missing)")
                continue
            _, scratch, _, _ = tune_one(table["C7"], f, ttrials, args.seed + 1, out / f"C7-{f}-scratch.jsonl",
                                        args.batch, options=options)
            _, warm, split, _ = tune_one(table["C7"], f, ttrials, args.seed + 1, out / f"C7-{f}-transfer.jsonl",
                                         args.batch, transfer=[str(src)], options=options)
            curves[f"{f} scratch"] = scratch
            curves[f"{f} from C12"] = warm
            print(f"transfer {f}: loading + featurising the C12 records took {split['setup']:.1f} s", flush=True)
        if curves:
            print_curves("Transfer C12 -> C7 (Zheng figures 4 and 5)", curves, ttrials)


if __name__ == "__main__":
    main()
