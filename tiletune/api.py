"""Small Python API: export the best kernel of a records file, load it, call it on numpy arrays (or torch
tensors) without copying them when they fit (``Kernel``, ``Model``, ``empty``; docs/decisions/api-zero-copy.md)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from .alignment import PARAM_ALIGNMENT, TVM_ALIGNMENT
from .errors import TiletuneError
from .paths import check_output
from .quiet import quiet_tvm
from .records import best, load
from .schedules import build, make_space
from .target import has_gpu, host_cores, is_cuda
from .workloads import parse


FIRST_USE = ("background", "wait", None)  # Model(first_use=): docs/decisions/shape-rule.md


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
    description. The output directory and the C compiler are checked before anything is built. A CPU kernel
    declares its arrays ``PARAM_ALIGNMENT``-byte aligned (numpy's own alignment), a GPU kernel TVM's 64;
    the description's ``alignment`` says which."""
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
    alignment = PARAM_ALIGNMENT if target.get("kind") == "llvm" else TVM_ALIGNMENT
    ex = build(wl, space, cfg, target, param_alignment=alignment)
    try:
        ex.export_library(output)
    except (RuntimeError, OSError) as e:  # the compiler or linker failed: its last words, in one line
        last = [line for line in str(e).strip().splitlines() if line.strip()][-1:] or [type(e).__name__]
        raise TiletuneError(f"exporting {output!r} failed: {last[0].strip()[:300]}") from None
    meta = {"workload": wl.key, "target": target, "config": b.config, "gflops": b.gflops,
            "inputs": [list(s) for s in wl.input_shapes()], "output": list(wl.output_shape()), "dtype": wl.dtype,
            "alignment": alignment}
    Path(output + ".json").write_text(json.dumps(meta, indent=1))
    return meta


def _levels_of(config: dict, wl) -> dict[str, int]:
    return {a.name: len(config[f"tile_{a.name}"]) for a in wl.axes_no_tvm() if f"tile_{a.name}" in config}


#: the alignment (bytes) of ``empty``'s arrays: what any kernel may assume, including those of libraries
#: exported before kernels declared ``PARAM_ALIGNMENT`` (docs/decisions/api-zero-copy.md)
ALIGNMENT = TVM_ALIGNMENT


def _alignment(meta: dict) -> int:
    """The data alignment (bytes) that a library's kernels assume for their arrays, from its description
    (libraries written before the description said it: TVM's 64)."""
    return int(meta.get("alignment") or TVM_ALIGNMENT)


def empty(shape, dtype: str = "float32") -> np.ndarray:
    """An uninitialised numpy array whose data is ``ALIGNMENT``-byte aligned, so that ``Kernel`` and ``Model``
    pass it to TVM without a copy whatever alignment their library declares (plain numpy arrays suffice for
    those that declare ``PARAM_ALIGNMENT``, the default since libraries say it)."""
    dt = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    buf = np.empty(size + ALIGNMENT, np.uint8)
    off = -buf.ctypes.data % ALIGNMENT
    return buf[off:off + size].view(dt).reshape(shape)


