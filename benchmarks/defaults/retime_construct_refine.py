"""Re-measure the kernels that construct_refine.py's runs recorded (not a test). Two modes:

- top (default): per workload, the top ``--top`` runs of every setting in ``--out`` by recorded GFLOPS,
  measured ``--rounds`` times in one warm pool; answers whether a run's best was a timing fluke. Writes
  ``OUT/retime.jsonl``.
- ``--confirm SETTING[,SETTING...]``: the suite's goals judged on kernels re-measured in one period. Per
  workload, in one warm pool: the best kernel of every reference run (the long runs), the ``--top`` best
  kernels of any run ("best any"), and the best kernel within the first ``--at`` trials (48) of every
  (strategy, seed) run of each SETTING and of random search (from any setting that has it), so that settings
  measured in different periods compare in one; each distinct kernel once per round, all
  of a workload's kernels in each round, ``--rounds`` rounds. Writes ``OUT/confirm.jsonl`` (one line per
  kernel: who found it, recorded GFLOPS, re-measured GFLOPS per round), which ``construct_refine.py
  --analyze`` turns into the report's "confirmed" lines.

Why: a run's best is the maximum of its noisy measurements, and a 900-trial run's maximum is biased upward
more than a 48-trial run's; runs made days apart also differ by the machine's period. Re-measuring both
sides together removes both: on znver5 the 900-trial GEMM bests re-measured 5-9% below their records, while
the seed means of the 48-trial bests of ``sweep2`` (a slow period) re-measured 1-7% above theirs.

    python benchmarks/defaults/retime_construct_refine.py --out benchmarks/out/construct-refine-zen5 --workloads 4,5,6
    python benchmarks/defaults/retime_construct_refine.py --out benchmarks/out/construct-refine-128 --confirm sweep2
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # gzjsonl

from gzjsonl import existing, read_lines  # noqa: E402
from tiletune.bench.suites import load  # noqa: E402
from tiletune.measure.factory import make_measurer  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import parse_levels  # noqa: E402
from tiletune.target import host_target  # noqa: E402
from tiletune.workloads import parse  # noqa: E402


def traces(out: Path):
    """(setting, trace line) of every run under ``out`` (``traces.jsonl`` or ``traces.jsonl.gz``)."""
    for d in sorted(p for p in out.iterdir() if existing(p / "traces.jsonl")):
        for text in read_lines(d / "traces.jsonl"):
            yield d.name, json.loads(text)


def best_within(records: Path, workload: str, at: int) -> dict[tuple[str, int], tuple[float, dict]]:
    """(strategy, seed) -> (GFLOPS, config) of the best measurement within the first ``at`` trials of each run
    recorded in ``records`` (or ``records.gz``) for ``workload``."""
    best: dict[tuple[str, int], tuple[float, dict]] = {}
    for text in read_lines(records):
        r = json.loads(text)
        if r.get("workload") != workload or not r.get("gflops") or r.get("trial", at + 1) > at:
            continue
        key = (r["strategy"], r["seed"])
        if key not in best or r["gflops"] > best[key][0]:
            best[key] = (r["gflops"], r["config"])
    return best


def candidates(out: Path, workload: str, top: int, confirm: str | None, at: int) -> list[tuple[float, str, dict]]:
    """(recorded GFLOPS, label, config) of the kernels to re-measure for ``workload``."""
    lines = list(traces(out))
    runs = sorted(((r["best_gflops"], f"{r['strategy']}/{s}/seed {r['seed']}", r["best_config"])
                   for s, r in lines if r["workload"] == workload and r.get("best_config")),
                  key=lambda x: -x[0])
    if confirm is None:
        return runs[:top]
    picks = [(g, f"top: {lab}", c) for g, lab, c in runs[:top]]
    picks += [(g, f"reference: {lab}", c) for g, lab, c in runs if lab.split("/")[1].startswith("reference")]
    for setting in confirm.split(","):
        for (strategy, seed), (g, c) in sorted(best_within(out / setting / "records.jsonl", workload, at).items()):
            if strategy != "random":
                picks.append((g, f"at{at}: {strategy}/{setting}/seed {seed}", c))
    random_dirs = sorted({s for s, r in lines if r["strategy"] == "random" and not s.startswith("reference")})
    for s in random_dirs:
        for (strategy, seed), (g, c) in sorted(best_within(out / s / "records.jsonl", workload, at).items()):
            if strategy == "random":
                picks.append((g, f"at{at}: random/{s}/seed {seed}", c))
    return picks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="a construct_refine.py output directory")
    ap.add_argument("--suite", default="construct-refine")
    ap.add_argument("--workloads", default=None, help="1-based positions in the suite ('4,5,6'); default: all")
    ap.add_argument("--top", type=int, default=4, help="runs by recorded GFLOPS (the best of any run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--confirm", metavar="SETTING[,SETTING]", default=None,
                    help="re-measure these settings' runs (e.g. sweep2,transfer2) for the goals: writes confirm.jsonl")
    ap.add_argument("--at", type=int, default=48, help="with --confirm: the runs' best within this many trials")
    a = ap.parse_args()
    out = Path(a.out)
    for setting in (a.confirm.split(",") if a.confirm else ()):
        if not existing(out / setting / "records.jsonl"):
            print(f"error: {out / setting / 'records.jsonl'} (or .gz) does not exist", file=sys.stderr)
            return 2
    suite = load(a.suite)
    if a.workloads:
        suite = suite.select(a.workloads)
    levels = parse_levels(suite.levels)  # as the harness builds the suite's spaces
    dest = out / ("confirm.jsonl" if a.confirm else "retime.jsonl")
    lines = []
    for key in suite.workloads:
        wl = parse(key)
        pick = candidates(out, wl.key, a.top, a.confirm, a.at)
        if not pick:
            continue
        tgt = host_target()
        space = make_space(wl, levels, tgt)
        kernels: dict = {}  # one measurement per distinct kernel per round, whoever found it
        for g, label, c in pick:
            cfg = space.from_dict(c)
            kernels.setdefault(cfg, []).append((g, label))
        configs = list(kernels)
        again: list[list[float]] = [[] for _ in configs]
        with make_measurer(wl, space, tgt) as m:
            m.warm_up()
            for rnd in range(a.rounds):
                for i, res in enumerate(m.measure(configs)):
                    if res.costs:
                        again[i].append(wl.flops / statistics.median(res.costs) / 1e9)
                print(f"{wl.key}: round {rnd + 1}/{a.rounds} of {len(configs)} kernels", file=sys.stderr, flush=True)
        for cfg, xs in zip(configs, again):
            for g, label in kernels[cfg]:
                line = {"workload": wl.key, "run": label, "recorded_gflops": round(g, 1),
                        "remeasured_gflops": [round(x, 1) for x in xs]}
                if a.confirm:
                    line["config"] = space.to_dict(cfg)
                print(json.dumps(line), flush=True)
                lines.append(line)
        dest.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")  # after each workload
    return 0


if __name__ == "__main__":
    sys.exit(main())
