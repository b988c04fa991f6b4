"""HardwareSpec: a target's compute and memory hierarchy as data.

``detect_cpu()`` reads this machine (``/proc/cpuinfo``, ``/sys/devices/system/cpu/cpu0/cache``) and measures
the memory bandwidth with a short stream-style numpy run; ``preset(name)`` gives a GPU (RTX 4090, A100,
H100, H200, Orin Nano, Titan Xp); ``load(path)`` / ``HardwareSpec.from_json`` read a user's own file.

Conventions (what the numbers mean):
- ``memory`` lists the levels from the fastest (registers) to the slowest (DRAM). A *private* level
  (``shared=False``: registers, L1, L2 of a CPU core; registers and shared memory of an SM) gives its size and
  bandwidth per core / per SM; a *shared* level (L3, GPU L2, DRAM) gives chip totals. ``size_bytes`` is
  ``None`` for DRAM (unbounded for tiling purposes). Latency is in nanoseconds, bandwidth in GB/s (1e9 B/s).
- ``peak_gflops`` = cores x simd_lanes x fma_units x 2 x freq_ghz (fp32; one FMA = 2 FLOPs).
- ``bank_count`` / ``bank_width_bytes``: GPU shared-memory banks (32 x 4 B). For a CPU there is no banked
  scratchpad; the analog we record (used only by Gensor's optional vThread action) is the L1 vector access:
  one vector load serves ``simd_lanes`` 4-byte "banks".

Choices for the CPU (written here because /proc does not tell them):
- FMA units per core: 2 when the ``fma`` flag is present (two FMA pipes on AMD Zen 2+ and Intel big cores),
  otherwise 1 (mul and add then still give 2 FLOPs per lane and cycle on separate pipes).
- Frequency: ``/sys/.../cpufreq/cpuinfo_max_freq``, else ``lscpu``'s "CPU max MHz", else ``/proc/cpuinfo``'s
  "cpu MHz" (the current clock; virtual machines report only this), else 2.0 GHz.
- Cache bandwidths are the theoretical per-core widths of current x86 cores (L1: 2 loads per cycle of one
  vector each; L2: 32 B/cycle; L3: 16 B/cycle); latencies are typical (registers 1, L1 4, L2 14, L3 50
  cycles, DRAM 90 ns). The DRAM bandwidth is measured (copy and triad over arrays twice the L3 size, one numpy thread
  per core, best of repeats, about 0.3 s), cached in ``~/.cache/tiletune/hardware.json`` keyed by CPU model
  and core count. Without measurement and without a cached value it is estimated as 10 GB/s per core
  (capped at 100 GB/s) and ``source`` says so.
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import TiletuneError
from .cpu_features import cpuinfo, host_mcpu

SCHEMA = 1
DEFAULT_CACHE = Path.home() / ".cache" / "tiletune" / "hardware.json"


@dataclass(frozen=True)
class MemoryLevel:
    """One level of the memory hierarchy (see the module docstring for per-core vs chip totals)."""

    name: str
    size_bytes: int | None
    bandwidth_gbs: float
    latency_ns: float
    line_bytes: int = 64
    shared: bool = False

    def access_time_ns(self, data_bytes: float) -> float:
        """Latency + data / bandwidth: the time to move ``data_bytes`` through this level."""
        return self.latency_ns + data_bytes / self.bandwidth_gbs  # GB/s == B/ns


def thread_registers(max_regs: int, regs_per_sm: int, threads: int) -> int:
    """The registers a thread of a block of ``threads`` may hold: the arch's per-thread limit, or its share of the
    SM's register file (allocated in units of 8), whichever is lower. TVM's CUDA kernels carry
    ``__launch_bounds__(threads)``, so beyond this ptxas spills to local memory."""
    return min(max_regs, regs_per_sm // max(threads, 1) // 8 * 8)


@dataclass(frozen=True)
class HardwareSpec:
    """Compute and memory of a target. ``cores`` are CPU cores or GPU SMs; ``simd_lanes`` fp32 lanes per
    vector (CPU) or the warp size (GPU)."""

    name: str
    kind: str  # "cpu" | "gpu"
    cores: int
    simd_lanes: int
    fma_units: int
    freq_ghz: float
    peak_gflops: float
    memory: tuple[MemoryLevel, ...]
    vector_registers: int = 0  # CPU: architectural vector registers
    warp_size: int = 0
    max_threads_per_block: int = 0
    max_threads_per_sm: int = 0
    registers_per_sm: int = 0
    registers_per_thread: int = 0
    shared_mem_per_sm: int = 0
    shared_mem_per_block: int = 0
    bank_count: int = 0
    bank_width_bytes: int = 4
    # GPU: dense half-precision tensor-core FLOPs per SM and clock, accumulating in fp32 (mma.sync); 0: none
    tensor_flops_per_clock_sm: int = 0
    source: dict = field(default_factory=dict, compare=False)

    # ---- lookups -------------------------------------------------------------------------------
    def level(self, name: str) -> MemoryLevel:
        for m in self.memory:
            if m.name.lower() == name.lower():
                return m
        raise TiletuneError(f"hardware {self.name}: no memory level {name!r}; levels: "
                            + ", ".join(m.name for m in self.memory))

    @property
    def dram_bandwidth_gbs(self) -> float:
        return self.memory[-1].bandwidth_gbs

    @property
    def caches(self) -> tuple[MemoryLevel, ...]:
        """The levels that have a capacity (all but DRAM), fastest first."""
        return tuple(m for m in self.memory if m.size_bytes is not None)

    # ---- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["memory"] = [asdict(m) for m in self.memory]
        d["schema"] = SCHEMA
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: Any, where: str = "hardware spec") -> "HardwareSpec":
        if not isinstance(d, dict):
            raise TiletuneError(f"{where}: expected a JSON object, got {type(d).__name__}")
        d = dict(d)
        d.pop("schema", None)
        required = ("name", "kind", "cores", "simd_lanes", "fma_units", "freq_ghz", "memory")
        missing = [k for k in required if k not in d]
        if missing:
            raise TiletuneError(f"{where}: missing field(s) {', '.join(missing)}; required: {', '.join(required)}")
        known = {f for f in cls.__dataclass_fields__}
        extra = sorted(set(d) - known)
        if extra:
            raise TiletuneError(f"{where}: unknown field(s) {', '.join(extra)}; accepted: {', '.join(sorted(known))}")
        if d["kind"] not in ("cpu", "gpu"):
            raise TiletuneError(f"{where}: kind must be 'cpu' or 'gpu', got {d['kind']!r}")
        mem = d["memory"]
        if not isinstance(mem, list) or not mem:
            raise TiletuneError(f"{where}: memory must be a non-empty list of levels, fastest first")
        levels = []
        mfields = set(MemoryLevel.__dataclass_fields__)
        for i, m in enumerate(mem):
            if not isinstance(m, dict) or not {"name", "size_bytes", "bandwidth_gbs", "latency_ns"} <= set(m):
                raise TiletuneError(f"{where}: memory[{i}] needs name, size_bytes, bandwidth_gbs, latency_ns")
            bad = sorted(set(m) - mfields)
            if bad:
                raise TiletuneError(f"{where}: memory[{i}] has unknown field(s) {', '.join(bad)}")
            try:
                lv = MemoryLevel(name=str(m["name"]),
                                 size_bytes=None if m["size_bytes"] is None else int(m["size_bytes"]),
                                 bandwidth_gbs=float(m["bandwidth_gbs"]), latency_ns=float(m["latency_ns"]),
                                 line_bytes=int(m.get("line_bytes", 64)), shared=bool(m.get("shared", False)))
            except (TypeError, ValueError) as e:
                raise TiletuneError(f"{where}: memory[{i}]: {e}") from None
            if lv.bandwidth_gbs <= 0 or lv.latency_ns < 0 or (lv.size_bytes is not None and lv.size_bytes <= 0):
                raise TiletuneError(f"{where}: memory[{i}] ({lv.name}): sizes and bandwidths must be positive")
            levels.append(lv)
        if any(lv.size_bytes is None for lv in levels[:-1]):
            raise TiletuneError(f"{where}: only the last (slowest) memory level may have size_bytes null")
        d["memory"] = tuple(levels)
        try:
            for k in ("cores", "simd_lanes", "fma_units", "vector_registers", "warp_size", "max_threads_per_block",
                      "max_threads_per_sm", "registers_per_sm", "registers_per_thread", "shared_mem_per_sm",
                      "shared_mem_per_block", "bank_count", "bank_width_bytes"):
                if k in d:
                    d[k] = int(d[k])
            d["freq_ghz"] = float(d["freq_ghz"])
            if "peak_gflops" not in d:
                d["peak_gflops"] = peak_gflops(d["cores"], d["simd_lanes"], d["fma_units"], d["freq_ghz"])
            d["peak_gflops"] = float(d["peak_gflops"])
        except (TypeError, ValueError) as e:
            raise TiletuneError(f"{where}: {e}") from None
        if d["cores"] < 1 or d["simd_lanes"] < 1 or d["freq_ghz"] <= 0 or d["peak_gflops"] <= 0:
            raise TiletuneError(f"{where}: cores, simd_lanes, freq_ghz and peak_gflops must be positive")
        if not isinstance(d.get("source", {}), dict):
            raise TiletuneError(f"{where}: source must be an object")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str, where: str = "hardware spec") -> "HardwareSpec":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise TiletuneError(f"{where}: not valid JSON ({e})") from None
        return cls.from_dict(d, where)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


def load(path: str | Path) -> HardwareSpec:
    """Read a HardwareSpec JSON file (as written by ``to_json`` or ``tiletune hardware -o``)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise TiletuneError(f"cannot read hardware spec {p}: {e.strerror}") from None
    return HardwareSpec.from_json(text, where=str(p))


