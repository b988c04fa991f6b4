"""One model task's best configuration timed alone in three cache states: how much of a kernel's time in the model
is its data arriving from memory (not a test).

    TVM_NUM_THREADS=1 python benchmarks/research/in_model/kernel_cache_states.py --model resnet50 \
        --task fused_conv2d18_add13_relu9 -r RECORDS [--evict-mb 256] [--rounds 5] [--calls 40]

States, each sample one call (TVM's evaluator, number = 1), weights packed as the model runs them:
``warm`` (the previous call left everything in the caches), ``evict`` (a numpy buffer of ``--evict-mb`` MiB
rewritten before each call: 16 leaves the data in this VM's last-level cache, 256 does not) and ``clflush`` (TVM's
``cache_flush_cpu_non_first_arg``: every argument but the activation flushed, as ``model tune`` times a kernel with
weights, docs/decisions/measure-cold-weights.md). ``--flush-args 1 3`` adds a state per listed argument position
(0: the activation, then the other inputs, the output last), that argument alone flushed with clflush before each
call, by a small C helper compiled with the system's ``cc``: which operand's coldness costs. The states alternate in
``--rounds`` rounds; per state the minimum over all calls and the median of the rounds' minima. Compare with the
kernel's per-call time in the model (``inmodel_calls.py``).
"""
from __future__ import annotations

import argparse
import ctypes
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.measure.local import COLD_PREPROC, build_kernel, kernel_arguments  # noqa: E402
from tiletune.model.kernels.tasks import load_model_tasks  # noqa: E402
from tiletune.records import best, load  # noqa: E402
from tiletune.schedules import make_space  # noqa: E402
from tiletune.target import host_target  # noqa: E402


FLUSH_C = """
#include <stddef.h>
#include <immintrin.h>
void flush(const char* p, size_t n) { for (size_t i = 0; i < n; i += 64) _mm_clflush(p + i); _mm_mfence(); }
"""


def clflush_helper():
    """``flush(address, bytes)`` from a C helper compiled with the system's C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("--flush-args needs a C compiler (cc or gcc) on PATH")
    d = tempfile.mkdtemp()
    (Path(d) / "flush.c").write_text(FLUSH_C)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", f"{d}/flush.so", f"{d}/flush.c"], check=True)
    lib = ctypes.CDLL(f"{d}/flush.so")
    lib.flush.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return lib.flush


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True, help="the task's kernel name")
    ap.add_argument("-r", "--records", required=True)
    ap.add_argument("--evict-mb", type=float, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--flush-args", type=int, nargs="*", default=[], metavar="POS")
    a = ap.parse_args()
    import tvm

    target = host_target()
    _, tasks = load_model_tasks(a.model, target)
    found = [k for k in tasks.tasks if k.name == a.task]
    if not found:
        sys.exit(f"no task {a.task!r} in {a.model}; its tasks: {', '.join(k.name for k in tasks.tasks)}")
    wl = found[0].workload
    space = make_space(wl, target=target)
    rec = best(load(a.records, workload=wl.key))
    if rec is None:
        sys.exit(f"{a.records}: no successful trial of {wl.key}")
    dev = tvm.cpu()
    lib, args, out, _ = kernel_arguments(wl, build_kernel(wl, space, space.from_dict(dict(rec.config)), target), dev)
    junk = np.ones(int(a.evict_mb * 2**20 / 8))

    @tvm.register_global_func("tiletune_research_evict", override=True)
    def _evict(*_args):
        np.add(junk, 1.0, out=junk)

    states = {"warm": {}, f"evict {a.evict_mb:g} MiB": {"f_preproc": "tiletune_research_evict"},
              "clflush": {"f_preproc": COLD_PREPROC}}
    if a.flush_args:
        flush = clflush_helper()
        views = [np.from_dlpack(x) for x in args + [out]]
        for pos in a.flush_args:
            if not 0 <= pos < len(views):
                sys.exit(f"--flush-args: {pos} is not an argument position (0-{len(views) - 1})")
            v = views[pos]

            def one(*_args, v=v):
                flush(v.ctypes.data, v.nbytes)

            tvm.register_global_func(f"tiletune_research_flush_{pos}", one, override=True)
            states[f"arg {pos} {list(v.shape)}"] = {"f_preproc": f"tiletune_research_flush_{pos}"}
    fs = {s: lib.time_evaluator("main", dev, number=1, repeat=a.calls, min_repeat_ms=0, **kw)
          for s, kw in states.items()}
    for f in fs.values():
        f(*args, out)
    mins: dict[str, list[float]] = {s: [] for s in states}
    for _ in range(a.rounds):
        for s, f in fs.items():
            mins[s].append(min(f(*args, out).results))
    print(f"{wl.key}: {a.rounds} rounds of {a.calls} calls per state")
    for s, v in mins.items():
        print(f"  {s:24s} min {min(v) * 1e6:8.1f} us  {wl.flops / min(v) / 1e9:6.1f} GFLOPS  "
              f"median of the rounds' minima {statistics.median(v) * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
