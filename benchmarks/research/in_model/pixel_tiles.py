"""Would pixel tiles that do not divide a 7x7 map help? The 1x1 convolutions of resnet50's last stage are GEMMs of
49 output pixels (NHWC: rows of the activation), and a register tile of pixels must divide 7 (7 pixels x 2 vectors
of channels; ONNX Runtime's kernels take 6 or 12 pixels of the flattened map and a remainder). A partitioned (48 + 1)
or padded (56) pixel loop is what would let our template do the same. This probe asks first whether those pixel
counts run faster per pixel at all: the GEMMs M x N x K with M = 49 (the convolution), 48 and 56, each tuned by xgb in
the measurement workers, then each one's best kernel timed alternately in this process.

    TVM_NUM_THREADS=2 python benchmarks/research/in_model/pixel_tiles.py --out DIR [--n 512 --k 2048] [--trials 150] [--rounds 5]

Writes DIR/gemm-M.jsonl (the records; a second run resumes them) and DIR/summary.md: per M, the best recorded
time and the alternating rounds' minimum and median, and the time per pixel relative to M = 49.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from tiletune.measure.base import MeasureSettings
from tiletune.measure.local import build_kernel, run_kernel
from tiletune import records
from tiletune.schedules import make_space
from tiletune.target import host_target
from tiletune.workloads import parse

ROWS = (49, 48, 56)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--k", type=int, default=2048)
    p.add_argument("--trials", type=int, default=150)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    target = host_target()
    kernels = {}
    for m in ROWS:
        spec, rec = f"gemm:M={m},N={a.n},K={a.k}", out / f"gemm-{m}.jsonl"
        subprocess.run(["tiletune", "tune", spec, "-s", "xgb", "--trials", str(a.trials), "--seed", str(a.seed),
                        "-r", str(rec), "--quiet"], check=True)
        r = records.best(records.load(rec))
        wl = parse(r.workload)
        space = make_space(wl, target=target)
        kernels[m] = (wl, build_kernel(wl, space, space.from_dict(r.config), target), r)
    settings = MeasureSettings(repeat=9, min_repeat_ms=50)
    times: dict[int, list[float]] = {m: [] for m in ROWS}
    for i in range(a.rounds):
        for m, (wl, lib, _) in kernels.items():
            times[m].append(statistics.median(run_kernel(wl, lib, settings)))
        print(f"round {i}: " + ", ".join(f"M={m} {times[m][-1] * 1e3:.3f} ms" for m in ROWS), flush=True)
    ref = statistics.median(times[ROWS[0]]) / ROWS[0]
    lines = [f"# Pixel counts of the 7x7 stage: GEMM M x {a.n} x {a.k}, M = {', '.join(map(str, ROWS))}", "",
             f"    TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', '')} python {' '.join(sys.argv)}", "",
             f"xgb, {a.trials} trials each (seed {a.seed}); the best kernels then timed alternately, {a.rounds} rounds "
             "(median of 9 samples of >= 50 ms each).", "",
             "| M | best config | recorded ms | rounds: min ms | median ms | median per pixel vs M=49 |",
             "|---:|---|---:|---:|---:|---:|"]
    for m, (_, _, r) in kernels.items():
        med = statistics.median(times[m])
        lines.append(f"| {m} | `{json.dumps(r.config)}` | {r.median_s * 1e3:.3f} | {min(times[m]) * 1e3:.3f} | "
                     f"{med * 1e3:.3f} | {ref / (med / m):.2f}x |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