def peak_gflops(cores: int, lanes: int, fma_units: int, freq_ghz: float) -> float:
    """cores x lanes x fma_units x 2 FLOPs x freq (GHz) -> GFLOP/s."""
    return float(cores * lanes * fma_units * 2 * freq_ghz)


# ---- CPU detection ----------------------------------------------------------------------------------
def _cpuinfo() -> dict[str, str]:
    return cpuinfo()


def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.I)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]


def _read_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[int, tuple[int, int]]:
    """{level: (size_bytes, line_bytes)} for data/unified caches."""
    out: dict[int, tuple[int, int]] = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return out
    for e in entries:
        if not e.startswith("index"):
            continue
        d = os.path.join(root, e)
        try:
            level = int(open(os.path.join(d, "level")).read())
            ctype = open(os.path.join(d, "type")).read().strip()
            size = _parse_size(open(os.path.join(d, "size")).read())
            line = int(open(os.path.join(d, "coherency_line_size")).read())
        except (OSError, ValueError):
            continue
        if ctype == "Instruction" or size is None:
            continue
        out[level] = (size, line)
    return out


def _frequency_ghz(info: dict[str, str]) -> tuple[float, str]:
    try:
        khz = int(open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read())
        if khz > 0:
            return khz / 1e6, "sysfs cpuinfo_max_freq"
    except (OSError, ValueError):
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        m = re.search(r"CPU max MHz:\s*([\d.]+)", out)
        if m and float(m.group(1)) > 0:
            return float(m.group(1)) / 1e3, "lscpu CPU max MHz"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        mhz = float(info.get("cpu MHz", ""))
        if mhz > 0:
            return mhz / 1e3, "/proc/cpuinfo cpu MHz (current clock)"
    except ValueError:
        pass
    return 2.0, "fallback 2.0 GHz (no frequency found)"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def cpu_model_key(cores: int | None = None) -> str:
    info = _cpuinfo()
    return f"{info.get('model name', 'unknown cpu')}|{cores or _cores()} cores"


