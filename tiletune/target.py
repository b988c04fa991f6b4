"""Targets as TVM JSON dicts (the host CPU as ``tiletune.cpu_features`` reads it), and what a target computes."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from . import cpu_features
from .cpu_features import host_mcpu
from .errors import TiletuneError

def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def host_target() -> dict[str, Any]:
    return {"kind": "llvm", "mcpu": host_mcpu(), "num-cores": host_cores()}


def is_cuda(target: dict[str, Any] | None) -> bool:
    """Whether ``target`` is an NVIDIA GPU target (kind "cuda")."""
    return target is not None and target.get("kind") == "cuda"


def has_gpu() -> bool:
    """Whether this machine has a CUDA device TVM can use (``tvm.cuda(0).exist``)."""
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001  (a runtime built without CUDA)
        return False


def parse_target(text: str | dict | None) -> dict[str, Any]:
    """None -> the host; a JSON object string or a dict -> that target; 'llvm' / 'cuda' shorthands."""
    if text is None or text == "host":
        return host_target()
    if isinstance(text, dict):
        t = dict(text)
    elif text == "llvm":
        t = host_target()
    elif text.startswith("cuda"):
        _, _, arch = text.partition(":")
        t = {"kind": "cuda", "arch": arch or "sm_90"}
    else:
        try:
            t = json.loads(text)
        except json.JSONDecodeError:
            raise TiletuneError(
                f"bad target {text!r}: give 'host', 'llvm', 'cuda[:sm_XX]' or a JSON object such as "
                '\'{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}\''
            ) from None
    if not isinstance(t, dict) or t.get("kind") not in ("llvm", "cuda"):
        raise TiletuneError(f"bad target {text!r}: kind must be 'llvm' or 'cuda'")
    _check_num_cores(t)
    if t["kind"] == "llvm" and "mcpu" in t:
        _check_mcpu(t)
    return t


def _check_num_cores(t: dict[str, Any]) -> None:
    if "num-cores" not in t:
        return
    n = t["num-cores"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TiletuneError(f"bad target: num-cores must be a whole number >= 1, got {n!r}")


# the mcpu values host_mcpu() gives: known to LLVM, accepted without asking it (which imports TVM)
_KNOWN_MCPU = frozenset(["znver2", "znver3", "znver4", "znver5", "sapphirerapids", "skylake-avx512", "haswell",
                         "x86-64", "generic"])


@lru_cache(maxsize=None)
def llvm_cpus(mtriple: str | None = None) -> tuple[str, ...]:
    """The CPU names LLVM (through TVM) accepts as ``mcpu`` for ``mtriple`` (None: this machine)."""
    import tvm
    from tvm.target import codegen

    spec: dict[str, Any] = {"kind": "llvm"}
    if mtriple:
        spec["mtriple"] = mtriple
    return tuple(str(c) for c in codegen.llvm_get_cpu_archlist(tvm.target.Target(spec)))


def _check_mcpu(t: dict[str, Any]) -> None:
    mcpu = t["mcpu"]
    if not isinstance(mcpu, str) or not mcpu:
        raise TiletuneError(f"bad target: mcpu must be an LLVM CPU name, got {mcpu!r}")
    triple = t.get("mtriple")
    if mcpu in _KNOWN_MCPU and not triple:
        return
    known = llvm_cpus(triple if isinstance(triple, str) else None)
    if known and mcpu not in known:  # an empty list: this LLVM cannot tell (then LLVM's own warning stands)
        close = [c for c in known if c.startswith(mcpu[:3])] or [c for c in known if c in _KNOWN_MCPU]
        raise TiletuneError(
            f"bad target: LLVM knows no CPU {mcpu!r}{' for ' + triple if triple else ''} (it would fall back to a "
            f"generic CPU, several times slower); this machine's CPU is {host_mcpu()!r}; e.g. "
            f"{', '.join(close[:8] or known[:8])} ({len(known)} known)")


def check_local_target(t: dict[str, Any]) -> None:
    """Checks for a target measured on this machine (not one replayed or measured on RPC devices):
    an llvm target's num-cores must not exceed the cores this process may use; a CUDA target needs a GPU here."""
    _check_num_cores(t)
    if is_cuda(t) and not has_gpu():
        raise TiletuneError("a CUDA target is measured on this machine's GPU, and none was found: run on a machine "
                            "with an NVIDIA GPU, or measure on one through --rpc HOST:PORT:KEY ('tiletune rpc --help')")
    n = t.get("num-cores")
    cores = host_cores()
    if t.get("kind") == "llvm" and isinstance(n, int) and n > cores:
        raise TiletuneError(
            f"bad target: num-cores {n} is more than this machine's {cores} logical cores (those this process "
            f"may use); measured here, {n} threads would share {cores} cores. Give num-cores <= {cores}, or "
            "measure on the machine that has them (--rpc)")


def target_key(t: dict[str, Any]) -> str:
    return json.dumps(t, sort_keys=True)


def check_dtype_for(dtype: str, target: dict) -> None:
    """A one-line TiletuneError unless ``target`` computes ``dtype``: float32 anywhere; float16 and bfloat16 on CUDA
    targets; bfloat16 on a CPU target whose instructions multiply bf16 (AVX512-BF16 or AMX-BF16 in the target's
    features, ``tiletune.cpu_features``: the bf16 template, ``tiletune.schedules.x86_bf16``), float16 on no CPU."""
    if dtype == "float32" or is_cuda(target):
        return
    if dtype == "bfloat16":
        feats = cpu_features.target_features(target)
        if feats & {"avx512_bf16", "amx_bf16"}:
            return
        raise TiletuneError(f"--dtype bfloat16 on a CPU needs avx512bf16 or amx-bf16 in the target (mcpu="
                            f"{target.get('mcpu') or 'generic'} has neither; e.g. znver4, sapphirerapids, or "
                            "\"mattr\": [\"+avx512bf16\"]); without them the model computes in float32")
    raise TiletuneError(f"--dtype {dtype} is for CUDA targets (--target cuda[:sm_XX]); on a CPU the model computes "
                        "in float32 or, where the CPU multiplies bf16, bfloat16")
