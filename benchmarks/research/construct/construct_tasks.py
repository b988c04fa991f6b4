"""A dynamic model's tasks as Gensor and Roller construct them for a model build, each kernel timed alone (not a
test): where one construction loses to the other, task by task, and what that costs per inference.

    python benchmarks/research/construct/construct_tasks.py --shapes batch=4 --shapes seq=128 [--walks 4,16] [--rounds 3]

Per task of ``--model`` (default Bert-small of Fig. 11) at the shapes given: the configuration
``tiletune.model.build.constructed_configs`` gives it (``gensor`` with each ``--walks`` count, and ``roller``),
all measured in one warm pool per task, ``--rounds`` times alternating (the first round also warms), the median
of the later rounds. Prints per task the calls, the microseconds per call of each, and the per-inference
difference (calls x time); and the sums. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common"))

from tiletune.construct import gensor  # noqa: E402
from tiletune.measure.factory import make_measurer  # noqa: E402
from tiletune.model.build import constructed_configs  # noqa: E402
from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks  # noqa: E402
from tiletune.model.frontend.source import load  # noqa: E402
from tiletune.target import host_target  # noqa: E402

MODEL = str(Path(__file__).resolve().parents[2] / "common" / "dyn_models.py") + ":bert_small"


def constructed(tasks, method: str, walks: int):
    """``constructed_configs`` with Gensor's walk count set to ``walks``."""
    with mock.patch.object(gensor.GensorWalk.pool, "__defaults__", (walks,)):
        return constructed_configs(tasks, method, {})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=MODEL)
    p.add_argument("--shapes", action="append", default=[], help="NAME=V1,V2 (as 'model tune --shapes')")
    p.add_argument("--walks", default="4", help="Gensor's walk counts to compare (comma-separated)")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    target = host_target()
    source = load(a.model)
    tasks = shape_tasks(source, target, "NHWC", parse_shapes(a.shapes, source)).merged
    builds = {f"gensor-{w}": constructed(tasks, "gensor", int(w)) for w in a.walks.split(",")}
    builds["roller"] = constructed_configs(tasks, "roller", {})
    names = list(builds)
    print("| task | calls | " + " | ".join(f"{n} us" for n in names) + f" | {names[0]} - roller us/inference |")
    print("|---|---:|" + "---:|" * len(names) + "---:|")
    sums = {n: 0.0 for n in names}
    for k in tasks.tasks:
        chosen = {n: b.get(k.hash) for n, b in builds.items()}
        if any(c is None for c in chosen.values()):
            continue
        space = next(iter(chosen.values())).space
        configs = list(dict.fromkeys(c.config for c in chosen.values()))
        times: list[list[float]] = [[] for _ in configs]
        with make_measurer(k.workload, space, target) as meas:
            meas.warm_up()
            for r in range(a.rounds):
                for j, res in enumerate(meas.measure(configs)):
                    if res.costs and (r > 0 or a.rounds == 1):
                        times[j].append(statistics.median(res.costs))
        us = {n: 1e6 * statistics.median(times[configs.index(c.config)]) if times[configs.index(c.config)]
              else float("nan") for n, c in chosen.items()}
        calls = k.calls
        for n in names:
            sums[n] += calls * us[n]
        print(f"| {k.name} | {calls} | " + " | ".join(f"{us[n]:.1f}" for n in names)
              + f" | {calls * (us[names[0]] - us['roller']):+.1f} |", flush=True)
    print("| **sum** | | " + " | ".join(f"{sums[n]:.0f}" for n in names)
          + f" | {sums[names[0]] - sums['roller']:+.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