def measure_bandwidth(seconds: float = 0.3, nbytes: int | None = None, threads: int | None = None) -> float:
    """Stream-style DRAM bandwidth in GB/s, the best over repeats (for about ``seconds``) of
    copy (b = a: 2 array streams) and triad (b = a + 0.5 c, done as two numpy ufuncs with ``out=``:
    b = 0.5 c then b += a, 2 + 3 = 5 array streams), one thread per core on its own slice (numpy releases
    the GIL in copies and ufunc loops). Arrays are float64 of ``nbytes`` each (default 2 x L3, at least
    64 MiB), so they do not fit any cache."""
    import numpy as np

    threads = threads or _cores()
    if nbytes is None:
        l3 = max((s for s, _ in _read_caches().values()), default=32 * 1024**2)
        nbytes = max(64 * 1024**2, 2 * l3)
    n = nbytes // 8
    a = np.ones(n)
    b = np.empty(n)
    c = np.full(n, 0.5)
    bounds = np.linspace(0, n, threads + 1).astype(int)
    slices = [slice(bounds[i], bounds[i + 1]) for i in range(threads)]

    def run_parallel(fn) -> float:
        ts = [threading.Thread(target=fn, args=(s,)) for s in slices]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return time.perf_counter() - t0

    def copy(s):
        np.copyto(b[s], a[s])

    def triad(s):  # b = a + 0.5 * c, done as b = c * 0.5 (2 streams) then b += a (3 streams)
        np.multiply(c[s], 0.5, out=b[s])
        np.add(b[s], a[s], out=b[s])

    best = 0.0
    deadline = time.perf_counter() + seconds
    run_parallel(copy)  # touch pages
    while True:
        t = run_parallel(copy)
        best = max(best, 2 * nbytes / t / 1e9)
        t = run_parallel(triad)
        best = max(best, 5 * nbytes / t / 1e9)  # 2 + 3 array streams
        if time.perf_counter() >= deadline:
            break
    return best