class _Args:
    """Arguments in and out of a compiled function, with as few copies as possible.

    Inputs: a numpy array (or a CPU torch tensor) that is C-contiguous, of the expected dtype and aligned to
    ``alignment`` bytes (what the library's kernels declare: ``PARAM_ALIGNMENT``, which numpy's allocations
    meet, or TVM's 64 for older libraries) goes to TVM without a copy (DLPack: the TVM tensor shares its
    memory). Anything else of the expected shape (another dtype that numpy casts to it with
    ``casting="same_kind"``, strides, a read-only array, a list, or an array less aligned than declared,
    which would crash the kernel) is copied into a staging buffer allocated once per input; a shape that
    differs, a dtype that does not cast, or a tensor on another device is a TiletuneError. Outputs: TVM
    tensors of a small pool, returned as numpy views (DLPack, no copy); a buffer is reused only once no view
    of it (nor any array derived from it) is alive, so an output the caller keeps is never overwritten by a
    later call. One instance is not safe to share between threads."""

    def __init__(self, dev, what: str, alignment: int = TVM_ALIGNMENT):
        import tvm
        import tvm_ffi

        self.dev, self.what, self.alignment = dev, what, alignment
        self._dlpack, self._empty = tvm_ffi.from_dlpack, tvm.runtime.empty
        self._stage: dict[int, tuple] = {}  # input index -> (tvm tensor, numpy view)
        self._free: dict[tuple, list] = {}  # (shape, dtype) -> idle output tensors
        self._lent: list = []  # (weakref to the view handed out, its tensor, its (shape, dtype))

    def input(self, i: int, x, shape: tuple, dtype: np.dtype, name: str | None = None):
        """The TVM tensor for input ``i`` (``name`` in errors; default: ``i``)."""
        if type(x) is not np.ndarray:
            x = self._host_array(x, name or str(i))
        if x.shape != shape:
            name = name or str(i)
            raise TiletuneError(f"{self.what} {name}: shape {tuple(x.shape)} != expected {shape}")
        if x.dtype == dtype:
            t = self._shared(x)
            if t is not None:
                return t
        staged = self._stage.get(i)
        if staged is None or staged[1].shape != shape or staged[1].dtype != dtype:
            t = self._empty(shape, str(dtype), self.dev)
            staged = self._stage[i] = (t, np.from_dlpack(t))
        try:
            np.copyto(staged[1], x, casting="same_kind")
        except TypeError:
            raise TiletuneError(f"{self.what} {name or i}: dtype {x.dtype} does not convert to {dtype} "
                                "(same-kind casts only)") from None
        return staged[0]

    def _host_array(self, x, name: str):
        """A numpy array, or a torch tensor ready for DLPack, from whatever the caller passed."""
        if hasattr(x, "detach") and hasattr(x, "device"):  # a torch tensor: zero-copy when it fits, else numpy
            if x.device.type != "cpu":
                raise TiletuneError(f"{self.what} {name}: the tensor is on {x.device}; pass a CPU tensor")
            return x.detach().numpy()  # a view of the tensor's memory
        return np.asarray(x)

    def output(self, shape: tuple, dtype: np.dtype):
        """(tvm tensor, numpy view) from the pool: a buffer no live array refers to, else a new one."""
        if self._lent:
            alive = []
            for item in self._lent:
                if item[0]() is not None:
                    alive.append(item)
                    continue
                idle = self._free.setdefault(item[2], [])
                if len(idle) < 2:  # two idle buffers per shape are enough to alternate
                    idle.append(item[1])
            self._lent = alive
        key = (shape, dtype)
        idle = self._free.get(key)
        t = idle.pop() if idle else self._empty(shape, str(dtype), self.dev)
        view = np.from_dlpack(t)
        self._lent.append((weakref.ref(view), t, key))
        return t, view

    def out_arg(self, out, shape: tuple, dtype: np.dtype, inputs: tuple):
        """The TVM tensor for a caller's ``out=`` array when it can be written in place, else None."""
        if not isinstance(out, np.ndarray) or out.shape != shape:
            raise TiletuneError(f"out= must be a numpy array of shape {shape} (got "
                                f"{getattr(out, 'shape', type(out).__name__)})")
        if any(isinstance(x, np.ndarray) and np.may_share_memory(out, x) for x in inputs):
            raise TiletuneError("out= overlaps an input; pass a separate array")
        if out.dtype == dtype and out.flags.writeable:
            return self._shared(out)
        return None

    def _shared(self, x: np.ndarray):
        """A TVM tensor sharing ``x``'s memory when ``x`` is contiguous and aligned as declared, else None
        (read-only arrays too: numpy does not export them). The checks are made on the imported tensor,
        not by ``from_dlpack``'s own, whose refusal costs a C++ backtrace (tens of microseconds)."""
        try:
            t = self._dlpack(x)
        except (RuntimeError, ValueError, BufferError, TypeError):
            return None
        return t if t.data_ptr() % self.alignment == 0 and t.is_contiguous() else None


class Kernel:
    """A tuned kernel loaded from a library: ``kernel(a, b)`` returns the output as a numpy array.

    Inputs pass to TVM without a copy when they are C-contiguous, of the kernel's dtype and aligned as the
    kernel declares (``alignment``: ``PARAM_ALIGNMENT`` for CPU kernels, which numpy's allocations and CPU
    torch tensors meet; 64 for libraries exported before, see ``tiletune.api.empty``); others are copied
    once into a staging buffer (same-kind dtype casts only; a wrong shape is an error). The result is a
    numpy view of a TVM tensor, not a copy: a later call writes into a new or idle buffer, never into a
    result the caller still holds (nor into arrays derived from it). ``kernel(a, b, out=c)`` writes into
    ``c`` instead (in place when ``c`` is contiguous, aligned as the inputs must be and of the kernel's
    dtype, else through one copy) and returns ``c``. See ``_Args`` for the exact rule."""

    def __init__(self, path: str):
        import tvm

        meta_path = Path(path + ".json")
        if not meta_path.exists():
            raise TiletuneError(f"{meta_path} (written by 'tiletune build') is missing")
        self.meta = json.loads(meta_path.read_text())
        self.workload = parse(self.meta["workload"])
        self._lib = tvm.runtime.load_module(path)
        self._main = self._lib["main"]
        self._dev = tvm.cpu()
        self._shapes = [tuple(s) for s in self.meta["inputs"]]
        self._out_shape = tuple(self.meta["output"])
        self._dtype = np.dtype(self.meta["dtype"])
        self.alignment = _alignment(self.meta)
        self._args = _Args(self._dev, "input", self.alignment)
        set_threads(int(self.meta["target"].get("num-cores") or 0) or None)

    def __call__(self, *inputs, out: np.ndarray | None = None) -> np.ndarray:
        if len(inputs) != len(self._shapes):
            raise TiletuneError(f"{self.workload.key} takes {len(self._shapes)} inputs, got {len(inputs)}")
        inp, dt = self._args.input, self._dtype
        args = [inp(i, x, s, dt) for i, (x, s) in enumerate(zip(inputs, self._shapes))]
        if out is not None:
            t = self._args.out_arg(out, self._out_shape, self._dtype, inputs)
            if t is not None:
                self._main(*args, t)
                return out
        t, view = self._args.output(self._out_shape, self._dtype)
        self._main(*args, t)
        if out is not None:
            np.copyto(out, view, casting="same_kind")
            return out
        return view


