"""The search methods on an NVIDIA GPU: tune GEMMs and convolutions with the CUDA templates (SIMT for fp32,
tensor cores for fp16/bf16) on this machine's GPU, and time the vendor libraries and TVM's untuned tensor-core
schedule on the same shapes in the same run.

    python benchmarks/goals/gpu.py --out gpu-out [--suite fp32|tensor-cores|all] [--trials 48] [--seconds 40]
                             [--strategies random,gbfs,na2c,xgb,dgd-af,gensor] [--measure local|rpc]
                             [--workloads 'gemm:M=1024,N=1024,K=1024;...']

Suites (``SUITES``; ``--workloads`` replaces them): ``fp32`` (GEMM 1024^3 and 4096^3 and a ResNet convolution, the
SIMT template against cuBLAS/cuDNN with TF32 off), ``tensor-cores`` (the goal table: GEMM 4096^3 in fp16 and
bf16, the BERT/GPT-2 GEMMs at M=512 in fp16 and bf16, four ResNet-50 convolutions in NHWC fp16, against cuBLAS /
cuDNN in the same dtype (channels_last) and against TVM's untuned tensor-core schedule, dlight's ``gpu.Matmul``),
``hopper`` (GEMM 4096^3 in fp16 and bf16, the four BERT/GPT-2 GEMMs at M=512 in fp16 and the four ResNet-50
convolutions: run it with ``--arch sm_90a``
for the wgmma template and with ``--arch sm_90`` for the mma.sync template into the same ``--out``; rows are kept per
(workload, strategy, arch)).

For every workload and strategy (seed 0) it runs a tiletune session with ``--target cuda:<arch of the GPU>`` (or
``--arch``):
with ``--measure local`` (the default) on this machine's GPU (the build workers compile every kernel in
parallel, the kernels run one at a time on the GPU), with ``--measure rpc`` through a tracker and one server
(``--no-fork``: forked sessions failed CUDA's initialization on an H200) that it starts on 127.0.0.1 and stops at
the end, also on errors. Every kernel is checked against numpy first (a wrong one is a ``wrong-answer`` record).
The hardware spec that Gensor, Roller and the analytical features use is the preset of the GPU torch reports
(``h100``/``h200``..., else the preset of the architecture).

Per (workload, strategy) one JSON line goes to ``OUT/results.jsonl`` (best GFLOPS, its configuration, trials,
errors, wall seconds and trials per second, the trial at which the best was found); every trial goes to
``OUT/records/<n>.jsonl``. A pair already in results.jsonl is skipped, so an interrupted run resumes. The
baselines run after the tuning of a workload: torch on the same GPU (``torch.matmul``: cuBLAS; ``conv2d``:
cuDNN, both memory formats, the faster kept; in the workload's dtype, fp32 with TF32 disabled), timed with CUDA
events around a CUDA graph of back-to-back calls (``_graph_timed``: median of 20 replays after 10 warm-up calls),
output checked against numpy (half precision: fp32 accumulation, cuBLAS's reduced-precision reductions turned
off, output in the workload's dtype, as the tensor-core templates compute); and for half-precision GEMMs in fp16 dlight's ``gpu.Matmul`` on the workload's
PrimFunc, timed by TVM's ``time_evaluator``. ``OUT/report.md`` holds the table. Needs a CUDA GPU, torch with CUDA
and TVM with its compiler (tornado for ``--measure rpc``).
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
_BERT = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]  # (N, K) of the BERT/GPT-2 GEMMs at M=512
SUITES = {
    "fp32": "gemm:M=1024,N=1024,K=1024;gemm:M=4096,N=4096,K=4096;"
            "conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1",
    "tensor-cores": ";".join(
        [f"gemm:M=4096,N=4096,K=4096,dtype={d}" for d in ("float16", "bfloat16")]
        + [f"gemm:M=512,N={n},K={k},dtype={d}" for d in ("float16", "bfloat16") for n, k in _BERT]
        + [f"conv2d:N=1,C={c},H={h},W={h},K={k},R={r},S={r},stride={st},pad={r // 2},layout=NHWC,dtype=float16"
           for c, h, k, r, st in ((256, 56, 64, 1, 1), (64, 56, 64, 3, 1), (128, 56, 128, 3, 2), (512, 7, 512, 3, 1))]),
}
# the Hopper template's goal table (cuda:sm_90a: wgmma + TMA): GEMM 4096^3 and the BERT/GPT-2 GEMMs at M=512
SUITES["hopper"] = ";".join([f"gemm:M=4096,N=4096,K=4096,dtype={d}" for d in ("float16", "bfloat16")]
                            + [f"gemm:M=512,N={n},K={k},dtype=float16" for n, k in _BERT]) + ";" + ";".join(
    SUITES["tensor-cores"].split(";")[-4:])  # the four ResNet-50 convolutions, NHWC fp16
SUITES["all"] = SUITES["tensor-cores"] + ";" + SUITES["fp32"]
WORKLOADS = SUITES["fp32"]
STRATEGIES = "random,gbfs,na2c,xgb,dgd-af,gensor"


def _farm():
    """benchmarks/goals/rpc.py's start_farm / _stop (a tracker and N servers on 127.0.0.1)."""
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