def _read_cache_file(path: Path) -> dict:
    try:
        d = json.loads(path.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def detect_cpu(measure_bandwidth: bool = True, cache: bool = True,
               cache_path: str | Path | None = None) -> HardwareSpec:
    """This machine's CPU. With ``cache``, a spec measured before for the same CPU model and core count is
    read from (and a newly measured one written to) ``cache_path`` (default ~/.cache/tiletune/hardware.json).
    With ``measure_bandwidth=False`` and no cached measurement the DRAM bandwidth is an estimate."""
    path = Path(cache_path) if cache_path is not None else DEFAULT_CACHE
    cores = _cores()
    key = cpu_model_key(cores)
    if cache:
        entry = _read_cache_file(path).get(key)
        if entry is not None:
            try:
                return HardwareSpec.from_dict(entry, where=f"{path} [{key}]")
            except TiletuneError:
                pass  # stale or hand-broken entry: detect again
    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    if "avx512f" in flags:
        lanes, vregs, isa = 16, 32, "avx512f"
    elif "avx2" in flags or "avx" in flags:
        lanes, vregs, isa = 8, 16, "avx2" if "avx2" in flags else "avx"
    elif "asimd" in flags or "neon" in flags:
        lanes, vregs, isa = 4, 32, "neon"
    else:
        lanes, vregs, isa = 4, 16, "sse"
    fma = 2 if ("fma" in flags or "asimd" in flags) else 1
    freq, fsrc = _frequency_ghz(info)
    freq = round(freq, 4)
    caches = _read_caches()
    line = next((ln for _, ln in caches.values()), 64)
    vec_bytes = lanes * 4
    cyc = 1.0 / freq  # ns per cycle
    levels = [MemoryLevel("register", vregs * vec_bytes, 3 * vec_bytes * freq, cyc, vec_bytes, False)]
    per_cycle = {1: 2 * vec_bytes, 2: 32, 3: 16}
    lat_cycles = {1: 4, 2: 14, 3: 50}
    defaults = {1: 32 * 1024, 2: 512 * 1024, 3: 8 * 1024**2}
    for lv in (1, 2, 3):
        size, ln = caches.get(lv, (defaults[lv], line))
        bw = per_cycle[lv] * freq * (cores if lv == 3 else 1)
        levels.append(MemoryLevel(f"L{lv}", size, bw, lat_cycles[lv] * cyc, ln, lv == 3))
    source = {"frequency": fsrc, "isa": isa, "caches": "sysfs" if caches else "defaults (sysfs unreadable)",
              "fma_units": "2 if the fma flag is present (two FMA pipes on Zen/Intel big cores), else 1",
              "cache_bandwidths": "theoretical per-core widths (L1 2 vector loads, L2 32 B, L3 16 B per cycle)",
              "latencies": "typical cycles (register 1, L1 4, L2 14, L3 50), DRAM 90 ns"}
    if measure_bandwidth:
        dram = measure_bandwidth_fn()
        source["dram_bandwidth"] = "measured (stream copy/triad, numpy, one thread per core)"
    else:
        dram = min(10.0 * cores, 100.0)
        source["dram_bandwidth"] = "estimated 10 GB/s per core (not measured)"
    levels.append(MemoryLevel("DRAM", None, dram, 90.0, line, True))
    spec = HardwareSpec(
        name=info.get("model name", "cpu"), kind="cpu", cores=cores, simd_lanes=lanes, fma_units=fma,
        freq_ghz=freq, peak_gflops=peak_gflops(cores, lanes, fma, freq), memory=tuple(levels),
        vector_registers=vregs, bank_count=lanes, bank_width_bytes=4, source=source,
    )
    if cache and measure_bandwidth:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            d = _read_cache_file(path)
            d[key] = spec.to_dict()
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(d, indent=2))
            tmp.replace(path)
        except OSError:
            pass
    return spec


