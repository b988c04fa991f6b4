"""The seven analytical features of TVM-AF-DS (Li et al., "Accelerated Auto-Tuning of GPU Kernels for
Tensor Computations", ICS'24, section 4: Ansor-AF).

The paper replaces Ansor's 164 program features by seven numbers computed from the workload, the
configuration (the tile sizes T) and the hardware, with no code generation:

==================  ==========================================  ===========================================
feature             GPU (the paper)                             CPU counterpart (this module, kind "llvm")
==================  ==========================================  ===========================================
OI_Global_Mem       arithmetic ops / global->shared             arithmetic ops / cache lines moved into L1
                    transactions (128-B lines), block tile      from L2/L3/DRAM, for the largest loop-body
                                                                tile that fits L1
OI_Shared_Mem       arithmetic ops / shared->register           arithmetic ops / L1->vector-register loads
                    transactions: warp loads x bank-conflict    and accumulator round trips; strided vector
                    degree (estimated from access strides)      loads cost min(stride, lanes) (gather)
Reg_Reuse_Factor    arithmetic ops / elements loaded into       the same, with the CPU register tile
                    registers (register-tile reuse)             S3 x R1
ILP                 independent accumulators per thread         independent vector FMA chains in the
                    (register tile x vthreads), scaled down     register tile, spill-penalised against the
                    when registers/thread exceed the limit      vector register file
WLP                 active warps per SM, limited by registers   active threads: min(parallel tasks, cores);
                    per thread, shared memory per block,        a CPU core has no register/scratchpad
                    threads per SM (and 32 blocks per SM)       partition that limits co-residence
Estimated_Occupancy active warps (also limited by the grid) /   fraction of the FMA issue slots kept busy:
                    max warps per SM                            active cores x vector-lane use x
                                                                min(1, ILP / (FMA units x FMA latency))
Wave_Efficiency     (m/n) / ceil(m/n), m blocks on n SMs        (m/n) / ceil(m/n), m parallel tasks (S0
                                                                tiles) on n cores
==================  ==========================================  ===========================================

Meaning of the tiles. A spatial axis is split [S0, S1, S2, S3] and a reduction axis [R0, R1] (factors
outermost first; ``Space.from_axes`` with levels (4, 2)).

- cuda (the paper's setting, Ansor's GPU sketch): S0 = blockIdx (m = prod S0 blocks), S1 = vthread,
  S2 = threadIdx (threads per block = prod S2), S3 = per-thread register tile; R0 = shared-memory staging
  steps, R1 = the reduction chunk staged per step. Block (shared-memory) tile: S1 S2 S3 x R1 per axis;
  per-thread register tile: the thread's S1 S3 accumulators (S3 tile and its vthread copies, as the
  accumulator of ``schedules/cuda.py`` covers S1*S3) and their operands for one reduction step.
- llvm (tiletune's CPU template, loop order S0 S1 R0 S2 R1 S3): S3 x R1 = register tile (the innermost S3
  of the last spatial axis is vectorized), S2 S3 x R1 = L1 tile, S1 = L2 level, S0 = parallel tasks
  fused over the cores.
- Other level counts: spatial [f0 .. f(L-1)]: S0 = f0, S3 = f(L-1) (L >= 2), S2 = f(L-2) (L >= 3),
  S1 = the product of the rest; reduction: R1 = last factor (L >= 2), R0 = the product of the others.

Why these CPU counterparts (the memory spaces map one to one: GPU global memory -> the CPU's memory
system beyond L1 (L2, L3, DRAM are transparent caches/memory as the GPU's L2 is); shared memory ->
L1 (small, private to one core as shared memory is to one SM, and the buffer the register tile streams
from); registers -> vector registers):

- OI_Global_Mem. On a GPU the block tile is loaded into shared memory explicitly, so the traffic is what
  the schedule says. A CPU cache is implicit: a tile's data stays resident only if the tile fits.
  The candidates are the loop-body tiles of the nest S0 S1 R0 S2 R1 S3, inner to outer:
  {S3 x 1}, {S3 x R1}, {S2 S3 x R1} (R0 body), {S2 S3 x R0 R1} (S1 body), {S1 S2 S3 x R} (S0 body, one
  core's task), and the whole iteration space; the largest whose footprint (in whole lines) fits L1 is
  the reuse tile, and the traffic is the access model's Q(t) (``workloads.access``: inputs loaded once per
  tile of the iteration space, outputs once per spatial tile) in lines. The GPU uses Q(block tile) in
  128-byte transactions (coalesced rows), no capacity test (the kernel would not launch).
- OI_Shared_Mem. GPU: every thread loads its register tile's operands for each reduction step,
  Q({S1 S3 x 1}) elements in total; a warp issues one load per 32 of them and pays the bank-conflict degree
  of that tensor: the 32 lanes of the first warp (threadIdx of the last spatial axis fastest) are
  placed at their tile origins in the row-major shared tile, and the degree is the largest number of
  distinct 4-byte words falling in one of the 32 banks (1 for a broadcast). CPU: the analog of a bank
  conflict is a vector load that is not contiguous (the hardware spec records one vector load as serving
  ``simd_lanes`` 4-byte "banks"): per reduction step, an input contiguous along the vectorized axis costs
  ceil(S3/lanes) vector loads per row, an input that does not depend on it costs one broadcast load per
  element, any other stride s costs min(s, lanes) loads per vector (a gather); the accumulator
  (S3 tile) is loaded and stored once per {S3 x R1} tile (the local accumulator lives in L1 across R0).
- Reg_Reuse_Factor. The notes call it the OI of the register level; here: arithmetic ops per element moved
  into registers (inputs at the register tile per reduction step; on the CPU also the accumulator round trips), with no
  warp, bank or lane effects, so that it measures the register tile's reuse alone (a GEMM tile a x b
  gives 2ab / (a + b)).
- ILP. GPU: independent accumulators per thread, prod(S1 S3) (vthreads are unrolled into the thread),
  scaled by 255 / registers when the estimated registers per thread (accumulators + one operand
  fragment per input tile + 10 for indices and addresses) exceed the 255-register limit (spills). CPU:
  independent FMA chains = accumulator vectors prod(S3 of the other spatial axes) x ceil(S3_last/lanes),
  the analog of the vector register file being the register budget: with R = vector_registers minus
  one operand register per input, a tile of a > R accumulators spills and counts R^2 / a.
- WLP. GPU: warps per SM = blocks per SM x warps per block, blocks per SM = min(32,
  threads per SM / threads per block, registers per SM / (registers per thread rounded up to 8 x threads
  per block), shared memory per SM / shared memory per block); 0 when the block is not launchable (more
  than max threads per block, more than min(preset, 48 KiB) of shared memory (TVM's static launch
  limit), or more than 8 vthreads, the limits of ``schedules/cuda.py``). CPU: one thread per core,
  and nothing partitions a core's registers or L1 between threads, so the only limit is the number of
  parallel tasks: min(prod S0, cores).
- Estimated_Occupancy. GPU: min(blocks per SM from resources, ceil(m/n) from the grid) x warps per block /
  (max threads per SM / 32). CPU: the share of the machine's FMA slots that can be busy, the product of
  active cores / cores, vector-lane use S3_last / (ceil(S3_last/lanes) lanes), and
  min(1, ILP / (FMA units x 4)) (4 cycles of FMA latency must be covered by independent chains).
- Wave_Efficiency. Exactly the paper's (m/n) / ceil(m/n) (1 when m = 0 cannot happen: m >= 1).

Choice knobs: ``pack`` (CPU, GEMM/batch_matmul) makes the packed inputs' tiles contiguous panels, so their
tile is rounded up to whole lines as one block instead of row by row; ``unroll`` is not visible to the
seven features (as in the paper, whose features describe the tiles only).

The tensor-core template's space (``tiletune.schedules.cuda_mma``: block, warp and k-chunk tiles as choice knobs)
gets the same seven features from its kernel's model (``mma_features``).

``analytical_features(...)`` gives one vector; ``AnalyticalExtractor`` is the cached batch extractor with
the interface of ``tiletune.features`` extractors (``extract(configs)``, ``dim``, ``stats``, ``close``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..analytic.mma import MmaModel
from ..analytic.wgmma import WgmmaModel, wgmma_features
from ..errors import TiletuneError
from ..hardware import HardwareSpec, detect_cpu, for_target
from ..schedules import cuda_mma, cuda_wgmma
from ..space import ChoiceKnob, Config, Space
from ..workloads.access import TensorAccess, tensor_accesses, tile_counts
from ..workloads.base import Axis
from .base import FeatureExtractor

FEATURE_NAMES = ("OI_Global_Mem", "OI_Shared_Mem", "Reg_Reuse_Factor", "ILP", "WLP", "Estimated_Occupancy",
                 "Wave_Efficiency")
N_FEATURES = len(FEATURE_NAMES)
FMA_LATENCY_CYCLES = 4  # CPU: independent chains needed per FMA unit
GPU_REG_OVERHEAD = 10  # registers per thread for indices and addresses
GPU_MAX_BLOCKS_PER_SM = 32
GPU_MAX_REGS_PER_THREAD = 255
GPU_STATIC_SMEM = 48 * 1024  # TVM's static shared-memory launch limit (as schedules/cuda.py)
GPU_MAX_VTHREAD = 8  # TVM's max_vthread_extent (as schedules/cuda.py)


@dataclass(frozen=True)
class Levels:
    """Per-axis tile factors by role: S0..S3 for spatial axes, R0/R1 for reduction axes."""

    s0: dict[str, int]
    s1: dict[str, int]
    s2: dict[str, int]
    s3: dict[str, int]
    r0: dict[str, int]
    r1: dict[str, int]
    choices: dict[str, Any]


def split_levels(space: Space, config: Config, axes: Sequence[Axis]) -> Levels:
    """Read S0..S3 / R0, R1 from a configuration (see the module docstring for other level counts);
    an axis without a split knob counts as untiled (all in S0 / R0)."""
    d = dict(zip(space.names, config.values))
    s0, s1, s2, s3, r0, r1 = {}, {}, {}, {}, {}, {}
    by_axis = {k.axis: k for _, k in space.split_knobs}
    for a in axes:
        k = by_axis.get(a.name)
        f = tuple(d[k.name]) if k is not None else (a.extent,)
        if a.kind == "S":
            L = len(f)
            s0[a.name] = f[0]
            s3[a.name] = f[-1] if L >= 2 else 1
            s2[a.name] = f[-2] if L >= 3 else 1
            s1[a.name] = math.prod(f[1:-2]) if L >= 4 else 1
        else:
            r1[a.name] = f[-1] if len(f) >= 2 else 1
            r0[a.name] = math.prod(f[:-1]) if len(f) >= 2 else f[0]
    choices = {k.name: v for k, v in zip(space.knobs, config.values) if isinstance(k, ChoiceKnob)}
    return Levels(s0, s1, s2, s3, r0, r1, choices)


def _mul(*ds: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in ds:
        for k, v in d.items():
            out[k] = out.get(k, 1) * v
    return out


def wave_efficiency(m: int, n: int) -> float:
    """The paper's (m/n) / ceil(m/n) for m blocks (tasks) on n SMs (cores)."""
    if m < 1 or n < 1:
        raise ValueError("wave efficiency needs m >= 1 blocks and n >= 1 processors")
    return (m / n) / math.ceil(m / n)


