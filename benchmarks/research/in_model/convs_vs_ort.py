"""A model's kernels in our build against ONNX Runtime's, class by class: a CNN's convolutions by input channels,
output channels, kernel size and output height, a transformer's matmuls by shape (fused epilogues on our side, bias
and GELU nodes of their own on ONNX Runtime's, which count as "other"), layer norms and softmaxes: where the
whole-model ratio is won and lost.

    python benchmarks/research/in_model/convs_vs_ort.py --model resnet50 -r RECORDS --out DIR [--runs 40] [--threads 2] \
        [--stat min] [--rounds R]

Each side runs in a child process of its own, one after the other (``--rounds 1``, the default), or with ``--rounds
R`` both children alive at once and alternating: R rounds of ``--runs`` inferences each side, taking turns, so that a
drift of the shared host's speed falls on both sides alike (the statistic then over all R x runs inferences of a side;
ONNX Runtime's warm-up is one round more, left out). The sides: ours (``ours``: the model built from the records,
every kernel call timed by the VM's instrument, host clock around each call, TVM_NUM_THREADS = --threads) and ONNX
Runtime (``ort``: its own profiler's per-node kernel times, intra-op threads = --threads, OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset as for every vendor baseline). Per run, the time of every class is summed over its calls; the
table gives the median over the runs (ONNX Runtime: over the second half, its first runs warm up), or with ``--stat
min`` their minimum (on a shared host whose neighbours only ever slow a run down, each class's time in the quietest
runs), and writes ``DIR/convs-vs-ort.md`` and the two sides' JSON. "other" is everything that is not in one of these
classes (pads, pooling, layout transposes, the VM's allocations on our side). The instrument's callbacks cost each side
a little host time per call; ours has more calls (the VM's builtins)."""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from threads_vs_ort import Turns, side_env  # benchmarks/research/in_model/threads_vs_ort.py
from vm_calls import TimedVM, timed_calls  # benchmarks/research/in_model/vm_calls.py


def classes_of(tasks) -> dict[str, str]:
    """{kernel name: its class} for our build's convolutions and classifier (the rest is "other")."""
    from tiletune.model.kernels.pad_fusion import fused_name, fusable

    key = {}
    for k in tasks.kernels:
        if "conv2d" in k.name and len(k.inputs) >= 2 and len(k.inputs[1]) == 4:
            kh, _, c, kout = k.inputs[1]  # NHWC weights: kh x kw x C x K
            key.update({n: f"C{c} K{kout} k{kh} Ho{k.output[1]}" for n in k.names})
        elif ("matmul" in k.name or "dense" in k.name) and hasattr(k.workload, "axes_no_tvm"):
            key.update({n: anchor_class(k.workload) for n in k.names})
        elif ("matmul" in k.name or "dense" in k.name) and len(k.inputs) >= 2:
            key.update({n: matmul_class(k.inputs[0], k.inputs[1]) for n in k.names})
        elif "layer_norm" in k.name or "softmax" in k.name:
            key.update({n: "layer norm" if "layer_norm" in k.name else "softmax" for n in k.names})
    key.update(_winograd_classes(tasks))
    for prod, pad in fusable(tasks.fused):  # a producer that writes a pad's buffer (tiletune.model.kernels.pad_fusion)
        if prod in key:
            key[fused_name(prod, pad)] = key[prod]
    return key


def anchor_class(workload) -> str:
    """A tuned matmul's class from its anchor's axes (the operands' shapes do not tell it when the kernel reads a
    layout copy's source, ``tiletune.model.kernels.producer_fusion``): the spatial axes [batch..., M, N] and the reduction K."""
    spatial = [a.extent for a in workload.axes_no_tvm() if a.kind == "S"]
    k = math.prod(a.extent for a in workload.axes_no_tvm() if a.kind == "R")
    *lead, m, n = [1] * max(0, 2 - len(spatial)) + spatial
    return matmul_class((*lead, m, k), (k, n))


