"""int8 GEMMs: our VNNI kernels against ONNX Runtime's MatMulInteger (MLAS) and against our own fp32 kernels.

    python benchmarks/goals/int8.py [--shapes 1024x1024x1024,128x768x768,...] [--trials 48] [--rounds 5]
                                    [--out benchmarks/out/int8]

For each shape M x N x K (default: GEMM 1024^3 and the BERT-base GEMMs at M = 128 and 512: 768x768 (attention
projections), 3072x768 (FFN up), 768x3072 (FFN down)):

1. tunes ``qgemm:M,N,K,out_dtype=int32`` (uint8 x int8 -> int32 with the activation's zero point, what
   ``MatMulInteger`` computes with a zero weight zero point) and ``gemm:M,N,K`` (fp32) with ``tiletune tune``
   (dgd, ``--trials`` each; the records under ``OUT/records/`` resume);
2. times, ``--rounds`` times and taking turns, each engine in its own process with ``--threads`` threads and the
   project's timing rule (``tiletune.measure.timing``): ours int8 (the best record's kernel, the weight packed
   beforehand as a model build packs it), ONNX Runtime's ``MatMulInteger`` (the weight a constant initializer,
   which MLAS packs once; OPENBLAS_* unset in its process) and ours fp32. Each output is checked (int8: exactly
   against numpy; fp32: against numpy).

Prints every timing and the per-shape medians, and writes ``OUT/results.jsonl`` and ``OUT/summary.md`` (with the CPU
name and its flags). Not a test: the machine is shared; compare the ratios of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT_SHAPES = ("1024x1024x1024,128x768x768,128x3072x768,128x768x3072,512x768x768,512x3072x768,512x768x3072")


def specs(shape: str) -> tuple[str, str]:
    m, n, k = shape.split("x")
    return f"qgemm:M={m},N={n},K={k},out_dtype=int32", f"gemm:M={m},N={n},K={k}"


# ---- children -----------------------------------------------------------------------------------------------------
def child_ours(spec: str, records: str, threads: int) -> dict:
    """Our best kernel of ``spec`` in ``records``: built, checked, timed (seconds per call)."""
    import tvm

    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.timing import time_callable
    from tiletune.records import best, load
    from tiletune.schedules import build, make_space, prepacked_inputs
    from tiletune.target import host_target
    from tiletune.workloads import parse

    wl = parse(spec)
    rec = best(load(records, workload=wl.key))
    target = host_target()
    space = make_space(wl, None, target)
    config = space.from_dict(rec.config)
    ex = build(wl, space, config, target, prepacked=True)
    packs = prepacked_inputs(wl, space, config, target)
    inputs = wl.make_inputs(seed=0)
    ref = wl.reference(*inputs)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(packs[i].pack(x) if i in packs else x, dev) for i, x in enumerate(inputs)]
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype), dev)
    f = ex.mod["main"]
    f(*args, out)
    got = out.numpy()
    ok = bool(np.array_equal(got, ref)) if wl.out_dtype == "int32" else bool(np.allclose(got, ref, *wl.tolerance()))
    costs = time_callable(lambda: f(*args, out), MeasureSettings(repeat=5, min_repeat_ms=100))
    return {"costs": costs, "ok": ok, "config": rec.config}


def child_ort(spec: str, threads: int) -> dict:
    """ONNX Runtime's MatMulInteger on the same inputs (W a constant initializer, the zero points inputs)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.timing import time_callable
    from tiletune.workloads import parse

    wl = parse(spec)
    d = dict(zip(wl.input_names(), wl.make_inputs(seed=0)))
    ref = wl.reference(*[d[n] for n in wl.input_names()])
    M, K, N = wl.M, wl.K, wl.N
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "W", "za", "zw"], ["Y"])], "qgemm",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [M, K]),
         helper.make_tensor_value_info("za", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [M, N])],
        [numpy_helper.from_array(d["W"], "W"), numpy_helper.from_array(np.array(0, np.int8), "zw")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {"A": d["A"], "za": np.array(d["za"][0], np.uint8)}
    got = sess.run(None, feed)[0]
    ok = bool(np.array_equal(got, ref))
    costs = time_callable(lambda: sess.run(None, feed), MeasureSettings(repeat=5, min_repeat_ms=100))
    return {"costs": costs, "ok": ok, "version": ort.__version__}


def run_child(kind: str, spec: str, records: str, threads: int) -> dict:
    env = dict(os.environ, TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if kind == "ort":
        for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            env.pop(v, None)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([sys.executable, __file__, "--child", kind, spec, records, str(threads), out], env=env,
                       check=True)
        return json.loads(Path(out).read_text())


# ---- the study ------------------------------------------------------------------------------------------------------
def tune(spec: str, records: Path, trials: int) -> None:
    subprocess.run(["tiletune", "tune", spec, "-n", str(trials), "-o", str(records), "--quiet"], check=True)


def cpu_line() -> str:
    from tiletune.cpu_features import cpu_name, machine_features

    return f"{cpu_name()}; {os.cpu_count()} cores seen; flags: {', '.join(sorted(machine_features()))}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES)
    p.add_argument("--trials", type=int, default=48)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/out/int8")
    p.add_argument("--no-fp32", action="store_true", help="leave out our fp32 kernels")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        kind, spec, records, threads, out = a.child
        r = child_ort(spec, int(threads)) if kind == "ort" else child_ours(spec, records, int(threads))
        Path(out).write_text(json.dumps(r))
        return
    out = Path(a.out)
    (out / "records").mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    header = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {cpu_line()}, "
              f"{a.threads} threads, {a.rounds} rounds, {a.trials} trials per kernel (dgd)")
    print(header, flush=True)
    rows = []
    for shape in a.shapes.split(","):
        q, f = specs(shape)
        rq, rf = out / "records" / f"int8-{shape}.jsonl", out / "records" / f"fp32-{shape}.jsonl"
        tune(q, rq, a.trials)
        if not a.no_fp32:
            tune(f, rf, a.trials)
        from tiletune.workloads import parse

        flops = parse(f).flops
        times: dict[str, list[float]] = {"int8": [], "ort": [], "fp32": []}
        for i in range(a.rounds):
            kinds = [("int8", q, str(rq)), ("ort", q, "")] + ([] if a.no_fp32 else [("fp32", f, str(rf))])
            kinds = kinds[i % len(kinds):] + kinds[:i % len(kinds)]  # each engine first in turn
            line = []
            for name, spec, rec in kinds:
                r = run_child("ort" if name == "ort" else "ours", spec, rec, a.threads)
                if not r["ok"]:
                    raise SystemExit(f"{name} {shape}: wrong output")
                t = statistics.median(r["costs"])
                times[name].append(t)
                line.append(f"{name} {t * 1e3:.4f} ms ({flops / t / 1e9:.0f} GOPS)")
            print(f"{shape} round {i}: " + ", ".join(line), flush=True)
        med = {k: statistics.median(v) for k, v in times.items() if v}
        low = {k: min(v) for k, v in times.items() if v}  # the least disturbed run of each side, on a loaded host
        row = {"shape": shape, "int8_ms": med["int8"] * 1e3, "ort_int8_ms": med["ort"] * 1e3,
               "int8_vs_ort": med["ort"] / med["int8"], "runs": {k: v for k, v in times.items() if v},
               "min_ms": {k: v * 1e3 for k, v in low.items()}, "min_int8_vs_ort": low["ort"] / low["int8"]}
        if "fp32" in med:
            row.update(fp32_ms=med["fp32"] * 1e3, int8_vs_fp32=med["fp32"] / med["int8"],
                       min_int8_vs_fp32=low["fp32"] / low["int8"])
        rows.append(row)
        print(f"{shape}: int8 {row['int8_ms']:.4f} ms, ORT MatMulInteger {row['ort_int8_ms']:.4f} ms "
              f"({row['int8_vs_ort']:.2f}x)" + (f", our fp32 {row['fp32_ms']:.4f} ms ({row['int8_vs_fp32']:.2f}x)"
                                               if "fp32_ms" in row else ""), flush=True)
    with open(out / "results.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps({"header": header, **r}) + "\n")
    lines = [f"# int8 GEMMs against ONNX Runtime's MatMulInteger", "", header, "",
             f"`python benchmarks/goals/int8.py"
             + ("" if a.shapes == DEFAULT_SHAPES else f" --shapes {a.shapes}")
             + f" --trials {a.trials} --rounds {a.rounds} --out {a.out}` "
             f"(python {platform.python_version()})", "",
             "Medians of the rounds, and in brackets the fastest round of each side (on a loaded host the least disturbed "
             "run) and the ratio of those.", "",
             "| M x N x K | ours int8 (ms) | ORT MatMulInteger (ms) | ours / ORT | ours fp32 (ms) | int8 / fp32 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lo = r["min_ms"]
        lines.append(f"| {r['shape']} | {r['int8_ms']:.4f} ({lo['int8']:.4f}) | {r['ort_int8_ms']:.4f} ({lo['ort']:.4f}) "
                     f"| {r['int8_vs_ort']:.2f}x ({r['min_int8_vs_ort']:.2f}x) | "
                     + (f"{r['fp32_ms']:.4f} ({lo['fp32']:.4f}) | {r['int8_vs_fp32']:.2f}x ({r['min_int8_vs_fp32']:.2f}x) |"
                        if "fp32_ms" in r else "- | - |"))
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
