"""Config -> TensorIR schedule on NVIDIA tensor cores, for float16 and bfloat16 inputs accumulated in float32:
gemm, batch_matmul and conv2d in NHWC (an implicit GEMM), for CUDA targets of sm_80 and later.

The kernel (the structure of MetaSchedule's ``MultiLevelTilingTensorCore`` and of dlight's tensor-core matmul,
with the intrinsics of TVM 0.27's ``get_mma_intrin_group``, for float16 and bfloat16: ``intrinsics``):

1. The compute is normalised to C[S, I, J] += A[S, I, K] * B[S, K, J] (``reindex`` of both operands and the
   output, dlight's ``get_index_map``): S the batch (1 for gemm and conv), I the output rows (conv: the output
   pixels n, p, q), J the output columns (conv: the output channels), K the reduction (conv: r, s, c, with the
   input channel innermost, so A is read along its contiguous dimension, and B along J as it lies in memory).
2. I, J, K are padded to multiples of the block tile and the k-chunk (``pad_einsum``): any shape works (N=1000,
   a vocabulary of 50257); the padding is produced while staging (zero fill) and never written back.
3. Tiling: I = [blocks, warps, MMA tiles per warp, 16], J likewise, K = [chunks, 16-steps per chunk, 16];
   the block loops of S, I and J are fused into ``blockIdx.x``, the warps of I and J into ``threadIdx.y``;
   each warp computes a ``warp_m`` x ``warp_n`` tile with m16n8k16 ``mma.sync`` (two per 16x16 tile), fp32
   accumulators in registers (the ``warp`` scope, in the ldmatrix fragment layout).
4. Per k-chunk the block copies its A tile (``block_m`` x ``chunk_k``) and B tile (``chunk_k`` x ``block_n``)
   from global to dynamic shared memory (``shared.dyn``, up to the arch's opt-in limit), ``vector`` elements
   per thread and instruction (``cp.async`` of 4 to 16 bytes, predicated with zero fill at the padded
   edges); rows padded by 16 bytes (``storage_align``), so the 8 rows one ``ldmatrix`` reads fall in
   distinct banks.
5. Software pipeline over the k-chunks with ``stages`` buffers (``stages - 1`` chunks in flight, asynchronous
   copies: ``tirx.use_async_copy``), and a two-stage pipeline of the ldmatrix fragments within a chunk
   (MetaSchedule's annotations for this structure). A chunk of one 16-step (``chunk_k`` 16) has no fragment
   pipeline: annotated on a loop of one iteration, TVM's pipeline sized the fragment buffers over more than the
   warp's tile and indexed them by the chunk, which put them in local memory (docs/gpu.md, "Tensor cores").
6. The accumulators go to shared memory (fp32) and from there to the output, coalesced and vectorized, cast
   to the output dtype (the workload's ``_cast`` stage) and cut to the unpadded shape.

Knobs (choice knobs; the space is their product under the constraint): ``block_m``, ``block_n`` (block tile),
``warp_m``, ``warp_n`` (warp tile), ``chunk_k`` (the K slice staged per pipeline step), ``stages``,
``vector`` (elements per global->shared copy instruction, lowered per operand to what its contiguous
dimension allows). No unroll knob: nvcc unrolls the constant-trip loops itself, and TVM's explicit unrolling
(``pragma_auto_unroll_max_step``, at any depth tried, on the block or the main loop) left the fragments in
local memory (docs/gpu.md, "Tensor cores").

The constraint (``MmaLimitRule``, as ``cuda.LimitRule`` for the SIMT template): warp tiles divide block tiles,
at most as many pipeline stages as k-chunks (beyond that TVM's pipeline asks ``cp.async.wait_group`` for a count
it cannot fold into a constant), threads per block (warps x 32) within the arch's limit, shared memory (the pipeline's buffers, or the output
staging, whichever is larger: TVM merges the dynamic shared allocations whose lifetimes do not overlap)
within the arch's opt-in per-block limit (``hardware`` presets: 227 KiB on sm_90, 163 KiB on sm_80; TVM sets
the kernel's dynamic shared memory attribute at launch), and an estimate of registers per thread (fp32
accumulators + double-buffered A and B fragments + addressing) within 255 and within the thread's share of the SM's
register file (65536 / threads: a block of 512 threads gets 128 each, or ptxas spills).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import hardware
from ..errors import TiletuneError
from ..space import ChoiceKnob, Config, Space
from ..workloads.access import DTYPE_BYTES
from ..workloads.base import HALF, Workload
from .cpu import InvalidConfig
from .cuda import Limits
from .cuda import limits_for as simt_limits

MMA = 16  # the m16n8k16 instruction pair computes a 16x16x16 tile
WARP = 32
SMEM_ROW_PAD = 8  # elements (16 bytes of a half type) added to every staged row: ldmatrix without bank conflicts
OUT_ROW_PAD = 4  # fp32 elements added to every row of the output staging
KNOBS = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (16, 32, 64, 128, 256),
    "warp_m": (16, 32, 64, 128),
    "warp_n": (16, 32, 64, 128),
    "chunk_k": (16, 32, 64),
    "stages": (2, 3, 4),
    "vector": (2, 4, 8),
}
# registers a thread needs besides its accumulators and fragments (addresses, loop counters, predicates)
ADDRESS_REGS = 24


class InvalidMmaConfig(InvalidConfig):
    """A tensor-core configuration over one of the GPU's per-block limits, or with inconsistent tiles."""


