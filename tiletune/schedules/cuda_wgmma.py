"""Config -> TIRx kernel on Hopper's warpgroup tensor cores (``wgmma``) fed by the tensor memory accelerator
(TMA), for float16 and bfloat16 gemm and batch_matmul accumulated in float32, on ``cuda:sm_90a`` targets.

The mma.sync template (``cuda_mma``) stays for sm_80/86/89 and for a plain ``sm_90`` target: ``wgmma`` and
``setmaxnreg`` exist only on the ``sm_90a`` target (docs/gpu.md, "Hopper template").

The kernel is written directly in TVM 0.27's TIRx dialect (``tvm.compile(..., tir_pipeline="tirx")``), not
scheduled from the workload's TE: its structure (warp specialization, an mbarrier ring, asynchronous tensor
cores) has no TensorIR schedule primitive. Per thread block (``consumers + 1`` warpgroups of 128 threads):

1. Host side: two tiled TMA descriptors (``runtime.cuTensorMapEncodeTiled``, encoded per call from the
   arrays' pointers and passed to the kernel as ``__grid_constant__ CUtensorMap``): A as [S, M, K] with boxes of
   64 x ``block_m`` (64 halves = one 128-byte row), B as [S, K, N] with boxes of 64 x ``block_k``, both with the
   128-byte swizzle. TMA fills what lies outside the arrays with zeros: M, N and K need no padding and no
   bounds checks on the loads (N = 1000 works); the global row strides must be multiples of 16 bytes (K and N
   multiples of 8), else the workload stays on the mma.sync template (``supports``).
2. Shared memory (dynamic, 1024-byte aligned, as the swizzle wants): ``stages`` buffers of A (``block_m`` x
   ``block_k``, K-major: ``block_k / 64`` boxes of ``block_m`` rows of 128 bytes) and B (``block_k`` x
   ``block_n``, N-major: ``block_n / 64`` boxes of ``block_k`` rows of 128 bytes); two mbarriers per stage,
   *full* (the TMA's bytes arrived) and *empty* (the consumers have read it).
3. Warpgroup 0 is the producer: its first thread walks the k-tiles, waits on the stage's *empty* barrier,
   announces the stage's bytes (``mbarrier.arrive.expect_tx``) and issues the TMA copies
   (``cp.async.bulk.tensor``, completing on the *full* barrier). It gives its registers back (``setmaxnreg.dec``
   to ``PRODUCER_REGS``); the consumers take them (``setmaxnreg.inc``).
4. Warpgroups 1..``consumers`` each own ``block_m / consumers`` rows of the block tile: per k-tile they wait on
   *full*, issue ``block_k / 16`` x (rows / 64) x (``block_n`` / ``wgmma_n``) ``wgmma.mma_async.m64n{wgmma_n}k16``
   with both operands read from shared memory through matrix descriptors (A K-major: 32 bytes further per
   16-step; B N-major with ``trans-b``: the 64-column atoms ``block_k`` rows apart), commit the group, wait until at
   most one group is in flight (the previous k-tile's) and release that k-tile's stage (one arrive per
   warpgroup on *empty*). The fp32 accumulators stay in registers (``wgmma_n / 2`` per m64 instruction and
   thread).
5. Epilogue: each pair of neighbouring accumulators (columns 2j, 2j + 1 of a row) cast to the output dtype;
   ``stage_c`` 1: the pairs go to shared memory (the stages reused once every consumer is done with them, rows
   padded by 16 bytes), then each warpgroup copies its rows to C with 16-byte stores along the rows, a warp
   writing 512 contiguous bytes; ``stage_c`` 0 (and a persistent kernel, whose producer refills the stages):
   each pair stored straight from registers with one 4-byte (8 for float32) store. Stores outside C are left out
   (N is a multiple of 8, so a pair or an 8-column run is inside or outside together).
6. Tiles to blocks: ``group_m`` block-rows are walked together (rasterization: consecutive blocks share B's
   columns in L2). ``persistent`` 1: a grid of one block per SM (the preset's SM count) loops over the tiles,
   the mbarrier ring running on across tiles, so the producer loads the next tile while the consumers store.

Knobs: ``block_m``, ``block_n``, ``block_k``, ``stages``, ``consumers``, ``wgmma_n``, ``group_m``,
``persistent``, ``stage_c``. The constraint (``WgmmaLimitRule``): ``block_m`` a multiple of 64 per consumer warpgroup,
``wgmma_n`` divides ``block_n``, the stages within the arch's dynamic shared memory, the accumulators within
``ACC_REGS`` registers per thread, and at most as many stages as k-tiles plus one.
"""
from __future__ import annotations

