"""The vendor-library baseline: the operator computed by a vendor library, checked, then timed.

``vendor(workload)`` times numpy (OpenBLAS) ``matmul`` for gemm / gemv / batch_matmul (with bf16 inputs and a bf16
output: torch.matmul in bf16, oneDNN's bf16 kernels, when torch is installed); torch's CPU kernels
(oneDNN) for conv2d, depthwise_conv2d (``groups=C``) and avgpool2d (``count_include_pad=True``) when torch
is installed, else numpy (im2col + GEMM for convolutions, a window sum for pooling), labelled as such.
Every vendor output is checked against the workload's numpy reference before it is timed, so a wrong
mapping of parameters is reported (``wrong-answer``) instead of a fast, meaningless number. It is timed
by the rule our kernels are timed by (``tiletune.measure.timing``: warm-up, then ``repeat`` samples of
runs lasting at least ``min_repeat_ms``), with a Python loop instead of TVM's evaluator.

Convolutions with torch are timed in both of torch's memory formats, ``contiguous`` (NCHW / OIHW) and
``channels_last`` (NHWC / OHWI in memory), whatever the workload's own layout: input and weight are put
in the format before timing (the conversion is not timed, as a network keeps its tensors in one format),
and the output stays in the format torch returns. The faster format is the result (its label names it;
``extra["formats"]`` holds both medians and ``extra["format"]`` the winner), so the comparison is fair to
oneDNN, whose direct and Winograd kernels prefer blocked or channels-last data.

**Its own process.** ``vendor()`` checks and times the library in a child process
(``python -m tiletune.bench.vendor JOB``) whose environment lacks ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE``: machines that set them for old OpenBLAS builds make numpy's OpenBLAS run a kernel older
than the CPU (Haswell's AVX2 kernel on an AVX-512 CPU), and a baseline timed so is not the library at its best
(docs/decisions/vendor-baseline.md). The variables stay as they are in the calling process and everywhere
else. The child also keeps OpenBLAS's spinning threads away from the caller's TVM kernels, and it gives the
library ``threads`` threads (``OPENBLAS_NUM_THREADS``, ``torch.set_num_threads``). Labels name the kernel
that ran: BLAS name, version, kernel architecture and threads (``threadpoolctl``); torch's version, backend,
memory format, CPU capability (ISA) and threads.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import TiletuneError
from ..measure.base import MeasureSettings
from ..measure.timing import time_callable
from ..workloads import parse
from ..workloads.base import Workload, make
from ..workloads.conv import pad_nchw, input_windows
from .machine import blas_name, optional_torch
from .results import BaselineResult


def _im2col(wl: Workload, data: np.ndarray) -> np.ndarray:
    """[N, C, R, S, P, Q] windows of the padded input (the im2col matrix before reshaping)."""
    R = getattr(wl, "R", None) or wl.kernel
    S = getattr(wl, "S", None) or wl.kernel
    dil = wl.values.get("dilation", 1)
    return input_windows(pad_nchw(data, wl.pad), R, S, wl.P, wl.Q, wl.stride, dil)


#: operators the vendor baseline computes with numpy's BLAS, and those it computes with torch (oneDNN) when
#: torch is installed (else with a labelled numpy stand-in)
NUMPY_OPS = ("gemm", "batch_matmul", "gemv")
TORCH_OPS = ("conv2d", "depthwise_conv2d", "avgpool2d")
#: environment variables removed from the child that times the vendor library (see the module docstring)
UNSET_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: torch's memory formats the convolutions are timed in (the faster is reported)
MEMORY_FORMATS = ("contiguous", "channels_last")
CONV_OPS = ("conv2d", "depthwise_conv2d")


def torch_conv_kernel(wl: Workload, inputs: list[np.ndarray], memory_format: str, threads: int | None = None
                      ) -> tuple[str, Callable[[], np.ndarray]]:
    """(label, fn): torch's conv2d on ``wl`` with input and weight in ``memory_format`` ("contiguous" or
    "channels_last"); fn() returns the output in the workload's own layout (a view, no copy)."""
    torch = optional_torch()
    if torch is None:
        raise TiletuneError("torch is not installed (pip install torch) for the torch convolution baseline")
    if memory_format not in MEMORY_FORMATS:
        raise TiletuneError(f"unknown memory format {memory_format!r}; accepted: {', '.join(MEMORY_FORMATS)}")
    if threads:
        torch.set_num_threads(int(threads))
    data, weight = (torch.from_numpy(np.ascontiguousarray(x)) for x in inputs)
    nhwc = wl.layout == "NHWC"
    if nhwc:  # NCHW / OIHW views of the NHWC data and the HWIO (conv2d) or HWC (depthwise) weight
        data = data.permute(0, 3, 1, 2)
        weight = weight.permute(3, 2, 0, 1) if wl.op == "conv2d" else weight.permute(2, 0, 1).unsqueeze(1)
    fmt = torch.channels_last if memory_format == "channels_last" else torch.contiguous_format
    x, w = data.contiguous(memory_format=fmt), weight.contiguous(memory_format=fmt)
    groups = wl.C if wl.op == "depthwise_conv2d" else 1
    st, pd, dl = wl.stride, wl.pad, wl.dilation
    F = torch.nn.functional

    def run():
        with torch.no_grad():
            y = F.conv2d(x, w, stride=st, padding=pd, dilation=dl, groups=groups)
        return (y.permute(0, 2, 3, 1) if nhwc else y).numpy()

    backend = "oneDNN" if torch.backends.mkldnn.is_available() else "native"
    return f"torch {torch.__version__.split('+')[0]} conv2d ({backend}, {memory_format}, {torch_kernel(torch)})", run


