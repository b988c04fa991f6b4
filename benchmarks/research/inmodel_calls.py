"""Every kernel call of a model built from records, timed in the model (the VM's instrument, host clock around
each call), minima per call over ``--runs`` inferences (not a test).

    TVM_NUM_THREADS=1 python benchmarks/research/inmodel_calls.py --model resnet50 -r RECORDS [--runs 40]

Prints per kernel: calls, the sum of its calls' minima and the mean per call, largest first, and the sum over the
model. The instrument costs each call about a microsecond of host time (its VM builtins, shown as such, take
0.6-7 us each under it); a kernel's per-call minimum is its time in the model's cache state, to set beside the
same kernel alone (``kernel_cache_states.py``).
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vm_calls import timed_calls  # noqa: E402  (benchmarks/research/vm_calls.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--runs", type=int, default=40)
    a = ap.parse_args()
    _, runs = timed_calls(a.model, a.records, a.runs)
    per = collections.defaultdict(list)
    for i, (name, _) in enumerate(runs[0]):
        per[name].append(min(r[i][1] for r in runs))
    kernels = {k: v for k, v in per.items() if not k.startswith("vm.builtin")}
    print(f"| kernel | calls | us (sum of the calls' minima) | us per call |\n|---|---:|---:|---:|")
    for k, v in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {k} | {len(v)} | {sum(v):.1f} | {sum(v) / len(v):.1f} |")
    builtin = sum(sum(v) for k, v in per.items() if k.startswith("vm.builtin"))
    print(f"\nkernels {sum(sum(v) for v in kernels.values()) / 1e3:.2f} ms, VM builtins {builtin / 1e3:.2f} ms "
          f"(under the instrument), {a.runs} runs, minima per call")


if __name__ == "__main__":
    main()
