"""A 1x1 convolution of resnet50 (NHWC, + bias + ReLU) with its input's channel stride C against C + 16: is the L1
set conflict of NHWC pixel tiles what costs? (not a test)

    TVM_NUM_THREADS=1 python benchmarks/research/in_model/stride_probe.py --hw 14 --c 1024 --k 256 -r RECORDS [--configs 40]

The same configurations on both inputs: the model task's 12 best records, then schedulable samples up to
``--configs``; each timed warm in this process, the minimum of 5 samples of 20 calls. At C >= 1024 the pixels of a
register tile are 4 KiB apart in NHWC and share one L1 set; 16 floats of padding per pixel separate them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def conv1x1(hw: int, c: int, k: int, stride: int):
    """The model's kernel structure (names as TOPI's NHWC conv2d: nn, yy, xx, ff | ry, rx, rc), reading an input
    whose channel axis is ``stride`` long."""
    from tvm import te

    from tiletune.workloads.primfunc import PrimFuncWorkload

    data = te.placeholder((1, hw, hw, stride), name="data")
    w = te.placeholder((1, 1, c, k), name="w")
    b = te.placeholder((1, 1, 1, k), name="b")
    ry, rx, rc = te.reduce_axis((0, 1), "ry"), te.reduce_axis((0, 1), "rx"), te.reduce_axis((0, c), "rc")
    conv = te.compute((1, hw, hw, k), lambda nn, yy, xx, ff: te.sum(
        data[nn, yy + ry, xx + rx, rc] * w[ry, rx, rc, ff], axis=[ry, rx, rc]), name="conv2d_nhwc")
    out = te.compute((1, hw, hw, k), lambda n, y, x, f: te.max(conv[n, y, x, f] + b[0, 0, 0, f], 0.0), name="relu")
    func = te.create_prim_func([data, w, b, out]).with_attr("layout_free_buffers", [1, 2])
    return PrimFuncWorkload.from_prim_func(func, name=f"conv1x1_stride{stride}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", type=int, default=14)
    ap.add_argument("--c", type=int, default=1024)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--configs", type=int, default=40)
    a = ap.parse_args()

    import tvm

    from tiletune.model.frontend.source import load
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.records import load as load_records
    from tiletune.schedules import check, cpu, make_space
    from tiletune.target import host_target

    target = host_target()
    plain, padded = conv1x1(a.hw, a.c, a.k, a.c), conv1x1(a.hw, a.c, a.k, a.c + 16)
    space = make_space(plain, None, target)
    tasks = model_tasks(load("resnet50"), target, "NHWC", "float32")
    task = next(k for k in tasks.tasks if len(k.inputs) == 3 and k.inputs[0] == (1, a.hw, a.hw, a.c)
                and k.inputs[1] == (1, 1, a.c, a.k))
    recs = sorted((r for r in load_records(a.records) if r.workload == task.workload.key and r.ok),
                  key=lambda r: min(r.costs))
    configs = [space.from_dict(r.config) for r in recs[:12]]
    for c in space.sample_unique(np.random.default_rng(0), 20 * a.configs):
        if len(configs) >= a.configs:
            break
        try:
            check(plain, space, c, target)
        except cpu.InvalidConfig:
            continue
        configs.append(c)
    dev, tgt = tvm.cpu(), tvm.target.Target(target)
    best = [float("inf"), float("inf")]
    for i, cfg in enumerate(configs):
        us = []
        for wl in (plain, padded):
            lib = tvm.compile(cpu.schedule(wl, space, cfg, target).mod, target=tgt)
            args = [tvm.runtime.tensor(np.random.default_rng(1).standard_normal([int(s) for s in p.ty.shape])
                                       .astype("float32"), dev) for p in wl.prim_func().params]
            us.append(min(lib.mod.time_evaluator("main", dev, number=20, repeat=5)(*args).results) * 1e6)
        best = [min(b, u) for b, u in zip(best, us)]
        print(f"{i:2d} stride {a.c}: {us[0]:8.1f} us  stride {a.c + 16}: {us[1]:8.1f} us  {us[0] / us[1]:.2f}x  "
              f"{space.to_dict(cfg)}", flush=True)
    print(f"best of {len(configs)}: stride {a.c} {best[0]:.1f} us, stride {a.c + 16} {best[1]:.1f} us "
          f"({best[0] / best[1]:.2f}x)")


if __name__ == "__main__":
    main()
