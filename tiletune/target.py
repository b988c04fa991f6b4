"""Targets as TVM JSON dicts; the host CPU is detected from /proc/cpuinfo."""
from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

from .errors import TiletuneError

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


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def host_target() -> dict[str, Any]:
    return {"kind": "llvm", "mcpu": host_mcpu(), "num-cores": host_cores()}


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
    return t


def target_key(t: dict[str, Any]) -> str:
    return json.dumps(t, sort_keys=True)