import itertools
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

WARPGROUP = 128
ATOM = 64  # halves per 128-byte swizzled row: the TMA box's inner extent and the wgmma descriptor's atom
MMA_M, MMA_K = 64, 16
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B, and the same code in TVM's matrix-descriptor helper
L2_PROMOTE_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B
PRODUCER_REGS = 40  # setmaxnreg for the producer warpgroup (CUTLASS's value for its load warpgroup)
# the accumulators a consumer thread may hold: the rest of a 232/240-register budget goes to descriptors,
# addresses and the epilogue
ACC_REGS = 128
# an empty asm that takes an accumulator by reference: nvcc then keeps every use of it after the wgmma
# wait before it and every write before the wgmma fence (CUTLASS's warpgroup_fence_operand; TVM 0.27's
# wgmma_noop_barrier takes the register by value)
ACC_FENCE = ("__device__ __forceinline__ void tiletune_acc_fence(float& r) "
             "{ asm volatile(\"\" : \"+f\"(r) :: \"memory\"); }")
# two fp32 accumulators (neighbouring columns) cast and stored with one 4- or 8-byte store
STORE2 = {
    "float16": "__device__ __forceinline__ void tiletune_store2_f16(half* p, float a, float b) "
               "{ *reinterpret_cast<half2*>(p) = __floats2half2_rn(a, b); }",
    "bfloat16": "__device__ __forceinline__ void tiletune_store2_bf16(nv_bfloat16* p, float a, float b) "
                "{ *reinterpret_cast<nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b); }",
    "float32": "__device__ __forceinline__ void tiletune_store2_f32(float* p, float a, float b) "
               "{ *reinterpret_cast<float2*>(p) = make_float2(a, b); }",
}
COPY16 = ("__device__ __forceinline__ void tiletune_copy16(void* dst, const void* src) "
          "{ *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src); }")
C_ROW_PAD = 8  # elements added to every row of the staged output tile: its pair stores without bank conflicts
BARRIER_BYTES = 1024  # static shared memory besides the stages (mbarriers), what the limit check reserves
KNOBS = {
    "block_m": (64, 128, 256),
    "block_n": (64, 128, 192, 256),
    "block_k": (64, 128),
    "stages": (2, 3, 4, 5, 6),
    "consumers": (1, 2),
    "wgmma_n": (64, 128, 192, 256),
    "group_m": (1, 8),
    "persistent": (0, 1),
    "stage_c": (1, 0),
}


class InvalidWgmmaConfig(InvalidConfig):
    """A wgmma configuration over one of the GPU's per-block limits, or with inconsistent tiles."""


def is_sm90a(target: dict[str, Any] | None) -> bool:
    """Whether ``target`` is a CUDA target for ``sm_90a`` (where wgmma, setmaxnreg and the TMA exist)."""
    return bool(target) and target.get("kind") == "cuda" and str(target.get("arch", "")) == "sm_90a"


@dataclass(frozen=True)
class Conv:
    """An NHWC convolution's window: data [N, H, W, C], weight [R, S, C, K] (HWIO), output [N, P, Q, K]."""

    N: int
    H: int
    W: int
    C: int
    P: int
    Q: int
    R: int
    S: int
    stride: int
    pad: int
    dilation: int

    @property
    def pointwise(self) -> bool:
        """A 1x1 window at stride 1 without padding: a GEMM over the N H W pixels."""
        return self.R == self.S == self.stride == 1 and self.pad == 0


