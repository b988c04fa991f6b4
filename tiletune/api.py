"""Small Python API: export the best kernel of a records file, load it, call it on numpy arrays."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import TiletuneError
from .records import best, load
from .schedules import build, make_space
from .target import host_cores
from .workloads import parse


def export_best(records: str, output: str, workload: str | None = None) -> dict[str, Any]:
    key = parse(workload).key if workload else None
    recs = load(records, workload=key)
    if key is None and len({r.workload for r in recs}) > 1:
        raise TiletuneError(f"{records} holds several workloads; choose one with --workload: "
                            + ", ".join(sorted({r.workload for r in recs})))
    b = best(recs)
    if b is None:
        raise TiletuneError(f"no successful trial in {records}")
    wl = parse(b.workload)
    target = json.loads(b.target)
    space = None
    for levels in (None, _levels_of(b.config, wl)):
        sp = make_space(wl, levels, target)
        try:
            cfg = sp.from_dict(b.config)
            space = sp
            break
        except TiletuneError:
            continue
    if space is None:
        raise TiletuneError(f"the best record's config does not fit a space of {wl.key}: {b.config}")
    ex = build(wl, space, cfg, target)
    ex.export_library(output)
    meta = {"workload": wl.key, "target": target, "config": b.config, "gflops": b.gflops,
            "inputs": [list(s) for s in wl.input_shapes()], "output": list(wl.output_shape()), "dtype": wl.dtype}
    Path(output + ".json").write_text(json.dumps(meta, indent=1))
    return meta


def _levels_of(config: dict, wl) -> dict[str, int]:
    return {a.name: len(config[f"tile_{a.name}"]) for a in wl.axes_no_tvm() if f"tile_{a.name}" in config}


class Kernel:
    """A tuned kernel loaded from a library: ``kernel(a, b)`` returns the output as a numpy array."""

    def __init__(self, path: str):
        import tvm

        meta_path = Path(path + ".json")
        if not meta_path.exists():
            raise TiletuneError(f"{meta_path} (written by 'tiletune build') is missing")
        self.meta = json.loads(meta_path.read_text())
        self.workload = parse(self.meta["workload"])
        self._lib = tvm.runtime.load_module(path)
        self._dev = tvm.cpu()
        set_threads(int(self.meta["target"].get("num-cores") or 0) or None)

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        import tvm

        shapes = [tuple(s) for s in self.meta["inputs"]]
        if len(inputs) != len(shapes):
            raise TiletuneError(f"{self.workload.key} takes {len(shapes)} inputs, got {len(inputs)}")
        args = []
        for x, s in zip(inputs, shapes):
            x = np.ascontiguousarray(x, dtype=self.meta["dtype"])
            if x.shape != s:
                raise TiletuneError(f"input shape {x.shape} != expected {s}")
            args.append(tvm.runtime.tensor(x, self._dev))
        out = tvm.runtime.tensor(np.zeros(self.meta["output"], self.meta["dtype"]), self._dev)
        self._lib["main"](*args, out)
        return out.numpy()


def set_threads(n: int | None = None) -> None:
    """Give TVM's runtime ``n`` threads (default: the cores this process may use) unless the user set
    TVM_NUM_THREADS. TVM's own default halves the hardware concurrency on x86 (to skip hyper-threads),
    which on machines without them leaves half the cores idle. TVM reads the variable when its thread
    pool starts, i.e. at the first parallel kernel call of the process: call this before that."""
    os.environ.setdefault("TVM_NUM_THREADS", str(n or host_cores()))


def load_kernel(path: str) -> Kernel:
    return Kernel(path)
