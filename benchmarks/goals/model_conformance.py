"""The model conformance suite's table: every layer family (tiletune.model.frontend.families) x import path (torch.export,
ONNX) x layout (NHWC, NCHW), each imported, tuned for a few trials per task, built and checked against torch.

    python benchmarks/goals/model_conformance.py --out benchmarks/out/model-conformance [--families a,b] [--trials 2]

Writes OUT/results.jsonl (one line per case, as it finishes; a rerun skips finished cases) and OUT/report.md
(the table); prints the table. One pool of warm workers and one records file serve every case.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from tiletune.measure.factory import shared_pool
from tiletune.model.evaluate.conformance import Outcome, cases, run_case, table
from tiletune.model.frontend.families import FAMILIES
from tiletune.target import parse_target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (results.jsonl, report.md, records.jsonl)")
    ap.add_argument("--families", default=None, help=f"comma-separated subset of: {', '.join(FAMILIES)}")
    ap.add_argument("--paths", default="torch,onnx", help="import paths: torch, onnx")
    ap.add_argument("--layouts", default="NHWC,NCHW", help="layouts: NHWC, NCHW")
    ap.add_argument("--trials", type=int, default=2, help="trials per task (random search)")
    args = ap.parse_args(argv)
    families = args.families.split(",") if args.families else None
    unknown = [f for f in families or () if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown families {unknown}; accepted: {', '.join(FAMILIES)}")
    os.makedirs(args.out, exist_ok=True)
    results = os.path.join(args.out, "results.jsonl")
    done = {}
    if os.path.exists(results):
        for line in open(results):
            r = json.loads(line)
            done[(r["family"], r["path"], r["layout"])] = r
    target = parse_target(None)
    todo = cases(families, args.paths.split(","), args.layouts.split(","))
    pool = shared_pool(target)
    outcomes = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for fam, path, layout in todo:
                if (fam, path, layout) in done:
                    r = done[(fam, path, layout)]
                    outcomes.append(Outcome(**{k: v for k, v in r.items() if k not in ("ok", "seconds")}))
                    continue
                t0 = time.monotonic()
                o = run_case(fam, path, layout, target=target, records=os.path.join(args.out, "records.jsonl"),
                             workdir=work, trials=args.trials, pool=pool)
                outcomes.append(o)
                with open(results, "a") as f:
                    f.write(json.dumps({**o.row(), "seconds": round(time.monotonic() - t0, 1)}) + "\n")
                print(f"{fam:20s} {path:5s} {layout}: {'ok' if o.ok else o.stage + ': ' + o.error} "
                      f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    finally:
        pool.close()
    report = table(outcomes)
    ok = sum(o.ok for o in outcomes)
    text = (f"# Model conformance\n\n{ok} of {len(outcomes)} cases tune every task, build and match torch.\n\n"
            f"`python benchmarks/goals/model_conformance.py --out {args.out} --trials {args.trials}`\n\n{report}\n")
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if ok == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
