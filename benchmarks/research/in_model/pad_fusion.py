"""The pads taken into their producers (``tiletune.model.kernels.pad_fusion``) against the pads as kernels of their own:
both builds of a model exported, and every fused producer timed alone against its unfused kernel plus the pad
kernel (not a test).

    TVM_NUM_THREADS=2 python benchmarks/research/in_model/pad_fusion.py --model resnet50 -r RECORDS --out DIR [--rounds 15]

Writes ``DIR/MODEL-fused.so`` and ``DIR/MODEL-padkernels.so`` (then time them alternately in one process with
``builds_alternate.py``), and prints per fused producer the minima over ``--rounds`` rounds, each round timing
the four kernels one after the other (warm, 20 calls each): the producer as tuned, the pad kernel, the producer
writing the padded buffer with its border, and without the border fill (what the fill costs).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()

    import tvm

    from tiletune.model.kernels import pad_fusion as pf
    from tiletune.model.build import ModelRunner, best_configs, check, compile_module, export, scheduled_module
    from tiletune.model.frontend.source import load
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.schedules import cpu
    from tiletune.target import host_target

    Path(a.out).mkdir(parents=True, exist_ok=True)
    src = load(a.model)
    tasks = model_tasks(src, host_target(), "NHWC", "float32")
    chosen = best_configs(tasks, a.records)
    for fuse, label in ((True, "fused"), (False, "padkernels")):
        ex = compile_module(scheduled_module(tasks, chosen, fuse_pads=fuse)[0], tasks.target)
        print(f"{label}: largest error against the framework {check(src, ModelRunner(ex)):.2g}", flush=True)
        export(ex, f"{a.out}/{a.model}-{label}.so", {"model": a.model, "pads": label})

    dev, tgt = tvm.cpu(), tvm.target.Target(tasks.target)
    kernels = {n: k for k in tasks.kernels for n in k.names}
    print("\n| producer (output) | calls | as tuned | pad kernel | sum | fused | fused, no border | sum / fused |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    seen = set()
    for (prod, pad), spec in pf.fusable(tasks.fused).items():
        k = kernels[prod]
        c = chosen.get(k.hash)
        if c is None or (k.hash, spec) in seen:
            continue
        seen.add((k.hash, spec))
        padded = cpu.schedule(k.workload, c.space, c.config, tasks.target, func=pf.into_padded(k.func, spec))
        funcs = {"tuned": cpu.schedule(k.workload, c.space, c.config, tasks.target).mod["main"],
                 "pad": tasks.fused[pad],
                 "fused": pf.with_border(padded.mod["main"], k.output, spec),
                 "noborder": padded.mod["main"]}
        rng = np.random.default_rng(0)
        ins = [tvm.runtime.tensor(rng.standard_normal([int(s) for s in p.ty.shape]).astype("float32"), dev)
               for p in k.func.params[:-1]]
        out = tvm.runtime.tensor(np.zeros(k.output, "float32"), dev)
        big = tvm.runtime.tensor(np.zeros(spec.padded(k.output), "float32"), dev)
        args = {"tuned": ins + [out], "pad": [out, big], "fused": ins + [big], "noborder": ins + [big]}
        timers = {n: tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target=tgt)
                  .mod.time_evaluator("main", dev, number=20, repeat=1) for n, f in funcs.items()}
        best = dict.fromkeys(funcs, float("inf"))
        for _ in range(a.rounds):
            for n in funcs:
                best[n] = min(best[n], timers[n](*args[n]).mean * 1e6)
        total = best["tuned"] + best["pad"]
        print(f"| {prod} {'x'.join(map(str, k.output))} | {k.calls} | {best['tuned']:.1f} | {best['pad']:.1f} | "
              f"{total:.1f} | {best['fused']:.1f} | {best['noborder']:.1f} | {total / best['fused']:.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()