def supports(workload: Workload) -> bool:
    """Whether this template schedules ``workload``: half-precision gemm, batch_matmul or NHWC conv2d."""
    if workload.dtype not in HALF or not getattr(workload, "mixed_precision", False):
        return False
    if workload.op in ("gemm", "batch_matmul"):
        return True
    if workload.op == "primfunc":
        return primfunc_gemm(workload) is not None
    return workload.op == "conv2d" and workload.layout == "NHWC"


def refusal(workload: Workload) -> str:
    return (f"{workload.key}: on CUDA, {workload.dtype} runs on tensor cores for gemm, batch_matmul and conv2d "
            f"with layout=NHWC only; use dtype=float32 for {workload.op}"
            + (" in NCHW" if workload.op == "conv2d" else ""))


# ---- the problem as a GEMM ----------------------------------------------------------------------
@dataclass(frozen=True)
class Gemm:
    """The normalised problem: S batches of I x J outputs over K; ``a_inner``/``b_inner`` are the extents of
    the operands' contiguous dimensions within a row of the staged tile (they bound the copy's vector)."""

    S: int
    I: int
    J: int
    K: int
    a_inner: int
    b_inner: int
    in_bytes: int
    out_bytes: int


def as_gemm(workload: Workload) -> Gemm:

    w = workload
    ib, ob = DTYPE_BYTES[w.dtype], DTYPE_BYTES[w.out_dtype]
    if w.op == "gemm":
        return Gemm(1, w.M, w.N, w.K, w.K, w.N, ib, ob)
    if w.op == "batch_matmul":
        return Gemm(w.B, w.M, w.N, w.K, w.K, w.N, ib, ob)
    if w.op == "conv2d" and w.layout == "NHWC":
        return Gemm(1, w.N * w.P * w.Q, w.K, w.R * w.S * w.C, w.C, w.K, ib, ob)
    g = primfunc_gemm(w) if w.op == "primfunc" else None
    if g is None:
        raise TiletuneError(refusal(w))
    return g


