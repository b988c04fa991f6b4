"""Bert-small's QKV matmul at seq 384 (384 x 512 -> 1536, + bias) with Roller's construction and that
configuration's innermost (vectorized) tile changed, built with and without the CPU template's split of odd-length
vectors (``tiletune.schedules.cpu.vectorize_lanes``; docs/decisions/register-tile.md, "Vectors of odd lengths").

    python benchmarks/research/construct/odd_vectors.py [--calls 3]

Prints ms per call (mean of --calls after one warm call, one thread as TVM_NUM_THREADS gives it) for each tile,
split and unsplit, and checks that both give the same output.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import tvm

from tiletune.model.dynamic.shapes import shape_tasks
from tiletune.model.frontend.source import load
from tiletune.schedules import cpu, make_space
from tiletune.target import host_target

MODEL = f"{Path(__file__).resolve().parents[2] / 'common' / 'dyn_models.py'}:bert_small"
ROLLER = {"tile_i0": [2, 2, 16, 6], "tile_i1": [8, 4, 1, 48], "tile_k": [32, 16], "unroll": 64, "pack": 1}
VARIANTS = {"48 (Roller's)": {}, "24": {"tile_i1": [8, 8, 1, 24]},
            "96": {"tile_i1": [8, 2, 1, 96], "tile_i0": [2, 2, 48, 2]},
            "64": {"tile_i1": [8, 3, 1, 64], "tile_i0": [2, 2, 48, 2]}, "12": {"tile_i1": [8, 16, 1, 12]},
            "8": {"tile_i1": [8, 24, 1, 8]}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=3)
    a = p.parse_args()
    target = host_target()
    tasks = shape_tasks(load(MODEL), target, "NHWC", [{"batch": 1, "seq": 384}]).merged
    k = next(t for t in tasks.tasks if t.name.startswith("fused_matmul_add1"))
    space = make_space(k.workload, None, target)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal([int(s) for s in p.shape]).astype("float32"), dev)
            for p in k.func.params]
    split = cpu.vectorize_lanes
    print(f"{k.name} {k.output}: ms per call, mean of {a.calls}")
    for name, change in VARIANTS.items():
        config = space.from_dict({**ROLLER, **change})
        row = {}
        for how in ("unsplit", "split"):
            if how == "unsplit":
                cpu.vectorize_lanes = lambda sch, loop, lanes: sch.vectorize(loop)
            try:
                func = cpu.schedule(k.workload, space, config, target).mod["main"].with_attr("global_symbol", "main")
            finally:
                cpu.vectorize_lanes = split
            lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(target))
            lib["main"](*args)
            row[how] = args[-1].numpy().copy()
            t = time.perf_counter()
            for _ in range(a.calls):
                lib["main"](*args)
            row[how + "_ms"] = (time.perf_counter() - t) / a.calls * 1e3
        np.testing.assert_allclose(row["split"], row["unsplit"], rtol=1e-4, atol=1e-4)
        print(f"  innermost {name:14s} unsplit {row['unsplit_ms']:8.1f}  split {row['split_ms']:8.1f}")


if __name__ == "__main__":
    main()
