"""The error a compute dtype adds to whole models (docs/decisions/model-dtype-tolerance.md): each model imported,
cast by ``tiletune.model.passes.precision.cast`` (what ``--dtype`` does on a CUDA target), built for this CPU with the
default schedules, and compared with PyTorch in float32 on random inputs of ``--seeds`` seeds; the largest error
relative to the output's scale, per dtype. The CPU computes the same cast module as the GPU build, so the error
of the cast itself is measured without a GPU (a GPU's kernels add their own rounding order on top).

    python benchmarks/research/model_build/model_dtype_error.py tiny family:gelu_mlp family:attention family:norms \\
        family:conv_silu bert-small resnet18 mobilenetv2
"""
from __future__ import annotations

import argparse

from tiletune.model.build import ModelRunner, compare, compile_module, scheduled_module
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.target import parse_target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--dtypes", default="float32,float16,bfloat16")
    a = p.parse_args()
    host = parse_target("llvm")
    print("| model | " + " | ".join(a.dtypes.split(",")) + " |")
    print("|---|" + "---:|" * len(a.dtypes.split(",")))
    for spec in a.models:
        src = load(spec)
        row = []
        for dt in a.dtypes.split(","):
            runner = ModelRunner(compile_module(scheduled_module(model_tasks(src, host, "NHWC", dt), {})[0], host))
            errs = []
            for seed in range(a.seeds):
                x = src.random_inputs(seed)
                errs.append(compare(runner(*x), src.reference(x)))
            row.append(f"{max(errs):.2e}")
        print(f"| {spec} | " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