measure_bandwidth_fn = measure_bandwidth  # detect_cpu's parameter shadows the function name


# ---- GPU presets ------------------------------------------------------------------------------------
def _gpu(name: str, *, sms: int, clock_ghz: float, cores_per_sm: int, max_threads_sm: int, smem_sm_kib: int,
         smem_block_kib: int, l2_mib: float, dram_gbs: float, l2_lat_cycles: int, dram_lat_cycles: int,
         smem_lat_cycles: int = 30, tensor_clk_sm: int = 0, arch: str = "", note: str = "") -> HardwareSpec:
    cyc = 1.0 / clock_ghz
    regs = 65536
    lanes = 32
    fma_units = cores_per_sm // lanes  # warp-wide FMA issue per SM and cycle
    smem_bw = 32 * 4 * clock_ghz  # 32 banks x 4 B per cycle per SM
    memory = (
        MemoryLevel("register", regs * 4, 3 * cores_per_sm * 4 * clock_ghz, cyc, 4, False),
        MemoryLevel("shared", smem_sm_kib * 1024, smem_bw, smem_lat_cycles * cyc, 128, False),
        MemoryLevel("L2", int(l2_mib * 1024**2), 2.5 * dram_gbs, l2_lat_cycles * cyc, 128, True),
        MemoryLevel("DRAM", None, dram_gbs, dram_lat_cycles * cyc, 128, True),
    )
    return HardwareSpec(
        name=name, kind="gpu", cores=sms, simd_lanes=lanes, fma_units=fma_units, freq_ghz=clock_ghz,
        peak_gflops=peak_gflops(sms, lanes, fma_units, clock_ghz), memory=memory, warp_size=32,
        max_threads_per_block=1024, max_threads_per_sm=max_threads_sm, registers_per_sm=regs,
        registers_per_thread=255, shared_mem_per_sm=smem_sm_kib * 1024, shared_mem_per_block=smem_block_kib * 1024,
        bank_count=32, bank_width_bytes=4, tensor_flops_per_clock_sm=tensor_clk_sm,
        source={"preset": name, "arch": arch, "numbers": "vendor data sheets (SMs, boost clock, memory, dense "
                "fp16 tensor FLOPs with fp32 accumulation); latencies from published microbenchmarks; L2 bandwidth "
                "taken as 2.5x DRAM"
                + (f"; {note}" if note else "")},
    )