def _torch_tensor(torch, x: np.ndarray, dtype: str):
    """A CUDA tensor of ``x`` in the workload's dtype (numpy has no bfloat16: through float32)."""
    t = torch.from_numpy(np.ascontiguousarray(np.asarray(x, dtype=np.float32) if dtype == "bfloat16" else x))
    return t.cuda().to(getattr(torch, dtype))


def _rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """The largest absolute error relative to the reference's largest magnitude."""
    return float(np.max(np.abs(got - ref)) / max(1e-30, float(np.max(np.abs(ref)))))


def _graph_timed(torch, fn, repeat: int = 20) -> list[float]:
    """Seconds per call of ``fn`` as the GPU runs it, after 10 warm-up calls (which also size the graph): ``number``
    calls captured in one CUDA graph (a replay of about 1 ms), ``repeat`` replays each between two CUDA events.
    One call from Python between two events would count the host's launch time (tens of microseconds through
    torch), longer than a small kernel; calls queued in a loop are bound by that launch time too. TVM's
    ``time_evaluator``, which times our kernels, launches from C++ (a few microseconds). Where capture fails, the
    calls are queued in a loop."""
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(10):
        fn()
    b.record()
    b.synchronize()
    number = max(1, min(200, int(1e-3 / max(a.elapsed_time(b) / 1e3 / 10, 1e-7))))
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # a warm-up on the capture's stream (cuDNN's and cuBLAS's workspaces)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            for _ in range(number):
                fn()
        run = graph.replay
    except RuntimeError:
        def run():
            for _ in range(number):
                fn()
    run()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / number)
    return times