def _dlight_finds_gemm(w: Workload) -> bool:
    """Whether dlight's ``get_index_map`` (what ``schedule`` normalises with) finds the GEMM in the anchor."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.dlight.gpu.matmul import get_index_map

    sch = s_tir.Schedule(tvm.IRModule({"main": w.prim_func()}))
    return get_index_map(sch.get(sch.get_sblock(w.anchor_name()))) is not None


def primfunc_gemm(w: Workload) -> Gemm | None:
    """A PrimFunc workload's anchor as a GEMM, or None when it is none: two operands A and B (in the order the
    update reads them) and the output C, each anchor axis in A, B and C (S), A and C (I), B and C (J) or A and
    B only (K), as dlight's ``get_index_map`` normalises it. An operand's contiguous run (``a_inner``,
    ``b_inner``) is its last dimension when that dimension is indexed by one K axis (A) or one J axis (B) with
    stride 1, else 1 (the copy is then element-wise: a transposed operand is correct, only slower). None also
    where dlight's ``get_index_map`` finds no GEMM (a matrix-vector product whose row axis has extent 1)."""
    cached = getattr(w, "_mma_gemm", False)
    if cached is not False:
        return cached
    g = None
    if w.mixed_precision and w.dtype in HALF:
        try:
            accesses = w.tensor_accesses()
        except TiletuneError:
            accesses = []
        ins = [t for t in accesses if t.role == "input"]
        outs = [t for t in accesses if t.role == "output"]
        if len(ins) == 2 and len(outs) == 1:
            a, b, c = ins[0], ins[1], outs[0]
            ext = {"S": 1, "I": 1, "J": 1, "K": 1}
            kinds: dict[str, str] = {}
            for ax in w.axes():
                where = (ax.name in a.axes, ax.name in b.axes, ax.name in c.axes)
                kind = {(True, True, True): "S", (True, False, True): "I", (False, True, True): "J",
                        (True, True, False): "K"}.get(where)
                if kind is None:
                    break
                kinds[ax.name] = kind
                ext[kind] *= ax.extent
            else:
                def run(t, kind: str) -> int:
                    d = t.dims[-1]
                    one = len(d.terms) == 1 and d.terms[0][1] == 1 and kinds.get(d.terms[0][0]) == kind
                    return d.size if one else 1

                if ext["K"] > 1 and _dlight_finds_gemm(w):
                    g = Gemm(ext["S"], ext["I"], ext["J"], ext["K"], run(a, "K"), run(b, "J"),
                             DTYPE_BYTES[w.dtype], DTYPE_BYTES[w.out_dtype])
    w._mma_gemm = g
    return g


# ---- limits and the space ---------------------------------------------------------------------------
def limits_for(target: dict[str, Any] | None) -> Limits:
    """The arch's per-block limits (``cuda.limits_for``): its HardwareSpec preset's opt-in shared memory, which
    dynamic shared memory reaches, unlike the SIMT template's static arrays; threads and registers."""
    return simt_limits(target, static_smem=False)


def check_arch(target: dict[str, Any] | None) -> None:
    arch = str((target or {}).get("arch", "") or "")
    if arch.startswith("sm_"):
        digits = "".join(ch for ch in arch[3:] if ch.isdigit())
        if digits and int(digits) < 80:
            raise TiletuneError(f"the tensor-core template needs sm_80 or later (ldmatrix, m16n8k16 mma.sync for "
                                f"bf16, cp.async); the target's arch is {arch}")


@dataclass(frozen=True)
class TileInfo:
    warps: int
    threads: int
    smem_bytes: int
    registers: int
    vector_a: int
    vector_b: int
    vector_out: int
    padded: tuple[int, int, int]


def _vector(want: int, inner: int, elem_bytes: int) -> int:
    """The largest power of two <= ``want`` (and 16 bytes) that divides ``inner``."""
    v = want
    while v > 1 and (inner % v or v * elem_bytes > 16):
        v //= 2
    return max(v, 1)