_PRESETS = {
    "rtx4090": lambda: _gpu("NVIDIA GeForce RTX 4090", sms=128, clock_ghz=2.52, cores_per_sm=128, max_threads_sm=1536,
                            smem_sm_kib=100, smem_block_kib=99, l2_mib=72, dram_gbs=1008, l2_lat_cycles=270,
                            dram_lat_cycles=560, tensor_clk_sm=512, arch="sm_89"),
    "a100": lambda: _gpu("NVIDIA A100 SXM4 80GB", sms=108, clock_ghz=1.41, cores_per_sm=64, max_threads_sm=2048,
                         smem_sm_kib=164, smem_block_kib=163, l2_mib=40, dram_gbs=2039, l2_lat_cycles=200,
                         dram_lat_cycles=470, tensor_clk_sm=2048, arch="sm_80"),
    "h100": lambda: _gpu("NVIDIA H100 SXM5 80GB", sms=132, clock_ghz=1.98, cores_per_sm=128, max_threads_sm=2048,
                         smem_sm_kib=228, smem_block_kib=227, l2_mib=50, dram_gbs=3350, l2_lat_cycles=260,
                         dram_lat_cycles=480, tensor_clk_sm=4096, arch="sm_90"),
    "h200": lambda: _gpu("NVIDIA H200 SXM 141GB", sms=132, clock_ghz=1.98, cores_per_sm=128, max_threads_sm=2048,
                         smem_sm_kib=228, smem_block_kib=227, l2_mib=50, dram_gbs=4800, l2_lat_cycles=260,
                         dram_lat_cycles=480, tensor_clk_sm=4096, arch="sm_90"),
    "orin-nano": lambda: _gpu("NVIDIA Jetson Orin Nano 8GB", sms=8, clock_ghz=0.625, cores_per_sm=128,
                              max_threads_sm=1536, smem_sm_kib=164, smem_block_kib=163, l2_mib=2, dram_gbs=68,
                              l2_lat_cycles=200, dram_lat_cycles=400, tensor_clk_sm=2048, arch="sm_87",
                              note="625 MHz GPU clock of the original 15 W mode (1.28 TFLOPS fp32)"),
    "titan-xp": lambda: _gpu("NVIDIA TITAN Xp", sms=30, clock_ghz=1.582, cores_per_sm=128, max_threads_sm=2048,
                             smem_sm_kib=96, smem_block_kib=48, l2_mib=3, dram_gbs=547.7, l2_lat_cycles=220,
                             dram_lat_cycles=500, smem_lat_cycles=24, arch="sm_61"),
}
_ALIASES = {"4090": "rtx4090", "rtx-4090": "rtx4090", "orin": "orin-nano", "orinnano": "orin-nano",
            "titanxp": "titan-xp", "titan_xp": "titan-xp", "orin_nano": "orin-nano"}
_ARCH = {"sm_89": "rtx4090", "sm_80": "a100", "sm_90": "h100", "sm_90a": "h100", "sm_87": "orin-nano", "sm_61": "titan-xp"}


def presets() -> list[str]:
    return sorted(_PRESETS)


def preset(name: str) -> HardwareSpec:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _PRESETS:
        raise TiletuneError(f"unknown hardware preset {name!r}; presets: {', '.join(presets())}")
    return _PRESETS[key]()