def matmul_class(a, b) -> str:
    """A matmul's class from its two operands' shapes: "matmul [B x] M x K x N" (leading dimensions of size 1
    dropped, the batch their product); a matrix of one row is the classifier of a CNN."""
    m, k, n = (a[-2] if len(a) > 1 else 1), a[-1], b[-1]
    batch = 1
    for d in a[:-2]:
        batch *= d
    if m == 1 and batch == 1:
        return "classifier"
    return f"matmul {batch} x {m}x{k}x{n}" if batch > 1 else f"matmul {m}x{k}x{n}"


def _winograd_classes(tasks) -> dict[str, str]:
    """{kernel name: its convolution's class} for the three kernels of each convolution that Winograd's transforms
    compute (tiletune.model.passes.winograd): the product [a2, P, C] x [a2, C, K], the input transform that makes its
    [a2, P, C], the output transform that reads its [a2, P, K] and writes the 1 x Ho x Wo x K output."""
    from tiletune.model.passes.winograd import transform

    kinds = {k.name: transform(k.func) for k in tasks.kernels}
    outputs = {k.inputs[0]: k for k in tasks.kernels if kinds[k.name] == "output"}  # by the products they read
    inputs = {k.output: k for k in tasks.kernels if kinds[k.name] == "input"}  # by the V they write
    key = {}
    for k in tasks.kernels:
        if kinds[k.name] or len(k.inputs) != 2 or len(k.inputs[0]) != 3 or len(k.inputs[1]) != 3:
            continue
        (a2, p, c), (_, _, kout) = k.inputs[0], k.inputs[1]
        out = outputs.get((a2, p, kout))
        if out is None:
            continue
        cls = f"C{c} K{kout} k3 Ho{out.output[1]}"
        for kernel in (k, out, inputs.get(k.inputs[0])):
            if kernel is not None:
                key.update({n: cls for n in kernel.names})
    return key


def ours_runs(tasks, logs) -> list[dict[str, float]]:
    """Per inference, microseconds per class."""
    key = classes_of(tasks)
    out = []
    for log in logs:
        acc = collections.defaultdict(float)
        for name, us in log:
            acc[key.get(name, "other")] += us
        out.append(dict(acc))
    return out


class OrtSide:
    """ONNX Runtime's session of the model with its profiler on: ``run(n)`` more inferences, ``runs(skip)`` the
    per-inference microseconds per class of every inference after the first ``skip`` (ends the profiling)."""

    def __init__(self, model: str, threads: int):
        import onnxruntime as rt

        from tiletune.model.frontend.source import export_onnx, load

        src = load(model)
        d = tempfile.mkdtemp()
        path = os.path.join(d, "m.onnx")
        export_onnx(src, path)
        o = rt.SessionOptions()
        o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
        o.enable_profiling, o.profile_file_prefix = True, os.path.join(d, "prof")
        self.s = rt.InferenceSession(path, o, providers=["CPUExecutionProvider"])
        self.x = dict(zip([i.name for i in self.s.get_inputs()], src.random_inputs(0)))
        self.count = 0

    def run(self, n: int) -> None:
        for _ in range(n):
            self.s.run(None, self.x)
        self.count += n

    def runs(self, skip: int) -> list[dict[str, float]]:
        events = json.loads(Path(self.s.end_profiling()).read_text())
        starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
        per = [collections.defaultdict(float) for _ in starts]
        for e in events:
            if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
                continue
            a = e["args"]
            ins, outs = a.get("input_type_shape", []), a.get("output_type_shape", [])
            if a.get("op_name") in ("Conv", "FusedConv") and len(ins) >= 2:
                kout, c, kh, _ = next(iter(ins[1].values()))  # OIHW weights
                k = f"C{c} K{kout} k{kh} Ho{next(iter(outs[0].values()))[2]}"
            elif a.get("op_name") in ("Gemm", "MatMul", "FusedMatMul") and len(ins) >= 2:
                k = matmul_class(*(next(iter(i.values())) for i in ins[:2]))
            elif a.get("op_name") in ("LayerNormalization", "SkipLayerNormalization", "Softmax"):
                k = "softmax" if a["op_name"] == "Softmax" else "layer norm"
            else:
                k = "other"
            per[bisect.bisect_right(starts, e["ts"]) - 1][k] += e["dur"]
        return [dict(p) for p in per[skip:]]


