"""The search methods on an NVIDIA GPU: tune a GEMM and a ResNet convolution with the CUDA template through a
TVM RPC server on this machine's GPU, and time cuBLAS / cuDNN (through torch) on the same shapes in the same run.

    python benchmarks/gpu.py --out gpu-out [--trials 48] [--seconds 40] [--strategies random,gbfs,na2c,xgb,dgd-af,gensor]
                             [--workloads 'gemm:M=1024,N=1024,K=1024;conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1']

For every workload and strategy (seed 0) it runs ``tiletune tune`` with ``--target cuda:<arch of the GPU>``
and ``--rpc`` to a tracker and one server (``--no-fork``: forked sessions failed CUDA's initialization on an
H200) that it starts on 127.0.0.1 (and stops at the end, also on errors):
the kernels are built and exported by the build workers here, loaded by the server (TVM compiles the CUDA
source with NVRTC), checked against numpy and timed with the device's ``time_evaluator`` under tiletune's timing
rule. One server, so that no two kernels share the GPU while one of them is timed. The hardware spec that
Gensor, Roller and the analytical features use is the preset of the GPU torch reports (``h100``/``h200``...,
else the preset of the architecture).

Per (workload, strategy) one JSON line goes to ``OUT/results.jsonl`` (best GFLOPS, its configuration, trials,
errors, wall seconds, the trial at which the best was found); every trial goes to ``OUT/records/<n>.jsonl``.
A pair already in results.jsonl is skipped, so an interrupted run resumes. The vendor baseline is torch on the
same GPU after the tuning (the server stopped): ``torch.matmul`` (cuBLAS) for GEMM and ``conv2d`` (cuDNN, both
memory formats, the faster kept) for convolutions, fp32 with TF32 disabled (tiletune's kernels compute in
fp32), timed with CUDA events, median of 50 timed calls after 10 warm-up calls, output checked against
numpy. ``OUT/report.md`` holds the table. Needs a CUDA GPU, torch with CUDA, tornado and TVM with its compiler.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

from tiletune.bench.results import read_jsonl
from tiletune.hardware import preset, presets
from tiletune.measure.base import MeasureSettings
from tiletune.session import RunSpec, run
from tiletune.workloads import parse

HERE = Path(__file__).resolve().parent
WORKLOADS = "gemm:M=1024,N=1024,K=1024;conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1"
STRATEGIES = "random,gbfs,na2c,xgb,dgd-af,gensor"


def _farm():
    """benchmarks/rpc.py's start_farm / _stop (a tracker and N servers on 127.0.0.1)."""
    spec = importlib.util.spec_from_file_location("rpc_bench", HERE / "rpc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.start_farm, mod._stop


def gpu_info() -> tuple[str, str, str]:
    """(device name, arch 'sm_XY', hardware preset) of GPU 0, through torch."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible to torch: this benchmark needs one")
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    arch = f"sm_{major}{minor}"
    low = name.lower()
    chosen = next((p for p in presets() if p in low.replace(" ", "").replace("-", "")), None)
    return name, arch, chosen or {"sm_90": "h100", "sm_80": "a100", "sm_89": "rtx4090"}.get(arch, "h100")


def vendor_gpu(wl) -> dict:
    """torch (cuBLAS / cuDNN) on GPU 0, fp32 without TF32: label, median seconds, GFLOPS, max error."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    inputs = wl.make_inputs(seed=0)
    ref = wl.reference(*inputs)
    t = [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in inputs]
    F = torch.nn.functional
    variants = []
    if wl.op == "gemm":
        variants.append((f"torch {torch.__version__.split('+')[0]} matmul (cuBLAS, fp32, no TF32)",
                         lambda: torch.matmul(t[0], t[1])))
    elif wl.op == "conv2d" and wl.layout == "NCHW":
        for fmt_name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
            x, w = t[0].contiguous(memory_format=fmt), t[1].contiguous(memory_format=fmt)
            variants.append((f"torch {torch.__version__.split('+')[0]} conv2d (cuDNN, {fmt_name}, fp32, no TF32)",
                             lambda x=x, w=w: F.conv2d(x, w, stride=wl.stride, padding=wl.pad, dilation=wl.dilation)))
    else:
        return {"error": "unsupported", "message": f"no GPU vendor baseline for {wl.key}"}
    best = None
    for label, fn in variants:
        with torch.no_grad():
            out = fn()
            torch.cuda.synchronize()
            err = float(np.max(np.abs(out.contiguous().cpu().numpy() - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
            for _ in range(10):
                fn()
            times = []
            for _ in range(50):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
        med = float(np.median(times))
        row = {"label": label, "median_s": med, "gflops": wl.flops / med / 1e9, "rel_error": err}
        if best is None or med < best["median_s"]:
            best = row
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory (resumable)")
    ap.add_argument("--workloads", default=WORKLOADS, help="workload specs separated by ';'")
    ap.add_argument("--strategies", default=STRATEGIES, help="comma-separated")
    ap.add_argument("--trials", type=int, default=48, help="trial budget per run")
    ap.add_argument("--seconds", type=float, default=None, help="time budget per run (with --trials: the first)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.trials < 1:
        ap.error("--trials must be >= 1")
    out = Path(a.out)
    (out / "records").mkdir(parents=True, exist_ok=True)
    name, arch, hw = gpu_info()
    hw_file = out / f"hardware-{hw}.json"
    preset(hw).save(hw_file)
    print(f"GPU: {name} ({arch}); hardware preset {hw}", flush=True)
    workloads = [parse(s.strip()) for s in a.workloads.split(";") if s.strip()]
    strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    results = out / "results.jsonl"
    done = {(r["workload"], r["strategy"]) for r in read_jsonl(results) if r.get("trials_budget") == a.trials}
    start_farm, stop = _farm()
    for wl in workloads:
        todo = [s for s in strategies if (wl.key, s) not in done]
        if todo:
            rpc, procs = start_farm(1, ("--no-fork",))  # forked sessions fail CUDA init
            try:
                for s in todo:
                    n = len(list((out / "records").glob("*.jsonl")))
                    rec = out / "records" / f"{n:03d}.jsonl"
                    spec = RunSpec(workload=wl, strategy=s, trials=a.trials, seconds=a.seconds, seed=a.seed,
                                   target={"kind": "cuda", "arch": arch}, records=str(rec), rpc=rpc,
                                   hardware=str(hw_file), settings=MeasureSettings())
                    t0 = time.perf_counter()
                    res = run(spec)
                    wall = time.perf_counter() - t0
                    best = res.best
                    row = {"workload": wl.key, "strategy": s, "gpu": name, "arch": arch, "trials_budget": a.trials,
                           "seconds_budget": a.seconds, "trials": res.trials, "errors": res.errors,
                           "skipped": res.skipped, "wall_s": round(wall, 1), "stopped": res.stopped,
                           "best_gflops": round(res.best_gflops, 1),
                           "best_trial": best.trial if best is not None else None,
                           "best_config": best.config if best is not None else None, "records": str(rec.relative_to(out))}
                    with open(results, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"{wl.key} {s}: {row['best_gflops']:.1f} GFLOPS after {res.trials} trials "
                          f"({res.errors} errors, {wall:.0f} s)", flush=True)
            finally:
                stop(procs)
        if not any(r.get("vendor") and r["workload"] == wl.key for r in read_jsonl(results)):
            v = vendor_gpu(wl)
            with open(results, "a") as f:
                f.write(json.dumps({"workload": wl.key, "vendor": True, "gpu": name, **v}) + "\n")
            print(f"{wl.key} vendor: {v.get('label')} {v.get('gflops', 0):.1f} GFLOPS", flush=True)
    report(out)
    return 0


def report(out: Path) -> None:
    rows = read_jsonl(out / "results.jsonl")
    lines = ["# Search methods on an NVIDIA GPU (CUDA template, measured through TVM RPC)", ""]
    for wl in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == wl]
        v = next((r for r in mine if r.get("vendor") and not r.get("error")), None)
        gpu = mine[0].get("gpu", "")
        lines += [f"## {wl} ({gpu})", "",
                  "| method | best GFLOPS | x vendor | trials | errors | found at trial | wall s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in mine:
            if r.get("vendor"):
                continue
            ratio = f"{r['best_gflops'] / v['gflops']:.2f}x" if v else "-"
            lines.append(f"| {r['strategy']} | {r['best_gflops']:.1f} | {ratio} | {r['trials']} | {r['errors']} | "
                         f"{r['best_trial']} | {r['wall_s']:.0f} |")
        if v:
            lines.append(f"| {v['label']} | {v['gflops']:.1f} | 1.00x | | | | |")
        lines.append("")
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