def torch_kernel(torch) -> str:
    """torch's CPU capability (the ISA its kernels were dispatched for) and its intra-op threads."""
    try:
        isa = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch < 2.1
        isa = "ISA unknown"
    return f"{isa}, {_threads(torch.get_num_threads())}"


def blas_kernel() -> str:
    """numpy's BLAS as it runs in this process: "OpenBLAS 0.3.31, SkylakeX kernel, 2 threads" (threadpoolctl:
    the library, its version, the kernel architecture it chose and its threads); ``blas_name()`` (numpy's build
    information) when threadpoolctl is missing or finds no BLAS."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return blas_name()
    libs = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    numpy_dir = os.path.dirname(os.path.dirname(np.__file__))  # numpy.libs / scipy_openblas* sit beside numpy
    mine = [lib for lib in libs if str(lib.get("filepath", "")).startswith(numpy_dir)] or libs
    if not mine:
        return blas_name()
    lib = mine[0]
    names = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS", "flexiblas": "FlexiBLAS"}
    name = names.get(lib.get("internal_api"), lib.get("internal_api") or "BLAS")
    ver = ".".join(str(lib.get("version") or "").split(".")[:3])
    parts = [f"{name} {ver}".strip()]
    if lib.get("architecture"):
        parts.append(f"{lib['architecture']} kernel")
    parts.append(_threads(lib.get("num_threads")))
    return ", ".join(parts)


def _threads(n) -> str:
    return f"{n} thread" + ("" if n == 1 else "s")


class _AsArray:
    """A torch tensor that numpy reads as float32 (``np.asarray``): a bf16 result is converted only when checked."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __array__(self, dtype=None, copy=None):
        out = self.tensor.float().numpy()
        return out if dtype is None else out.astype(dtype)