# ---- the data-movement helpers (on top of workloads.access) ------------------------------------------
def _tensor_traffic(t: TensorAccess, axes: Sequence[Axis], tiles: Mapping[str, int], unit: int,
                    contiguous: bool = False) -> float:
    """Q(t) of one tensor in transfer units of ``unit`` elements (see workloads.access.traffic_bytes); a
    ``contiguous`` (packed) tile is rounded up to whole units as one block."""
    allt, sp = tile_counts(axes, tiles)
    if contiguous:
        units = math.ceil(t.tile_elements(tiles) / unit)
    else:
        units = t.tile_elements(tiles, unit) / unit
    return units * (allt if t.role == "input" else sp)


def _footprint_units(acc: Sequence[TensorAccess], tiles: Mapping[str, int], unit: int, packed: set[str]) -> float:
    tot = 0.0
    for t in acc:
        tot += math.ceil(t.tile_elements(tiles) / unit) * unit if t.name in packed else t.tile_elements(tiles, unit)
    return tot


def _axis_stride(t: TensorAccess, axis: str) -> int | None:
    """Elements between neighbours along ``axis`` in the row-major tensor (None if it does not index it)."""
    stride, inner = None, 1
    for d in reversed(t.dims):
        for a, c in d.terms:
            if a == axis:
                stride = (stride or 0) + c * inner
        inner *= d.size
    return stride


