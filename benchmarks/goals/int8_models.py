"""Quantized models: our int8 build against ONNX Runtime's int8 on the same file, and against our fp32 build.

    python benchmarks/goals/int8_models.py [--models bert-small] [--trials 160] [--rounds 3]
                                           [--out benchmarks/out/int8/models]

For each model (a built-in torch model of ``tiletune.model.frontend.zoo``): exports it to ONNX (``export_onnx``),
quantizes it with ONNX Runtime (``quantize_dynamic``, int8 weights: MatMulInteger / DynamicQuantizeLinear), tunes
the quantized file and the float file with ``tiletune model tune`` (``--trials`` each; records under ``OUT``
resume), builds both (``tiletune model build``, which checks each library against the original), then times, in
``--rounds`` rounds taking turns, each engine in its own process with ``--threads`` threads and the project's timing
rule: ours int8, ONNX Runtime int8 (same file), ours fp32, ONNX Runtime fp32. Prints the accuracy of our int8 build
against the float model and against ONNX Runtime's int8 on the same input (max absolute difference and cosine
similarity), every timing and the medians; writes ``OUT/results.jsonl`` and ``OUT/summary.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def child(kind: str, path: str, threads: int, out: str) -> None:
    """Time one engine on the model's example input; write its seconds per call and its output."""
    from tiletune.measure.base import MeasureSettings
    from tiletune.measure.timing import time_callable

    x = np.load(path + ".input.npy")
    if kind == "ours":
        from tiletune.api import load_model

        m = load_model(path)
        call = lambda: m(x)  # noqa: E731
        y = m(x)[0]
    else:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed = {s.get_inputs()[0].name: x}
        call = lambda: s.run(None, feed)  # noqa: E731
        y = s.run(None, feed)[0]
    costs = time_callable(call, MeasureSettings(repeat=5, min_repeat_ms=200))
    np.save(out + ".npy", np.asarray(y, dtype=np.float32))
    Path(out).write_text(json.dumps({"costs": costs}))