def vendor_kernel(wl: Workload, inputs: list[np.ndarray], threads: int | None = None, use_torch: bool = True
                  ) -> tuple[str, Callable[[], np.ndarray]]:
    """(label, fn) where fn() computes the workload's output with a vendor library in this process
    (convolutions with torch: in the contiguous memory format; ``vendor`` times both formats); with
    ``use_torch=False`` the numpy stand-ins replace torch."""
    op = wl.op
    torch = optional_torch() if use_torch and op in NUMPY_OPS and wl.dtype == wl.out_dtype == "bfloat16" else None
    if torch is not None:  # bf16's vendor figure: torch.matmul in bf16 (the same bf16 values)
        if threads:
            torch.set_num_threads(int(threads))
        ta, tb = (torch.from_numpy(np.asarray(x, dtype=np.float32)).to(torch.bfloat16) for x in inputs)
        label = f"torch {torch.__version__.split('+')[0]} matmul bfloat16 ({torch_kernel(torch)})"

        def run_bf16():
            with torch.no_grad():
                return _AsArray(torch.matmul(ta, tb))  # converted for the check only, not in the timed calls

        return label, run_bf16
    if op in NUMPY_OPS:
        a, b = inputs
        out = np.empty(wl.output_shape(), wl.out_dtype)  # fp16 inputs with out_dtype=float32: numpy casts
        return f"numpy matmul ({blas_kernel()})", lambda: np.matmul(a, b, out=out)
    torch = optional_torch() if use_torch else None
    if op in TORCH_OPS and torch is not None:
        if threads:
            torch.set_num_threads(int(threads))
        tin = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        F = torch.nn.functional
        if op == "avgpool2d":
            k, s, p = wl.kernel, wl.stride, wl.pad
            fn = lambda: F.avg_pool2d(tin[0], k, stride=s, padding=p, count_include_pad=True)  # noqa: E731
            label = f"torch {torch.__version__.split('+')[0]} avg_pool2d ({torch_kernel(torch)})"
        else:
            return torch_conv_kernel(wl, inputs, "contiguous", threads)

        def run():
            with torch.no_grad():
                return fn().numpy()

        return label, run
    if op in CONV_OPS and wl.layout == "NHWC":  # the NCHW stand-in on transposed copies, transposed back
        data, weight = inputs
        nchw = make(wl.op, dtype=wl.dtype, **wl.values)
        w = weight.transpose(3, 2, 0, 1) if op == "conv2d" else weight.transpose(2, 0, 1)[:, None]
        label, fn = vendor_kernel(nchw, [np.ascontiguousarray(data.transpose(0, 3, 1, 2)), np.ascontiguousarray(w)],
                                  threads, use_torch=False)
        return label, lambda: fn().transpose(0, 2, 3, 1)
    if op == "conv2d":
        data, weight = inputs
        K, C, R, S = weight.shape
        wmat = weight.reshape(K, C * R * S)
        N, P, Q = wl.N, wl.P, wl.Q

        def run():
            cols = _im2col(wl, data).transpose(1, 2, 3, 0, 4, 5).reshape(C * R * S, N * P * Q)
            return (wmat @ cols).reshape(K, N, P, Q).transpose(1, 0, 2, 3)

        return f"numpy im2col + GEMM ({blas_kernel()}; torch not installed)", run
    if op == "depthwise_conv2d":
        data, weight = inputs
        C, _, R, S = weight.shape
        wmat = weight.reshape(C, 1, R * S)
        N, P, Q = wl.N, wl.P, wl.Q

        def run():
            cols = _im2col(wl, data).transpose(1, 2, 3, 0, 4, 5).reshape(C, R * S, N * P * Q)
            return np.matmul(wmat, cols).reshape(C, N, P, Q).transpose(1, 0, 2, 3)

        return f"numpy im2col + batched GEMM ({blas_kernel()}; torch not installed)", run
    if op == "avgpool2d":
        data = inputs[0]
        k2 = wl.kernel * wl.kernel
        return "numpy window sum (torch not installed)", lambda: _im2col(wl, data).sum(axis=(2, 3)) / k2
    raise TiletuneError(f"no vendor baseline for operator {op!r}")