def reduce_runs(runs: list[dict[str, float]], stat) -> dict[str, float]:
    keys = {k for r in runs for k in r}
    return {k: float(stat([r.get(k, 0.0) for r in runs])) for k in keys}


def serve(side: str, a, out: Path) -> None:
    """A child of the alternating mode (``threads_vs_ort.Turns``): set up, say "ready", then "run" -> ``--runs``
    inferences -> "done"; when the input ends, the per-inference classes written to ``out/SIDE-runs.json``."""
    if side == "ours":
        t = TimedVM(a.model, a.records)
        logs: list = []
        step = lambda: logs.extend(t.run(a.runs))  # noqa: E731
    else:
        t = OrtSide(a.model, a.threads)
        t.run(a.runs)  # its warm-up: one round more
        step = lambda: t.run(a.runs)  # noqa: E731
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            step()
            print("done", flush=True)
    runs = ours_runs(t.tasks, logs) if side == "ours" else t.runs(a.runs)
    (out / f"{side}-runs.json").write_text(json.dumps(runs))


def alternate(a, out: Path, stat) -> tuple[dict, dict]:
    sides = ("ours", "ort")
    with Turns([([sys.executable, __file__, *sys.argv[1:], "--side", side, "--serve"], side_env(side, a.threads))
                for side in sides]) as turns:
        for r in range(a.rounds):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                turns.turn(i)
            print(f"round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
    return tuple(reduce_runs(json.loads((out / f"{s}-runs.json").read_text()), stat) for s in sides)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per class, the median of the runs' times, or their minimum (a shared host's quiet runs)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="> 1: both sides alive at once, alternating, this many rounds of --runs inferences each")
    ap.add_argument("--side", choices=("ours", "ort"), help=argparse.SUPPRESS)  # a child's side
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a child of the alternating mode
    a = ap.parse_args()
    stat = {"median": np.median, "min": np.min}[a.stat]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.side and a.serve:
        return serve(a.side, a, out)
    if a.side == "ours":
        tasks, logs = timed_calls(a.model, a.records, a.runs)
        return (out / "ours.json").write_text(json.dumps(reduce_runs(ours_runs(tasks, logs), stat), indent=1))
    if a.side == "ort":
        t = OrtSide(a.model, a.threads)
        t.run(2 * a.runs)  # the first half warms up
        return (out / "ort.json").write_text(json.dumps(reduce_runs(t.runs(a.runs), stat), indent=1))
    if a.rounds > 1:
        o, r = alternate(a, out, stat)
        for side, d in (("ours", o), ("ort", r)):
            (out / f"{side}.json").write_text(json.dumps(d, indent=1))
    else:
        for side in ("ours", "ort"):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--side", side], env=side_env(side, a.threads),
                           check=True)
        o, r = (json.loads((out / f"{s}.json").read_text()) for s in ("ours", "ort"))
    rows = sorted(set(o) | set(r), key=lambda k: -r.get(k, 0.0))
    lines = [f"# {a.model}: kernels by class, ours against ONNX Runtime ({a.threads} threads, us per inference, "
             f"{a.stat} of {a.runs * a.rounds} runs"
             + (f", {a.rounds} alternating rounds" if a.rounds > 1 else "") + ")",
             "", f"    python benchmarks/research/in_model/convs_vs_ort.py --model {a.model} "
             f"-r RECORDS --out DIR --runs {a.runs} --threads {a.threads}" + (" --stat min" if a.stat == "min" else "")
             + (f" --rounds {a.rounds}" if a.rounds > 1 else ""),
             "",
             "| class (convolutions: C in, K out, kernel, output height) | ours | ONNX Runtime | ours vs ORT | ORT - ours |",
             "|---|---:|---:|---:|---:|"]
    for k in rows:
        mine, theirs = o.get(k, 0.0), r.get(k, 0.0)
        lines.append(f"| {k} | {mine:.0f} | {theirs:.0f} | {theirs / mine if mine else float('nan'):.2f}x | "
                     f"{theirs - mine:+.0f} |")
    lines.append(f"| **all** | {sum(o.values()):.0f} | {sum(r.values()):.0f} | "
                 f"{sum(r.values()) / sum(o.values()):.2f}x | {sum(r.values()) - sum(o.values()):+.0f} |")
    (out / "convs-vs-ort.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
