"""The vendor-library baseline: the operator computed by a vendor library, checked, then timed.

``vendor(workload)`` times numpy (OpenBLAS) ``matmul`` for gemm / gemv / batch_matmul; torch's CPU kernels
(oneDNN) for conv2d, depthwise_conv2d (``groups=C``) and avgpool2d (``count_include_pad=True``) when torch
is installed, else numpy (im2col + GEMM for convolutions, a window sum for pooling), labelled as such.
Every vendor output is checked against the workload's numpy reference before it is timed, so a wrong
mapping of parameters is reported (``wrong-answer``) instead of a fast, meaningless number. It is timed
by the rule our kernels are timed by (``tiletune.measure.timing``: warm-up, then ``repeat`` samples of
runs lasting at least ``min_repeat_ms``), with a Python loop instead of TVM's evaluator.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..errors import TiletuneError
from ..measure.base import MeasureSettings
from ..measure.timing import time_callable
from ..workloads import parse
from ..workloads.base import Workload
from ..workloads.conv import _np_pad, _windows
from .machine import blas_name, optional_torch
from .results import BaselineResult


def _im2col(wl: Workload, data: np.ndarray) -> np.ndarray:
    """[N, C, R, S, P, Q] windows of the padded input (the im2col matrix before reshaping)."""
    R = getattr(wl, "R", None) or wl.kernel
    S = getattr(wl, "S", None) or wl.kernel
    dil = wl.values.get("dilation", 1)
    return _windows(_np_pad(data, wl.pad), R, S, wl.P, wl.Q, wl.stride, dil)


#: operators the vendor baseline computes with numpy's BLAS, and those it computes with torch (oneDNN) when
#: torch is installed (else with a labelled numpy stand-in)
NUMPY_OPS = ("gemm", "batch_matmul", "gemv")
TORCH_OPS = ("conv2d", "depthwise_conv2d", "avgpool2d")


def vendor_kernel(wl: Workload, inputs: list[np.ndarray], threads: int | None = None
                  ) -> tuple[str, Callable[[], np.ndarray]]:
    """(label, fn) where fn() computes the workload's output with a vendor library."""
    op = wl.op
    if op in NUMPY_OPS:
        a, b = inputs
        out = np.empty(wl.output_shape(), wl.dtype)
        blas = blas_name()
        return f"numpy matmul ({blas})", lambda: np.matmul(a, b, out=out)
    torch = optional_torch()
    if op in TORCH_OPS and torch is not None:
        if threads:
            torch.set_num_threads(int(threads))
        tin = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        F = torch.nn.functional
        if op == "avgpool2d":
            k, s, p = wl.kernel, wl.stride, wl.pad
            fn = lambda: F.avg_pool2d(tin[0], k, stride=s, padding=p, count_include_pad=True)  # noqa: E731
            label = f"torch {torch.__version__.split('+')[0]} avg_pool2d"
        else:
            groups = wl.C if op == "depthwise_conv2d" else 1
            st, pd, dl = wl.stride, wl.pad, wl.dilation
            fn = lambda: F.conv2d(tin[0], tin[1], stride=st, padding=pd, dilation=dl, groups=groups)  # noqa: E731
            backend = "oneDNN" if torch.backends.mkldnn.is_available() else "native"
            label = f"torch {torch.__version__.split('+')[0]} conv2d ({backend})"

        def run():
            with torch.no_grad():
                return fn().numpy()

        return label, run
    if op == "conv2d":
        data, weight = inputs
        K, C, R, S = weight.shape
        wmat = weight.reshape(K, C * R * S)
        N, P, Q = wl.N, wl.P, wl.Q

        def run():
            cols = _im2col(wl, data).transpose(1, 2, 3, 0, 4, 5).reshape(C * R * S, N * P * Q)
            return (wmat @ cols).reshape(K, N, P, Q).transpose(1, 0, 2, 3)

        return f"numpy im2col + GEMM ({blas_name()}; torch not installed)", run
    if op == "depthwise_conv2d":
        data, weight = inputs
        C, _, R, S = weight.shape
        wmat = weight.reshape(C, 1, R * S)
        N, P, Q = wl.N, wl.P, wl.Q

        def run():
            cols = _im2col(wl, data).transpose(1, 2, 3, 0, 4, 5).reshape(C, R * S, N * P * Q)
            return np.matmul(wmat, cols).reshape(C, N, P, Q).transpose(1, 0, 2, 3)

        return "numpy im2col + batched GEMM (torch not installed)", run
    if op == "avgpool2d":
        data = inputs[0]
        k2 = wl.kernel * wl.kernel
        return "numpy window sum (torch not installed)", lambda: _im2col(wl, data).sum(axis=(2, 3)) / k2
    raise TiletuneError(f"no vendor baseline for operator {op!r}")


def vendor(workload: Workload | str, settings: MeasureSettings | None = None, threads: int | None = None
           ) -> BaselineResult:
    """Time the vendor library on the workload (output checked against the numpy reference first)."""
    wl = parse(workload)
    settings = settings or MeasureSettings()
    t0 = time.perf_counter()
    try:
        inputs = wl.make_inputs(seed=0)
        label, fn = vendor_kernel(wl, inputs, threads)
    except TiletuneError as e:
        return BaselineResult("vendor", wl.key, error="unsupported", message=str(e))
    try:
        out = np.asarray(fn())
        if settings.check:
            ref = wl.reference(*inputs)
            rtol, atol = wl.tolerance()
            if out.shape != ref.shape or not np.allclose(out, ref, rtol=rtol, atol=atol):
                err = float(np.max(np.abs(out - ref))) if out.shape == ref.shape else float("nan")
                return BaselineResult("vendor", wl.key, label=label, error="wrong-answer",
                                      message=f"vendor output differs from the reference (shape {out.shape} vs "
                                              f"{ref.shape}, max abs error {err:.3g})",
                                      wall_s=time.perf_counter() - t0)
        costs = time_callable(fn, settings)
    except Exception as e:  # noqa: BLE001 - a failing baseline is data
        return BaselineResult("vendor", wl.key, label=label if "label" in locals() else "", error="run-error",
                              message=f"{type(e).__name__}: {e}"[:2000], wall_s=time.perf_counter() - t0)
    return BaselineResult("vendor", wl.key, label=label, costs=tuple(costs), wall_s=time.perf_counter() - t0)
