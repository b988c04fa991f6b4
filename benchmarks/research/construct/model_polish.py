"""How far the constructions of a model's tasks stop from their own analytic model's nearby optima (a probe; nothing
in tiletune uses it).

    python benchmarks/research/construct/model_polish.py --model resnet50 [--task PREFIX ...] [--json]

Per task: the analytic time (``tiletune.analytic.etir.Model.config_time``) of the best of the ``construct`` start's
four constructions (Gensor's, Roller's and the direct orders' tops), and of a steepest descent on that model from
each of the first two: a move takes one prime factor of one split knob from one level to another, keeps the
configurations the space allows that fit the model's memory levels, and the descent stops where no move lowers the
time (the moves are ``Space.neighbours``, G-BFS's actions; moves of a choice knob leave the model's time as it is).
``--json`` also prints each polished configuration (the model's unroll choice for its tiles), ready for
``benchmarks/research/in_model/task_configs.py -c``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.construct import constructions  # noqa: E402
from tiletune.analytic.etir import Model  # noqa: E402
from tiletune.model.kernels.tasks import load_model_tasks  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.space import ChoiceKnob, Config  # noqa: E402
from tiletune.target import host_target  # noqa: E402


def polish(model: Model, c: Config, steps: int = 64) -> tuple[Config, float]:
    """Steepest descent on ``model`` from ``c`` (see the module docstring); (configuration, analytic time)."""
    space = model.space
    best, t_best = c, model.config_time(c)
    for _ in range(steps):
        step = None
        for n in space.neighbours(best):  # G-BFS's actions: a prime factor between two levels (choice knobs: +-1)
            e = model.from_config(n)
            if not model.fits(e, model.n - 1):
                continue
            t = model.time(e)
            if t < t_best * (1 - 1e-9) and (step is None or t < step[0]):
                step = (t, n)
        if step is None:
            break
        t_best, best = step
    vals = list(best.values)
    for ki, k in enumerate(space.knobs):
        if isinstance(k, ChoiceKnob) and k.name == "unroll":
            vals[ki] = model.unroll_value(k, model.from_config(best))
    return Config(tuple(vals)), t_best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--layout", default="NHWC")
    ap.add_argument("--task", action="append", default=[], help="only tasks whose name starts so")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    target = host_target()
    _, tasks = load_model_tasks(a.model, target, a.layout)
    print("| task | best construction (model ns) | polished (model ns) | model's gain |")
    print("|---|---:|---:|---:|")
    for k in tasks.tasks:
        if a.task and not any(k.name.startswith(p) for p in a.task):
            continue
        space = make_space(k.workload, target=target)
        try:
            model = Model(space, workload=k.workload, target=target)
            cons = constructions("construct", space, workload=k.workload, target=target, k=4,
                                 rng=np.random.default_rng(0))
        except Exception as e:  # a task the analytic model does not describe
            print(f"| {k.name} | - | - | ({type(e).__name__}) |")
            continue
        t_cons = min(model.config_time(c) for c in cons)
        c, t = min((polish(model, c) for c in cons[:2]), key=lambda ct: ct[1])
        print(f"| {k.name} | {t_cons:.4g} | {t:.4g} | {t_cons / t:.2f}x |")
        if a.json:
            print("    " + json.dumps({n: (list(v) if isinstance(v, tuple) else v)
                                      for n, v in space.to_dict(c).items()}))


if __name__ == "__main__":
    main()
