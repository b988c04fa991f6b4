"""Every constructed kernel of a dynamic model's library, as Gensor and as Roller construct it, timed alone on the
target's device (not a test): which kernels make one construction's library slower than the other's at a shape.

    python benchmarks/research/construct/construction_kernels.py [--shapes batch=1,4 --shapes seq=16,64,128,384] [--seconds 240]
        [--first batch=1,seq=384] [--target cuda:sm_90 --dtype float16 (default) | --target host --dtype float32]
        [--seeds 0,1,2]

``--seeds``: Gensor's constructions from each of these seeds of its walks (``model build --seed``), each timed
beside Roller's, with the analytic model's time of every configuration (``Model.config_time``; CPU tasks with
tile knobs): whether a draw's slower kernels are ones the model rates as fast.

The tasks and constructions are those of ``model bench --construct METHOD`` at the same shapes (one merged task
set, the same seed, so the same configurations as the libraries of ``benchmarks/device/run_fig11.sh``); each kernel
is compiled alone and timed as the tuner times it (``tiletune.measure.local.run_kernel``: on a CPU a model kernel's
weights are flushed from the caches before each sample, as the model finds them; ``--warm``: not flushed, by
``tiletune.model.build.kernel_latencies``). Prints per task the two
configurations (block_m, block_n, warp_m, warp_n, chunk_k, stages, vector), microseconds per call and the ratio,
then per shape the sums (calls x time); a line per kernel as it is timed, so a run cut short keeps what it did. On a
CPU every core runs the kernels (before 2026-11-28 evening the script left TVM's default, half of them: one
thread on the 2-core VMs).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.api import set_threads  # noqa: E402
from tiletune.analytic.etir import Model  # noqa: E402
from tiletune.measure.base import MeasureSettings  # noqa: E402
from tiletune.measure.local import build_kernel, run_kernel  # noqa: E402
from tiletune.model.build import constructed_configs, kernel_latencies  # noqa: E402
from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks  # noqa: E402
from tiletune.model.frontend.source import load  # noqa: E402
from tiletune.target import parse_target  # noqa: E402



def _labels(task) -> list[str]:
    """The shapes a merged task serves (its name: KERNEL@LABEL+LABEL...)."""
    return task.name.split("@", 1)[-1].split("+")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="benchmarks/common/dyn_models.py:bert_small")
    ap.add_argument("--shapes", action="append", default=None, metavar="NAME=V1,V2")
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--seconds", type=float, default=240.0, help="stop timing new kernels after this long")
    ap.add_argument("--warm", action="store_true", help="time without flushing the weights (CPU)")
    ap.add_argument("--first", action="append", default=[], metavar="LABEL",
                    help="time the tasks of this shape (e.g. batch=1,seq=384) before the others; repeatable")
    ap.add_argument("--seeds", default="0", help="Gensor's seeds, comma-separated (each a column)")
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",") if x]
    methods = [f"gensor@{s}" if len(seeds) > 1 else "gensor" for s in seeds] + ["roller"]
    t0 = time.time()
    target = parse_target(args.target)
    if target.get("kind") != "cuda":  # every core, as the tuner's workers and the model run (TVM's default: half)
        set_threads(int(target.get("num-cores") or 0) or None)
    source = load(args.model)
    bindings = parse_shapes(args.shapes or ["batch=1,4", "seq=16,64,128,384"], source)
    dyn = shape_tasks(source, target, "NHWC", bindings, dtype=args.dtype)
    chosen = {m: constructed_configs(dyn.merged, m.split("@")[0], {}, seed=int((m.split("@") + [seeds[0]])[1]))
              for m in methods}
    tasks = [k for k in dyn.merged.tasks if all(k.hash in chosen[m] for m in methods)]
    rank = {lb: i for i, lb in enumerate(args.first)}
    tasks.sort(key=lambda k: min((rank.get(lb, len(rank)) for lb in _labels(k)), default=len(rank)))
    print(f"{len(tasks)} constructed tasks at {len(bindings)} shapes, ready in {time.time() - t0:.0f} s", flush=True)
    settings = MeasureSettings(repeat=5, min_repeat_ms=20)
    times: dict[str, dict[str, float]] = {m: {} for m in methods}
    for k in tasks:
        if time.time() - t0 > args.seconds:
            print(f"time is up: {len(times['roller'])} of {len(tasks)} tasks timed")
            break
        for m in methods:
            c = chosen[m][k.hash]
            if args.warm:
                one = SimpleNamespace(kernels=[k], target=dyn.merged.target)
                times[m][k.hash] = kernel_latencies(one, {k.hash: c}, settings)[k.hash]
            else:
                lib = build_kernel(k.workload, c.space, c.config, dyn.merged.target)
                times[m][k.hash] = statistics.median(run_kernel(k.workload, lib, settings))
        r = times["roller"][k.hash]
        print(f"{k.name:55s} x{k.calls:<3d}", flush=True)
        for m in methods:
            c = chosen[m][k.hash]
            print(f"    {m:9s} {c.config.values} {times[m][k.hash] * 1e6:9.1f} us  analytic "
                  f"{_analytic(k, c, dyn.merged.target):9.1f} us  /R {times[m][k.hash] / r:6.2f}", flush=True)
    print("\nper shape, the constructed kernels only (that shape's calls x time):")
    for st in dyn.shapes:  # a merged task's calls are every shape's together: each shape counts its own
        mine = [k for k in st.tasks.tasks if k.hash in times["roller"]]
        sums = {m: sum(times[m][k.hash] * k.calls for k in mine if math.isfinite(times[m][k.hash])) for m in methods}
        print(f"  {st.label:20s} {len(mine):2d} tasks  " + "  ".join(f"{m} {sums[m] * 1e3:8.3f} ms" for m in methods))
    return 0


def _analytic(task, chosen, target) -> float:
    """The analytic model's time of a configuration in microseconds (nan where the model does not apply)."""
    try:
        return Model(chosen.space, task.workload, target=target).config_time(chosen.config) / 1e3  # ns
    except Exception:  # noqa: BLE001 - tensor-core and row tasks have no tile knobs for the model
        return float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
