"""A model built from records with some tasks' configurations replaced: what one kernel's choice is worth in the
whole model (time the result against the unchanged build with ``builds_alternate.py``).

    python benchmarks/research/in_model/build_swap.py MODEL RECORDS OUT.so ['{"KEY_PREFIX": {"knob": value, ...}, ...}']

Each task whose workload key starts with a prefix takes its chosen configuration (``model build``'s choice from
the records) with the given knobs replaced; the other tasks are built as ``tiletune model build`` builds them.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

from tiletune.model.build import best_configs, compile_module, export, scheduled_module
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.target import parse_target


def with_swaps(chosen: dict, swaps: dict) -> dict:
    """``chosen`` (``best_configs``' {task: choice}) with the knobs of ``swaps`` ({workload key prefix: {knob: value}})
    replaced in every task whose key starts with a prefix."""
    chosen = dict(chosen)
    for h, c in list(chosen.items()):
        for prefix, values in swaps.items():
            if c.kernel.workload.key.startswith(prefix):
                d = {**c.space.to_dict(c.config), **values}
                chosen[h] = replace(c, config=c.space.from_dict(d))
                print("swapped", c.kernel.workload.key, d)
    return chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("records")
    ap.add_argument("output")
    ap.add_argument("swaps", nargs="?", default="{}", help="JSON: {workload key prefix: {knob: value}}")
    args = ap.parse_args()
    swaps = json.loads(args.swaps)
    target = parse_target(None)
    _, tasks = load_model_tasks(args.model, target)
    chosen = with_swaps(best_configs(tasks, args.records), swaps)
    mod, _ = scheduled_module(tasks, chosen)
    export(compile_module(mod, target), args.output, {"model": args.model, "records": args.records, "swaps": swaps})
    print("built", args.output)


if __name__ == "__main__":
    main()