def set_threads(n: int | None = None) -> None:
    """Give TVM's runtime ``n`` threads (default: the cores this process may use) unless the user set
    TVM_NUM_THREADS. TVM's own default halves the hardware concurrency on x86 (to skip hyper-threads),
    which on machines without them leaves half the cores idle. TVM reads the variable when its thread
    pool starts, i.e. at the first parallel kernel call of the process: call this before that."""
    os.environ.setdefault("TVM_NUM_THREADS", str(n or host_cores()))


def load_kernel(path: str) -> Kernel:
    return Kernel(path)


class Model:
    """A whole model exported by ``tiletune model build``: ``model(*inputs)`` runs it on numpy arrays (or CPU
    torch tensors) and returns the list of its outputs as numpy arrays.

    Inputs follow ``Kernel``'s rule: contiguous arrays of the input's dtype, aligned as the model's kernels
    declare (``alignment``), pass without a copy, others are copied once into a staging buffer. Outputs are
    numpy views of the tensors the VM allocates for each call (no copy); the VM gives every call new output
    tensors, so a result the caller keeps is never overwritten.

    A model built for a CUDA target runs on this machine's GPU (``gpu`` is True): numpy inputs are copied to the
    device, a torch tensor already there is passed without a copy, and the outputs come back as numpy arrays."""

    def __init__(self, path: str, first_use: str | None = "background"):
        import tvm
        from tvm import relax

        meta_path = Path(path + ".json")
        if not meta_path.exists():
            raise TiletuneError(f"{meta_path} (written by 'tiletune model build') is missing")
        if not Path(path).exists():
            raise TiletuneError(f"model library {path!r} does not exist")
        self.meta = json.loads(meta_path.read_text())
        self.gpu = is_cuda(self.meta["target"])
        if self.gpu and not has_gpu():
            raise TiletuneError(f"{path} was built for a CUDA GPU ({self.meta['target'].get('arch')}), and this "
                                "machine has none")
        set_threads(int(self.meta["target"].get("num-cores") or 0) or None)
        self._dev = tvm.cuda(0) if self.gpu else tvm.cpu()
        with quiet_tvm():  # the VM logs every memory scope it loads
            self._vm = relax.VirtualMachine(tvm.runtime.load_module(path), self._dev)
        self._main = self._vm["main"]
        self._specs = [(tuple(s["shape"]), np.dtype(s["dtype"]), s["name"]) for s in self.inputs]
        self._dims = self.meta.get("dims", {})  # a model with symbolic dimensions: name -> [lo, hi or None]
        self.alignment = _alignment(self.meta)
        self._args = _DeviceArgs(self._dev, "input") if self.gpu else _Args(self._dev, "input", self.alignment)
        if first_use not in FIRST_USE:
            raise TiletuneError(f"first_use={first_use!r}; accepted: {', '.join(map(str, FIRST_USE))}")
        self._path = path
        self._first_use = first_use if self._dims and self.meta.get("first_use") else None
        self._shapes: dict[str, Any] = {}  # shape label -> (VM, main) of its constructed library, or None: failed
        self._jobs: dict[str, Any] = {}  # shape label -> the construction's process

    @property
    def inputs(self) -> list[dict]:
        return self.meta["inputs"]

    def __call__(self, *inputs) -> list[np.ndarray]:
        if len(inputs) != len(self._specs):
            raise TiletuneError(f"the model takes {len(self._specs)} inputs, got {len(inputs)}")
        values: dict[str, int] = {}
        specs = self._resolve(inputs, values) if self._dims else self._specs
        args = [self._args.input(i, x, *spec) for i, (x, spec) in enumerate(zip(inputs, specs))]
        main = self._shape_main(values) if self._first_use else self._main
        out = main(*args)
        return [t.numpy() for t in _tensors(out)] if self.gpu else _outputs(out)

    def _shape_main(self, values: dict[str, int]):
        """The function that runs a dynamic model at ``values``: the library's ``main`` at a tuned shape; at
        another, the library constructed for that shape at its first use (``tiletune.model.dynamic.first_use``, in its
        own process, kept in ``PATH.shapes/``) once it is there; the library's ``main`` (its rule for shapes not
        tuned) until then, or with ``first_use="wait"`` after waiting for it."""
        import tvm
        from tvm import relax

        key = ",".join(f"{d}={values[d]}" for d in self._dims)
        if key in self.meta.get("shapes", ()):
            return self._main
        if key in self._shapes:
            got = self._shapes[key]
            return got[1] if got is not None else self._main
        lib = Path(self._path + ".shapes") / ("_".join(f"{d}{values[d]}" for d in self._dims) + ".so")
        job = self._jobs.get(key)
        if not lib.exists() and job is None:
            lib.parent.mkdir(parents=True, exist_ok=True)
            with open(str(lib)[:-3] + ".log", "w") as log:
                job = self._jobs[key] = subprocess.Popen(
                    [sys.executable, "-m", "tiletune.model.dynamic.first_use", self._path, key], stdout=log,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if job is not None:
            if self._first_use == "wait":
                job.wait()
            if job.poll() is None:
                return self._main
            del self._jobs[key]
        if not lib.exists():
            self._shapes[key] = None  # the construction failed (its log is next to it): the library's rule
            return self._main
        with quiet_tvm():
            vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), self._dev)
        self._shapes[key] = (vm, vm["main"])
        return vm["main"]

    def _resolve(self, inputs, values: dict[str, int]) -> list[tuple]:
        """The input specs with each symbolic dimension (a name in the shape) at the size the inputs give it
        (set in ``values``), checked against its bounds and equal wherever it appears."""
        out = []
        for x, (shape, dtype, name) in zip(inputs, self._specs):
            got = tuple(getattr(x, "shape", None) or np.shape(x))
            if len(got) == len(shape):
                for d, v in zip(shape, got):
                    if isinstance(d, str):
                        lo, hi = self._dims[d]
                        if values.setdefault(d, int(v)) != v:
                            raise TiletuneError(f"input {name}: {d}={v}, but {values[d]} in an earlier input")
                        if v < lo or (hi is not None and v > hi):
                            raise TiletuneError(f"input {name}: {d}={v} is outside the model's bounds {lo}..{hi}")
            out.append((tuple(values.get(d, -1) if isinstance(d, str) else d for d in shape), dtype, name))
        return out


