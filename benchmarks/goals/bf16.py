"""bf16 GEMMs on the CPU's matrix instructions against torch.matmul in bf16, and against our own fp32 kernels.

    python benchmarks/goals/bf16.py [--shapes 1024x1024x1024,128x768x768,...] [--trials 64] [--strategy dgd]
                                    [--rounds 3] [--out benchmarks/out/bf16]

Not a test. For each GEMM (M x N x K; default: 1024^3 and the BERT-base GEMMs at M = 128 and 512: N x K in
768 x 768, 2304 x 768 (QKV), 3072 x 768 (FFN up), 768 x 3072 (FFN down)):

1. tune: ``tiletune tune gemm:...,dtype=bfloat16`` and the same GEMM in fp32, the same strategy and trial budget
   (records under OUT/records/, resumed when present);
2. time, taking turns, ``--rounds`` rounds: in each round, for each GEMM, four processes one after the other:
   ours bf16 (the best configuration of its records, built and measured as the tuner measures it:
   ``tiletune.measure.local.build_kernel`` / ``run_kernel``, output checked against numpy in fp32 on the rounded
   inputs), torch.matmul in bf16, ours fp32, torch.matmul in fp32 (each output checked the same way, at the dtype's
   tolerance, ``Workload.tolerance``). torch runs without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, at the target's
   cores; TVM at the same (TVM_NUM_THREADS).

The records are committed gzipped (``gzip -9n``); ``--no-tune`` reads them so. Writes OUT/results.jsonl (one line
per process), OUT/summary.json and OUT/summary.md (per GEMM: the medians over
the rounds, ours bf16 / torch bf16 and ours bf16 / ours fp32, the instruction our bf16 kernel used), with this
machine's CPU name and flags, the date and the commit.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_SHAPES = ("1024x1024x1024,128x768x768,128x2304x768,128x3072x768,128x768x3072,"
                  "512x768x768,512x2304x768,512x3072x768,512x768x3072")
SIDES = ("ours-bf16", "torch-bf16", "ours-fp32", "torch-fp32")


def spec(shape: str, dtype: str) -> str:
    m, n, k = shape.split("x")
    return f"gemm:M={m},N={n},K={k}" + (f",dtype={dtype}" if dtype != "float32" else "")


def records_path(out: Path, shape: str, dtype: str) -> Path:
    return out / "records" / f"gemm-{shape}-{dtype}.jsonl"


# ---- the children ------------------------------------------------------------------------------------------

def child_ours(spec_: str, records: str, repeat: int, min_repeat_ms: float) -> dict:
    from tiletune import records as rec
    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.local import build_kernel, run_kernel
    from tiletune.schedules import make_space, x86_bf16
    from tiletune.space import Config
    from tiletune.target import host_target
    from tiletune.workloads import parse

    wl = parse(spec_)
    target = host_target()
    if not os.path.exists(records) and os.path.exists(records + ".gz"):  # committed records are gzipped
        records += ".gz"
    best = rec.best(rec.load(records), wl.key)
    if best is None:
        return {"error": f"no measured kernel of {wl.key} in {records}"}
    space = make_space(wl, target=target)
    config = space.from_dict(best.config)
    lib = build_kernel(wl, space, config, target)
    costs = run_kernel(wl, lib, MeasureSettings(repeat=repeat, min_repeat_ms=min_repeat_ms, cutoff=0))
    asm = (lib.mod if hasattr(lib, "mod") and hasattr(lib.mod, "inspect_source") else lib).inspect_source("asm")
    instr = next((i for i in ("tdpbf16ps", "vdpbf16ps", "vfmadd231ps") if i in asm), "?")
    kind = x86_bf16.path(wl, target) or "fp32 template"
    return {"costs": costs, "label": f"tiletune ({kind}: {instr}), config {best.config}", "instruction": instr}


def child_torch(spec_: str, threads: int, repeat: int, min_repeat_ms: float) -> dict:
    import numpy as np
    import torch

    from tiletune.bench.vendor import torch_kernel
    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.timing import time_callable
    from tiletune.workloads import parse

    wl = parse(spec_)
    torch.set_num_threads(threads)
    a, b = wl.make_inputs(seed=0)
    tdt = torch.bfloat16 if wl.dtype == "bfloat16" else torch.float32
    ta = torch.from_numpy(a.astype(np.float32)).to(tdt)  # exactly the same (bf16-representable) values
    tb = torch.from_numpy(b.astype(np.float32)).to(tdt)

    def run():
        with torch.no_grad():
            return torch.matmul(ta, tb)

    out = run().float().numpy()
    ref = wl.reference(a, b).astype(np.float32)
    rtol, atol = wl.tolerance()
    if not np.allclose(out, ref, rtol=rtol, atol=atol):
        return {"error": f"torch output differs from the reference (max abs error {np.abs(out - ref).max():.3g})"}
    costs = time_callable(run, MeasureSettings(repeat=repeat, min_repeat_ms=min_repeat_ms, cutoff=0))
    return {"costs": costs, "label": f"torch {torch.__version__.split('+')[0]} matmul {wl.dtype} "
                                     f"({torch_kernel(torch)})"}


def run_child(side: str, shape: str, args) -> dict:
    dtype = "bfloat16" if side.endswith("bf16") else "float32"
    s = spec(shape, dtype)
    env = dict(os.environ)
    if side.startswith("torch"):
        for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            env.pop(k, None)
    env["TVM_NUM_THREADS"] = str(args.threads)
    cmd = [sys.executable, __file__, "--child", side, "--spec", s, "--threads", str(args.threads),
           "--repeat", str(args.repeat), "--records", str(records_path(args.out, shape, dtype))]
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:300]}"}
    return json.loads(lines[-1])


# ---- the parent --------------------------------------------------------------------------------------------

def machine() -> dict:
    from tiletune import cpu_features
    from tiletune.target import host_mcpu

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu_features.cpu_name(), "mcpu": host_mcpu(), "cores": os.cpu_count(),
            "flags": sorted(cpu_features.machine_features()),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit}


def tune(args, shapes: list[str]) -> None:
    for shape in shapes:
        for dtype in ("bfloat16", "float32"):
            path = records_path(args.out, shape, dtype)
            path.parent.mkdir(parents=True, exist_ok=True)
            cmd = ["tiletune", "tune", spec(shape, dtype), "-s", args.strategy, "-n", str(args.trials), "-o",
                   str(path), "--seed", "0", "--no-vendor", "-q"]
            print("+", " ".join(cmd), flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            best = [ln for ln in proc.stdout.splitlines() if ln.startswith("best")]
            print("  ", best[0] if best else proc.stderr.strip().splitlines()[-1:], flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK items, comma-separated")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--strategy", default="dgd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--no-tune", action="store_true", help="time the records already in OUT/records")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/bf16"))
    ap.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--records", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        try:
            if args.child.startswith("ours"):
                r = child_ours(args.spec, args.records, args.repeat, 50.0)
            else:
                r = child_torch(args.spec, args.threads, args.repeat, 50.0)
        except Exception as e:  # noqa: BLE001  (a failing side is data)
            r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
        print(json.dumps(r))
        return 0

    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(f"machine: {info}", flush=True)
    if not args.no_tune:
        tune(args, shapes)
    results = args.out / "results.jsonl"
    rows: dict[str, dict[str, list[float]]] = {s: {side: [] for side in SIDES} for s in shapes}
    labels: dict[str, dict[str, str]] = {s: {} for s in shapes}
    with results.open("a") as f:
        for rnd in range(args.rounds):
            for shape in shapes:
                m, n, k = map(int, shape.split("x"))
                line = []
                for side in SIDES:
                    r = run_child(side, shape, args)
                    r.update(round=rnd, shape=shape, side=side, commit=info["commit"], date=info["date"])
                    f.write(json.dumps(r) + "\n")
                    f.flush()
                    if "costs" in r:
                        g = 2 * m * n * k / statistics.median(r["costs"]) / 1e9
                        rows[shape][side].append(g)
                        labels[shape][side] = r["label"]
                        line.append(f"{side} {g:7.1f}")
                    else:
                        line.append(f"{side} error: {r['error']}")
                print(f"round {rnd} {shape}: " + " | ".join(line), flush=True)
    summary = []
    for shape in shapes:
        med = {side: statistics.median(v) if v else None for side, v in rows[shape].items()}
        ours, torch_bf16, fp32 = med["ours-bf16"], med["torch-bf16"], med["ours-fp32"]
        summary.append({"shape": shape, "gflops": med, "runs": {s: len(v) for s, v in rows[shape].items()},
                        "ours_bf16_vs_torch_bf16": ours / torch_bf16 if ours and torch_bf16 else None,
                        "ours_bf16_vs_ours_fp32": ours / fp32 if ours and fp32 else None,
                        "labels": labels[shape]})
    (args.out / "summary.json").write_text(json.dumps({"machine": info, "rounds": args.rounds,
                                                        "strategy": args.strategy, "trials": args.trials,
                                                        "rows": summary}, indent=1))
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    ratio = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    md = [f"# bf16 GEMMs: ours against torch.matmul bf16 and our fp32", "",
          f"Machine: {info['cpu']} (LLVM mcpu {info['mcpu']}), flags {', '.join(info['flags'])}; {args.threads} "
          f"threads; {info['date']}, commit {info['commit']}. Tuning: {args.strategy}, {args.trials} trials per "
          f"GEMM and dtype. GFLOPS are medians over {args.rounds} rounds, each side in its own process, taking turns.",
          "", "| M x N x K | ours bf16 | torch bf16 | ours fp32 | torch fp32 | ours bf16 / torch bf16 | "
          "ours bf16 / ours fp32 | our bf16 instruction |", "|---|---|---|---|---|---|---|---|"]
    for row in summary:
        g = row["gflops"]
        instr = next((i for i in ("tdpbf16ps", "vdpbf16ps", "vfmadd231ps") if i in row["labels"].get("ours-bf16", "")),
                     "-")
        md.append(f"| {row['shape']} | {fmt(g['ours-bf16'])} | {fmt(g['torch-bf16'])} | {fmt(g['ours-fp32'])} | "
                  f"{fmt(g['torch-fp32'])} | {ratio(row['ours_bf16_vs_torch_bf16'])} | "
                  f"{ratio(row['ours_bf16_vs_ours_fp32'])} | {instr} |")
    md += ["", "Kernels: " + "; ".join(f"{r['shape']}: {r['labels'].get('torch-bf16', '-')}" for r in summary[:1]),
           "", f"Command: `python benchmarks/goals/bf16.py {' '.join(argv if argv is not None else sys.argv[1:])}`"]
    (args.out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
