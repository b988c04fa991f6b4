"""Config -> TensorIR schedule for NVIDIA GPU targets (``{"kind": "cuda", "arch": "sm_XX"}``).

Structure: Ansor's GPU multi-level tiling "S S S R R S R S" (Zheng et al., OSDI 2020, Sec. 4.1), which
splits every spatial axis into 5 levels and every reduction axis into 3 and orders them

    S0 S1 S2 R0 R1 S3 R2 S4      S0 -> blockIdx, S1 -> vthread, S2 -> threadIdx, S3 S4 -> per-thread tile

This template takes the space's (Ls, Lr) = (4, 2) levels (the G-BFS paper's levels, so the space has the
same size as on the CPU) and maps them onto that structure with Ansor's two innermost levels set to 1
(R2 = 1, S4 = 1), i.e. the loop order is

    S0(all spatial, fused) -> blockIdx.x
    S1(all spatial, fused) -> vthread.x          (virtual threads: strided sub-tiles of one thread)
    S2(all spatial, fused) -> threadIdx.x
    R0(all reduction)      -> one step of the shared-memory staging loop
    R1(all reduction)      -> the reduction inside the staged tile
    S3(all spatial)        -> the per-thread register tile

- Every input of the compute is staged in shared memory (``cache_read(..., "shared")``) at the last R0
  loop: for each R0 step a thread block cooperatively fetches the block's input tile (the footprint of the
  block tile S1*S2*S3 per spatial axis and R1 per reduction axis). The fetch loop nest is fused, split into
  [rest, threads, v] with the middle loop bound to threadIdx.x (the same threads as the compute) and the
  inner loop vectorized; v is the largest of 4, 2, 1 (at most 16 bytes) that divides the innermost extent
  of the staged tile, and the global dimension, and is 1 when that dimension is a sliding window (conv
  rows/columns) or when the tile's elements are not a multiple of threads x v (so the vector loads are
  always aligned and never predicated).
- The accumulator lives in registers (``cache_write(..., "local")``) attached at the threadIdx.x loop,
  so it covers S1*S3 per spatial axis (the vthread copies and the register tile); it is zeroed in its own
  loop nest (``decompose_reduction`` at R0) and written back after the reduction.
- ``unroll`` (choices 0, 16, 64, 512, 1500: Ansor's ``auto_unroll_max_step`` values, with AutoTVM's largest
  CUDA value 1500 in place of Ansor's GPU 1024) sets ``pragma_auto_unroll_max_step`` (explicit unrolling) on
  the blockIdx loop, which covers the whole kernel body.
- Padding stages (conv2d, depthwise, avgpool) are inlined into the shared-memory fetch of the padded
  input, so the zero border is produced while staging and no out-of-bounds global load is issued.

Other level counts: Ls >= 4 as above with S3.. per-thread; Ls = 3 drops the vthread level
(S0 blockIdx, S1 threadIdx, S2 per-thread); Ls = 2 is S0 blockIdx, S1 threadIdx. After R0 the remaining
reduction levels R1.. and per-thread spatial levels are interleaved R1 S3 R2 S4 ... (Ansor's order), the
longer list's leftovers last. Ls = 1 is rejected (a GPU kernel needs a thread level).

Invalid configurations (rejected by ``check`` before building, reported as error kind "invalid"), with the
limits of the HardwareSpec preset of the target's arch (``tiletune.hardware.for_target``: sm_90 -> h100,
sm_80 -> a100, sm_89 -> rtx4090, sm_87 -> orin-nano, sm_61 -> titan-xp; a target's ``"hardware"`` entry
naming a preset or JSON file wins; an unknown arch falls back to a 48 KiB / 1024 threads / 255 registers
default):
- threads per block (product of the threadIdx factors) > max_threads_per_block (1024);
- shared memory per block (sum of the staged input tiles, element bytes of the dtype) >
  shared_mem_per_block. Note: TVM requests the static 48 KiB limit of a kernel launch unless dynamic
  shared memory is configured, so presets' larger opt-in limits (227 KiB on H100) are used only through
  ``"hardware"``; by default the limit is min(preset, 48 KiB) as the issue asks (``STATIC_SMEM_LIMIT``);
- registers per thread > what a thread of the block may hold (``hardware.thread_registers``: the arch's
  registers_per_thread, 255, or the block's share of the SM's 65536, 64 at 1024 threads, 128 at 512; TVM's
  kernels carry ``__launch_bounds__``, so ptxas spills beyond it), estimated as accumulator tile
  (prod S1*S3) + fetch registers: the operands one thread reads from shared memory for one innermost
  reduction step (the input tiles of its S1*S3 accumulators at reduction tile 1) + one cooperative-fetch
  vector (v) per input;
- vthread extent (product of the S1 factors) > 8: TVM's VerifyGPUCode ``max_vthread`` as used by
  MetaSchedule and Ansor (``max_vthread_extent`` = warp size / 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import hardware
from ..errors import TiletuneError
from ..space import Config, Space, SplitKnob
from ..workloads.access import tensor_accesses
from ..workloads.base import Workload
from ..workloads.epilogue import fuse_epilogue
from ..workloads.primfunc import PrimFuncWorkload
from .cpu import InvalidConfig, has_root

UNROLL_CHOICES = (0, 16, 64, 512, 1500)
DEFAULT_LEVELS = (4, 2)
STATIC_SMEM_LIMIT = 48 * 1024
MAX_VTHREAD = 8
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2}


class InvalidGPUConfig(InvalidConfig):
    """A configuration over one of the GPU's per-block limits."""


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None) -> Space:
    """The GPU template's space: (4, 2) levels by default and the unroll knob, constrained to the
    configurations within the target's per-block limits (``LimitRule``)."""
    levels = DEFAULT_LEVELS if levels is None else levels
    space = Space.from_axes(workload.axes(), levels=levels, choices={"unroll": UNROLL_CHOICES})
    for k in space.knobs:
        if isinstance(k, SplitKnob) and k.kind == "S" and k.levels < 2:
            raise TiletuneError(f"the CUDA template needs at least 2 levels on spatial axis {k.axis!r} "
                                f"(blockIdx and threadIdx), got {k.levels}")
    space.constraint = LimitRule(workload, limits_for(target))
    return space


