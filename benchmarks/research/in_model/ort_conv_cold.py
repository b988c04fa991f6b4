"""One convolution alone in ONNX Runtime, warm and with the caches trashed before each run: the vendor's side of
``kernel_cache_states.py`` (not a test).

    python benchmarks/research/in_model/ort_conv_cold.py --c 1024 --k 512 --hw 14 [--kernel 1] [--stride 1] [--residual]

A torch.nn model of one Conv2d (+ the residual add) + ReLU, exported to ONNX (opset 17) and run by ONNX Runtime
with one intra-op thread, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset as for every vendor baseline. ``--rounds``
rounds alternate 30 warm runs and 30 runs each after a numpy buffer of ``--trash-mb`` MiB is rewritten; the
convolution node's time comes from ONNX Runtime's profiler. Prints per state the minimum and the median in us.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.bench.vendor import UNSET_ENV  # noqa: E402


def run(a) -> None:
    import onnxruntime as ort
    import torch

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(a.c, a.k, a.kernel, stride=a.stride, padding=a.kernel // 2)

        def forward(self, x, r):
            y = self.c(x)
            return torch.relu(y + r) if a.residual else torch.relu(y)

    d = tempfile.mkdtemp()
    path = os.path.join(d, "conv.onnx")
    ho = (a.hw + 2 * (a.kernel // 2) - a.kernel) // a.stride + 1
    x, r = torch.randn(1, a.c, a.hw, a.hw), torch.randn(1, a.k, ho, ho)
    torch.onnx.export(Conv().eval(), (x, r), path, opset_version=17, dynamo=False)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.enable_profiling, so.profile_file_prefix = True, os.path.join(d, "profile")
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    feed = dict(zip(names, [x.numpy(), r.numpy()][:len(names)]))
    junk = np.ones(a.trash_mb * 2**20 // 8)
    for _ in range(10):
        s.run(None, feed)
    order = []
    for _ in range(a.rounds):
        for state in ("warm", "trashed"):
            for _ in range(30):
                if state == "trashed":
                    np.add(junk, 1.0, out=junk)
                s.run(None, feed)
                order.append(state)
    events = json.load(open(s.end_profiling()))
    convs = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
             and "Conv" in e["args"].get("op_name", "")][-len(order):]
    for state in ("warm", "trashed"):
        v = [e["dur"] for e, st in zip(convs, order) if st == state]
        print(f"ONNX Runtime conv C{a.c} K{a.k} k{a.kernel} s{a.stride} at {a.hw}: {state:8s} min {min(v):8.1f} us  "
              f"median {np.median(v):8.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--c", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--hw", type=int, required=True)
    ap.add_argument("--kernel", type=int, default=1)
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--residual", action="store_true")
    ap.add_argument("--trash-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        run(a)
        return
    env = {k: v for k, v in os.environ.items() if k not in UNSET_ENV}
    sys.exit(subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child"], env=env).returncode)


if __name__ == "__main__":
    main()
