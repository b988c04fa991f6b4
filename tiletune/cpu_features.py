"""This machine's CPU (``cpuinfo``, ``host_mcpu``) and the x86 matrix and dot-product features a CPU kernel may
use, read from the target and from this machine.

Two sources, both needed before a kernel uses an instruction:

- the **target** (``{"kind": "llvm", "mcpu": ..., "mattr": [...]}``): what LLVM may emit for it. The features of its
  ``mcpu`` come from LLVM itself (``llvm_get_cpu_features``), then ``mattr``'s ``+x`` / ``-x`` entries apply;
- the **machine** (``/proc/cpuinfo``'s ``flags``): what this CPU runs. A kernel measured or run here needs both.

Features are named as ``/proc/cpuinfo`` names them (``FEATURES``); ``LLVM_NAMES`` maps them to LLVM's. AMX tiles
also need the process to ask Linux for the tile state once, before its first tile instruction
(``request_amx``: ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, as TVM's former ``runtime.amx_init`` and
oneDNN do); without it the first ``ldtilecfg`` ends the process with SIGILL.
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from typing import Any

from .errors import TiletuneError

#: the features this module reports, in /proc/cpuinfo's names, and what each one gives a kernel
FEATURES = {
    "avx512f": "AVX-512 (16 fp32 lanes)",
    "avx512_bf16": "AVX512-BF16 (vdpbf16ps: pairs of bf16 products into fp32 lanes)",
    "avx512_vnni": "AVX512-VNNI (vpdpbusd: u8 x s8 dot products into int32 lanes)",
    "avx_vnni": "AVX-VNNI (vpdpbusd on 256-bit vectors)",
    "amx_tile": "AMX tiles (8 tile registers of 16 rows x 64 bytes)",
    "amx_bf16": "AMX-BF16 (tdpbf16ps on bf16 tiles)",
    "amx_int8": "AMX-INT8 (tdpbusd on int8 tiles)",
}
#: /proc/cpuinfo's name -> LLVM's (``-mattr``) name
LLVM_NAMES = {"avx512f": "avx512f", "avx512_bf16": "avx512bf16", "avx512_vnni": "avx512vnni", "avx_vnni": "avxvnni",
              "amx_tile": "amx-tile", "amx_bf16": "amx-bf16", "amx_int8": "amx-int8"}
_FROM_LLVM = {v: k for k, v in LLVM_NAMES.items()}

# Linux's arch_prctl (x86-64 syscall 158) codes for the dynamically enabled AMX tile data (arch/x86/include/uapi/
# asm/prctl.h); XFEATURE_XTILEDATA is the state component number 18
SYS_ARCH_PRCTL = 158
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18


# (family, model ranges) are fuzzy; we map from flags to a safe LLVM mcpu.
_AMD_ZEN = {23: "znver2", 25: "znver3", 26: "znver5"}


@lru_cache(maxsize=None)
def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    if info:
                        break
                    continue
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return dict(info)


def host_mcpu() -> str:
    info = cpuinfo()
    flags = set(info.get("flags", "").split())
    vendor = info.get("vendor_id", "")
    fam = int(info.get("cpu family", "0") or 0)
    if vendor == "AuthenticAMD" and fam in _AMD_ZEN:
        if fam == 25 and "avx512f" in flags:
            return "znver4"
        return _AMD_ZEN[fam]
    if "amx_tile" in flags:
        return "sapphirerapids"
    if "avx512f" in flags:
        return "skylake-avx512"
    if "avx2" in flags:
        return "haswell"
    return "x86-64" if os.uname().machine == "x86_64" else "generic"


def _check_name(feature: str) -> None:
    if feature not in FEATURES:
        raise TiletuneError(f"unknown CPU feature {feature!r}; known: {', '.join(FEATURES)}")


def cpu_name() -> str:
    """This machine's CPU as /proc/cpuinfo names it (``model name``), or the machine type where it has none."""
    return cpuinfo().get("model name") or os.uname().machine


def machine_features() -> frozenset[str]:
    """The features of ``FEATURES`` this machine's CPU has (``/proc/cpuinfo``'s flags; none where it is absent)."""
    flags = set(cpuinfo().get("flags", "").split())
    return frozenset(f for f in FEATURES if f in flags)