class LimitRule:
    """The per-block limits of ``check`` as the space's constraint, so that sampling, moves, neighbourhoods
    and constructions stay within what the GPU can launch. Without it a local search started from a
    construction, or a walk of Gensor's, spends its budget on configurations ``check`` rejects before
    building (the limits: docs/gpu.md). The space's size is unchanged (the constraint filters, it does not
    re-index)."""

    def __init__(self, workload: Workload, limits: Limits):
        self.workload = workload
        self.limits = limits
        self.accesses = tensor_accesses(workload)  # once: the rule is asked for every move of a walk

    def __call__(self, space: Space, config: Config) -> bool:
        try:
            check(self.workload, space, config, limits=self.limits, accesses=self.accesses)
        except InvalidGPUConfig:
            return False
        return True

    def describe(self) -> str:
        lim = self.limits
        return (f"constraint: the GPU's per-block limits ({lim.max_threads} threads, {lim.max_smem} bytes of shared "
                f"memory, {lim.max_regs} registers per thread or the block's share of {lim.regs_per_sm}, "
                f"{lim.max_vthread} virtual threads; {lim.source})")


# ---- limits --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    max_threads: int = 1024
    max_smem: int = STATIC_SMEM_LIMIT
    max_regs: int = 255
    max_vthread: int = MAX_VTHREAD
    regs_per_sm: int = 65536  # a block's threads share them (hardware.thread_registers)
    source: str = "default"


def limits_for(target: dict[str, Any] | None, static_smem: bool = True) -> Limits:
    """Per-block limits from the HardwareSpec preset of the target (see the module docstring). ``static_smem``:
    this template's static shared arrays are capped at ``STATIC_SMEM_LIMIT`` unless the target names its
    hardware; the tensor-core template (``cuda_mma``), whose dynamic shared memory reaches the preset's opt-in
    limit, passes False."""
    if not target:
        return Limits()
    explicit = isinstance(target.get("hardware"), str)
    try:
        hw = hardware.for_target(target, measure_bandwidth=False, cache=False)
    except TiletuneError:
        if explicit:
            raise
        return Limits(source=f"default (no preset for arch {target.get('arch')!r})")
    smem = hw.shared_mem_per_block or STATIC_SMEM_LIMIT
    if static_smem and not explicit:
        smem = min(smem, STATIC_SMEM_LIMIT)
    return Limits(max_threads=hw.max_threads_per_block or 1024, max_smem=smem,
                  max_regs=hw.registers_per_thread or 255, max_vthread=MAX_VTHREAD,
                  regs_per_sm=hw.registers_per_sm or 65536, source=hw.name)


# ---- level roles ---------------------------------------------------------------------------------
def roles(ls: int) -> dict[str, Any]:
    """Which spatial level is blockIdx / vthread / threadIdx, and which are per-thread."""
    if ls < 2:
        raise InvalidGPUConfig(f"the CUDA template needs at least 2 spatial levels, got {ls}")
    if ls == 2:
        return {"block": 0, "vthread": None, "thread": 1, "inner": []}
    if ls == 3:
        return {"block": 0, "vthread": None, "thread": 1, "inner": [2]}
    return {"block": 0, "vthread": 1, "thread": 2, "inner": list(range(3, ls))}