@dataclass(frozen=True)
class Problem:
    """The GEMM of a workload: S batches of C[M, N] = A[M, K] @ B[K, N], in ``dtype``, out ``out_dtype``; for an
    NHWC convolution (``conv``) M = N P Q output pixels, N = K output channels, K = R S C."""

    S: int
    M: int
    N: int
    K: int
    dtype: str
    out_dtype: str
    conv: Conv | None = None

    @property
    def windowed(self) -> bool:
        """A convolution loaded window by window (4-d TMA boxes of pixels), not as a GEMM."""
        return self.conv is not None and not self.conv.pointwise

    def pixel_tile(self, bm: int) -> tuple[int, int]:
        """(rows, columns) of output pixels in a block tile of ``bm`` pixels: the power-of-two width (8..64,
        its strided input run within the TMA's 256-element box) that wastes the fewest pixel slots on the
        output's edges, the wider on ties."""
        c = self.conv
        best = None
        for bq in (64, 32, 16, 8):
            if bq > bm or bq * c.stride > 256:
                continue
            bp = bm // bq
            used = (c.P * c.Q) / (math.ceil(c.P / bp) * bp * math.ceil(c.Q / bq) * bq)
            if best is None or used > best[0] + 1e-12:
                best = (used, bp, bq)
        return (best[1], best[2]) if best else (bm // 8, 8)

    def m_tiles(self, bm: int) -> int:
        if not self.windowed:
            return math.ceil(self.M / bm)
        bp, bq = self.pixel_tile(bm)
        c = self.conv
        return c.N * math.ceil(c.P / bp) * math.ceil(c.Q / bq)

    def k_tiles(self, bk: int) -> int:
        if not self.windowed:
            return math.ceil(self.K / bk)
        return self.conv.R * self.conv.S * math.ceil(self.conv.C / bk)

    @property
    def operand_elems(self) -> int:
        """Elements of the operands as they lie in memory (a convolution's data once, not per window)."""
        if self.conv is not None:
            c = self.conv
            return c.N * c.H * c.W * c.C + c.R * c.S * c.C * self.N
        return self.S * (self.M * self.K + self.K * self.N)


def problem(workload: Workload) -> Problem | None:
    """The workload as this template's GEMM, or None where it is none (see ``supports``)."""
    w = workload
    if w.dtype not in HALF or not getattr(w, "mixed_precision", False):
        return None
    if w.op == "gemm":
        return Problem(1, w.M, w.N, w.K, w.dtype, w.out_dtype)
    if w.op == "batch_matmul":
        return Problem(w.B, w.M, w.N, w.K, w.dtype, w.out_dtype)
    if w.op == "conv2d" and w.layout == "NHWC":
        c = Conv(w.N, w.H, w.W, w.C, w.P, w.Q, w.R, w.S, w.stride, w.pad, w.dilation)
        return Problem(1, w.N * w.P * w.Q, w.K, w.R * w.S * w.C, w.dtype, w.out_dtype, c)
    return None


def supports(workload: Workload) -> bool:
    """Whether this template builds ``workload``: half-precision gemm, batch_matmul or NHWC conv2d whose rows are
    whole 16-byte units (K and N multiples of 8, a convolution's C and K: the TMA's global strides), a
    convolution's stride within the TMA's element strides (8). The others stay on mma.sync."""
    p = problem(workload)
    if p is None or p.N % 8:
        return False
    if p.conv is not None:
        return p.conv.C % 8 == 0 and p.conv.stride <= 8
    return p.K % 8 == 0


# ---- limits and the space ---------------------------------------------------------------------------
def limits_for(target: dict[str, Any] | None) -> Limits:
    return simt_limits(target, static_smem=False)


def sm_count(target: dict[str, Any] | None) -> int:
    """The SMs of the target's preset (the persistent grid), 132 (an H100 SXM) where it has none."""
    try:
        return hardware.for_target(target or {"kind": "cuda", "arch": "sm_90a"}, measure_bandwidth=False,
                                   cache=False).cores or 132
    except TiletuneError:
        return 132


@dataclass(frozen=True)
class TileInfo:
    threads: int
    smem_bytes: int
    acc_regs: int  # fp32 accumulators per consumer thread
    consumer_regs: int  # the setmaxnreg of the consumer warpgroups
    m_atoms: int  # m64 instructions per consumer warpgroup and k-step
    n_atoms: int  # wgmma_n-wide instructions per m64 row and k-step
    k_tiles: int
    tiles: int
    grid: int


def consumer_regs(consumers: int) -> int:
    """The consumers' setmaxnreg: what the SM's 65536 registers leave after the producer, rounded down to a
    multiple of 8 and at most 240 (CUTLASS's 240 with one consumer, 232 with two)."""
    left = (65536 - WARPGROUP * PRODUCER_REGS) // (WARPGROUP * consumers)
    return min(240, left // 8 * 8)


def tile_info(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None,
              prob: Problem | None = None) -> TileInfo:
    d = space.to_dict(config)
    p = prob or problem(workload)
    if p is None:
        raise TiletuneError(refusal(workload))
    bm, bn, bk, st, nc, wn = (d["block_m"], d["block_n"], d["block_k"], d["stages"], d["consumers"],
                              d["wgmma_n"])
    if bm % (MMA_M * nc):
        raise InvalidWgmmaConfig(f"block_m {bm} is not a multiple of 64 rows per consumer warpgroup ({nc})")
    if bn % wn:
        raise InvalidWgmmaConfig(f"wgmma_n {wn} does not divide block_n {bn}")
    if bn % ATOM or bk % ATOM:
        raise InvalidWgmmaConfig(f"block_n {bn} and block_k {bk} must be multiples of {ATOM}")
    k_tiles = p.k_tiles(bk)
    if st > k_tiles + 1:
        raise InvalidWgmmaConfig(f"{st} stages over {k_tiles} k-tiles")
    if d["stage_c"]:
        if d["persistent"]:
            raise InvalidWgmmaConfig("stage_c reuses the stages, which a persistent block's producer refills")
        if DTYPE_BYTES[p.out_dtype] != DTYPE_BYTES[p.dtype]:
            raise InvalidWgmmaConfig(f"stage_c stages the output in {p.dtype}, not {p.out_dtype}")
        if bm * (bn + C_ROW_PAD) > st * (bm * bk + bk * bn):
            raise InvalidWgmmaConfig(f"the staged {bm} x {bn} output tile is larger than the stages")
    m_atoms, n_atoms = bm // nc // MMA_M, bn // wn
    tiles = p.S * p.m_tiles(bm) * math.ceil(p.N / bn)
    grid = min(tiles, sm_count(target)) if d["persistent"] else tiles
    smem = st * (bm * bk + bk * bn) * DTYPE_BYTES[p.dtype]
    return TileInfo(WARPGROUP * (nc + 1), smem, m_atoms * n_atoms * wn // 2, consumer_regs(nc), m_atoms, n_atoms,
                    k_tiles, tiles, grid)


def check(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None,
          limits: Limits | None = None, prob: Problem | None = None) -> TileInfo:
    """Raise InvalidWgmmaConfig for inconsistent tiles or a configuration over the per-block limits."""
    lim = limits or limits_for(target)
    info = tile_info(workload, space, config, target, prob)
    if info.threads > lim.max_threads:
        raise InvalidWgmmaConfig(f"{info.threads} threads per block > {lim.max_threads}")
    if info.smem_bytes + BARRIER_BYTES > lim.max_smem:
        raise InvalidWgmmaConfig(f"{info.smem_bytes} bytes of shared memory for the stages (+{BARRIER_BYTES}) "
                                 f"> {lim.max_smem}")
    if info.acc_regs > ACC_REGS:
        raise InvalidWgmmaConfig(f"{info.acc_regs} accumulator registers per consumer thread > {ACC_REGS}")
    return info


class WgmmaLimitRule:
    """``check`` as the space's constraint (see the module docstring)."""

    def __init__(self, workload: Workload, limits: Limits, target: dict[str, Any] | None):
        self.workload, self.limits, self.target = workload, limits, target
        self.prob = problem(workload)

    def __call__(self, space: Space, config: Config) -> bool:
        try:
            check(self.workload, space, config, self.target, limits=self.limits, prob=self.prob)
        except InvalidWgmmaConfig:
            return False
        return True

    def describe(self) -> str:
        lim = self.limits
        return (f"constraint: block_m a multiple of 64 per consumer warpgroup, wgmma_n divides block_n, the "
                f"stages within {lim.max_smem} bytes of dynamic shared memory, at most {ACC_REGS} fp32 "
                f"accumulators per consumer thread ({lim.source})")


def refusal(workload: Workload) -> str:
    return (f"{workload.key}: the wgmma template builds float16/bfloat16 gemm and batch_matmul with K and N "
            "multiples of 8; the mma.sync template (target cuda:sm_90) takes the others")


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None) -> Space:
    """The template's space (``KNOBS``) under ``WgmmaLimitRule``; block tiles much larger than the problem
    (a 256-row block over 64 rows) are left out."""
    if levels is not None:
        raise TiletuneError("the wgmma template has no tiling levels (its knobs are block tiles, stages and "
                            "warpgroups); leave --levels out")
    if not is_sm90a(target):
        raise TiletuneError("the wgmma template needs the target cuda:sm_90a")
    p = problem(workload)
    if p is None or not supports(workload):
        raise TiletuneError(refusal(workload))

    def fits(extent: int, values: tuple[int, ...]) -> tuple[int, ...]:
        cap = max(values[0], 1 << max(0, math.ceil(math.log2(max(extent, 1)))))
        return tuple(v for v in values if v <= cap)

    knobs = dict(KNOBS)
    knobs["block_m"] = fits(p.M, KNOBS["block_m"])
    knobs["block_n"] = fits(p.N, KNOBS["block_n"])
    knobs["block_k"] = fits(p.conv.C if p.windowed else p.K, KNOBS["block_k"])
    knobs["wgmma_n"] = tuple(v for v in KNOBS["wgmma_n"] if v <= max(knobs["block_n"]))
    space = Space([ChoiceKnob(name, values) for name, values in knobs.items()])
    space.constraint = WgmmaLimitRule(workload, limits_for(target), target)
    return space


def owns(space: Space) -> bool:
    """Whether ``space`` is this template's (made by ``make_space``)."""
    return isinstance(space.constraint, WgmmaLimitRule)


def default_config(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> Config:
    """A configuration without measurement: CUTLASS's Hopper default where it fits (128 x 256 x 64 block,
    two consumer warpgroups of 64 x 256, one m64n256k16 per 16-step, 4 stages), smaller tiles where the
    problem is small or the blocks would not fill the SMs; the first allowed configuration in that order."""
    p = problem(workload)
    prefs = {
        "block_m": (128, 64, 256), "block_n": (256, 128, 192, 64), "block_k": (64, 128),
        "stages": (4, 3, 5, 2, 6), "consumers": (2, 1), "wgmma_n": (256, 192, 128, 64),
        "group_m": (8, 1), "persistent": (0, 1), "stage_c": (1, 0),
    }
    knobs = {k.name: k for k in space.knobs}
    order = [tuple(v for v in prefs[n] if v in knobs[n].values) for n in space.names]
    sms = sm_count(target)
    first = None
    for combo in itertools.product(*order):
        cfg = Config(tuple(combo))
        if not space.allows(cfg):
            continue
        first = first or cfg
        d = space.to_dict(cfg)
        if p is not None and p.S * p.m_tiles(d["block_m"]) * math.ceil(p.N / d["block_n"]) >= sms // 2:
            return cfg
    if first is None:
        raise TiletuneError(f"{workload.key}: no wgmma configuration fits the target's limits")
    return first


# ---- the kernel ------------------------------------------------------------------------------------
@dataclass
class Kernel:
    """What ``schedule`` gives for this template: the TIRx module (``mod``), compiled with the TIRx pipeline."""

    mod: Any


def _min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    from tvm.script import tirx as T

    return T.min(a, b)


def _and(*conds):
    if all(isinstance(c, bool) for c in conds):
        return all(conds)
    from tvm.script import tirx as T

    out = conds[0]
    for c in conds[1:]:
        out = T.And(out, c)
    return out


class Tiling:
    """Where a block's tile lies: the tile order (``coords``), the TMA coordinates of its operand boxes
    (``a_coord``, ``b_coord``) and where a row and column of its accumulators go in C (``out``). Each takes Python
    ints (the tests walk every tile) or TIR expressions (the kernel)."""

    def __init__(self, p: Problem, d: dict):
        self.p, self.d = p, d
        self.BM, self.BN, self.BK = d["block_m"], d["block_n"], d["block_k"]
        self.TM, self.TN = p.m_tiles(self.BM), math.ceil(p.N / self.BN)
        self.GM = min(d["group_m"], self.TM)
        self.tiles = p.S * self.TM * self.TN
        if p.windowed:
            cv = p.conv
            self.BP, self.BQ = p.pixel_tile(self.BM)
            self.TP, self.TQ, self.CT = math.ceil(cv.P / self.BP), math.ceil(cv.Q / self.BQ), math.ceil(cv.C / self.BK)

    def coords(self, tile):
        """(batch, M-tile, first column) of a tile index, ``group_m`` M-tiles walked down before across."""
        TM, TN, GM = self.TM, self.TN, self.GM
        group = GM * TN
        b = tile // (TM * TN)
        t = tile % (TM * TN)
        first = t // group * GM
        size = _min(TM - first, GM)
        return b, first + (t % group) % size, (t % group) // size * self.BN

    def a_coord(self, kt, j, tm, b):
        """The TMA coordinates (innermost first) of A's j-th 64-wide box of k-tile kt."""
        p, BK = self.p, self.BK
        if p.windowed:
            cv = p.conv
            rs, c0 = kt // self.CT, kt % self.CT * BK + j * ATOM
            img, p0, q0 = tm // (self.TP * self.TQ), tm // self.TQ % self.TP * self.BP, tm % self.TQ * self.BQ
            return [c0, q0 * cv.stride - cv.pad + rs % cv.S * cv.dilation,
                    p0 * cv.stride - cv.pad + rs // cv.S * cv.dilation, img]
        return [kt * BK + j * ATOM, tm * self.BM] + ([b] if p.S > 1 else [])

    def b_coord(self, kt, j, n0, b):
        p, BK = self.p, self.BK
        if p.windowed:
            return [n0 + j * ATOM, kt % self.CT * BK, kt // self.CT]
        return [n0 + j * ATOM, kt * BK] + ([b] if p.S > 1 else [])

    def out(self, b, tm, m, col):
        """(C's index, whether it lies inside C) of row m of M-tile tm (for a convolution: the m-th pixel of the
        tile's BP x BQ rectangle, as the TMA box lays them out), column col."""
        p = self.p
        cv = p.conv
        if p.windowed:
            img = tm // (self.TP * self.TQ)
            pp, qq = tm // self.TQ % self.TP * self.BP + m // self.BQ, tm % self.TQ * self.BQ + m % self.BQ
            return (img, pp, qq, col), _and(pp < cv.P, qq < cv.Q, col < p.N)
        row = tm * self.BM + m
        inside = _and(row < p.M, col < p.N)
        if cv is not None:
            return (row // (cv.P * cv.Q), row // cv.Q % cv.P, row % cv.Q, col), inside
        return ((row, col) if p.S == 1 else (b, row, col)), inside


def tensor_maps(p: Problem, d: dict) -> tuple[tuple, tuple[int, list], tuple[int, list]]:
    """(the shapes of A, B and C; (rank, operands) of A's and B's TMA descriptors): the operands of
    ``runtime.cuTensorMapEncodeTiled`` after the dtype, the rank and the pointer: dims (innermost first), byte
    strides of the outer dims, box, element strides, interleave, swizzle (128 bytes), L2 promotion, out-of-bounds
    fill (zeros)."""
    S, M, N, K, cv = p.S, p.M, p.N, p.K, p.conv
    BM, BK = d["block_m"], d["block_k"]
    eb = DTYPE_BYTES[p.dtype]
    if cv is None:
        shapes = ((M, K), (K, N), (M, N)) if S == 1 else ((S, M, K), (S, K, N), (S, M, N))
        batch = [S] if S > 1 else []
        a = [K, M, *batch, K * eb, *([M * K * eb] if S > 1 else []), ATOM, BM, *[1] * len(batch)]
        b = [N, K, *batch, N * eb, *([K * N * eb] if S > 1 else []), ATOM, BK, *[1] * len(batch)]
        a_strides = b_strides = [1] * (2 + len(batch))
    else:
        shapes = (cv.N, cv.H, cv.W, cv.C), (cv.R, cv.S, cv.C, N), (cv.N, cv.P, cv.Q, N)
        if cv.pointwise:  # [N H W, C] x [C, K]
            a, b, a_strides, b_strides = [cv.C, M, cv.C * eb, ATOM, BM], [N, K, N * eb, ATOM, BK], [1, 1], [1, 1]
        else:  # the data as [N, H, W, C], one box of BP x BQ pixels (the stride apart) per (r, s, 64 channels)
            bp, bq = p.pixel_tile(BM)
            st = cv.stride
            a = [cv.C, cv.W, cv.H, cv.N, cv.C * eb, cv.W * cv.C * eb, cv.H * cv.W * cv.C * eb,
                 ATOM, bq * st, bp * st, 1]
            b = [N, cv.C, cv.R * cv.S, N * eb, cv.C * N * eb, ATOM, BK, 1]
            a_strides, b_strides = [1, st, st, 1], [1, 1, 1]
    tail = [0, SWIZZLE_128B, L2_PROMOTE_128B, 0]
    return shapes, (len(a_strides), a + a_strides + tail), (len(b_strides), b + b_strides + tail)


def pass_config() -> dict[str, Any]:
    return {}


def prim_func(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None):
    """The TIRx PrimFunc of ``config`` (see the module docstring), with the workload's signature (A, B, C)."""
    from tvm.script import tirx as T

    p = problem(workload)
    info = check(workload, space, config, target, prob=p)
    d = space.to_dict(config)
    S, M, N, K, dtype, out_dtype, cv = p.S, p.M, p.N, p.K, p.dtype, p.out_dtype, p.conv
    BM, BN, BK, ST, NC, WN = (d["block_m"], d["block_n"], d["block_k"], d["stages"], d["consumers"],
                              d["wgmma_n"])
    eb = DTYPE_BYTES[dtype]
    ab = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    rows_wg, MI, NI, KT = BM // NC, info.m_atoms, info.n_atoms, info.k_tiles
    ACC_N = WN // 2  # accumulators per thread of one m64 x WN instruction
    A_TILE, B_TILE = BM * BK, BK * BN
    STAGE_BYTES = (A_TILE + B_TILE) * eb
    TILES, GRID = info.tiles, info.grid
    LT = math.ceil(TILES / GRID)  # tiles per block
    THREADS, CREGS = info.threads, info.consumer_regs
    KS = BK // MMA_K
    (a_shape, b_shape, c_shape), (a_rank, a_args), (b_rank, b_args) = tensor_maps(p, d)
    tma = "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes"
    tma_a, tma_b = tma.format(a_rank), tma.format(b_rank)
    chain = f"wgmma.mma_async.sync.aligned.m64n{WN}k16.f32.{ab}.{ab}"
    A_SDO = 8 * ATOM * eb // 16  # 8 rows of 128 bytes between core-matrix groups, in 16-byte units
    B_LDO = BK * ATOM * eb // 16  # one 64-column atom of B (BK rows of 128 bytes), in 16-byte units
    STAGE_C, CPAD = bool(d["stage_c"]), BN + C_ROW_PAD
    store2 = "tiletune_store2_" + {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}[out_dtype]

    tl = Tiling(p, d)
    coords, a_coord, b_coord, out = tl.coords, tl.a_coord, tl.b_coord, tl.out

    # fmt: off
    @T.prim_func
    def main(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"global_symbol": "main"})
        A = T.match_buffer(a, a_shape, dtype, align=16)
        B = T.match_buffer(b, b_shape, dtype, align=16)
        C = T.match_buffer(c, c_shape, out_dtype, align=16)
        A_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", A_map, dtype, a_rank, A.data, *a_args)
        B_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        T.call_packed("runtime.cuTensorMapEncodeTiled", B_map, dtype, b_rank, B.data, *b_args)
        T.device_entry()
        T.attr({"tirx.launch_bounds_min_blocks_per_sm": 1})  # a register cap at entry, which setmaxnreg needs
        bx = T.cta_id([GRID])
        tx = T.thread_id([THREADS])
        smem = T.alloc_buffer((ST * (A_TILE + B_TILE),), dtype, scope="shared.dyn", align=1024)
        full = T.alloc_buffer((ST,), "uint64", scope="shared", align=8)
        empty = T.alloc_buffer((ST,), "uint64", scope="shared", align=8)
        descA: T.uint64
        descB: T.uint64
        acc = T.alloc_buffer((MI * NI * ACC_N,), "float32", scope="local")
        if tx == 0:
            for s in T.serial(ST):
                T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
                T.ptx.mbarrier.init.shared.b64(T.address_of(empty[s]), T.uint32(NC))
        T.ptx.fence.proxy.async_.shared__cta()
        T.cuda.cta_sync()
        if tx < WARPGROUP:
            if NC > 1:  # with one consumer the 256-thread block's cap (255) is already above its needs
                T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
            if tx == 0:
                for lt in T.serial(LT):
                    if bx + lt * GRID < TILES:
                        bb, tm, n0 = T.meta_var(coords(bx + lt * GRID))
                        for kt in T.serial(KT):
                            g = T.meta_var(lt * KT + kt)
                            s = T.meta_var(g % ST)
                            T.cuda.mbarrier_wait(T.address_of(empty[s]), ((g // ST) & 1) ^ 1)
                            T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(full[s]), T.uint32(STAGE_BYTES))
                            for j in T.unroll(BK // ATOM):
                                T.ptx[tma_a](T.address_of(smem[s * A_TILE + j * BM * ATOM]), T.address_of(A_map),
                                             *a_coord(kt, j, tm, bb), T.address_of(full[s]))
                            for j in T.unroll(BN // ATOM):
                                T.ptx[tma_b](T.address_of(smem[ST * A_TILE + s * B_TILE + j * BK * ATOM]),
                                             T.address_of(B_map), *b_coord(kt, j, n0, bb), T.address_of(full[s]))
        else:
            if NC > 1:
                T.ptx["setmaxnreg.inc.sync.aligned.u32"](CREGS)
            wg = T.meta_var((tx - WARPGROUP) // WARPGROUP)
            for lt in T.serial(LT):
                if bx + lt * GRID < TILES:
                    bb, tm, n0 = T.meta_var(coords(bx + lt * GRID))
                    for i in T.unroll(MI * NI * ACC_N):
                        acc[i] = T.float32(0)
                        T.cuda.func_call("tiletune_acc_fence", acc[i], source_code=ACC_FENCE)
                    for kt in T.serial(KT):
                        g = T.meta_var(lt * KT + kt)
                        s = T.meta_var(g % ST)
                        T.cuda.mbarrier_wait(T.address_of(full[s]), (g // ST) & 1)
                        T.ptx.wgmma.fence.sync.aligned()
                        for kk in T.unroll(KS):
                            for mi in T.unroll(MI):
                                for ni in T.unroll(NI):
                                    T.cuda.wgmma.encode_matrix_descriptor(
                                        T.address_of(descA),
                                        T.address_of(smem[s * A_TILE + kk // 4 * BM * ATOM
                                                          + (wg * rows_wg + mi * MMA_M) * ATOM + kk % 4 * MMA_K]),
                                        1, A_SDO, SWIZZLE_128B)
                                    T.cuda.wgmma.encode_matrix_descriptor(
                                        T.address_of(descB),
                                        T.address_of(smem[ST * A_TILE + s * B_TILE + ni * WN // ATOM * BK * ATOM
                                                          + kk * MMA_K * ATOM]),
                                        B_LDO, 8 * ATOM * eb // 16, SWIZZLE_128B)
                                    T.ptx[chain](*[acc[(mi * NI + ni) * ACC_N + i] for i in range(ACC_N)],
                                                 descA, descB, T.bool(True), 1, 1, 0, 1)
                        T.ptx.wgmma.commit_group.sync.aligned()
                        if kt > 0:  # the previous k-tile's group is done: its stage goes back to the producer
                            T.ptx.wgmma.wait_group.sync.aligned(1)
                            if tx % WARPGROUP == 0:
                                T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[(g + ST - 1) % ST]))
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    for i in T.unroll(MI * NI * ACC_N):
                        T.cuda.func_call("tiletune_acc_fence", acc[i], source_code=ACC_FENCE)
                    if tx % WARPGROUP == 0:
                        T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[(lt * KT + KT - 1) % ST]))
                    if STAGE_C:  # through shared memory: 16-byte stores along C's rows
                        T.ptx.bar.sync(1, NC * WARPGROUP)  # every consumer's wgmmas are done with the stages
                        for mi in T.unroll(MI):
                            for ni in T.unroll(NI):
                                for i in T.unroll(ACC_N // 2):
                                    m = T.meta_var(wg * rows_wg + mi * MMA_M + tx % WARPGROUP // 32 * 16
                                                   + tx % 32 // 4 + i % 2 * 8)
                                    T.cuda.func_call(store2, T.address_of(smem[m * CPAD + ni * WN + i // 2 * 8
                                                                               + tx % 4 * 2]),
                                                     acc[(mi * NI + ni) * ACC_N + 2 * i],
                                                     acc[(mi * NI + ni) * ACC_N + 2 * i + 1],
                                                     source_code=STORE2[out_dtype])
                        if wg == 0:  # this warpgroup's rows are in shared memory (a constant barrier id each)
                            T.ptx.bar.sync(2, WARPGROUP)
                        else:
                            T.ptx.bar.sync(3, WARPGROUP)
                        for it in T.unroll(rows_wg * BN // 8 // WARPGROUP):
                            m = T.meta_var(wg * rows_wg + (it * WARPGROUP + tx % WARPGROUP) // (BN // 8))
                            c8 = T.meta_var((it * WARPGROUP + tx % WARPGROUP) % (BN // 8) * 8)
                            index, inside = T.meta_var(out(bb, tm, m, n0 + c8))
                            if inside:
                                T.cuda.func_call("tiletune_copy16", T.address_of(C[index]),
                                                 T.address_of(smem[m * CPAD + c8]), source_code=COPY16)
                    else:
                        for mi in T.unroll(MI):
                            for ni in T.unroll(NI):
                                for i in T.unroll(ACC_N // 2):  # two neighbouring columns per store (N is even)
                                    m = T.meta_var(wg * rows_wg + mi * MMA_M + tx % WARPGROUP // 32 * 16
                                                   + tx % 32 // 4 + i % 2 * 8)
                                    col = T.meta_var(n0 + ni * WN + i // 2 * 8 + tx % 4 * 2)
                                    index, inside = T.meta_var(out(bb, tm, m, col))
                                    if inside:
                                        T.cuda.func_call(store2, T.address_of(C[index]),
                                                         acc[(mi * NI + ni) * ACC_N + 2 * i],
                                                         acc[(mi * NI + ni) * ACC_N + 2 * i + 1],
                                                         source_code=STORE2[out_dtype])
    # fmt: on
    return main


def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None) -> Kernel:
    """The kernel of ``config`` as an IRModule (``Kernel.mod``): what ``schedules.build`` compiles."""
    import tvm

    if not is_sm90a(target):
        raise TiletuneError("the wgmma template needs the target cuda:sm_90a")
    return Kernel(tvm.IRModule({"main": prim_func(workload, space, config, target)}))
