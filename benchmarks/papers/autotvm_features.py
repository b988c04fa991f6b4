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

4. (``--sa-compare``) Zheng's proposed SA improvements, a cooling schedule and restarts, against
   AutoTVM's linear SA: spread of the best result over seeds on a synthetic cost (no hardware).

Usage (the full run is long: ~200 trials x 4 features x 2 workloads + transfer; hours on 2 cores):

    python benchmarks/papers/autotvm_features.py                       # C7 and C12, 200 trials, all features
    python benchmarks/papers/autotvm_features.py --features knob,curve --trials 100
    python benchmarks/papers/autotvm_features.py --smoke               # small convolutions, 16 trials: minutes
    python benchmarks/papers/autotvm_features.py --sa-compare 10       # SA cooling/restarts, synthetic cost

Records go to ``--out`` (default benchmarks/out/autotvm/), one JSONL file per run, rewritten each time;
``summary.json`` there holds every curve, the vendor baseline (torch's CPU conv2d when torch is installed,
else numpy im2col + GEMM, timed in the same run before the tuning of each workload) and the time split,
and ``features-C7.png``, ``features-C12.png``, ``transfer.png`` and ``time-split.png`` plot them.
The time split is also given per 1000 trials (the run's wall time scaled linearly), the unit of
Zheng's table 3.
"""
from __future__ import annotations

import argparse
import json
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
    from tiletune.measure.factory import make_measurer
    from tiletune.schedules import make_space
    from tiletune.strategies import TuneContext, create
    from tiletune.target import host_target, target_key
    from tiletune.tune import tune
    from tiletune.workloads import parse

    wl = parse(spec)
    target = host_target()
    space = make_space(wl, None, target)
    ctx = TuneContext(workload=wl, target=target, transfer=tuple(transfer))
    t_start = time.perf_counter()
    strat = create("xgb", space, seed=seed, context=ctx, options={"feature": feature, "start": "random", **(options or {})})
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


def synthetic_cost(space):
    """A smooth stand-in for hardware (no TVM): a sum of per-knob terms, best with register tiles of
    4 x 16 on the last two spatial axes, cache tiles of 2 there, an inner reduction tile of 8 (or the
    extent) and unroll 64; off-target knobs cost quadratically in log2 units. Returns (cost, optimum);
    the optimum is exact because the terms are independent. Used only to compare the SA variants."""
    from tiletune.space import SplitKnob

    spatial = [i for i, k in enumerate(space.knobs) if isinstance(k, SplitKnob) and k.kind == "S"]
    terms = {}
    for pos, i in enumerate(spatial[-2:]):
        terms[i] = (lambda t: lambda f: 0.3 * (math.log2(f[-1]) - t) ** 2 + 0.3 * (math.log2(f[-2]) - 1) ** 2)((2, 4)[pos])
    for i, k in enumerate(space.knobs):
        if isinstance(k, SplitKnob) and k.kind == "R":
            terms[i] = (lambda e: lambda f: 0.1 * (math.log2(f[-1]) - min(3, math.log2(e))) ** 2)(k.extent)
        elif k.name == "unroll":
            terms[i] = lambda v: 0.2 * abs(math.log2(1 + v) - math.log2(65))

    def cost(c):
        return (1.0 + sum(t(c.values[i]) for i, t in terms.items())) * 1e-3

    optimum = (1.0 + sum(min(t(v) for v in space.knobs[i].options) for i, t in terms.items())) * 1e-3
    return cost, optimum


def sa_compare(spec: str, seeds: int, trials: int) -> None:
    """Zheng's proposed SA improvements vs AutoTVM's plain SA: best cost after ``trials`` trials,
    mean and spread over ``seeds`` seeds, knob features, on the synthetic cost."""
    import numpy as np

    from tiletune.measure import FunctionMeasurer
    from tiletune.schedules import make_space
    from tiletune.strategies import create
    from tiletune.tune import tune
    from tiletune.workloads import parse

    wl = parse(spec)
    space = make_space(wl)
    cost, optimum = synthetic_cost(space)
    variants = {
        "linear (AutoTVM)": {"cooling": "linear"},
        "exp cooling": {"cooling": "exp"},
        "linear + 2 restarts": {"cooling": "linear", "restarts": 2},
        "exp + 2 restarts": {"cooling": "exp", "restarts": 2},
    }
    print(f"\nSA variants on a synthetic cost over the space of {spec} ({space.size} configs), "
          f"{trials} trials, {seeds} seeds: best cost / optimum (1.000 = found it)")
    print(f"{'variant':24s}{'mean':>8s}{'std':>8s}{'worst':>8s}{'hit opt':>9s}{'s/run':>8s}")
    for name, opts in {**variants, "random search": None}.items():
        best, secs = [], []
        for seed in range(seeds):
            m = FunctionMeasurer(cost)
            strat = create("random" if opts is None else "xgb", space, seed=seed,
                           options=None if opts is None else {"start": "random", **opts})  # AutoTVM's start
            t0 = time.perf_counter()
            r = tune(space=space, strategy=strat, measurer=m, workload="synthetic", flops=1, trials=trials,
                     batch_size=8)
            secs.append(time.perf_counter() - t0)
            best.append(r.best.median_s / optimum)
        b = np.asarray(best)
        print(f"{name:24s}{b.mean():8.3f}{b.std():8.3f}{b.max():8.3f}{np.mean(b < 1.0001):9.2f}"
              f"{np.mean(secs):8.1f}", flush=True)


def checkpoints(n: int) -> list[int]:
    out, k = [], 8
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


def vendor_gflops(spec: str) -> tuple[float | None, str]:
    """Vendor conv2d (torch/oneDNN if installed, else numpy im2col + GEMM) on ``spec``, timed like our
    kernels; (GFLOPS or None, label)."""
    from tiletune.bench.vendor import vendor
    from tiletune.workloads import parse

    res = vendor(spec)
    if not res.ok:
        return None, f"{res.label or 'vendor'} failed: {res.error} {res.message}"
    return res.gflops(parse(spec).flops), res.label


def per_1000(split: dict, trials: int) -> dict:
    """The split scaled linearly to 1000 trials (seconds)."""
    k = 1000.0 / max(1, trials)
    return {key: split[key] * k for key in ("wall", "measure", "features", "model", "search")}


def plot_curves(path: Path, title: str, curves: dict[str, list[float]], vendor: tuple) -> None:
    from tiletune.bench.plots import agg_pyplot

    plt = agg_pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, best in curves.items():
        style = "--" if name.endswith("scratch") else "-"
        ax.plot(range(1, len(best) + 1), best, style, label=name)
    if vendor[0]:
        ax.axhline(vendor[0], color="k", lw=1, ls=":", label=f"{vendor[1]} (same run)")
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOPS so far")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_split(path: Path, splits: dict[str, dict]) -> None:
    from tiletune.bench.plots import agg_pyplot

    plt = agg_pyplot()
    names = list(splits)
    parts = ("measure", "features", "model", "search")
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(names) + 1.4))
    left = [0.0] * len(names)
    for part in parts:
        vals = [max(0.0, splits[n]["per_1000"][part]) / 60 for n in names]
        ax.barh(names, vals, left=left, label=part)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("minutes per 1000 trials (scaled from the run)")
    ax.set_title("Tuning-time split per feature type (Zheng's table 3)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    ap.add_argument("--sa-compare", type=int, default=0, metavar="SEEDS",
                    help="only compare the SA variants (cooling, restarts) on a synthetic cost over the C7 "
                         "space with this many seeds (no TVM; minutes)")
    args = ap.parse_args()

    from tiletune.strategies import parse_options

    if args.sa_compare:
        sa_compare(WORKLOADS["C7"], args.sa_compare, args.trials if args.trials != 200 else 100)
        return
    table = SMOKE if args.smoke else WORKLOADS
    trials = 16 if args.smoke else args.trials
    ttrials = (8 if args.smoke else args.transfer_trials)
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    options = parse_options(args.option)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    splits: dict[str, dict] = {}
    summary_out: dict = {"trials": trials, "seed": args.seed, "features": features, "workloads": {},
                         "transfer": {}}
    vendors: dict[str, tuple] = {}

    def save() -> None:
        (out / "summary.json").write_text(json.dumps({**summary_out, "splits": splits}, indent=1))

    for name in names:
        spec = table[name]
        vendors[name] = vendor_gflops(spec)
        print(f"{name}: vendor {vendors[name][1]}: "
              + (f"{vendors[name][0]:.1f} GFLOPS" if vendors[name][0] else "no figure"), flush=True)
        curves = {}
        summary_out["workloads"][name] = {"spec": spec, "vendor_label": vendors[name][1],
                                          "vendor_gflops": vendors[name][0], "curves": curves}
        for f in features:
            rec = out / f"{name}-{f}.jsonl"
            run, best, split, summary = tune_one(spec, f, trials, args.seed, rec, args.batch, options=options)
            curves[f] = best
            split["per_1000"] = per_1000(split, run.trials)
            split["trials"] = run.trials
            splits[f"{name} {f}"] = split
            save()
            print(f"{name} {f:8s}: best {run.best_gflops:7.1f} GFLOPS after {run.trials} trials "
                  f"({run.errors} errors), {split['wall']:.0f} s; {summary}", flush=True)
        print_curves(f"{name} = {spec}", curves, trials)
        if vendors[name][0]:
            print(f"{'vendor ' + vendors[name][1]:24s}{vendors[name][0]:8.1f} GFLOPS (measured before tuning)")
        plot_curves(out / f"features-{name}.png", f"{name} = {spec}, xgb, seed {args.seed}", curves,
                    vendors[name])

    print("\nTuning-time split (seconds; Zheng's table 3 for 1000 trials on a GPU)")
    print(f"{'run':18s}{'wall':>8s}{'measure':>9s}{'features':>10s}{'model':>8s}{'search':>8s}"
          f"{'feat/cfg':>10s}{'#feat':>8s}")
    for k, s in splits.items():
        print(f"{k:18s}{s['wall']:8.0f}{s['measure']:9.0f}{s['features']:10.1f}{s['model']:8.1f}"
              f"{max(0.0, s['search']):8.1f}{s['feature_ms']:8.1f}ms{int(s['feature_configs']):8d}")
    print("\nPer 1000 trials (minutes, scaled linearly from the runs above)")
    print(f"{'run':18s}{'wall':>8s}{'measure':>9s}{'features':>10s}{'model':>8s}{'search':>8s}")
    for k, s in splits.items():
        q = s["per_1000"]
        print(f"{k:18s}{q['wall'] / 60:8.1f}{q['measure'] / 60:9.1f}{q['features'] / 60:10.2f}"
              f"{q['model'] / 60:8.2f}{max(0.0, q['search']) / 60:8.2f}")
    if splits:
        plot_split(out / "time-split.png", splits)

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
            summary_out["transfer"] = curves
            save()
            print(f"transfer {f}: loading + featurising the C12 records took {split['setup']:.1f} s", flush=True)
        if curves:
            print_curves("Transfer C12 -> C7 (Zheng figures 4 and 5)", curves, ttrials)
            plot_curves(out / "transfer.png", f"Transfer C12 -> C7, {ttrials} trials, seed {args.seed + 1}",
                        curves, vendors.get("C7", (None, "")))
    save()


if __name__ == "__main__":
    main()