@dataclass(frozen=True)
class TileInfo:
    threads: int
    vthreads: int
    accumulators: int
    smem_bytes: int
    fetch_vectors: dict
    registers: int


def _split_knobs(space: Space) -> tuple[list[SplitKnob], list[SplitKnob]]:
    sp = [k for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "S"]
    rd = [k for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "R"]
    return sp, rd


def tile_info(workload: Workload, space: Space, config: Config, accesses=None) -> TileInfo:
    """Threads, vthreads, accumulators, shared-memory bytes, fetch vector widths and register estimate
    (``accesses``: the workload's ``tensor_accesses``, when the caller has them already)."""
    d = space.to_dict(config)
    sp, rd = _split_knobs(space)
    threads = vthreads = acc = 1
    block_tiles: dict[str, int] = {}
    thread_tiles: dict[str, int] = {}
    for k in sp:
        f = d[k.name]
        r = roles(len(f))
        threads *= f[r["thread"]]
        per_thread = math.prod(f[i] for i in r["inner"])
        if r["vthread"] is not None:
            vthreads *= f[r["vthread"]]
            per_thread *= f[r["vthread"]]
        acc *= per_thread
        block_tiles[k.axis] = math.prod(f[1:])
        thread_tiles[k.axis] = per_thread
    for k in rd:
        block_tiles[k.axis] = math.prod(d[k.name][1:])
        thread_tiles[k.axis] = 1
    smem = 0
    operands = 0
    vectors: dict[str, int] = {}
    for t in (accesses if accesses is not None else tensor_accesses(workload)):
        if t.role != "input":
            continue
        smem += t.tile_bytes(block_tiles)
        operands += t.tile_elements(thread_tiles)
        vectors[t.name] = fetch_vector(t, block_tiles, threads)
    regs = acc + operands + sum(vectors.values())
    return TileInfo(threads, vthreads, acc, smem, vectors, regs)


def fetch_vector(access, block_tiles: dict[str, int], threads: int) -> int:
    """Vector width of the cooperative fetch of one staged input (see the module docstring)."""
    inner = access.dims[-1]
    if len(inner.terms) != 1 or inner.terms[0][1] != 1:
        return 1
    ext = inner.tile_extent(block_tiles)
    total = access.tile_elements(block_tiles)
    for v in (4, 2):
        if v * access.dtype_bytes > 16:
            continue
        if ext % v == 0 and inner.size % v == 0 and total % (threads * v) == 0:
            return v
    return 1


def check(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None,
          limits: Limits | None = None, accesses=None) -> TileInfo:
    """Raise InvalidGPUConfig for configurations over the per-block limits; returns the tile info."""
    lim = limits or limits_for(target)
    info = tile_info(workload, space, config, accesses)
    if info.threads > lim.max_threads:
        raise InvalidGPUConfig(f"{info.threads} threads per block > {lim.max_threads}")
    if info.smem_bytes > lim.max_smem:
        raise InvalidGPUConfig(f"{info.smem_bytes} bytes of shared memory per block > {lim.max_smem}")
    cap = hardware.thread_registers(lim.max_regs, lim.regs_per_sm, info.threads)
    if info.registers > cap:
        raise InvalidGPUConfig(f"about {info.registers} registers per thread (accumulators {info.accumulators}) "
                               f"> {cap} ({info.threads} threads)")
    if info.vthreads > lim.max_vthread:
        raise InvalidGPUConfig(f"{info.vthreads} virtual threads > {lim.max_vthread}")
    return info


