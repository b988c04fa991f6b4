"""The machine a benchmark runs on: its details for the report, and its fp32 peak.

- ``machine_info(target)``: CPU, cores, memory, OS and the versions of Python, TVM, numpy (and its BLAS),
  torch, xgboost, matplotlib and tiletune.
- ``peak(target)``: the fp32 peak, measured (``fma_peak``: a loop of independent vector FMAs built by TVM for
  the target, on its cores), so reports show % of peak; where it cannot be measured, the physical limit from
  ``tiletune.hardware.detect_cpu`` (cores x SIMD lanes x FMA units x 2 flops x clock). The clock a VM reports
  is often the base clock, below what its cores run at (a 2-core Xeon VM: 2.1 GHz reported, 268.8 GFLOPS
  inferred, 337 measured).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import numpy as np

from ..hardware import detect_cpu
from ..cpu_features import cpuinfo
from ..target import host_cores, host_target


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


#: independent FMA chains per thread in ``fma_peak``: at least FMA units x latency (2 x 4 on current x86) in flight
FMA_CHAINS = 12
#: iterations of the chains per timed call (12 chains x 16 lanes x 2 flops x 2^20: 0.4 GFLOP, ~2.5 ms a core)
FMA_ITERS = 1 << 20


def fma_peak(target: dict, lanes: int, threads: int, timeout: float = 120) -> float:
    """Measured fp32 peak GFLOPS of ``threads`` cores: a kernel built by TVM for ``target`` in which each thread
    updates ``FMA_CHAINS`` independent ``lanes``-wide vectors by a multiply-add (LLVM contracts it into an FMA)
    ``FMA_ITERS`` times; the best of 5 calls. It runs in a child process with TVM_NUM_THREADS = ``threads``
    (this process's TVM thread pool may be sized otherwise already)."""
    job = json.dumps({"target": target, "lanes": lanes, "threads": threads})
    env = dict(os.environ, TVM_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", f"from {__name__} import _fma_child; _fma_child({job!r})"],
                         env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip().splitlines() or ["the FMA loop failed"])[-1])
    return float(out.stdout.split()[-1])


def _fma_child(job: str) -> None:
    import tvm
    from tvm.script import tirx as T

    j = json.loads(job)
    lanes, threads, chains = int(j["lanes"]), int(j["threads"]), FMA_CHAINS

    @T.prim_func
    def fma(out: T.Buffer((threads * chains * lanes,), "float32"), n: T.int32):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for t in T.parallel(threads):
            acc = T.alloc_buffer((chains * lanes,), "float32", scope="local")
            for c in T.unroll(chains):
                acc[T.ramp(c * lanes, 1, lanes)] = T.Broadcast(T.Cast("float32", c), lanes)
            for _ in range(n):
                for c in T.unroll(chains):
                    acc[T.ramp(c * lanes, 1, lanes)] = (acc[T.ramp(c * lanes, 1, lanes)]
                                                        * T.Broadcast(T.float32(1.0000001), lanes)
                                                        + T.Broadcast(T.float32(1e-7), lanes))
            for c in T.unroll(chains):
                out[T.ramp((t * chains + c) * lanes, 1, lanes)] = acc[T.ramp(c * lanes, 1, lanes)]

    target = dict(j["target"], **{"num-cores": threads})
    lib = tvm.compile(tvm.IRModule({"main": fma}), tvm.target.Target(target))
    out = tvm.runtime.tensor(np.zeros(threads * chains * lanes, "float32"))
    f = lib.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=5)
    best = min(f(out, FMA_ITERS).results)
    print(2 * lanes * chains * FMA_ITERS * threads / best / 1e9)


def peak(target: dict | None = None, measure: bool = True) -> Peak | None:
    """fp32 peak GFLOPS of the (CPU) target's cores: measured (``fma_peak``) unless ``measure`` is off or the
    measurement fails, else from the detected HardwareSpec (None when undetectable), scaled to the target's
    core count when it uses fewer or more cores than the machine has."""
    try:
        hw = detect_cpu(measure_bandwidth=False)  # the peak needs no bandwidth measurement
    except Exception:  # noqa: BLE001 - no /proc, no sysfs: no peak column
        return None
    cores = int((target or {}).get("num-cores") or 0) or hw.cores
    why = ""
    if measure:
        try:
            tgt = dict(target or {})
            if "mcpu" not in tgt:  # a generic target would time generic code: this machine's CPU
                tgt = {**host_target(), **tgt}
            g = fma_peak(tgt, hw.simd_lanes, cores)
            return Peak(g, "measured", f"{cores} core{'s' * (cores != 1)} x {FMA_CHAINS} chains of "
                                       f"{hw.simd_lanes}-lane FMAs, built by TVM (tiletune.bench.machine.fma_peak)")
        except Exception as e:  # noqa: BLE001 - no compiler, no TVM: the inferred peak, saying why
            why = f"; not measured: {str(e)[:120]}"
    g = hw.peak_gflops * cores / hw.cores
    detail = f"{hw.cores} cores x {hw.simd_lanes} fp32 lanes x {hw.fma_units} FMA units x 2 x {hw.freq_ghz} GHz"
    if cores != hw.cores:
        detail += f", scaled to the target's {cores} cores"
    fsrc = (hw.source or {}).get("frequency")
    if fsrc:
        detail += f"; clock from {fsrc}"
    return Peak(g, "tiletune.hardware.detect_cpu", detail + why)


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
