"""CNN layers against torch (oneDNN): every distinct convolution of ResNet-50 and ResNet-18 and the depthwise
layers of MobileNetV2, each tuned in both layouts and compared with torch's faster memory format.

Not a test: it prints and saves a table. For every layer of the suites (``resnet-conv``,
``mobilenetv2-depthwise``):

1. tune it with ``--strategy`` (default xgb) for ``--trials`` (default 300) in each of ``--layouts``
   (default NHWC,NCHW; the suites list the layers in NCHW and ``layout=NHWC`` is added for NHWC),
   through the normal tuning loop; records go to ``OUT/records/<suite>-<nn>-<layout>.jsonl``, so an
   interrupted layer resumes from its records (the configurations already measured count towards the budget);
2. re-time the best kernel of each layout once more with the same timing rule as torch (a fresh
   measurement: the tuning's best is the minimum of many noisy measurements and would flatter us), in a
   fresh worker pool whose workers have all started first; the tuning's own figure is kept as ``tuned_s``;
3. time torch's conv2d on the same layer in both memory formats (contiguous, channels_last) and keep the
   faster (``tiletune.bench.vendor``), after the tuning's workers have closed, so it has the cores;
4. append one line to ``OUT/results.jsonl``: ours (best layout, and each layout), torch best (and its
   format), ratio = torch seconds / our seconds (> 1: our kernel is faster).

A layer already in results.jsonl with the same budget, strategy and layouts is skipped, so the script can be
stopped and started again at any point. After every layer it rewrites ``OUT/report.md`` (machine, the
per-layer table, the geometric mean of the ratios per suite and overall, and how many layers reach 1.0x)
and prints the table.

Usage (the full run is long: 29 + 10 layers x 2 layouts x 300 trials; about 10-15 hours on 2 cores):

    python benchmarks/goals/cnn_layers.py                                   # everything, resumable
    python benchmarks/goals/cnn_layers.py --suites resnet-conv --layers 3,5,23 --trials 64
    python benchmarks/goals/cnn_layers.py --layouts NHWC                    # only the layout expected to win
    python benchmarks/goals/cnn_layers.py --smoke --out /tmp/cnn-smoke      # three tiny layers, 4 trials: minutes
    python benchmarks/goals/cnn_layers.py --report-only                     # rewrite the report from results.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from tiletune.bench.results import read_jsonl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common/: gzjsonl
from gzjsonl import unpack  # noqa: E402

SUITES = ("resnet-conv", "mobilenetv2-depthwise")
LAYOUTS = ("NHWC", "NCHW")
SMOKE = {
    "smoke": ["conv2d:N=1,C=8,H=9,W=9,K=16,R=3,S=3,stride=2,pad=1",
              "conv2d:N=1,C=16,H=7,W=7,K=16,R=1,S=1",
              "depthwise_conv2d:N=1,C=16,H=9,W=9,R=3,S=3,stride=1,pad=1"],
}


def with_layout(spec: str, layout: str) -> str:
    return spec if layout == "NCHW" else f"{spec},layout={layout}"


def same_run(row: dict, suite: str, index: int, spec: str, args) -> bool:
    return (row.get("suite") == suite and row.get("index") == index and row.get("spec") == spec
            and row.get("trials") == args.trials and row.get("strategy") == args.strategy
            and row.get("seed") == args.seed and sorted(row.get("layouts", {})) == sorted(args.layouts))


def tune_layout(spec: str, records: Path, args, settings) -> dict:
    """Tune one layer in one layout (resuming from ``records``), then re-time its best kernel."""
    from tiletune.measure.factory import make_measurer
    from tiletune.schedules import make_space
    from tiletune.session import RunSpec, run
    from tiletune.target import host_target
    from tiletune.workloads import parse

    target = host_target()
    t0 = time.perf_counter()
    res = run(RunSpec(workload=spec, strategy=args.strategy, trials=args.trials, seed=args.seed,
                      records=str(records), batch_size=args.batch_size, target=target, settings=settings))
    tune_s = time.perf_counter() - t0
    if res.best is None:
        return {"spec": spec, "error": f"no kernel ran ({res.errors} errors of {res.trials} trials)",
                "trials": res.trials, "tune_s": tune_s}
    wl = parse(spec)
    space = make_space(wl, None, target)
    config = space.from_dict(res.best.config)
    with make_measurer(wl, space, target, settings=settings) as m:
        m.warm_up()  # every worker has imported TVM before the kernel is timed (none competes for a core)
        [again] = m.measure([config])
    median = again.median if again.ok else res.best.median_s
    return {"spec": spec, "trials": res.trials, "measured": res.measured, "tune_s": round(tune_s, 1),
            "config": res.best.config, "tuned_s": res.best.median_s, "median_s": median,
            "gflops": wl.flops / median / 1e9, "retime_error": again.error}


def torch_best(spec: str, settings) -> dict:
    from tiletune.bench.vendor import vendor
    from tiletune.target import host_target
    from tiletune.workloads import parse

    wl = parse(spec)
    r = vendor(wl, settings, threads=int(host_target().get("num-cores") or 0) or None)
    if not r.ok:
        return {"error": r.error, "message": r.message, "label": r.label}
    return {"label": r.label, "median_s": r.median_s, "gflops": r.gflops(wl.flops),
            "format": r.extra.get("format"), "formats": r.extra.get("formats", {})}


def run_layer(suite: str, index: int, spec: str, out: Path, args, settings) -> dict:
    from tiletune.workloads import parse

    layouts = {}
    for layout in args.layouts:
        sp = with_layout(spec, layout)
        rec = out / "records" / f"{suite}-{index:02d}-{layout}.jsonl"
        rec.parent.mkdir(parents=True, exist_ok=True)
        unpack(rec)  # records committed as .jsonl.gz resume as the plain file
        print(f"[{suite} #{index}] {sp}: tuning {args.trials} trials ({args.strategy})", flush=True)
        layouts[layout] = tune_layout(sp, rec, args, settings)
    torch = torch_best(spec, settings)
    ok = {k: v for k, v in layouts.items() if v.get("median_s")}
    best_layout = min(ok, key=lambda k: ok[k]["median_s"]) if ok else None
    ours = ok[best_layout]["median_s"] if best_layout else None
    ratio = torch["median_s"] / ours if ours and torch.get("median_s") else None
    return {"suite": suite, "index": index, "spec": spec, "flops": parse(spec).flops, "trials": args.trials,
            "strategy": args.strategy, "seed": args.seed, "layouts": layouts, "layout": best_layout,
            "ours_s": ours, "ours_gflops": ok[best_layout]["gflops"] if best_layout else None,
            "torch": torch, "ratio": ratio, "finished": time.strftime("%Y-%m-%d %H:%M:%S")}


def short(spec: str) -> str:
    """conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1 -> '64->64 3x3 56 s1'."""
    kind, _, body = spec.partition(":")
    v = dict(item.split("=") for item in body.split(","))
    s = f"s{v.get('stride', 1)}"
    if kind == "depthwise_conv2d":
        return f"dw {v['C']} {v['R']}x{v['S']} {v['H']} {s}"
    return f"{v['C']}->{v['K']} {v['R']}x{v['S']} {v['H']} {s}"


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _f(x, fmt="{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(rows: list[dict], layouts: list[str]) -> list[str]:
    head = "| suite | # | layer | " + " | ".join(f"ours {l} GFLOPS" for l in layouts) + \
        " | ours best GFLOPS | layout | torch best GFLOPS | torch format | ratio |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        per = [_f(r["layouts"].get(l, {}).get("gflops")) for l in layouts]
        t = r["torch"]
        lines.append(f"| {r['suite']} | {r['index']} | {short(r['spec'])} | " + " | ".join(per) +
                     f" | {_f(r['ours_gflops'])} | {r['layout'] or '-'} | {_f(t.get('gflops'))} | "
                     f"{t.get('format') or t.get('error', '-')} | {_f(r['ratio'], '{:.2f}x')} |")
    return lines


def summary(rows: list[dict]) -> list[str]:
    lines = []
    groups = {s: [r for r in rows if r["suite"] == s] for s in dict.fromkeys(r["suite"] for r in rows)}
    if len(groups) > 1:
        groups["all"] = rows
    for name, rs in groups.items():
        ratios = [r["ratio"] for r in rs if r["ratio"]]
        wins = sum(1 for x in ratios if x >= 1.0)
        gm = geomean(ratios)
        lines.append(f"- {name}: geometric mean of ratios {_f(gm, '{:.3f}x')} over {len(ratios)} layers; "
                     f">= 1.0x on {wins}/{len(rs)} layers; layout chosen: "
                     + ", ".join(f"{l} {sum(1 for r in rs if r['layout'] == l)}" for l in
                                 dict.fromkeys(r["layout"] for r in rs if r["layout"])))
    return lines


def write_report(out: Path, rows: list[dict], layouts: list[str], args) -> str:
    from tiletune.bench.machine import machine_info
    from tiletune.target import host_target

    info = machine_info(host_target())
    text = ["# CNN layers: tuned kernels against torch (oneDNN)", "",
            f"Machine: {info.get('cpu')}, {info.get('cores')} cores; tvm {info.get('tvm')}, torch {info.get('torch')}.",
            f"Strategy {args.strategy}, {args.trials} trials per layer and layout, seed {args.seed}. Ours: the best "
            "kernel of the layouts tuned, re-timed after tuning; torch: conv2d in its faster memory format "
            "(contiguous or channels_last), timed by the same rule in the same run. Ratio = torch seconds / our "
            "seconds (> 1: ours is faster).", "", *summary(rows), "", *table(rows, layouts), ""]
    (out / "report.md").write_text("\n".join(text))
    return "\n".join(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default=",".join(SUITES), help="shipped suite names or suite files")
    ap.add_argument("--layers", default="", help="1-based positions within each suite, e.g. 1,3 (default all)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="NHWC,NCHW (default both)")
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--strategy", default="xgb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5, help="timing samples (ours and torch alike)")
    ap.add_argument("--min-repeat-ms", type=float, default=50.0, help="each sample lasts at least this")
    ap.add_argument("--out", default="benchmarks/out/cnn-layers")
    ap.add_argument("--smoke", action="store_true", help="three tiny layers (4 trials unless --trials is given)")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)

    from tiletune.bench.suites import load
    from tiletune.errors import TiletuneError
    from tiletune.measure import MeasureSettings

    args.layouts = [x.strip().upper() for x in args.layouts.split(",") if x.strip()]
    if not args.layouts or set(args.layouts) - set(LAYOUTS):
        print(f"--layouts: give one or both of {', '.join(LAYOUTS)}", file=sys.stderr)
        return 2
    if args.smoke and "--trials" not in " ".join(argv if argv is not None else sys.argv):
        args.trials = 4
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    try:
        suites = SMOKE if args.smoke else {load(s).name: load(s).workloads for s in args.suites.split(",") if s}
        picks = [int(x) for x in args.layers.split(",") if x.strip()]
    except (TiletuneError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    settings = MeasureSettings(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    for suite, specs in suites.items():
        for index, spec in enumerate(specs, 1):
            if args.report_only or (picks and index not in picks):
                continue
            if any(same_run(r, suite, index, spec, args) for r in read_jsonl(results)):
                print(f"[{suite} #{index}] done, skipped", flush=True)
                continue
            row = run_layer(suite, index, spec, out, args, settings)
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows = [r for r in read_jsonl(results) if r.get("trials") == args.trials]
            print("\n".join(table([row], args.layouts)), flush=True)
            write_report(out, rows, args.layouts, args)
    rows = [r for r in read_jsonl(results) if r.get("trials") == args.trials and r.get("strategy") == args.strategy]
    print(write_report(out, rows, args.layouts, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