def tile_info(workload: Workload, space: Space, config: Config, gemm: Gemm | None = None) -> TileInfo:
    d = space.to_dict(config)
    g = gemm or as_gemm(workload)
    bm, bn, wm, wn, ck = d["block_m"], d["block_n"], d["warp_m"], d["warp_n"], d["chunk_k"]
    if bm % wm or bn % wn:
        raise InvalidMmaConfig(f"warp tile {wm}x{wn} does not divide block tile {bm}x{bn}")
    chunks = math.ceil(g.K / ck)
    if d["stages"] > max(2, chunks):  # TVM's pipeline then asks cp.async to wait on a count it cannot fold
        raise InvalidMmaConfig(f"{d['stages']} pipeline stages over {chunks} k-chunks")
    warps = (bm // wm) * (bn // wn)
    operands = d["stages"] * (bm * (ck + SMEM_ROW_PAD) + ck * (bn + SMEM_ROW_PAD)) * g.in_bytes
    staging = bm * (bn + OUT_ROW_PAD) * 4
    frag = (wm // MMA + wn // MMA) * (MMA * MMA // WARP) * g.in_bytes // 4  # 32-bit registers per k-step
    regs = wm * wn // WARP + 2 * frag + ADDRESS_REGS
    padded = (math.ceil(g.I / bm) * bm, math.ceil(g.J / bn) * bn, math.ceil(g.K / ck) * ck)
    vec_a = _vector(d["vector"], math.gcd(g.a_inner, ck), g.in_bytes)
    vec_b = _vector(d["vector"], math.gcd(g.b_inner, bn), g.in_bytes)
    # a fused epilogue (PrimFunc workloads) computes from the float32 accumulators, in float32 where it casts up
    # (GELU's erf): at most 4 lanes, as TVM's CUDA C prints a float32x8 constant as make_ulonglong4 of 8 floats
    out_bytes = max(g.out_bytes, 4) if workload.op == "primfunc" else g.out_bytes
    vec_out = _vector(16 // out_bytes, math.gcd(g.J, wn), out_bytes)
    return TileInfo(warps, warps * WARP, max(operands, staging), regs, vec_a, vec_b, vec_out, padded)


def check(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None,
          limits: Limits | None = None, gemm: Gemm | None = None) -> TileInfo:
    """Raise InvalidMmaConfig for inconsistent tiles or a configuration over the per-block limits."""
    lim = limits or limits_for(target)
    info = tile_info(workload, space, config, gemm)
    if info.threads > lim.max_threads:
        raise InvalidMmaConfig(f"{info.threads} threads per block > {lim.max_threads}")
    if info.smem_bytes > lim.max_smem:
        raise InvalidMmaConfig(f"{info.smem_bytes} bytes of shared memory per block > {lim.max_smem}")
    cap = hardware.thread_registers(lim.max_regs, lim.regs_per_sm, info.threads)
    if info.registers > cap:
        raise InvalidMmaConfig(f"about {info.registers} registers per thread > {cap} ({info.threads} threads)")
    return info


class MmaLimitRule:
    """``check`` as the space's constraint (see the module docstring)."""

    def __init__(self, workload: Workload, limits: Limits):
        self.workload, self.limits, self.gemm = workload, limits, as_gemm(workload)

    def __call__(self, space: Space, config: Config) -> bool:
        try:
            check(self.workload, space, config, limits=self.limits, gemm=self.gemm)
        except InvalidMmaConfig:
            return False
        return True

    def describe(self) -> str:
        lim = self.limits
        return (f"constraint: warp tiles divide block tiles; the GPU's per-block limits ({lim.max_threads} threads, "
                f"{lim.max_smem} bytes of dynamic shared memory, {lim.max_regs} registers per thread and "
                f"{lim.regs_per_sm} per block; {lim.source})")


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None) -> Space:
    """The tensor-core template's space (the knobs of ``KNOBS``) under ``MmaLimitRule``. Tiles larger than
    the padded problem are left out (a 256-row block on a 64-row GEMM computes padding only)."""
    if levels is not None:
        raise TiletuneError("the tensor-core template has no tiling levels (its knobs are block, warp and k-chunk "
                            "tiles); leave --levels out")
    if not supports(workload):
        raise TiletuneError(refusal(workload))
    check_arch(target)
    g = as_gemm(workload)

    def fits(extent: int, values: tuple[int, ...]) -> tuple[int, ...]:
        cap = max(MMA, 1 << max(0, math.ceil(math.log2(max(extent, 1)))))
        return tuple(v for v in values if v <= cap)

    knobs = dict(KNOBS)
    knobs["block_m"], knobs["warp_m"] = fits(g.I, KNOBS["block_m"]), fits(g.I, KNOBS["warp_m"])
    knobs["block_n"], knobs["warp_n"] = fits(g.J, KNOBS["block_n"]), fits(g.J, KNOBS["warp_n"])
    knobs["chunk_k"] = fits(g.K, KNOBS["chunk_k"])
    space = Space([ChoiceKnob(name, values) for name, values in knobs.items()])
    space.constraint = MmaLimitRule(workload, limits_for(target))
    return space


def owns(space: Space) -> bool:
    """Whether ``space`` is this template's (made by ``make_space``)."""
    return isinstance(space.constraint, MmaLimitRule)


def default_config(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> Config:
    """A construction without measurement: the largest warp tile within the registers (64 x 64 when the
    problem allows), 2 x 2 warps, a 32-deep k-chunk, 3 stages, 16-byte copies; smaller tiles
    first where the problem is small. The first allowed configuration in that order."""
    names = space.names
    prefs = {
        "block_m": (128, 64, 32, 16, 256), "block_n": (128, 64, 32, 16, 256),
        "warp_m": (64, 32, 16, 128), "warp_n": (64, 32, 16, 128),
        "chunk_k": (32, 16, 64), "stages": (3, 2, 4), "vector": (8, 4, 2),
    }
    knobs = {k.name: k for k in space.knobs}
    order = [tuple(v for v in prefs[n] if v in knobs[n].values) for n in names]
    import itertools

    for combo in itertools.product(*order):
        cfg = Config(tuple(combo))
        if space.allows(cfg):
            return cfg
    raise TiletuneError(f"{workload.key}: no tensor-core configuration fits the target's limits")


# ---- intrinsics ----------------------------------------------------------------------------------------
_REGISTERED: set[str] = set()
_ABBREV = {"float16": "f16", "bfloat16": "bf16"}


def intrinsics(dtype: str) -> dict[str, str]:
    """The tensor intrinsics for ``dtype`` inputs and fp32 accumulators, operands in ``shared.dyn`` (A as
    [I, K], B as [K, J]), the accumulators stored to ``shared.dyn``: TVM 0.27's ``get_mma_intrin_group(
    "shared.dyn", "shared.dyn", dtype, "float32", False, False)`` for float16, and the same group for bfloat16,
    which 0.27 does not register (PTX ``mma.sync.m16n8k16`` takes bf16 operands with fp32 accumulators, and
    ``ldmatrix`` moves 16-bit elements whatever their type; the fragment layouts are the fp16 ones).

    They are generated here by functions modelled on ``tvm.s_tir.tensor_intrin.cuda``'s (the same TVMScript,
    the same PTX builtins and fragment layouts) and registered under ``tiletune_``-prefixed names, because
    importing that module registers its ~100 intrinsics by parsing TVMScript: 45 to 90 s per process on the
    project's 2-core machines, paid by every build worker; these five take a second or two."""
    if dtype not in _ABBREV:
        raise TiletuneError(f"no tensor-core intrinsics for dtype {dtype}")
    a = _ABBREV[dtype]
    names = {"init": "tiletune_mma_fill_16x16_f32", "load_a": f"tiletune_mma_ldmatrix_{a}_a_dyn",
             "load_b": f"tiletune_mma_ldmatrix_{a}_b_dyn", "compute": f"tiletune_mma_{a}{a}f32",
             "store": "tiletune_mma_store_16x16_f32_shared_dyn"}
    if dtype not in _REGISTERED:
        from tvm.s_tir import TensorIntrin

        made = {"load_a": lambda: _ldmatrix("A", dtype), "load_b": lambda: _ldmatrix("B", dtype),
                "compute": lambda: _mma(dtype), "init": _fill, "store": _store}
        for role, name in names.items():
            if TensorIntrin.get(name, allow_missing=True) is None:
                TensorIntrin.register(name, *made[role]())
        _REGISTERED.add(dtype)
    return names


def ldmatrix_layout(i, j):
    """(lane, register element) of element (i, j) of a 16x16 tile in an ldmatrix.x4 / mma.sync fragment:
    TVM's ``shared_16x16_to_ldmatrix_32x8_layout``."""
    return 4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + (i // 8) * 2 + (j % 2)


def _ldmatrix(matrix: str, dtype: str):
    """ldmatrix.x4 of a 16x16 tile of A ([I, K], row-major) or B ([K, J], transposed by ldmatrix into the
    column-major fragment mma.sync wants) from ``shared.dyn``: TVM's ``get_ldmatrix_intrin(16, dtype, matrix,
    False, "shared.dyn")``."""
    from tvm.runtime import convert
    from tvm.script import tirx as T

    local = MMA * MMA // WARP
    half = convert(WARP // 2)
    trans = matrix == "B"

    @T.prim_func(s_tir=True)
    def desc(warp_handle: T.handle, shared_handle: T.handle) -> None:
        shared = T.match_buffer(shared_handle, (MMA, MMA), dtype, align=64, offset_factor=MMA, scope="shared.dyn")
        warp = T.match_buffer(warp_handle, (WARP, local), dtype, align=64, offset_factor=MMA, scope="warp")
        with T.sblock("root"):
            T.reads(shared[0:MMA, 0:MMA])
            T.writes(warp[0:WARP, 0:local])
            for ax0, ax1 in T.grid(MMA, MMA):
                with T.sblock("shared_warp"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    T.reads(shared[v0, v1])
                    thread_id, local_id = T.meta_var(ldmatrix_layout(v0, v1))
                    T.writes(warp[thread_id, local_id])
                    warp[thread_id, local_id] = shared[v0, v1]

    @T.prim_func(s_tir=True)
    def impl(warp_handle: T.handle, shared_handle: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        shared = T.match_buffer(shared_handle, (MMA, MMA), dtype, align=64, offset_factor=MMA, scope="shared.dyn",
                                strides=[s0, s1])
        warp = T.match_buffer(warp_handle, (WARP, local), dtype, align=64, offset_factor=MMA, scope="warp")
        with T.sblock("root"):
            T.reads(shared[0:MMA, 0:MMA])
            T.writes(warp[0:WARP, 0:local])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.ldmatrix(trans, 4, ".b16", warp.data, warp.elem_offset + local * tx,
                                                 shared.access_ptr("r"), s0 * (tx % half) + 8 * (tx // half),
                                                 dtype=dtype))

    return desc, impl


def _mma(dtype: str):
    """m16n8k16 mma.sync, ``dtype`` x ``dtype`` -> fp32, two per 16x16 tile: TVM's ``get_mma_intrin(16, dtype,
    dtype, "float32", False, False)``."""
    from tvm.script import tirx as T
    from tvm.tirx import Cast

    local = MMA * MMA // WARP
    ab = {"float16": "fp16", "bfloat16": "bf16"}[dtype]

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, local), dtype, align=64, offset_factor=MMA, scope="warp")
        B = T.match_buffer(b, (WARP, local), dtype, align=64, offset_factor=MMA, scope="warp")
        C = T.match_buffer(c, (WARP, local), "float32", align=64, offset_factor=MMA, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:local], A[0:WARP, 0:local], B[0:WARP, 0:local])
            T.writes(C[0:WARP, 0:local])
            for i, j, k in T.grid(MMA, MMA, MMA):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    tc, lc = T.meta_var(ldmatrix_layout(vi, vj))
                    ta, la = T.meta_var(ldmatrix_layout(vi, vk))
                    tb, lb = T.meta_var(ldmatrix_layout(vk, vj))
                    T.reads(C[tc, lc], A[ta, la], B[tb, lb])
                    T.writes(C[tc, lc])
                    C[tc, lc] += Cast("float32", A[ta, la]) * Cast("float32", B[tb, lb])

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (WARP, local), dtype, align=64, offset_factor=MMA, scope="warp")
        B = T.match_buffer(b, (WARP, local), dtype, align=64, offset_factor=MMA, scope="warp")
        C = T.match_buffer(c, (WARP, local), "float32", align=64, offset_factor=MMA, scope="warp")
        with T.sblock("root"):
            T.reads(C[0:WARP, 0:local], A[0:WARP, 0:local], B[0:WARP, 0:local])
            T.writes(C[0:WARP, 0:local])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.ptx_legacy.mma("m16n8k16", "row", "col", ab, ab, "fp32",
                                            A.data, A.elem_offset + tx * local, B.data, B.elem_offset + tx * local,
                                            C.data, C.elem_offset + tx * local, False, dtype="float32"))
                T.evaluate(T.ptx_legacy.mma("m16n8k16", "row", "col", ab, ab, "fp32",
                                            A.data, A.elem_offset + tx * local,
                                            B.data, B.elem_offset + tx * local + local // 2,
                                            C.data, C.elem_offset + tx * local + local // 2, False,
                                            dtype="float32"))

    return desc, impl


def _fill():
    """Zero a 16x16 fp32 accumulator fragment: TVM's ``get_mma_fill_intrin("float32", 8)``."""
    from tvm.script import tirx as T
    from tvm.tirx import IntImm

    local = MMA * MMA // WARP
    zero = IntImm("int32", 0).astype("float32")

    @T.prim_func(s_tir=True)
    def desc(a: T.handle) -> None:
        C = T.match_buffer(a, [WARP, local], dtype="float32", scope="warp")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:WARP, 0:local])
            for i0, i1 in T.grid(MMA, MMA):
                with T.sblock("C_warp"):
                    i, j = T.axis.remap("SS", [i0, i1])
                    thread_id, local_id = T.meta_var(ldmatrix_layout(i, j))
                    T.reads()
                    T.writes(C[thread_id, local_id])
                    C[thread_id, local_id] = zero

    @T.prim_func(s_tir=True)
    def impl(a: T.handle) -> None:
        C = T.match_buffer(a, [WARP, local], dtype="float32", scope="warp", offset_factor=1)
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:WARP, 0:local])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                T.evaluate(T.cuda.mma_fill_legacy(local, C.data, C.elem_offset, dtype="float32"))

    return desc, impl


