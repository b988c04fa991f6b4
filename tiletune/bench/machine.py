"""The machine a benchmark runs on: its details for the report, and its fp32 peak.

- ``machine_info(target)``: CPU, cores, memory, OS and the versions of Python, TVM, numpy (and its BLAS),
  torch, xgboost, matplotlib and tiletune.
- ``peak(target)``: the physical fp32 limit from ``tiletune.hardware.detect_cpu`` (cores x SIMD lanes x
  FMA units x 2 flops x clock), so reports show % of peak.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import numpy as np

from ..hardware import detect_cpu
from ..target import cpuinfo, host_cores


def optional_torch():
    """The torch module, or None when torch is not installed."""
    try:
        import torch

        return torch
    except ImportError:
        return None


_BLAS: str | None = None


def blas_name() -> str:
    """The BLAS numpy was built with (name and version), "BLAS" when numpy does not say."""
    global _BLAS
    if _BLAS is None:
        name = "BLAS"
        try:
            cfg = np.show_config(mode="dicts")  # numpy >= 1.25
            blas = cfg.get("Build Dependencies", {}).get("blas", {})
            name = blas.get("name", name) or name
            if blas.get("version"):
                name = f"{name} {blas['version']}"
        except Exception:  # noqa: BLE001 - informational only
            pass
        _BLAS = name
    return _BLAS


@dataclass(frozen=True)
class Peak:
    gflops: float
    source: str  # how it was obtained
    detail: str = ""


def peak(target: dict | None = None) -> Peak | None:
    """fp32 peak GFLOPS of the target's CPU from the detected HardwareSpec (None when undetectable),
    scaled to the target's core count when it uses fewer or more cores than the machine has."""
    try:
        hw = detect_cpu(measure_bandwidth=False)  # the peak needs no bandwidth measurement
    except Exception:  # noqa: BLE001 - no /proc, no sysfs: no peak column
        return None
    cores = int((target or {}).get("num-cores") or 0) or hw.cores
    g = hw.peak_gflops * cores / hw.cores
    detail = f"{hw.cores} cores x {hw.simd_lanes} fp32 lanes x {hw.fma_units} FMA units x 2 x {hw.freq_ghz} GHz"
    if cores != hw.cores:
        detail += f", scaled to the target's {cores} cores"
    fsrc = (hw.source or {}).get("frequency")
    if fsrc:
        detail += f"; clock from {fsrc}"
    return Peak(g, "tiletune.hardware.detect_cpu", detail)


def _version(mod: str) -> str | None:
    try:
        return version(mod)
    except Exception:  # noqa: BLE001
        return None


def machine_info(target: dict | None = None) -> dict[str, Any]:
    info = cpuinfo()
    torch = optional_torch()
    cores = host_cores()
    mem = None
    try:
        import psutil

        mem = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # noqa: BLE001
        pass
    return {
        "host": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
        "cores": cores,
        "logical_cpus": os.cpu_count(),
        "memory_gib": mem,
        "target": target,
        "python": platform.python_version(),
        "tvm": _version("apache-tvm"),
        "tvm_ffi": _version("apache-tvm-ffi"),
        "numpy": np.__version__,
        "blas": blas_name(),
        "torch": torch.__version__ if torch is not None else None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "xgboost": _version("xgboost"),
        "matplotlib": _version("matplotlib"),
        "tiletune": _version("tiletune"),
    }
