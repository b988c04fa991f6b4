"""Configurations of one task of a model timed side by side: which tiles are fastest for one kernel, on a shared host.

    TVM_NUM_THREADS=1 python benchmarks/research/in_model/task_configs.py --model resnet50 --task fused_conv2d18_add13_relu9 \
        -r RECORDS [-r ...] [-c '{"tile_ff": [16, 1, 1, 32], ...}' ...] [--rounds 6] [--calls 60] [--cold]

Each candidate is the best configuration of the task in a records file (``-r``) or a configuration given as JSON
(``-c``, knob values; knobs left out take the first candidate's values). The candidates are built once, then timed
in ``--rounds`` alternating rounds, each round ``--calls`` single calls of every candidate (TVM's evaluator,
number = 1), weights packed as the model runs them. Warm by default; ``--cold`` flushes every argument but the
activation before each call, as ``model tune`` measures a kernel with weights (docs/decisions/measure-cold-weights.md).
Per candidate: the minimum over all calls, and the median of the rounds' minima. On a host whose neighbours only ever
slow a call down, the minimum is the kernel's own speed; compare candidates within one run. ``--unchecked`` builds
configurations outside the space's register-tile rule too (to see what the rule refuses).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.errors import TiletuneError  # noqa: E402
from tiletune.measure.local import COLD_PREPROC, build_kernel, kernel_arguments  # noqa: E402
from tiletune.model.kernels.tasks import load_model_tasks  # noqa: E402
from tiletune.records import best, load  # noqa: E402
from tiletune.schedules import check, make_space  # noqa: E402
from tiletune.schedules.cpu import InvalidConfig  # noqa: E402
from tiletune.target import host_target  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True, help="the task's kernel name, or the start of its workload key")
    ap.add_argument("-r", "--records", action="append", default=[], help="its best configuration there")
    ap.add_argument("-c", "--config", action="append", default=[], help="a configuration as JSON knob values")
    ap.add_argument("--layout", default="NHWC")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--unchecked", action="store_true")
    a = ap.parse_args()
    import tvm

    target = host_target()
    _, tasks = load_model_tasks(a.model, target, a.layout)
    found = [k for k in tasks.tasks if k.name == a.task or k.workload.key.startswith(a.task)]
    if not found:
        sys.exit(f"no task {a.task!r} in {a.model}; its tasks: {', '.join(k.name for k in tasks.tasks)}")
    wl = found[0].workload
    space = make_space(wl, target=target)
    named: list[tuple[str, dict]] = []
    for path in a.records:
        rec = best(load(path, workload=wl.key))
        if rec is None:
            sys.exit(f"{path}: no successful trial of {wl.key}")
        named.append((path, dict(rec.config)))
    for text in a.config:
        base = dict(named[0][1]) if named else {}
        named.append((text, {**base, **json.loads(text)}))
    dev = tvm.cpu()
    runs = []
    for name, values in named:
        cfg = space.from_dict(values)
        try:
            if not a.unchecked:
                check(wl, space, cfg, target)
        except (TiletuneError, InvalidConfig) as e:
            print(f"skipped (invalid: {e}): {name}")
            continue
        lib, args, out, _ = kernel_arguments(wl, build_kernel(wl, space, cfg, target), dev)
        extra = {"f_preproc": COLD_PREPROC} if a.cold else {}
        f = lib.time_evaluator("main", dev, number=1, repeat=a.calls, min_repeat_ms=0, **extra)
        f(*args, out)  # warm-up
        runs.append((name, f, args, out, []))
    for _ in range(a.rounds):
        for _, f, args, out, mins in runs:
            mins.append(min(f(*args, out).results))
    print(f"{wl.key}: {a.rounds} rounds of {a.calls} {'cold' if a.cold else 'warm'} calls each")
    for name, _, _, _, mins in runs:
        t = min(mins)
        print(f"  min {t * 1e6:8.1f} us  {wl.flops / t / 1e9:6.1f} GFLOPS  median of the rounds' minima "
              f"{statistics.median(mins) * 1e6:8.1f} us  {name}")


if __name__ == "__main__":
    main()
