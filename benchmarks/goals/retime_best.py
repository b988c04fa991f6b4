"""Re-time the best kernels of one or more ``cnn_layers.py`` runs, interleaved in one warm measurer.

Not a test. Two questions it answers on the same machine, in the same minutes:

- how a run's best kernel times when measured again several times in a warm pool, against the figure its
  tuning recorded (``tuned_s``) and the one ``cnn_layers.py`` re-timed right after (``median_s``): the
  two differed by 1.2-1.9x in the first idle run (benchmarks/README.md, "CNN layers against oneDNN");
- which of several runs (e.g. main's code and a branch's, each tuned into its own ``--out``) found the
  faster kernel, with both kernels measured alternately (round 1: A, B; round 2: A, B; ...), so that a
  change in the machine's load hits both alike; torch (oneDNN, faster memory format) is timed in every round
  too, after the kernels, and its median over the rounds is the figure compared with ours.

For every layer present in the first run's results.jsonl (or ``--layers``), one line is appended to
``OUT/retime.jsonl``: per run its config, tuned and re-timed seconds, and this script's per-round medians;
torch's seconds (median of its rounds, and each round's). A layer already there with the same runs and rounds is skipped, so the script resumes.

    python benchmarks/goals/retime_best.py --runs benchmarks/out/cnn-layers,benchmarks/out/cnn-layers-rule \\
        --out benchmarks/out/retime --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from tiletune.bench.results import read_jsonl


def best_rows(run: Path) -> dict[tuple[str, int], dict]:
    """(suite, index) -> the NHWC/NCHW layout entry of the row's best layout, for one cnn_layers run."""
    out = {}
    for row in read_jsonl(run / "results.jsonl"):
        lay = row.get("layout")
        if lay and row.get("layouts", {}).get(lay, {}).get("config"):
            out[(row["suite"], row["index"])] = row["layouts"][lay]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="comma-separated cnn_layers.py output directories")
    ap.add_argument("--layers", default="", help="suite:index items, e.g. resnet-conv:3,resnet-conv:5 (default: all "
                    "layers of the first run that every run has)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-repeat-ms", type=float, default=50.0)
    ap.add_argument("--out", default="benchmarks/out/retime")
    args = ap.parse_args(argv)

    from tiletune.bench.vendor import vendor
    from tiletune.errors import TiletuneError
    from tiletune.measure import MeasureSettings
    from tiletune.measure.factory import make_measurer
    from tiletune.schedules import make_space
    from tiletune.target import host_target
    from tiletune.workloads import parse

    runs = [Path(r) for r in args.runs.split(",") if r.strip()]
    if not runs or args.rounds < 1:
        print("error: give --runs DIR[,DIR...] and --rounds >= 1", file=sys.stderr)
        return 2
    tables = [best_rows(r) for r in runs]
    keys = [k for k in tables[0] if all(k in t for t in tables)]
    if args.layers:
        try:
            want = [(s, int(i)) for s, _, i in (x.strip().rpartition(":") for x in args.layers.split(",") if x.strip())]
        except ValueError:
            print(f"error: --layers takes suite:index items, got {args.layers!r}", file=sys.stderr)
            return 2
        keys = [k for k in want if all(k in t for t in tables)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "retime.jsonl"
    names = [str(r) for r in runs]
    target = host_target()
    settings = MeasureSettings(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, cutoff=0)
    for suite, index in keys:
        done = [r for r in read_jsonl(results) if r.get("suite") == suite and r.get("index") == index
                and r.get("runs") == names and r.get("rounds") == args.rounds]
        if done:
            print(f"[{suite} #{index}] done, skipped", flush=True)
            continue
        entries = [t[(suite, index)] for t in tables]
        specs = {e["spec"] for e in entries}
        if len(specs) != 1:
            print(f"[{suite} #{index}] the runs tuned different workloads ({sorted(specs)}): skipped", flush=True)
            continue
        wl = parse(specs.pop())
        space = make_space(wl, None, target)
        space.constraint = None  # a run's best may predate the space's constraint: measure it as it was
        try:
            configs = [space.from_dict(e["config"]) for e in entries]
        except TiletuneError as e:
            print(f"[{suite} #{index}] {e}: skipped", flush=True)
            continue
        rounds: list[list[float | None]] = []
        torch_rounds: list[tuple[float | None, str | None]] = []
        threads = int(target.get("num-cores") or 0) or None
        with make_measurer(wl, space, target, settings=settings) as m:
            m.warm_up()
            for i in range(args.rounds):
                res = m.measure(configs)
                rounds.append([r.median if r.ok else None for r in res])
                # torch in every round too (its faster memory format of the round), so that a slow minute of
                # the machine hits both sides: a single torch timing after the rounds swung 83-116 GFLOPS
                t = vendor(wl, settings, threads=threads)
                torch_rounds.append((t.median_s if t.ok else None, t.extra.get("format")))
                print(f"[{suite} #{index}] round {i + 1}: " + ", ".join(
                    f"{n}: {wl.flops / s / 1e9:.1f}" if s else f"{n}: failed" for n, s in zip(names, rounds[-1]))
                    + (f", torch: {wl.flops / t.median_s / 1e9:.1f} ({t.extra.get('format')})" if t.ok else
                       f", torch: {t.error}") + f" GFLOPS (load {os.getloadavg()[0]:.1f})", flush=True)
        ok = [s for s, _ in torch_rounds if s]
        formats = [f for s, f in torch_rounds if s]
        row = {"suite": suite, "index": index, "spec": wl.key, "flops": wl.flops, "runs": names,
               "rounds": args.rounds, "load_after": os.getloadavg()[0],
               "kernels": [{"run": n, "config": e["config"], "tuned_s": e.get("tuned_s"), "retimed_s": e.get("median_s"),
                            "rounds_s": [r[j] for r in rounds]} for j, (n, e) in enumerate(zip(names, entries))],
               "torch": {"median_s": statistics.median(ok) if ok else None,
                         "format": max(set(formats), key=formats.count) if formats else None,
                         "rounds_s": [s for s, _ in torch_rounds]}}
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
    report(out, names, args.rounds)
    return 0


def report(out: Path, names: list[str], rounds: int) -> None:
    """OUT/report.md: per layer of ``retime.jsonl`` (these runs and rounds) and per run, our GFLOPS (the median
    of the rounds' medians) and the ratio torch seconds (its median over the rounds) / ours (> 1: ours faster); per run, the geometric mean
    and how many layers reach 1.0x. Printed too."""
    import math

    rows = [r for r in read_jsonl(out / "retime.jsonl") if r.get("runs") == names and r.get("rounds") == rounds
            and r.get("torch", {}).get("median_s")]
    if not rows:
        return
    lines = [f"# Best kernels re-timed: {rounds} rounds, one warm pool; torch (oneDNN, faster format) in every round",
             "", "| suite | # | workload | " + " | ".join(f"{n} GFLOPS | ratio" for n in names) + " | torch GFLOPS |",
             "|---|---|---|" + "---|---|" * len(names) + "---|"]
    ratios: list[list[tuple[str, float]]] = [[] for _ in names]
    for r in sorted(rows, key=lambda r: (r["suite"], r["index"])):
        cells = []
        for j, k in enumerate(r["kernels"]):
            ok = [s for s in k["rounds_s"] if s]
            if not ok:
                cells.append("failed | -")
                continue
            ours = statistics.median(ok)
            ratios[j].append((r["suite"], r["torch"]["median_s"] / ours))
            cells.append(f"{r['flops'] / ours / 1e9:.1f} | {ratios[j][-1][1]:.2f}x")
        lines.append(f"| {r['suite']} | {r['index']} | {r['spec']} | " + " | ".join(cells)
                     + f" | {r['flops'] / r['torch']['median_s'] / 1e9:.1f} ({r['torch']['format']}) |")
    lines.append("")
    for n, rs in zip(names, ratios):
        for suite in sorted({s for s, _ in rs}):
            xs = [x for s, x in rs if s == suite]
            gm = math.exp(sum(math.log(x) for x in xs) / len(xs))
            lines.append(f"- {n}, {suite}: geometric mean {gm:.3f}x over {len(xs)} layers; >= 1.0x on "
                         f"{sum(x >= 1.0 for x in xs)}/{len(xs)}")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