# ---- the schedule --------------------------------------------------------------------------------
def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None):
    """Build the TensorIR schedule of ``config`` for a CUDA target."""
    import tvm
    from tvm import s_tir

    info = check(workload, space, config, target)
    d = space.to_dict(config)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func()}))
    fused = isinstance(workload, PrimFuncWorkload)
    out_name = workload.anchor_name() if fused else workload.te()[-1].op.name
    epilogue = workload.epilogue_blocks() if fused else ()
    block = sch.get_sblock(out_name)

    # stage every input in shared memory, then inline the padding (and a PrimFunc's other producers:
    # reshapes, transposes) into the stage that reads it
    read_names = [r.source.name for r in sch.get(block).reads]
    shared = [sch.cache_read(block, i, "shared") for i in range(len(read_names))]
    _inline_producers(sch, keep={out_name, *epilogue} | {sch.get(b).name_hint for b in shared})

    axes = workload.axes()
    loops = sch.get_loops(block)
    assert len(loops) == len(axes), (loops, axes)
    sp_tiles: list[list] = []
    rd_tiles: list[list] = []
    for loop, ax in zip(loops, axes):
        factors = list(d[f"tile_{ax.name}"])
        parts = list(sch.split(loop, factors=factors)) if len(factors) > 1 else [loop]
        (sp_tiles if ax.kind == "S" else rd_tiles).append(parts)
    ls = len(sp_tiles[0])
    lr = len(rd_tiles[0]) if rd_tiles else 0
    r = roles(ls)

    order: list = []
    for lv in (r["block"], r["vthread"], r["thread"]):
        if lv is not None:
            order += [t[lv] for t in sp_tiles]
    if lr:
        order += [t[0] for t in rd_tiles]
    inner_r = list(range(1, lr))
    inner_s = list(r["inner"])
    for j in range(max(len(inner_r), len(inner_s))):
        if j < len(inner_r):
            order += [t[inner_r[j]] for t in rd_tiles]
        if j < len(inner_s):
            order += [t[inner_s[j]] for t in sp_tiles]
    sch.reorder(*order)

    def fuse(level: int):
        ls_ = [t[level] for t in sp_tiles]
        return sch.fuse(*ls_) if len(ls_) > 1 else ls_[0]

    bx = fuse(r["block"])
    sch.bind(bx, "blockIdx.x")
    if r["vthread"] is not None:
        sch.bind(fuse(r["vthread"]), "vthread.x")
    tx = fuse(r["thread"])
    sch.bind(tx, "threadIdx.x")
    unroll = int(d.get("unroll", 0) or 0)
    if unroll:
        sch.annotate(bx, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(bx, "pragma_unroll_explicit", 1)

    # register accumulator for the thread's tile, written back after the reduction
    if lr:
        wb = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(wb, tx, preserve_unit_loops=True)
        if epilogue:  # elementwise consumers (bias, residual, activation) computed by the write-back
            fuse_epilogue(sch, epilogue)

    # cooperative fetch of the staged inputs at the last R0 loop
    if lr:
        attach = rd_tiles[-1][0]
        depth = _depth(sch, block, attach)
        for b, name in zip(shared, read_names):
            sch.compute_at(b, attach, preserve_unit_loops=True)
            v = info.fetch_vectors.get(name, 1)  # a padded stage ('pad') is fetched element-wise
            _cooperative_fetch(sch, b, depth, info.threads, v)
        sch.decompose_reduction(block, rd_tiles[0][0])
    else:  # no reduction: the staged inputs are fetched under the thread loop
        for b in shared:
            sch.compute_at(b, tx, preserve_unit_loops=True)
    return sch


def _depth(sch, block, loop) -> int:
    """Number of loops from the root down to ``loop`` (inclusive) in ``block``'s loop nest."""
    target = sch.get(loop)
    for i, lp in enumerate(sch.get_loops(block)):
        if sch.get(lp).same_as(target):
            return i + 1
    raise AssertionError("loop is not above the block")


def _cooperative_fetch(sch, block, n_outer: int, threads: int, vector: int) -> None:
    loops = sch.get_loops(block)[n_outer:]
    if not loops:
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if vector > 1:
        _, t, vec = sch.split(fused, factors=[None, threads, vector])
        sch.vectorize(vec)
    else:
        _, t = sch.split(fused, factors=[None, threads])
    sch.bind(t, "threadIdx.x")


def _inline_producers(sch, keep: set[str]) -> None:
    if not has_root(sch):
        return
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(b).name_hint not in keep:
            sch.compute_inline(b)


def build(workload: Workload, space: Space, config: Config, target: dict[str, Any]):
    """Compile ``config`` for ``target``; the result's ``.mod`` is the runtime module."""
    import tvm

    sch = schedule(workload, space, config, target)
    return tvm.compile(sch.mod, target=tvm.target.Target(target))


def cuda_source(executable) -> str:
    """The generated CUDA C source of a built executable (read from the module's imports)."""
    m = cuda_module(executable.mod)
    if m is None:
        raise TiletuneError("no CUDA module among the built module's imports")
    return m.inspect_source()


def cuda_module(mod):
    """The CUDA module among a runtime module and its imports (the kernels of a CUDA build), or None."""
    for m in _walk(mod):
        try:
            kind = m.kind if isinstance(getattr(m, "kind", None), str) else m.type_key
        except Exception:  # noqa: BLE001
            kind = ""
        if "cuda" in str(kind):
            return m
    return None


def _walk(mod):
    yield mod
    for m in getattr(mod, "imports", []) or []:
        yield from _walk(m)