def vendor_gpu(wl) -> dict:
    """torch (cuBLAS / cuDNN) on GPU 0 in the workload's dtype (fp32 without TF32): label, median seconds,
    GFLOPS, max error relative to the reference's scale."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # fp32 accumulation throughout, as our kernels (cuBLAS may otherwise reduce split-K partials in fp16/bf16)
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cudnn.benchmark = True
    inputs = wl.make_inputs(seed=0)
    ref = np.asarray(wl.reference(*inputs), dtype=np.float64)
    t = [_torch_tensor(torch, x, wl.dtype) for x in inputs]
    F = torch.nn.functional
    ver = torch.__version__.split("+")[0]
    what = "fp32, no TF32" if wl.dtype == "float32" else f"{wl.dtype}, fp32 accumulation"
    variants = []
    if wl.op == "gemm":
        variants.append((f"torch {ver} matmul (cuBLAS, {what})", lambda: torch.matmul(t[0], t[1])))
    elif wl.op == "conv2d" and wl.layout == "NCHW":
        for fmt_name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
            x, w = t[0].contiguous(memory_format=fmt), t[1].contiguous(memory_format=fmt)
            variants.append((f"torch {ver} conv2d (cuDNN, {fmt_name}, {what})",
                             lambda x=x, w=w: F.conv2d(x, w, stride=wl.stride, padding=wl.pad, dilation=wl.dilation)))
    elif wl.op == "conv2d" and wl.layout == "NHWC":  # NHWC data is NCHW in channels_last; HWIO -> OIHW
        x = t[0].permute(0, 3, 1, 2)
        w = t[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        variants.append((f"torch {ver} conv2d (cuDNN, channels_last, {what})",
                         lambda: F.conv2d(x, w, stride=wl.stride, padding=wl.pad, dilation=wl.dilation).permute(0, 2, 3, 1)))
    else:
        return {"error": "unsupported", "message": f"no GPU vendor baseline for {wl.key}"}
    best = None
    for label, fn in variants:
        with torch.no_grad():
            out = fn()
            torch.cuda.synchronize()
            got = out.contiguous().float().cpu().numpy().astype(np.float64)
            err = _rel_error(got, ref)
            times = _graph_timed(torch, fn)
        med = float(np.median(times))
        row = {"label": label, "median_s": med, "gflops": wl.flops / med / 1e9, "rel_error": err}
        if best is None or med < best["median_s"]:
            best = row
    return best


def dlight_gpu(wl, arch: str) -> dict:
    """TVM's untuned tensor-core schedule (dlight ``gpu.Matmul`` on the workload's PrimFunc) on GPU 0: label,
    median seconds, GFLOPS, max error; for fp16 GEMMs only (dlight has no bf16 tensor-core rule)."""
    import tvm
    from tvm.s_tir import dlight as dl

    if wl.op not in ("gemm", "batch_matmul") or wl.dtype != "float16":
        return {"error": "unsupported", "message": "dlight's tensor-core Matmul (WMMA) is the baseline of fp16 GEMMs"}
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    mod = tvm.IRModule({"main": wl.prim_func()})
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul())(mod)
    lib = tvm.compile(mod, target=target).mod
    dev = tvm.cuda(0)
    inputs = wl.make_inputs(seed=0)
    ref = np.asarray(wl.reference(*inputs), dtype=np.float64)
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype), dev)
    lib["main"](*args, out)
    got = np.asarray(out.numpy(), dtype=np.float64)
    err = _rel_error(got, ref)
    med = float(np.median(lib.time_evaluator("main", dev, number=10, repeat=20)(*args, out).results))
    return {"label": f"TVM {tvm.__version__} dlight gpu.Matmul (untuned)", "median_s": med,
            "gflops": wl.flops / med / 1e9, "rel_error": err}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory (resumable)")
    ap.add_argument("--suite", default="fp32", choices=sorted(SUITES), help="the workloads (see SUITES)")
    ap.add_argument("--workloads", default=None, help="workload specs separated by ';' (instead of --suite)")
    ap.add_argument("--measure", default="local", choices=("local", "rpc"),
                    help="on this machine's GPU (build workers compile in parallel) or through a loopback RPC server")
    ap.add_argument("--strategies", default=STRATEGIES, help="comma-separated")
    ap.add_argument("--trials", type=int, default=48, help="trial budget per run")
    ap.add_argument("--seconds", type=float, default=None, help="time budget per run (with --trials: the first)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", default=None, help="the target's arch instead of the GPU's (sm_90a: the wgmma template)")
    a = ap.parse_args(argv)
    if a.trials < 1:
        ap.error("--trials must be >= 1")
    out = Path(a.out)
    (out / "records").mkdir(parents=True, exist_ok=True)
    name, arch, hw = gpu_info()
    arch = a.arch or arch
    hw_file = out / f"hardware-{hw}.json"
    preset(hw).save(hw_file)
    print(f"GPU: {name} ({arch}); hardware preset {hw}", flush=True)
    workloads = [parse(s.strip()) for s in (a.workloads or SUITES[a.suite]).split(";") if s.strip()]
    strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    results = out / "results.jsonl"
    done = {(r["workload"], r["strategy"]) for r in read_jsonl(results)
            if r.get("trials_budget") == a.trials and r.get("arch") == arch}
    start_farm, stop = _farm()
    for wl in workloads:
        todo = [s for s in strategies if (wl.key, s) not in done]
        if todo:
            rpc, procs = start_farm(1, ("--no-fork",)) if a.measure == "rpc" else (None, [])  # forked: no CUDA
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
                           "measure": a.measure, "trials_per_s": round(res.trials / max(wall, 1e-9), 2),
                           "best_gflops": round(res.best_gflops, 1),
                           "best_trial": best.trial if best is not None else None,
                           "best_config": best.config if best is not None else None, "records": str(rec.relative_to(out))}
                    with open(results, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"{wl.key} {s}: {row['best_gflops']:.1f} GFLOPS after {res.trials} trials "
                          f"({res.errors} errors, {wall:.0f} s)", flush=True)
            finally:
                if procs:
                    stop(procs)
        for kind, fn in (("vendor", vendor_gpu), ("dlight", lambda w: dlight_gpu(w, arch))):
            if any(r.get(kind) and r["workload"] == wl.key for r in read_jsonl(results)):
                continue
            try:
                v = fn(wl)
            except Exception as e:  # noqa: BLE001  (a baseline's failure is its row, not the run's end)
                v = {"error": "error", "message": f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}"}
            with open(results, "a") as f:
                f.write(json.dumps({"workload": wl.key, kind: True, "gpu": name, **v}) + "\n")
            if not v.get("error"):
                print(f"{wl.key} {kind}: {v.get('label')} {v.get('gflops', 0):.1f} GFLOPS", flush=True)
    report(out)
    return 0


def report(out: Path) -> None:
    rows = read_jsonl(out / "results.jsonl")
    lines = ["# Search methods on an NVIDIA GPU (CUDA templates)", ""]
    for wl in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == wl]
        v = next((r for r in mine if r.get("vendor") and not r.get("error")), None)
        gpu = mine[0].get("gpu", "")
        lines += [f"## {wl} ({gpu})", "",
                  "| method | best GFLOPS | x vendor | trials | errors | found at trial | wall s | trials/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in mine:
            if r.get("vendor") or r.get("dlight"):
                continue
            ratio = f"{r['best_gflops'] / v['gflops']:.2f}x" if v else "-"
            lines.append(f"| {r['strategy']} ({r.get('measure', 'rpc')}, {r.get('arch', '')}) | {r['best_gflops']:.1f} | {ratio} | "
                         f"{r['trials']} | {r['errors']} | {r['best_trial']} | {r['wall_s']:.0f} | "
                         f"{r.get('trials_per_s', r['trials'] / max(r['wall_s'], 1e-9)):.2f} |")
        for r in mine:
            if r.get("dlight") and not r.get("error"):
                ratio = f"{r['gflops'] / v['gflops']:.2f}x" if v else "-"
                lines.append(f"| {r['label']} | {r['gflops']:.1f} | {ratio} | | | | | |")
            elif (r.get("vendor") or r.get("dlight")) and r.get("error") != "unsupported" and r.get("error"):
                lines.append(f"| {'vendor' if r.get('vendor') else 'dlight'}: {r.get('message', '')[:80]} | | | | | | | |")
        if v:
            lines.append(f"| {v['label']} | {v['gflops']:.1f} | 1.00x | | | | | |")
        lines.append("")
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
