"""bert-small's softmax kernel with and without FastMathTransform (docs/decisions/fast-math.md).

    python benchmarks/research/model_build/fast_math_softmax.py [--model bert-small] [--rounds 5]

Fuses the model twice (exact exp, and TVM's fast_exp), gives both softmax kernels the default schedule, times
them alternately on the same inputs (median of 3 samples of >= 50 ms per round) and prints the medians and
the largest difference of the outputs.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import tvm
from tvm import relax

from tiletune.model.kernels.default_schedule import default_schedule
from tiletune.model.passes.pipeline import prepare
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import extract
from tiletune.target import parse_target


def softmax_kernel(mod, target: dict, fast: bool):
    from tvm.relax.backend.cpu_generic.pipeline import library_dispatch_passes

    with tvm.target.Target(target) as tgt:
        passes = library_dispatch_passes(tgt) + ([relax.transform.FastMathTransform()] if fast else []) + [
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
            relax.transform.FuseOps(), relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()]
        fused = tvm.transform.Sequential(passes)(mod)
    return next(k for k in extract(fused, target).kernels if "softmax" in k.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-small")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    target = parse_target(None)
    mod = prepare(load(args.model)).mod
    libs = {}
    for name, fast in (("exact", False), ("fast", True)):
        k = softmax_kernel(mod, target, fast)
        f = default_schedule(k.func, True).with_attr("global_symbol", "main")
        libs[name] = (tvm.compile(tvm.IRModule({"main": f}), target=tvm.target.Target(target)).mod, k)
    rng = np.random.default_rng(0)
    params = libs["exact"][1].func.params
    args_np = [rng.standard_normal(tuple(int(s) for s in p.shape)).astype(str(p.dtype)) for p in params]
    times, outs = {n: [] for n in libs}, {}
    for _ in range(args.rounds):
        for name, (lib, _k) in libs.items():
            tv = [tvm.runtime.tensor(a, tvm.cpu()) for a in args_np]
            times[name].append(lib.time_evaluator("main", tvm.cpu(), number=5, repeat=3, min_repeat_ms=50)(*tv).median)
            outs[name] = tv[-1].numpy()
    print(f"{libs['exact'][1].name} ({args.rounds} alternating rounds): "
          + ", ".join(f"{n} {np.median(v) * 1e6:.1f} us" for n, v in times.items())
          + f"; exact/fast {np.median(np.array(times['exact']) / np.array(times['fast'])):.2f}; "
          f"max |exact - fast| {float(np.max(np.abs(outs['exact'] - outs['fast']))):.2g}")


if __name__ == "__main__":
    main()
