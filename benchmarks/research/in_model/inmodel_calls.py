"""Every kernel call of a model built from records, timed in the model (the VM's instrument, host clock around
each call), minima per call over ``--runs`` inferences (not a test).

    TVM_NUM_THREADS=1 python benchmarks/research/in_model/inmodel_calls.py --model resnet50 -r RECORDS [--runs 40] \
        [--swap '{"KEY_PREFIX": {"knob": value}}' ...] [--rounds 4]
    TVM_NUM_THREADS=2 python benchmarks/research/in_model/inmodel_calls.py --model gpt2 --lib A.so --lib B.so --rounds 6

Prints per kernel: calls, the sum of its calls' minima and the mean per call, largest first, and the sum over the
model. The instrument costs each call about a microsecond of host time (its VM builtins, shown as such, take
0.6-7 us each under it); a kernel's per-call minimum is its time in the model's cache state, to set beside the
same kernel alone (``kernel_cache_states.py``).

``--lib`` (repeatable): instead of records, libraries that ``model build`` exported (one per build, e.g. the same
records built by two versions of tiletune; kernels missing from a build show "-").

``--swap`` (repeatable): a build whose chosen configurations have these knobs replaced (``build_swap.with_swaps``;
``{}`` is the records' build). With more than one build, all live in this process and take turns, ``--rounds``
rounds of ``--runs`` inferences each, so a slow spell of the shared host falls on every build; the table then
has one column per build, the per-call minima over all rounds.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from vm_calls import TimedVM  # noqa: E402  (benchmarks/research/in_model/vm_calls.py)


def per_call_minima(logs) -> dict[str, list[float]]:
    """{kernel name: the minimum over ``logs``' inferences of each of its calls}, in call order."""
    per = collections.defaultdict(list)
    for i, (name, _) in enumerate(logs[0]):
        per[name].append(min(r[i][1] for r in logs))
    return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records")
    ap.add_argument("--lib", action="append", help="a library 'model build' exported: one build each (no --records)")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--swap", action="append", help="JSON {workload key prefix: {knob: value}}: a build with these "
                    "knobs replaced in the records' choices (build_swap.py); repeat for more builds")
    ap.add_argument("--rounds", type=int, default=1, help="turns of --runs inferences per build (with several builds)")
    a = ap.parse_args()
    if bool(a.lib) == bool(a.records):
        ap.error("give --records (with --swap) or --lib")
    if a.lib:
        swaps = [{"library": p} for p in a.lib]
        vms = [TimedVM(a.model, None, library=p) for p in a.lib]
    else:
        swaps = [json.loads(s) for s in (a.swap or ["{}"])]
        vms = [TimedVM(a.model, a.records, swaps=s) for s in swaps]
    logs: list[list] = [[] for _ in vms]
    for r in range(a.rounds):
        for i in (range(len(vms)) if r % 2 == 0 else reversed(range(len(vms)))):
            logs[i].extend(vms[i].run(a.runs))
    pers = [per_call_minima(lg) for lg in logs]
    kernels = list(dict.fromkeys(k for p in pers for k in p if not k.startswith("vm.builtin")))
    kernels.sort(key=lambda k: -max(sum(p.get(k, [0])) for p in pers))
    if len(vms) == 1:
        per = pers[0]
        print("| kernel | calls | us (sum of the calls' minima) | us per call |\n|---|---:|---:|---:|")
        for k in kernels:
            print(f"| {k} | {len(per[k])} | {sum(per[k]):.1f} | {sum(per[k]) / len(per[k]):.1f} |")
    else:
        for i, s in enumerate(swaps):
            print(f"build {i}: {json.dumps(s)}")
        print("\n| kernel | calls | " + " | ".join(f"build {i}: us per call" for i in range(len(vms)))
              + " |\n|---|---:|" + "---:|" * len(vms))
        for k in kernels:
            calls = next(len(p[k]) for p in pers if k in p)
            print(f"| {k} | {calls} | " + " | ".join(f"{sum(p[k]) / len(p[k]):.1f}" if k in p else "-" for p in pers)
                  + " |")
    for i, per in enumerate(pers):
        builtin = sum(sum(v) for k, v in per.items() if k.startswith("vm.builtin"))
        mine = sum(sum(v) for k, v in per.items() if not k.startswith("vm.builtin"))
        print(f"\n{'' if len(pers) == 1 else f'build {i}: '}kernels {mine / 1e3:.2f} ms, VM builtins "
              f"{builtin / 1e3:.2f} ms (under the instrument), {a.runs * a.rounds} runs, minima per call")


if __name__ == "__main__":
    main()