def run(kind: str, path: str, threads: int) -> tuple[float, np.ndarray]:
    env = dict(os.environ, TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if kind == "ort":
        for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            env.pop(v, None)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        subprocess.run([sys.executable, __file__, "--child", kind, path, str(threads), out], env=env, check=True)
        return statistics.median(json.loads(Path(out).read_text())["costs"]), np.load(out + ".npy")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="bert-small")
    p.add_argument("--trials", type=int, default=160)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/out/int8/models")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        kind, path, threads, out = a.child
        child(kind, path, int(threads), out)
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tiletune.cpu_features import cpu_name, machine_features
    from tiletune.model.frontend.source import export_onnx, load

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="int8-models-"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    header = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {cpu_name()} "
              f"({', '.join(sorted(machine_features()))}), {a.threads} threads, {a.rounds} rounds, "
              f"{a.trials} trials per build")
    print(header, flush=True)
    rows = []
    for name in a.models.split(","):
        src = load(name)
        fp32, q = work / f"{name}.onnx", work / f"{name}-int8.onnx"
        export_onnx(src, str(fp32))
        quantize_dynamic(str(fp32), str(q), weight_type=QuantType.QInt8)
        x = np.random.default_rng(0).integers(src.inputs[0].low or 0, src.inputs[0].high or 2, src.inputs[0].shape) \
            if "int" in src.inputs[0].dtype else np.random.default_rng(0).normal(0, 1, src.inputs[0].shape)
        x = x.astype(src.inputs[0].dtype)
        libs = {}
        for tag, f in (("int8", q), ("fp32", fp32)):
            rec = out / f"{name}-{tag}.jsonl"
            subprocess.run(["tiletune", "model", "tune", str(f), "-n", str(a.trials), "-o", str(rec), "--quiet"],
                           check=True)
            lib = work / f"{name}-{tag}.so"
            subprocess.run(["tiletune", "model", "build", str(f), "-r", str(rec), "-o", str(lib)], check=True)
            libs[tag] = str(lib)
        for path in (libs["int8"], libs["fp32"], str(q), str(fp32)):
            np.save(path + ".input.npy", x)
        engines = [("ours int8", "ours", libs["int8"]), ("ORT int8", "ort", str(q)), ("ours fp32", "ours", libs["fp32"]),
                   ("ORT fp32", "ort", str(fp32))]
        times: dict[str, list[float]] = {e[0]: [] for e in engines}
        outs: dict[str, np.ndarray] = {}
        for i in range(a.rounds):
            turn = engines[i % len(engines):] + engines[:i % len(engines)]
            line = []
            for label, kind, path in turn:
                t, y = run(kind, path, a.threads)
                times[label].append(t)
                outs[label] = y
                line.append(f"{label} {t * 1e3:.3f} ms")
            print(f"{name} round {i}: " + ", ".join(line), flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        low = {k: min(v) for k, v in times.items()}  # the least disturbed run of each side, on a loaded host
        ours, ref_q, ref_f = outs["ours int8"], outs["ORT int8"], outs["ORT fp32"]
        row = {"model": name, "ms": {k: v * 1e3 for k, v in med.items()}, "runs": times,
               "int8_vs_ort_int8": med["ORT int8"] / med["ours int8"],
               "int8_vs_our_fp32": med["ours fp32"] / med["ours int8"],
               "min_ms": {k: v * 1e3 for k, v in low.items()},
               "min_int8_vs_ort_int8": low["ORT int8"] / low["ours int8"],
               "min_int8_vs_our_fp32": low["ours fp32"] / low["ours int8"],
               "max_abs_out": float(np.abs(ref_f).max()),
               "diff_vs_ort_int8": float(np.abs(ours - ref_q).max()), "diff_vs_float": float(np.abs(ours - ref_f).max()),
               "ort_int8_diff_vs_float": float(np.abs(ref_q - ref_f).max()),
               "cosine_vs_float": cosine(ours, ref_f)}
        rows.append(row)
        print(f"{name}: ours int8 {med['ours int8'] * 1e3:.3f} ms, ORT int8 {med['ORT int8'] * 1e3:.3f} ms "
              f"({row['int8_vs_ort_int8']:.2f}x), ours fp32 {med['ours fp32'] * 1e3:.3f} ms "
              f"({row['int8_vs_our_fp32']:.2f}x), ORT fp32 {med['ORT fp32'] * 1e3:.3f} ms; outputs up to "
              f"{row['max_abs_out']:.3g}: ours int8 - ORT int8 {row['diff_vs_ort_int8']:.3g}, ours int8 - float "
              f"{row['diff_vs_float']:.3g} (ORT int8 - float {row['ort_int8_diff_vs_float']:.3g}), cosine to float "
              f"{row['cosine_vs_float']:.5f}", flush=True)
    with open(out / "results.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps({"header": header, **r}) + "\n")
    lines = ["# Quantized models against ONNX Runtime's int8 and our fp32", "", header, "",
             f"`python benchmarks/goals/int8_models.py --models {a.models} --trials {a.trials} --rounds {a.rounds} "
             f"--out {a.out}`", "",
             "Medians of the rounds; in brackets the ratios of each side's fastest round.", "",
             "| model | ours int8 (ms) | ORT int8 (ms) | ours / ORT int8 | ours fp32 (ms) | int8 / fp32 | ORT fp32 (ms) "
             "| max out | ours - ORT int8 | ours - float | ORT int8 - float | cosine to float |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = r["ms"]
        lines.append(f"| {r['model']} | {ms['ours int8']:.3f} | {ms['ORT int8']:.3f} | {r['int8_vs_ort_int8']:.2f}x "
                     f"({r['min_int8_vs_ort_int8']:.2f}x) | {ms['ours fp32']:.3f} | {r['int8_vs_our_fp32']:.2f}x "
                     f"({r['min_int8_vs_our_fp32']:.2f}x) | {ms['ORT fp32']:.3f} | "
                     f"{r['max_abs_out']:.3g} | {r['diff_vs_ort_int8']:.3g} | {r['diff_vs_float']:.3g} | "
                     f"{r['ort_int8_diff_vs_float']:.3g} | {r['cosine_vs_float']:.5f} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