def for_target(target: dict[str, Any], measure_bandwidth: bool = True, cache: bool = True) -> HardwareSpec:
    """The HardwareSpec of a target dict: ``{"kind": "llvm", ...}`` -> this CPU (``num-cores`` overrides the
    detected core count and the peak); ``{"kind": "cuda", "arch": "sm_XX"}`` -> the preset of that
    architecture (sm_90 -> h100); a ``"hardware"`` entry naming a preset or a JSON file wins."""
    if not isinstance(target, dict):
        raise TiletuneError(f"target must be a dict, got {target!r}")
    hw = target.get("hardware")
    if isinstance(hw, str):
        return load(hw) if (hw.endswith(".json") or os.path.sep in hw) else preset(hw)
    kind = target.get("kind")
    if kind == "cuda":
        arch = str(target.get("arch", "sm_90"))
        if arch not in _ARCH:
            raise TiletuneError(f"no hardware preset for CUDA arch {arch!r}; known: "
                                + ", ".join(f"{a} ({p})" for a, p in sorted(_ARCH.items()))
                                + "; or give \"hardware\": PRESET|FILE in the target")
        return preset(_ARCH[arch])
    if kind == "llvm":
        spec = detect_cpu(measure_bandwidth=measure_bandwidth, cache=cache)
        n = target.get("num-cores")
        if isinstance(n, int) and n >= 1 and n != spec.cores:
            spec = replace(spec, cores=n, peak_gflops=peak_gflops(n, spec.simd_lanes, spec.fma_units, spec.freq_ghz))
        return spec
    raise TiletuneError(f"target kind must be 'llvm' or 'cuda', got {kind!r}")


# ---- the vector register file of a CPU target -------------------------------------------------------
# LLVM CPU names by vector ISA: AVX-512 cores have 32 zmm registers of 16 fp32 lanes, AVX2/AVX cores 16 ymm
# registers of 8 (both are architectural facts of the ISA, not of one core).
_AVX512_MCPU = frozenset([
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server", "tigerlake",
    "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids",
    "znver4", "znver5", "x86-64-v4", "knl", "knm"])
_AVX2_MCPU = frozenset([
    "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake",
    "gracemont", "sierraforest", "grandridge", "znver1", "znver2", "znver3", "bdver4", "x86-64-v3",
    "sandybridge", "ivybridge", "btver2", "bdver1", "bdver2", "bdver3"])


def vector_file(target: dict[str, Any] | None = None) -> tuple[int, int]:
    """(architectural vector registers, fp32 lanes per register) of an LLVM CPU target: from its ``mcpu``
    when it names a known AVX-512 (32 x 16) or AVX2/AVX (16 x 8) CPU, from its ``"hardware"`` entry when
    it has one, else this machine's (``detect_cpu``, which reads the ISA flags; nothing is measured)."""
    t = target if isinstance(target, dict) else {}
    mcpu = t.get("mcpu")
    if mcpu in _AVX512_MCPU:
        return 32, 16
    if mcpu in _AVX2_MCPU:
        return 16, 8
    if t.get("hardware") is not None:
        spec = for_target(t, measure_bandwidth=False)
    else:
        spec = _host_spec()
    return (spec.vector_registers or 16), max(1, spec.simd_lanes)


def l2_bytes(target: dict[str, Any] | None = None) -> int | None:
    """Bytes of one core's L2 on an LLVM CPU target: from its ``"hardware"`` entry when it has one; this machine's
    (``detect_cpu``, nothing measured) when the target is this machine's CPU (no ``mcpu``, or the host's); else None
    (another CPU, whose caches we do not know)."""
    t = target if isinstance(target, dict) else {}
    if t.get("hardware") is not None:
        spec = for_target(t, measure_bandwidth=False)
    elif t.get("mcpu") in (None, host_mcpu()):
        spec = _host_spec()
    else:
        return None
    try:
        return spec.level("L2").size_bytes
    except TiletuneError:
        return None


@functools.cache
def _host_spec() -> HardwareSpec:
    return detect_cpu(measure_bandwidth=False)