# ---- CPU ---------------------------------------------------------------------------------------------
def cpu_features(acc: Sequence[TensorAccess], axes: Sequence[Axis], lv: Levels, flops: float,
                 hw: HardwareSpec) -> np.ndarray:
    spatial = [a.name for a in axes if a.kind == "S"]
    red = [a.name for a in axes if a.kind == "R"]
    full_r = {a.name: a.extent for a in axes if a.kind == "R"}
    ones_r = {r: 1 for r in red}
    lanes = max(1, hw.simd_lanes)
    dtype = acc[0].dtype_bytes if acc else 4
    l1 = next((m for m in hw.memory if m.name.lower() == "l1"), hw.caches[1] if len(hw.caches) > 1 else hw.memory[0])
    line = max(1, l1.line_bytes // dtype)
    packed = _packed(acc, axes) if lv.choices.get("pack") else set()
    inputs = [t for t in acc if t.role == "input"]
    outputs = [t for t in acc if t.role == "output"]

    # loop-body tiles of S0 S1 R0 S2 R1 S3, inner to outer
    t_reg = _mul(lv.s3) | ones_r
    t_s2 = _mul(lv.s3) | dict(lv.r1)
    t_l1 = _mul(lv.s2, lv.s3) | dict(lv.r1)
    t_s1 = _mul(lv.s2, lv.s3) | full_r
    t_core = _mul(lv.s1, lv.s2, lv.s3) | full_r
    t_all = {a.name: a.extent for a in axes}
    cands = [t_reg, t_s2, t_l1, t_s1, t_core, t_all]
    reuse = t_reg
    for t in cands:
        if _footprint_units(acc, t, line, packed) * dtype <= l1.size_bytes:
            reuse = t
    lines = sum(_tensor_traffic(t, axes, reuse, line, t.name in packed) for t in acc)
    oi_global = flops / max(lines, 1.0)

    # L1 -> registers (vectorized axis = the last spatial axis)
    vax = spatial[-1] if spatial else None
    allt_reg, _ = tile_counts(axes, t_reg)
    allt_s2, _ = tile_counts(axes, t_s2)
    loads = 0.0
    elems = 0.0
    for t in inputs:
        n = t.tile_elements(t_reg)
        elems += n * allt_reg
        s = _axis_stride(t, vax) if vax else None
        v = lv.s3.get(vax, 1) if vax else 1
        if s is None or s == 0 or v == 1:  # broadcast (or scalar code): one load per element
            per_tile = n
        elif s == 1 or t.name in packed:  # contiguous vectors along the vectorized axis
            per_tile = (n / v) * math.ceil(v / lanes)
        else:  # gather: min(stride, lanes) loads per vector
            per_tile = (n / v) * math.ceil(v / lanes) * min(s, lanes)
        loads += per_tile * allt_reg
    for t in outputs:  # accumulator load + store once per {S3 x R1} tile
        n = t.tile_elements(t_s2)
        v = lv.s3.get(vax, 1) if vax else 1
        loads += 2 * (n / v) * math.ceil(v / lanes) * allt_s2
        elems += 2 * n * allt_s2
    oi_shared = flops / max(loads, 1.0)
    reg_reuse = flops / max(elems, 1.0)

    # ILP: independent vector accumulators of the register tile
    v = lv.s3.get(vax, 1) if vax else 1
    acc_vectors = math.prod(lv.s3.get(a, 1) for a in spatial[:-1]) * math.ceil(v / lanes)
    R = max(1, (hw.vector_registers or 16) - len(inputs))
    ilp = float(acc_vectors) if acc_vectors <= R else R * R / acc_vectors

    m = math.prod(lv.s0.values()) if lv.s0 else 1
    cores = max(1, hw.cores)
    wlp = float(min(m, cores))
    lane_use = v / (math.ceil(v / lanes) * lanes)
    occupancy = (wlp / cores) * lane_use * min(1.0, ilp / (max(1, hw.fma_units) * FMA_LATENCY_CYCLES))
    wave = wave_efficiency(m, cores)
    return np.asarray([oi_global, oi_shared, reg_reuse, ilp, wlp, occupancy, wave], dtype=np.float64)


def _packed(acc: Sequence[TensorAccess], axes: Sequence[Axis]) -> set[str]:
    """Inputs the CPU template packs (same rule as schedules.cpu.packable_inputs, from the accesses)."""
    spatial = [a.name for a in axes if a.kind == "S"]
    reduction = {a.name for a in axes if a.kind == "R"}
    out = set()
    if not spatial or not reduction:
        return out
    for t in acc:
        if t.role != "input":
            continue
        plain = all(len(d.terms) == 1 and d.terms[0][1] == 1 for d in t.dims)
        names = [d.terms[0][0] for d in t.dims] if plain else []
        if plain and names and names[-1] == spatial[-1] and reduction & set(names):
            out.add(t.name)
    return out


# ---- GPU ---------------------------------------------------------------------------------------------
def bank_conflict_degree(t: TensorAccess, axes: Sequence[Axis], lv: Levels, block_tile: Mapping[str, int],
                         warp: int = 32, banks: int = 32) -> int:
    """Largest number of distinct words in one bank when the first warp's lanes read the first element
    of their register tiles of tensor ``t`` from its row-major shared-memory tile (1 = no conflict or a
    broadcast)."""
    spatial = [a.name for a in axes if a.kind == "S"]
    ext = [d.tile_extent(block_tile) for d in t.dims]
    strides = [1] * len(ext)
    for i in range(len(ext) - 2, -1, -1):
        strides[i] = strides[i + 1] * ext[i + 1]
    threads = [lv.s2.get(a, 1) for a in spatial]
    nthreads = math.prod(threads)
    words_per_bank: dict[int, set[int]] = {}
    for lane in range(min(warp, nthreads)):
        coord, rest = {}, lane
        for a, n in zip(reversed(spatial), reversed(threads)):  # last spatial axis fastest
            rest, c = divmod(rest, n)
            coord[a] = c * lv.s3.get(a, 1)
        addr = 0
        for d, s in zip(t.dims, strides):
            addr += s * sum(c * coord.get(a, 0) for a, c in d.terms)
        words_per_bank.setdefault(addr % banks, set()).add(addr)
    return max((len(w) for w in words_per_bank.values()), default=1)


def gpu_features(acc: Sequence[TensorAccess], axes: Sequence[Axis], lv: Levels, flops: float,
                 hw: HardwareSpec) -> np.ndarray:
    red = [a.name for a in axes if a.kind == "R"]
    ones_r = {r: 1 for r in red}
    dtype = acc[0].dtype_bytes if acc else 4
    warp = hw.warp_size or 32
    inputs = [t for t in acc if t.role == "input"]
    glob = hw.memory[-1]
    unit = max(1, glob.line_bytes // dtype)

    block_tile = _mul(lv.s1, lv.s2, lv.s3) | dict(lv.r1)
    trans = sum(_tensor_traffic(t, axes, block_tile, unit) for t in acc)
    oi_global = flops / max(trans, 1.0)

    reg_tile = _mul(lv.s1, lv.s3) | ones_r  # one thread's accumulators (vthread copies x S3), one step
    allt_reg, _ = tile_counts(axes, reg_tile)
    shared_tx = 0.0
    elems = 0.0
    for t in inputs:
        n = t.tile_elements(reg_tile) * allt_reg
        elems += n
        deg = bank_conflict_degree(t, axes, lv, block_tile, warp, hw.bank_count or 32)
        shared_tx += n / warp * deg
    oi_shared = flops / max(shared_tx, 1.0)
    reg_reuse = flops / max(elems, 1.0)

    accumulators = math.prod(_mul(lv.s1, lv.s3).values()) if lv.s3 else 1
    operands = sum(t.tile_elements(reg_tile) for t in inputs)
    regs = accumulators + operands + GPU_REG_OVERHEAD
    limit = hw.registers_per_thread or GPU_MAX_REGS_PER_THREAD
    ilp = float(accumulators) * (min(1.0, limit / regs))

    threads = math.prod(lv.s2.values()) if lv.s2 else 1
    warps_per_block = math.ceil(threads / warp)
    smem = sum(t.tile_bytes(block_tile) for t in inputs)
    m = math.prod(lv.s0.values()) if lv.s0 else 1
    sms = max(1, hw.cores)
    max_warps = max(1, (hw.max_threads_per_sm or 2048) // warp)
    vthreads = math.prod(lv.s1.values()) if lv.s1 else 1
    smem_limit = min(hw.shared_mem_per_block or GPU_STATIC_SMEM, GPU_STATIC_SMEM)
    launchable = (threads <= (hw.max_threads_per_block or 1024) and smem <= smem_limit
                  and vthreads <= GPU_MAX_VTHREAD)
    if launchable:
        regs_alloc = math.ceil(min(regs, limit) / 8) * 8
        blocks = min(GPU_MAX_BLOCKS_PER_SM, (hw.max_threads_per_sm or 2048) // (warps_per_block * warp),
                     (hw.registers_per_sm or 65536) // (regs_alloc * warps_per_block * warp),
                     (hw.shared_mem_per_sm or 49152) // max(1, smem))
    else:
        blocks = 0
    wlp = float(blocks * warps_per_block)
    occupancy = min(blocks, math.ceil(m / sms)) * warps_per_block / max_warps
    wave = wave_efficiency(m, sms)
    return np.asarray([oi_global, oi_shared, reg_reuse, ilp, wlp, occupancy, wave], dtype=np.float64)


def mma_features(model: MmaModel, config: Config) -> np.ndarray:
    """The seven features of a tensor-core configuration (``tiletune.schedules.cuda_mma``), from the quantities of
    its analytic model (``tiletune.analytic.mma``): OI_Global_Mem = FLOPs per 128-byte global->shared
    transaction of the block tiles; OI_Shared_Mem = FLOPs per 128-byte shared->register transaction of the warps'
    ldmatrix fragment loads (bank-conflict free: the template pads the staged rows); Reg_Reuse_Factor = FLOPs per
    element loaded into registers (2 wm wn / (wm + wn) per k step); ILP = independent m16n8k16 MMAs per warp and
    k step, (wm / 16)(wn / 8), scaled down when the registers per thread exceed the limit; WLP = resident warps
    per SM; Estimated_Occupancy = min(resident blocks, blocks per SM of the grid) x warps / max warps;
    Wave_Efficiency = (m / n) / ceil(m / n), m blocks on n SMs."""
    d = dict(zip(model.names, config.values))
    flops = 2.0 * model.gemm.S * math.prod(model.padded(d))
    info = cuda_mma.tile_info(model.workload, model.space, config, model.gemm)
    hw = model.hw
    oi_global = flops / max(model.traffic(d, 1) / 128, 1.0)
    oi_shared = flops / max(model.traffic(d, 0) / 128, 1.0)
    reg_reuse = flops / max(model.traffic(d, 0) / model.gemm.in_bytes, 1.0)
    limit = hw.registers_per_thread or GPU_MAX_REGS_PER_THREAD
    ilp = (d["warp_m"] / 16) * (d["warp_n"] / 8) * min(1.0, limit / info.registers)
    regs = -(-info.registers // 8) * 8
    resident = min(GPU_MAX_BLOCKS_PER_SM, (hw.max_threads_per_sm or 2048) // info.threads,
                   (hw.registers_per_sm or 65536) // (regs * info.threads),
                   (hw.shared_mem_per_sm or 49152) // max(1, info.smem_bytes))
    ip, jp, _ = model.padded(d)
    m = model.gemm.S * (ip // d["block_m"]) * (jp // d["block_n"])
    sms = max(1, hw.cores)
    max_warps = max(1, (hw.max_threads_per_sm or 2048) // 32)
    wlp = float(resident * info.warps)
    occupancy = min(resident, math.ceil(m / sms)) * info.warps / max_warps
    return np.asarray([oi_global, oi_shared, reg_reuse, ilp, wlp, occupancy, wave_efficiency(m, sms)],
                      dtype=np.float64)


# ---- entry points ------------------------------------------------------------------------------------
def _kind(hardware: HardwareSpec, target: Any) -> str:
    if isinstance(target, dict) and target.get("kind") in ("llvm", "cuda"):
        return "gpu" if target["kind"] == "cuda" else "cpu"
    return hardware.kind


def analytical_features(workload, space: Space, config: Config, hardware: HardwareSpec,
                        target: Any = None) -> np.ndarray:
    """The seven features (FEATURE_NAMES order) of one configuration, float64. The set (CPU or GPU) is
    chosen by the target's kind ("llvm" / "cuda"), else by the hardware's kind."""
    if cuda_wgmma.owns(space):
        return wgmma_features(WgmmaModel(space, workload, hardware, target), config)
    if cuda_mma.owns(space):
        return mma_features(MmaModel(space, workload, hardware, target), config)
    axes = workload.axes_no_tvm()
    acc = tensor_accesses(workload)
    lv = split_levels(space, config, axes)
    kind = _kind(hardware, target)
    if kind == "gpu" and hardware.kind != "gpu":
        raise TiletuneError(f"cuda target but hardware spec {hardware.name!r} is a CPU; give a GPU preset")
    if kind == "cpu" and hardware.kind != "cpu":
        raise TiletuneError(f"llvm target but hardware spec {hardware.name!r} is a GPU; use detect_cpu()")
    fn = gpu_features if kind == "gpu" else cpu_features
    return fn(acc, axes, lv, float(workload.flops), hardware)


def hardware_for(context_hardware=None, target: Any = None) -> HardwareSpec:
    """The HardwareSpec the features use: the given one, else the target's (``hardware.for_target``,
    without measuring bandwidth), else this CPU (``detect_cpu(measure_bandwidth=False)``)."""
    if context_hardware is not None:
        return context_hardware
    if isinstance(target, dict):
        return for_target(target, measure_bandwidth=False)
    return detect_cpu(measure_bandwidth=False)


class AnalyticalExtractor(FeatureExtractor):
    """Cached batch extractor of the seven features (the ``tiletune.features`` extractor interface).

    Values go to the model as log2(1 + x) (monotone, so a tree model splits the same way; it keeps the
    operational intensities, which span orders of magnitude, in a float32-friendly range)."""

    kind = "analytical"
    names = FEATURE_NAMES

    def __init__(self, space: Space, workload, hardware: HardwareSpec | None = None, target: Any = None):
        if workload is None:
            raise TiletuneError("analytical features need the workload (TuneContext.workload is None)")
        super().__init__(space)
        self.workload = workload
        self.target = target
        self.hardware = hardware_for(hardware, target)
        self._wgmma = WgmmaModel(space, workload, self.hardware, target) if cuda_wgmma.owns(space) else None
        self._mma = MmaModel(space, workload, self.hardware, target) if cuda_mma.owns(space) else None
        if self._mma is not None or self._wgmma is not None:  # the tensor-core template's space: no tile knobs, features from its model
            return
        self._axes = workload.axes_no_tvm()
        self._acc = tensor_accesses(workload)
        self._fn = gpu_features if _kind(self.hardware, target) == "gpu" else cpu_features
        analytical_features(workload, space, space.untiled(), self.hardware, target)  # checks kinds

    @property
    def dim(self) -> int:
        return N_FEATURES

    def raw(self, config: Config) -> np.ndarray:
        if self._wgmma is not None:
            return wgmma_features(self._wgmma, config)
        if self._mma is not None:
            return mma_features(self._mma, config)
        lv = split_levels(self.space, config, self._axes)
        return self._fn(self._acc, self._axes, lv, float(self.workload.flops), self.hardware)

    def _compute(self, configs: list[Config]) -> list[np.ndarray]:
        return [np.log2(1.0 + self.raw(c)).astype(np.float32) for c in configs]


__all__ = ["FEATURE_NAMES", "N_FEATURES", "AnalyticalExtractor", "analytical_features", "bank_conflict_degree",
           "cpu_features", "gpu_features", "hardware_for", "mma_features", "split_levels", "wave_efficiency"]