@lru_cache(maxsize=64)
def _mcpu_features(mcpu: str, mtriple: str) -> frozenset[str]:
    import tvm
    from tvm.target import codegen

    spec: dict[str, Any] = {"kind": "llvm", "mcpu": mcpu}
    if mtriple:
        spec["mtriple"] = mtriple
    return frozenset(_FROM_LLVM[f] for f in (str(x) for x in codegen.llvm_get_cpu_features(tvm.target.Target(spec)))
                     if f in _FROM_LLVM)


def target_features(target: dict[str, Any] | None) -> frozenset[str]:
    """The features of ``FEATURES`` that LLVM may use for ``target``: those of its ``mcpu`` (LLVM's own table; none
    for a target without ``mcpu``, which LLVM compiles for generic x86-64), with ``mattr``'s ``+x`` added and
    ``-x`` removed. None: this machine's target (``host_mcpu``). A CUDA target has none."""
    if target is None:
        target = {"kind": "llvm", "mcpu": host_mcpu()}
    if target.get("kind") != "llvm":
        return frozenset()
    mcpu = target.get("mcpu")
    feats = set(_mcpu_features(mcpu, str(target.get("mtriple") or ""))) if mcpu else set()
    mattr = target.get("mattr") or []
    if isinstance(mattr, str):
        mattr = mattr.split(",")
    for attr in mattr:
        attr = str(attr).strip()
        name = _FROM_LLVM.get(attr[1:]) if attr[:1] in "+-" else None
        if name is None:
            continue
        (feats.add if attr[0] == "+" else feats.discard)(name)
    return frozenset(feats)


def _target_label(target: dict[str, Any]) -> str:
    mcpu = target.get("mcpu") or "generic x86-64"
    mattr = target.get("mattr")
    return f"mcpu={mcpu}" + (f", mattr={','.join(mattr) if isinstance(mattr, list) else mattr}" if mattr else "")


def has(feature: str, target: dict[str, Any] | None = None, *, machine: bool = True) -> bool:
    """Whether a kernel for ``target`` may use ``feature``: LLVM may emit it for the target and (``machine``) this
    machine runs it. ``machine=False``: the target alone (a kernel compiled here and run elsewhere)."""
    _check_name(feature)
    return feature in target_features(target) and (not machine or feature in machine_features())


def require(feature: str, what: str, target: dict[str, Any] | None = None, *, machine: bool = True) -> None:
    """A one-line TiletuneError, naming the CPU and the missing flag, unless ``has(feature, target, machine)``:
    ``what`` says what needed it (e.g. "the AMX bf16 GEMM")."""
    _check_name(feature)
    if machine and feature not in machine_features():
        raise TiletuneError(f"{what} needs {FEATURES[feature]}: this CPU ({cpu_name()}) has no {feature} flag in "
                            "/proc/cpuinfo")
    if target is not None and feature not in target_features(target):
        raise TiletuneError(f"{what} needs {FEATURES[feature]}: the target ({_target_label(target)}) does not enable "
                            f"it (add \"+{LLVM_NAMES[feature]}\" to its mattr, or an mcpu that has it)")


def llvm_attrs(*features: str) -> list[str]:
    """``mattr`` entries enabling ``features`` (``["+amx-bf16", ...]``)."""
    for f in features:
        _check_name(f)
    return [f"+{LLVM_NAMES[f]}" for f in features]


_amx_granted = False


def request_amx() -> None:
    """Ask Linux for the AMX tile state for this process (once; later calls return at once). A one-line
    TiletuneError when the CPU has no AMX, or the kernel refuses (Linux before 5.16, or no ``arch_prctl``)."""
    global _amx_granted
    if _amx_granted:
        return
    require("amx_tile", "asking Linux for the AMX tile state")
    if os.uname().machine != "x86_64":  # pragma: no cover  (amx_tile implies x86-64)
        raise TiletuneError(f"AMX tiles: arch_prctl is an x86-64 Linux call, this machine is {os.uname().machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                    ctypes.c_ulong(XFEATURE_XTILEDATA)) != 0:
        err = ctypes.get_errno()
        raise TiletuneError(f"AMX tiles: Linux refused the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, "
                            f"XFEATURE_XTILEDATA): {os.strerror(err)}; AMX needs Linux 5.16 or later)")
    bitmask = ctypes.c_ulong(0)
    if (libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_PERM), ctypes.byref(bitmask)) != 0
            or not bitmask.value >> XFEATURE_XTILEDATA & 1):
        raise TiletuneError("AMX tiles: Linux did not grant the tile state (ARCH_GET_XCOMP_PERM lacks XTILEDATA)")
    _amx_granted = True
