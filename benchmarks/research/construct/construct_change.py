"""A model's tasks constructed without and with one change of the constructions, each kernel timed alone (not a
test): what the change does, task by task and per inference.

    python benchmarks/research/construct/construct_change.py resnet50 --change unroll-floor --method gensor [--rounds 3]
    python benchmarks/research/construct/construct_change.py benchmarks/common/dyn_models.py:bert_small --shapes batch=1,4 \
        --shapes seq=16,32,64,128,256,384 --change accumulator-turns --method gensor --seed 1

Changes (``CHANGES``): ``unroll-floor``, ``Model.unroll_floor`` (docs/decisions/register-tile.md: an outer-product
register tile whose reduction loop leaves no depth under its steps is unrolled to the smallest non-zero depth
instead of not at all); ``gensor-align``, ``GensorWalk.align`` (docs/decisions/analytic-model.md: Gensor's walk
moves the vectorised axis in whole vectors on a CPU instead of along every divisor); ``fma-chains``,
``Model.cpu_fma_chains`` (docs/decisions/analytic-model.md: a CPU's FMA pipe needs 4 independent accumulators, its
latency in cycles, instead of 2); ``accumulator-turns``, ``Model.accumulator_turns`` (docs/decisions/analytic-model.md:
a register tile's accumulators make round trips to L1 only when the L1 tile holds several register tiles, and
those add to the time, instead of every tile's once per R0 iteration, overlapping the compute); ``rule-registers``,
``Model.rule_registers`` (docs/decisions/analytic-model.md: where the space has the template's register-tile rule, the
rule alone decides the register level's fit, instead of the footprint too, which counted each broadcast scalar as a
vector register).

Per task of the model (NHWC; a model with symbolic dimensions at ``--shapes``, its tasks merged over them) whose top
construction by ``--method`` differs (as ``model build --construct METHOD --seed SEED`` makes it: each task's walks
from the seed and the task; before 2026-11-28 evening every task's from ``default_rng(0)``, top 1 unchecked): the
configuration without the change and with it, both measured in one warm pool per task, ``--rounds`` times
alternating (the first round also warms), the median of the later rounds. Prints per task the calls, the microseconds
per call of each and the ratio; and the sums over the changed tasks (calls x time). Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path
from unittest import mock


sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.construct.gensor import GensorWalk  # noqa: E402
from tiletune.analytic import etir  # noqa: E402
from tiletune.measure.factory import make_measurer  # noqa: E402
from tiletune.model.build import constructed_configs  # noqa: E402
from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks  # noqa: E402
from tiletune.model.frontend.source import load  # noqa: E402
from tiletune.model.kernels.tasks import model_tasks  # noqa: E402
from tiletune.target import host_target  # noqa: E402


#: change -> the patch that undoes it (the code has it on)
CHANGES = {"unroll-floor": lambda: mock.patch.object(etir.Model, "unroll_floor", False),
           "gensor-align": lambda: mock.patch.object(GensorWalk, "align", lambda self, i: 1),
           "fma-chains": lambda: mock.patch.object(etir.Model, "cpu_fma_chains", 2),
           "accumulator-turns": lambda: mock.patch.object(etir.Model, "accumulator_turns", False),
           "rule-registers": lambda: mock.patch.object(etir.Model, "rule_registers", False)}


def tops(tasks, method: str, change: str, on: bool, seed: int) -> dict:
    """Each task's top construction by ``method`` (``Chosen``, as ``model build --construct METHOD --seed SEED``
    makes it) with ``change`` on or off."""
    with (contextlib.nullcontext() if on else CHANGES[change]()):
        return constructed_configs(tasks, method, {}, seed=seed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--change", required=True, choices=sorted(CHANGES))
    p.add_argument("--method", default="gensor", choices=("gensor", "roller"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shapes", action="append", default=None, metavar="NAME=V1,V2",
                   help="a model with symbolic dimensions: its tasks at these shapes (as model build --shapes)")
    p.add_argument("--seed", type=int, default=0, help="the seed of Gensor's walks (model build --seed)")
    a = p.parse_args()
    target = host_target()
    source = load(a.model)
    if a.shapes:
        tasks = shape_tasks(source, target, "NHWC", parse_shapes(a.shapes, source)).merged
    else:
        tasks = model_tasks(source, target, "NHWC")
    off_all, on_all = (tops(tasks, a.method, a.change, on, a.seed) for on in (False, True))
    print(f"| task | calls | knobs changed (without -> with) | without {a.change} us | with it us | ratio |")
    print("|---|---:|---|---:|---:|---:|")
    sums = [0.0, 0.0]
    for k in tasks.tasks:
        if k.hash not in on_all or k.hash not in off_all or on_all[k.hash].config == off_all[k.hash].config:
            continue
        space, off, on = on_all[k.hash].space, off_all[k.hash].config, on_all[k.hash].config
        times: list[list[float]] = [[], []]
        with make_measurer(k.workload, space, target) as meas:
            meas.warm_up()
            for r in range(a.rounds):
                for j, res in enumerate(meas.measure([off, on])):
                    if res.costs and (r > 0 or a.rounds == 1):
                        times[j].append(statistics.median(res.costs))
        us = [1e6 * statistics.median(t) if t else float("nan") for t in times]
        for j in range(2):
            sums[j] += k.calls * us[j]
        d0, d1 = space.to_dict(off), space.to_dict(on)
        changed = "; ".join(f"{n} {d0[n]} -> {d1[n]}" for n in d0 if d0[n] != d1[n])
        print(f"| {k.name} | {k.calls} | {changed} | "
              f"{us[0]:.1f} | {us[1]:.1f} | {us[0] / us[1]:.2f}x |", flush=True)
    ratio = sums[0] / sums[1] if sums[1] else float("nan")
    print(f"| **sum** | | | {sums[0]:.0f} | {sums[1]:.0f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