def _store():
    """A 16x16 fp32 accumulator fragment to ``shared.dyn`` with plain stores (TVM's ``get_mma_store_intrin(
    "float32", 8, "shared.dyn", False)``, the variant ``get_mma_intrin_group`` picks by default)."""
    from tvm.script import tirx as T

    local = MMA * MMA // WARP

    def back(thread_id, local_id):  # TVM's ldmatrix_32x8_to_shared_16x16_layout
        return 8 * (local_id % 4 // 2) + (thread_id // 4), 8 * (local_id // 4) + (thread_id % 4) * 2 + (local_id % 2)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        C_warp = T.match_buffer(a, [WARP, local], dtype="float32", scope="warp")
        C = T.match_buffer(c, [MMA, MMA], dtype="float32", scope="shared.dyn")
        with T.sblock("root"):
            T.reads(C_warp[0:WARP, 0:local])
            T.writes(C[0:MMA, 0:MMA])
            for i0, i1 in T.grid(MMA, MMA):
                with T.sblock("C_warp"):
                    v0, v1 = T.axis.remap("SS", [i0, i1])
                    thread_id, local_id = T.meta_var(ldmatrix_layout(v0, v1))
                    T.reads(C_warp[thread_id, local_id])
                    T.writes(C[v0, v1])
                    C[v0, v1] = C_warp[thread_id, local_id]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s0 = T.int32()
        s1 = T.int32()
        C_warp = T.match_buffer(a, [WARP, local], dtype="float32", scope="warp", offset_factor=1)
        C = T.match_buffer(c, [MMA, MMA], dtype="float32", scope="shared.dyn", offset_factor=1, strides=[s0, s1])
        with T.sblock("root"):
            T.reads(C_warp[0:WARP, 0:local])
            T.writes(C[0:MMA, 0:MMA])
            for tx in T.thread_binding(0, WARP, "threadIdx.x"):
                for local_id in T.serial(local):
                    row, col = T.meta_var(back(tx, local_id))
                    C[row, col] = C_warp[tx, local_id]

    return desc, impl


# ---- the schedule --------------------------------------------------------------------------------------
def pass_config() -> dict[str, Any]:
    """The PassContext entries a tensor-core kernel is compiled with (the copies become ``cp.async``)."""
    return {"tirx.use_async_copy": 1}


def _fragment_map(*idx):
    *lead, i, j = idx
    return (*lead, i // MMA, j // MMA, *ldmatrix_layout(i % MMA, j % MMA))


def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None):
    """Build the TensorIR schedule of ``config`` (see the module docstring)."""
    import tvm
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.gpu.matmul import auto_inline_consumer_chain, auto_inline_producers, get_index_map

    check_arch(target)
    info = check(workload, space, config, target)
    d = space.to_dict(config)
    bm, bn, wm, wn, ck, stages = d["block_m"], d["block_n"], d["warp_m"], d["warp_n"], d["chunk_k"], d["stages"]
    intrin = intrinsics(workload.dtype)

    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func()}))
    blk = sch.get_sblock(workload.anchor_name())

    # 1. C[S, I, J] += A[S, I, K] * B[S, K, J]
    ra = sch.reindex(blk, ("read", 0))
    rb = sch.reindex(blk, ("read", 1))
    rc = sch.reindex(blk, ("write", 0))
    maps = get_index_map(sch.get(blk))
    if maps is None:
        raise TiletuneError(f"{workload.key}: the tensor-core template finds no GEMM in the compute")
    block_map, a_map, b_map, c_map = maps
    f = b_map.final_indices
    b_map = tirx.IndexMap(b_map.initial_indices, [f[0], f[2], f[1]], None)
    sch.transform_layout(ra, ("write", 0), a_map)
    sch.transform_layout(rb, ("write", 0), b_map)
    sch.transform_layout(rc, ("read", 0), c_map)
    sch.transform_block_layout(blk, block_map)

    # 2. padding to whole block tiles and k-chunks
    sch.pad_einsum(blk, [1, bm, bn, ck])

    # 3. tiling: 16x16x16 tiles, then blocks / warps / tiles per warp, chunks / steps
    s, i, j, k = sch.get_loops(blk)
    i, ii = sch.split(i, [None, MMA])
    j, ji = sch.split(j, [None, MMA])
    k, ki = sch.split(k, [None, MMA])
    sch.reorder(i, j, k, ii, ji, ki)
    inner = blk
    outer = sch.blockize(ii)
    i0, i1, i2 = sch.split(i, [None, bm // wm, wm // MMA])
    j0, j1, j2 = sch.split(j, [None, bn // wn, wn // MMA])
    k0, k1 = sch.split(k, [None, ck // MMA])
    sch.reorder(s, i0, j0, i1, j1, k0, k1, i2, j2)
    bx = sch.fuse(s, i0, j0)
    sch.bind(bx, "blockIdx.x")
    ty = sch.fuse(i1, j1)
    sch.bind(ty, "threadIdx.y")

    # 4. global -> shared.dyn, vectorized (cp.async), rows padded against bank conflicts
    def stage(index: int, vector: int):
        b = sch.cache_read(outer, index, "shared.dyn")
        sch.compute_at(b, k0)
        fused = sch.fuse(*sch.get_loops(b)[-2:])
        _, wy, tx, vec = sch.split(fused, [None, info.warps, WARP, vector])
        sch.bind(tx, "threadIdx.x")
        sch.bind(wy, "threadIdx.y")
        sch.vectorize(vec)
        sch.storage_align(b, 0, axis=-2, factor=32, offset=SMEM_ROW_PAD)
        return b

    a_s = stage(0, info.vector_a)
    b_s = stage(1, info.vector_b)
    auto_inline_producers(sch, a_s)  # the reindex and padding stages read while staging
    auto_inline_producers(sch, b_s)

    # fragments (ldmatrix) per 16-step, accumulators in registers, staged through shared.dyn to the output
    a_w = sch.cache_read(outer, 0, "warp")
    b_w = sch.cache_read(outer, 1, "warp")
    sch.compute_at(a_w, k1)
    sch.compute_at(b_w, k1)
    c_s = sch.cache_write(outer, 0, "shared.dyn")
    sch.storage_align(c_s, 0, axis=-2, factor=32, offset=OUT_ROW_PAD)
    c_w = sch.cache_write(outer, 0, "warp")
    sch.reverse_compute_at(c_w, ty)
    sch.reverse_compute_at(c_s, ty)
    wi, wj = sch.get_loops(c_w)[-2:]
    wi0, wi1 = sch.split(wi, [None, MMA])
    wj0, wj1 = sch.split(wj, [None, MMA])
    sch.reorder(wi0, wj0, wi1, wj1)
    init = sch.decompose_reduction(outer, k0)
    init_inner = sch.get_child_blocks(init)[0]

    def fragment_loop(b):
        x, y = sch.get_loops(b)[-2:]
        x0, x1 = sch.split(x, [None, MMA])
        y0, y1 = sch.split(y, [None, MMA])
        sch.reorder(x0, y0, x1, y1)
        return x1

    la, lb = fragment_loop(a_w), fragment_loop(b_w)
    sch.transform_layout(a_w, ("write", 0), _fragment_map)
    sch.transform_layout(b_w, ("write", 0), _fragment_map)
    sch.transform_layout(c_w, ("read", 0), _fragment_map)
    sch.tensorize(la, intrin["load_a"])
    sch.tensorize(lb, intrin["load_b"])
    sch.tensorize(sch.get_loops(inner)[-3], intrin["compute"])
    sch.tensorize(sch.get_loops(init_inner)[-2], intrin["init"])
    sch.tensorize(sch.get_loops(c_w)[-2], intrin["store"])

    # 6. the output: unpadded, cast, coalesced and vectorized
    auto_inline_consumer_chain(sch, c_s)
    fused = sch.fuse(*sch.get_loops(c_s)[-2:])
    _, tx, vec = sch.split(fused, [None, WARP, info.vector_out])
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(vec)

    # 5. pipelines: k-chunks over ``stages`` buffers with asynchronous copies; fragments double-buffered. The
    # k1 loop is expanded first (prologue, body, epilogue), so the k0 body holds 5 statements
    if ck == MMA:  # one 16-step per chunk: k1 has nothing to pipeline (module docstring, step 5)
        sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 1])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2])
    elif stages > 2:  # the next chunk's first fragments loaded while the current chunk's last ones compute
        sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 2, stages - 1, stages - 1])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 3, 2, 4])
    else:
        sch.annotate(k0, "software_pipeline_stage", [0, 0, 1, 1, 1])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2, 3, 4])
    sch.annotate(k0, "software_pipeline_async_stages", [0])
    if ck > MMA:
        sch.annotate(k1, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(k1, "software_pipeline_order", [0, 1, 2])
    return sch