def vendor(workload: Workload | str, settings: MeasureSettings | None = None, threads: int | None = None
           ) -> BaselineResult:
    """Time the vendor library on the workload (output checked against the numpy reference first), in a
    child process without ``UNSET_ENV`` (see the module docstring); torch is used when it is installed here."""
    wl = parse(workload)
    settings = settings or MeasureSettings()
    t0 = time.perf_counter()
    job = {"workload": wl.key, "settings": asdict(settings), "threads": int(threads) if threads else None,
           "use_torch": optional_torch() is not None}
    with tempfile.TemporaryDirectory(prefix="tiletune-vendor-") as tmp:
        job_path, result_path = Path(tmp, "job.json"), Path(tmp, "result.json")
        job["result"] = str(result_path)
        job_path.write_text(json.dumps(job))
        proc = subprocess.run([sys.executable, "-m", "tiletune.bench.vendor", str(job_path)], env=child_env(threads),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            res = BaselineResult(**json.loads(result_path.read_text()))
        except (OSError, ValueError, TypeError):
            tail = [ln for ln in proc.stdout.decode(errors="replace").splitlines() if ln.strip()][-1:] or [""]
            return BaselineResult("vendor", wl.key, error="run-error",
                                  message=f"the vendor process exited with code {proc.returncode} without a "
                                          f"result: {tail[0][:300]}", wall_s=time.perf_counter() - t0)
    res.costs = tuple(res.costs)
    res.wall_s = time.perf_counter() - t0  # the child's start included
    return res


def child_env(threads: int | None = None, environ: dict | None = None) -> dict[str, str]:
    """The environment of the process that times the vendor library: ``environ`` (default: this process's)
    without ``UNSET_ENV``, and with ``OPENBLAS_NUM_THREADS=threads`` when ``threads`` is given."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if k not in UNSET_ENV}
    if threads:
        env["OPENBLAS_NUM_THREADS"] = str(int(threads))
    return env


def vendor_here(workload: Workload | str, settings: MeasureSettings | None = None, threads: int | None = None,
                use_torch: bool = True) -> BaselineResult:
    """``vendor`` in this process, with its environment as it is (the child's body)."""
    wl = parse(workload)
    settings = settings or MeasureSettings()
    t0 = time.perf_counter()
    use_torch = use_torch and optional_torch() is not None
    try:
        inputs = wl.make_inputs(seed=0)
        if wl.op in CONV_OPS and use_torch:
            kernels = [(f,) + torch_conv_kernel(wl, inputs, f, threads) for f in MEMORY_FORMATS]
        else:
            kernels = [(None,) + vendor_kernel(wl, inputs, threads, use_torch=use_torch)]
    except TiletuneError as e:
        return BaselineResult("vendor", wl.key, error="unsupported", message=str(e))
    ref = wl.reference(*inputs) if settings.check else None
    results = [_check_and_time(wl, label, fn, ref, settings, t0) for _, label, fn in kernels]
    if len(results) == 1:
        return results[0]
    ok = [(r, f) for r, (f, _, _) in zip(results, kernels) if r.ok]
    if not ok:  # every format failed: the first failure says why
        return results[0]
    best, fmt = min(ok, key=lambda rf: rf[0].median_s)
    best.extra = {"format": fmt, "formats": {f: r.median_s for r, (f, _, _) in zip(results, kernels)}}
    best.wall_s = time.perf_counter() - t0
    return best


def _check_and_time(wl: Workload, label: str, fn: Callable[[], np.ndarray], ref: np.ndarray | None,
                    settings: MeasureSettings, t0: float) -> BaselineResult:
    """One vendor kernel: its output checked against ``ref`` (when given), then timed."""
    try:
        out = np.asarray(fn())
        if ref is not None:
            rtol, atol = wl.tolerance()
            if out.shape != ref.shape or not np.allclose(out, ref, rtol=rtol, atol=atol):
                err = float(np.max(np.abs(out - ref))) if out.shape == ref.shape else float("nan")
                return BaselineResult("vendor", wl.key, label=label, error="wrong-answer",
                                      message=f"vendor output differs from the reference (shape {out.shape} vs "
                                              f"{ref.shape}, max abs error {err:.3g})",
                                      wall_s=time.perf_counter() - t0)
        costs = time_callable(fn, settings)
    except Exception as e:  # noqa: BLE001 - a failing baseline is data
        return BaselineResult("vendor", wl.key, label=label, error="run-error",
                              message=f"{type(e).__name__}: {e}"[:2000], wall_s=time.perf_counter() - t0)
    return BaselineResult("vendor", wl.key, label=label, costs=tuple(costs), wall_s=time.perf_counter() - t0)


def main(job_path: str) -> int:
    """The child: run the job written by ``vendor`` and write its BaselineResult as JSON."""
    job = json.loads(Path(job_path).read_text())
    res = vendor_here(job["workload"], MeasureSettings(**job["settings"]), job["threads"], job["use_torch"])
    d = asdict(res)
    d["costs"] = list(res.costs)
    Path(job["result"]).write_text(json.dumps(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
