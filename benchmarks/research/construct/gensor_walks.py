"""Gensor's walk count in a model build (not a test): Fig. 11's model built with Gensor's constructions from 4 walks
per task (the default, ``tiletune.construct.gensor.WALKS``) and from more, and with Roller's, timed alternately.

    python benchmarks/research/construct/gensor_walks.py --out DIR [--walks 4,16] [--seqs 16,32,64,128,256,384] [--batches 1,4]

Builds libraries in ``--work`` (default /tmp/tiletune-gensor-walks: they are large) with ``tiletune model build
MODEL --shapes ... --construct gensor|roller`` (in this process, Gensor's ``GensorWalk.pool`` default walk count
patched per build; the build's wall time noted),
then ``--rounds`` rounds of every library at every shape, interleaved, in a child process per round
(``benchmarks/common/dyn_bench.py``, wall clock, every core); ``DIR/results.jsonl`` and ``DIR/builds.jsonl`` are appended
and a re-run skips what is there; prints per shape the median latency of each and each Gensor build / Roller.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parents[1] / "common"))

from dyn_bench import run  # noqa: E402

from tiletune.bench.results import read_jsonl  # noqa: E402
from tiletune.cli import main as cli  # noqa: E402
from tiletune.construct import gensor  # noqa: E402
from tiletune.model.dynamic.shapes import parse_shapes  # noqa: E402
from tiletune.model.frontend.source import load  # noqa: E402

MODEL = f"{HERE.parents[1] / 'common' / 'dyn_models.py'}:bert_small"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/tiletune-gensor-walks", help="where the libraries go (not OUT)")
    p.add_argument("--model", default=MODEL)
    p.add_argument("--walks", default="4,16")
    p.add_argument("--seqs", default="16,32,64,128,256,384")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    out = Path(a.out)
    work = Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    shapes = ["--shapes", f"batch={a.batches}", "--shapes", f"seq={a.seqs}"]
    bindings = parse_shapes(shapes[1::2], load(a.model))
    libs = {f"gensor-{w}": int(w) for w in a.walks.split(",")}
    libs["roller"] = 0
    built = {r["lib"] for r in read_jsonl(out / "builds.jsonl")}
    for name, walks in libs.items():
        path = work / f"{name}.so"
        if name in built and path.exists():
            continue
        t0 = time.perf_counter()
        method = "roller" if name == "roller" else "gensor"
        with mock.patch.object(gensor.GensorWalk.pool, "__defaults__", (walks or gensor.WALKS,)):
            assert cli(["model", "build", a.model, *shapes, "--construct", method, "-o", str(path), "--no-check"]) == 0
        with open(out / "builds.jsonl", "a") as f:
            f.write(json.dumps({"lib": name, "walks": walks, "build_s": time.perf_counter() - t0}) + "\n")
    results = out / "results.jsonl"
    for r in range(len({x["round"] for x in read_jsonl(results)}), a.rounds):
        order = list(libs) if r % 2 == 0 else list(libs)[::-1]
        items = [{"method": n, "lib": str(work / f"{n}.so"), "binding": b, "round": r} for b in bindings for n in order]
        run("ours", {"model": a.model, "repeat": 5, "min_repeat_ms": 100, "items": items}, results)
    rows = read_jsonl(results)
    names = list(libs)
    print("| batch | seq | " + " | ".join(f"{n} ms" for n in names) + " | "
          + " | ".join(f"{n} / roller" for n in names if n != "roller") + " |")
    ratios: dict[str, list[float]] = {n: [] for n in names if n != "roller"}
    for b in bindings:
        ms = {n: 1e3 * float(np.median([x["median_s"] for x in rows if x["method"] == n and x["binding"] == b]))
              for n in names}
        for n in ratios:
            ratios[n].append(ms["roller"] / ms[n])
        print(f"| {b['batch']} | {b['seq']} | " + " | ".join(f"{ms[n]:.2f}" for n in names) + " | "
              + " | ".join(f"{ms['roller'] / ms[n]:.2f}x" for n in ratios) + " |")
    print("| mean | | " + " | " * len(names) + " | ".join(f"{np.mean(v):.2f}x" for v in ratios.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
