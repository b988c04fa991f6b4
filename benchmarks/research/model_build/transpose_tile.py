"""A model's reshape-transpose kernel (an attention's K^T) under three default schedules, timed alone and
alternately in one process: its passes one by one (the rule before blocking), one inlined pass blocked 16 x 16
(scalar), and the same with the tile's output row vectorized (the current rule; docs/decisions/default-schedule.md).

    TVM_NUM_THREADS=2 python benchmarks/research/model_build/transpose_tile.py bert-small [--rounds 15]

Checks that the three give the same output, then per round times each 200 calls (after 20 warm ones); prints the
median us per call over the rounds.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import tvm
from tvm import s_tir

from tiletune.api import set_threads
from tiletune.model.kernels import default_schedule as ds
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.target import host_target


def variants(func) -> dict:
    saved = ds._tile_source
    ds._tile_source = lambda *a: None
    try:
        passes = ds.default_schedule(func)
    finally:
        ds._tile_source = saved
    vectorized = ds.default_schedule(func)
    sch = s_tir.Schedule(tvm.IRModule({"main": vectorized}))
    block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    loops = sch.get_loops(block)
    sch.unroll(loops[-1])  # undo the vector: the tile's row as scalar code, LLVM's choice
    scalar = sch.mod["main"]
    return {"passes one by one": passes, "blocked, scalar": scalar, "blocked, vector (current)": vectorized}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    set_threads(2)
    _, tasks = load_model_tasks(a.model, host_target(), "NHWC")
    k = next(k for k in tasks.kernels if k.name.count("transpose") >= 2)  # reshape, two transposes: K^T
    tgt = tvm.target.Target(tasks.target)
    fs = {n: tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target=tgt)["main"]
          for n, f in variants(k.func).items()}
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(tuple(int(s) for s in p.shape)).astype("float32"))
            for p in k.func.params]
    outs = []
    for f in fs.values():
        f(*args)
        outs.append(args[-1].numpy().copy())
    assert all(np.array_equal(outs[0], o) for o in outs)
    res: dict[str, list[float]] = {n: [] for n in fs}
    for _ in range(a.rounds):
        for n, f in fs.items():
            for _ in range(20):
                f(*args)
            t0 = time.perf_counter()
            for _ in range(200):
                f(*args)
            res[n].append((time.perf_counter() - t0) / 200 * 1e6)
    print(f"{a.model}: {k.name} ({k.shapes}), {k.calls} calls per inference; us per call, median of {a.rounds} rounds")
    for n, v in res.items():
        print(f"  {n:28s} {float(np.median(v)):8.1f}")


if __name__ == "__main__":
    main()