class _DeviceArgs:
    """Inputs of a model on a GPU: a torch tensor already on the GPU (contiguous, of the input's dtype) passes
    without a copy (DLPack); numpy arrays, CPU tensors and lists of the input's shape are copied to the device
    (cast with ``casting="same_kind"``); a wrong shape or dtype is a TiletuneError."""

    def __init__(self, dev, what: str):
        import tvm

        self.dev, self.what, self._tvm = dev, what, tvm

    def input(self, i: int, x, shape: tuple, dtype: np.dtype, name: str | None = None):
        name = name or str(i)
        if hasattr(x, "detach") and hasattr(x, "device"):
            if x.device.type == "cuda":
                if tuple(x.shape) != shape or str(x.dtype).removeprefix("torch.") != str(dtype):
                    raise TiletuneError(f"{self.what} {name}: a {tuple(x.shape)} {x.dtype} GPU tensor; expected "
                                        f"{shape} {dtype}")
                return self._tvm.runtime.from_dlpack(x.detach().contiguous())
            x = x.detach().numpy()
        a = np.asarray(x)
        if a.shape != shape:
            raise TiletuneError(f"{self.what} {name}: shape {tuple(a.shape)} != expected {shape}")
        try:
            a = a.astype(dtype, casting="same_kind", copy=False)
        except TypeError:
            raise TiletuneError(f"{self.what} {name}: dtype {a.dtype} does not convert to {dtype} "
                                "(same-kind casts only)") from None
        return self._tvm.runtime.tensor(np.ascontiguousarray(a), self.dev)


def _tensors(out) -> list:
    if hasattr(out, "numpy"):
        return [out]
    return [x for o in out for x in _tensors(o)]


def _outputs(out) -> list[np.ndarray]:
    if hasattr(out, "__dlpack__"):
        return [np.from_dlpack(out)]
    return [x for o in out for x in _outputs(o)]


def load_model(path: str, first_use: str | None = "background") -> Model:
    """The model library ``path`` written by ``tiletune model build`` (with its ``path + '.json'``). ``first_use``
    (a model with symbolic dimensions): at a shape it was not tuned at, construct that shape's library in the
    background ("background"), or wait for it ("wait"), or only run the library's own rule (None); see
    ``Model._shape_main``."""
    return Model(path, first_use)
