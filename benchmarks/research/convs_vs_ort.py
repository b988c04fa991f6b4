"""A CNN's convolutions in our build against ONNX Runtime's, class by class (input channels, output channels,
kernel size, output height): where the whole-model ratio is won and lost.

    python benchmarks/research/convs_vs_ort.py --model resnet50 -r RECORDS --out DIR [--runs 40] [--threads 2] \
        [--stat min]

Each side runs in a child process of its own, one after the other: ours (``ours``: the model built from the
records, every kernel call timed by the VM's instrument, host clock around each call, TVM_NUM_THREADS =
--threads) and ONNX Runtime (``ort``: its own profiler's per-node kernel times, intra-op threads = --threads,
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset as for every vendor baseline). Per run, the time of every class
is summed over its calls; the table gives the median over the runs (ONNX Runtime: over the second half, its
first runs warm up), or with ``--stat min`` their minimum (on a shared host whose neighbours only ever slow a run
down, each class's time in the quietest runs), and writes ``DIR/convs-vs-ort.md`` and the two sides' JSON. "other"
is everything that is not a convolution or the classifier (pads, pooling, layout transposes, the VM's allocations on
our side). The instrument's callbacks cost each side a little host time per call; ours has more calls (its pads)."""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tiletune.bench.vendor import UNSET_ENV
from vm_calls import timed_calls  # benchmarks/research/vm_calls.py


def ours(model: str, records: str, runs: int, out: str, stat=np.median) -> None:
    tasks, logs = timed_calls(model, records, runs)
    key = {}
    for k in tasks.kernels:
        if "conv2d" in k.name and len(k.inputs) >= 2 and len(k.inputs[1]) == 4:
            kh, _, c, kout = k.inputs[1]  # NHWC weights: kh x kw x C x K
            key.update({n: f"C{c} K{kout} k{kh} Ho{k.output[1]}" for n in k.names})
        elif "matmul" in k.name or "dense" in k.name:
            key.update({n: "classifier" for n in k.names})
    per = collections.defaultdict(list)
    for log in logs:
        acc = collections.defaultdict(float)
        for name, us in log:
            acc[key.get(name, "other")] += us
        for k, v in acc.items():
            per[k].append(v)
    Path(out).write_text(json.dumps({k: float(stat(v)) for k, v in per.items()}, indent=1))


def ort(model: str, runs: int, threads: int, out: str, stat=np.median) -> None:
    import onnxruntime as rt

    from tiletune.model.source import export_onnx, load

    src = load(model)
    d = tempfile.mkdtemp()
    path = os.path.join(d, "m.onnx")
    export_onnx(src, path)
    o = rt.SessionOptions()
    o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
    o.enable_profiling, o.profile_file_prefix = True, os.path.join(d, "prof")
    s = rt.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    x = dict(zip([i.name for i in s.get_inputs()], src.random_inputs(0)))
    for _ in range(runs):
        s.run(None, x)
    events = json.loads(Path(s.end_profiling()).read_text())
    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
    per = collections.defaultdict(lambda: collections.defaultdict(float))
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        a = e["args"]
        ins, outs = a.get("input_type_shape", []), a.get("output_type_shape", [])
        if a.get("op_name") in ("Conv", "FusedConv") and len(ins) >= 2:
            kout, c, kh, _ = next(iter(ins[1].values()))  # OIHW weights
            k = f"C{c} K{kout} k{kh} Ho{next(iter(outs[0].values()))[2]}"
        else:
            k = "classifier" if a.get("op_name") in ("Gemm", "MatMul") else "other"
        per[k][bisect.bisect_right(starts, e["ts"]) - 1] += e["dur"]
    keep = range(runs // 2, runs)
    Path(out).write_text(json.dumps({k: float(stat([v[i] for i in keep])) for k, v in per.items()}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per class, the median of the runs' times, or their minimum (a shared host's quiet runs)")
    ap.add_argument("--side", choices=("ours", "ort"), help=argparse.SUPPRESS)  # a child's side
    a = ap.parse_args()
    stat = {"median": np.median, "min": np.min}[a.stat]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.side == "ours":
        return ours(a.model, a.records, a.runs, str(out / "ours.json"), stat)
    if a.side == "ort":
        return ort(a.model, 2 * a.runs, a.threads, str(out / "ort.json"), stat)
    for side in ("ours", "ort"):
        env = dict(os.environ, TVM_NUM_THREADS=str(a.threads))
        if side == "ort":
            for v in UNSET_ENV:
                env.pop(v, None)
        subprocess.run([sys.executable, __file__, *sys.argv[1:], "--side", side], env=env, check=True)
    o, r = (json.loads((out / f"{s}.json").read_text()) for s in ("ours", "ort"))
    rows = sorted(set(o) | set(r), key=lambda k: -r.get(k, 0.0))
    lines = [f"# {a.model}: convolutions by class, ours against ONNX Runtime ({a.threads} threads, us per inference, "
             f"{a.stat} of {a.runs} runs)", "", f"    python benchmarks/research/convs_vs_ort.py --model {a.model} "
             f"-r RECORDS --out DIR --runs {a.runs} --threads {a.threads}" + (" --stat min" if a.stat == "min" else ""),
             "",
             "| class (C in, K out, kernel, output height) | ours | ONNX Runtime | ours vs ORT | ORT - ours |",
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
