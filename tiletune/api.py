"""Small Python API: export the best kernel of a records file, load it, call it on numpy arrays."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .errors import TiletuneError
from .paths import check_output
from .records import best, load
from .schedules import build, make_space
from .target import host_cores
from .workloads import parse


def c_compiler() -> str:
    """The C compiler TVM's ``export_library`` will link with (``tvm.support.cc.get_cc``: $CXX or $CC, else
    the first of g++, gcc, clang++, clang, c++, cc on PATH), or a TiletuneError saying how to get one."""
    from tvm.support import cc

    found = cc.get_cc()
    if found is None:
        raise TiletuneError("building a kernel library needs a C compiler, and none was found: install one "
                            "(e.g. apt install g++, or gcc / clang) or name it in the CXX or CC environment variable")
    if shutil.which(found) is None:
        raise TiletuneError(f"the C compiler {found!r} named by the CXX or CC environment variable is not found; "
                            "fix the variable or unset it to use g++, gcc, clang++, clang, c++ or cc from PATH")
    return found


def export_best(records: str, output: str, workload: str | None = None) -> dict[str, Any]:
    """Compile the best configuration of ``records`` (of ``workload`` when the file holds several) and export
    it as the shared library ``output``, with its description in ``output + '.json'``; returns that
    description. The output directory and the C compiler are checked before anything is built."""
    check_output(output, "kernel library", parents=False)
    check_output(output + ".json", "kernel description", parents=False)
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
    c_compiler()  # export_library links the host code with it (for every target)
    ex = build(wl, space, cfg, target)
    try:
        ex.export_library(output)
    except (RuntimeError, OSError) as e:  # the compiler or linker failed: its last words, in one line
        last = [line for line in str(e).strip().splitlines() if line.strip()][-1:] or [type(e).__name__]
        raise TiletuneError(f"exporting {output!r} failed: {last[0].strip()[:300]}") from None
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


class Model:
    """A whole model exported by ``tiletune model build``: ``model(*inputs)`` runs it on numpy arrays and
    returns the list of its outputs (numpy arrays)."""

    def __init__(self, path: str):
        import tvm
        from tvm import relax

        meta_path = Path(path + ".json")
        if not meta_path.exists():
            raise TiletuneError(f"{meta_path} (written by 'tiletune model build') is missing")
        if not Path(path).exists():
            raise TiletuneError(f"model library {path!r} does not exist")
        self.meta = json.loads(meta_path.read_text())
        set_threads(int(self.meta["target"].get("num-cores") or 0) or None)
        self._dev = tvm.cpu()
        self._vm = relax.VirtualMachine(tvm.runtime.load_module(path), self._dev)

    @property
    def inputs(self) -> list[dict]:
        return self.meta["inputs"]

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        import tvm

        if len(inputs) != len(self.inputs):
            raise TiletuneError(f"the model takes {len(self.inputs)} inputs, got {len(inputs)}")
        args = []
        for x, spec in zip(inputs, self.inputs):
            x = np.ascontiguousarray(x, dtype=spec["dtype"])
            if list(x.shape) != list(spec["shape"]):
                raise TiletuneError(f"input {spec['name']}: shape {x.shape} != expected {tuple(spec['shape'])}")
            args.append(tvm.runtime.tensor(x, self._dev))
        return _outputs(self._vm["main"](*args))


def _outputs(out) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [x for o in out for x in _outputs(o)]


def load_model(path: str) -> Model:
    """The model library ``path`` written by ``tiletune model build`` (with its ``path + '.json'``)."""
    return Model(path)
