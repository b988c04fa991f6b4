"""Re-measure the best kernels that construct_refine.py's runs recorded (not a test): per workload, the top
``--top`` runs of every setting in ``--out`` by recorded GFLOPS, measured ``--rounds`` times in one warm pool,
all of a workload's kernels in each round (the first round also warms the pool: read the later ones). Answers
whether a run's best was a timing fluke. Appends nothing; writes ``OUT/retime.jsonl``.

    python benchmarks/retime_construct_refine.py --out benchmarks/out/construct-refine-zen5 --workloads 4,5,6
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiletune.bench.suites import load  # noqa: E402
from tiletune.measure.factory import make_measurer  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import parse_levels  # noqa: E402
from tiletune.target import host_target  # noqa: E402
from tiletune.workloads import parse  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="a construct_refine.py output directory")
    ap.add_argument("--suite", default="construct-refine")
    ap.add_argument("--workloads", default=None, help="1-based positions in the suite ('4,5,6'); default: all")
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    out = Path(a.out)
    suite = load(a.suite)
    if a.workloads:
        suite = suite.select(a.workloads)
    levels = parse_levels(suite.levels)  # as the harness builds the suite's spaces
    lines = []
    for key in suite.workloads:
        wl = parse(key)
        runs = []
        for t in sorted(out.glob("*/traces.jsonl")):
            for text in t.read_text(encoding="utf-8").splitlines():
                r = json.loads(text)
                if r["workload"] == wl.key and r.get("best_config"):
                    runs.append((r["best_gflops"], f"{r['strategy']}/{t.parent.name}/seed {r['seed']}", r["best_config"]))
        runs.sort(key=lambda x: -x[0])
        pick = runs[: a.top]
        if not pick:
            continue
        tgt = host_target()
        space = make_space(wl, levels, tgt)
        configs = [space.from_dict(c) for _, _, c in pick]
        again: list[list[float]] = [[] for _ in configs]
        with make_measurer(wl, space, tgt) as m:
            m.warm_up()
            for _ in range(a.rounds):
                for i, res in enumerate(m.measure(configs)):
                    if res.costs:
                        again[i].append(wl.flops / statistics.median(res.costs) / 1e9)
        for (g, label, _), xs in zip(pick, again):
            line = {"workload": wl.key, "run": label, "recorded_gflops": round(g, 1),
                    "remeasured_gflops": [round(x, 1) for x in xs]}
            print(json.dumps(line), flush=True)
            lines.append(line)
    (out / "retime.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
