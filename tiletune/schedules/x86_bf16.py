"""bf16 kernels on x86's matrix instructions: AVX512-BF16 (``vdpbf16ps``) and AMX-BF16 (``tdpbf16ps``).

TVM 0.27 legalizes bf16 arithmetic to fp32 on a CPU (``BF16ComputeLegalize`` keeps bf16 only for CUDA), so a bf16
kernel built by the fp32 template (``cpu.py``) runs at fp32's rate. This template tensorizes the anchor instead:

- **The instruction.** ``vdpbf16ps zmm_acc, zmm_a, zmm_b``: for each of 16 fp32 lanes i, acc[i] += a[2i] b[2i] +
  a[2i+1] b[2i+1]. The anchor must be an outer product along its vectorized axis (``operands``): its last spatial
  axis ``n`` (the output's contiguous dimension) is read by one input, the *vector operand* (GEMM's B[k, n], a
  convolution's weight[r, s, c, k]); a reduction axis ``k`` is the contiguous last dimension of every other input,
  the *broadcast operands* (A[m, k], data[.., c]). Two consecutive k of a broadcast operand (4 bytes) are broadcast
  to all lanes; the vector operand is packed into the *pair-interleaved* layout the instruction reads, 16 columns x
  2 reduction steps in 32 consecutive bf16 (``PairPanels``: [.., n // 16, .., k // 2, n % 16, k % 2]); a weight of a
  model is packed once, when the model is built (``cpu.PREPACK``). Accumulation is fp32; the output dtype of the
  spec (bf16 or fp32) is written by the accumulator's write-back.
- **Knobs in units of the instruction's tile.** The space splits ``n`` in units of 16 columns (knob ``tile_n16``)
  and ``k`` in units of 2 (``tile_k2``); the other axes as the CPU template does. The loop structure is the CPU
  template's "S0 S1 R0 S2 R1 S3" with the instruction's 16 x 2 inside S3; the S3 tile (P rows x V 16-column vectors)
  is the register tile, unrolled: P V accumulators + V vector operands + 1 broadcast must fit the register file
  less one (``RegisterTile``; the CPU template's rule for fp32 outer products).
- **Calling the instruction.** TVM maps no dtype to LLVM's ``bfloat`` vector type that
  ``llvm.x86.avx512bf16.dpbf16ps.512`` takes, and its LLVM code generation of unlegalized bf16 crashes; so the
  intrinsic's implementation reads the operands as int32 (a bf16 pair each) and calls a 5-line LLVM function,
  linked into the kernel (``pragma_import_llvm``) and inlined, that bitcasts them to ``<32 x bfloat>`` and calls
  the instruction (``_LL_AVX512``). The rest of the kernel goes through TVM's usual pipeline.
- **AMX** (``tdpbf16ps``): 16 x 16 fp32 accumulator tiles, A tiles of 16 rows x 32 bf16, B tiles of 16 pairs x 16
  columns (the same pair-interleaved layout), ``ldtilecfg`` set by LLVM's tile configuration pass per kernel
  (``_LL_AMX``). The innermost block of the AMX template is tm x tn C tiles (knobs in 16-row, 16-column and
  32-wide units), held to the budget of 8 tile registers: tm tn + tm + tn <= 8 (2 x 2 C tiles, 2 A and 2 B tiles).
  Each 16 x 16 x 32 step of it loads its C, A and B tiles and stores C back to the fp32 accumulator in memory: the
  block is not yet kept in tile registers across the reduction (unmeasured: no CPU here has AMX).
  A process must ask Linux for the tile state before its first tile instruction
  (``cpu_features.request_amx``): ``prepare_run`` does, and refuses in one line on a CPU without AMX.

Which template a bf16 workload gets (``path``): AMX where the target enables ``amx_bf16`` and the shape is made of
whole tiles, AVX512-BF16 where the target enables ``avx512_bf16``, else none (the fp32 template, at fp32's rate).
A kernel is built for the target's features; running it needs this machine's (``prepare_run``): a path the CPU
cannot run is refused in one line, never taken (docs/bf16.md).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import cpu_features
from ..errors import TiletuneError
from ..hardware import vector_file
from ..space import DEFAULT_UNROLL, Config, Space, SplitKnob
from ..workloads.access import tensor_accesses
from ..workloads.base import Axis, Workload
from ..workloads.epilogue import fuse_epilogue
from ..workloads.primfunc import PrimFuncWorkload
from . import x86_intrin
from .cpu import PREPACK, InvalidConfig, inline_producers, outer_levels, vectorize_lanes

#: fp32 lanes of one vdpbf16ps (a zmm register), and bf16 products summed into each lane
LANES = 16
PAIR = 2
#: an AMX tile: 16 rows of 64 bytes (16 fp32 or 32 bf16); tile registers per kernel
TILE_ROWS = 16
TILE_K = 32
TILE_REGISTERS = 8

AVX512_INTRIN = "tiletune_bf16_dot_16x2_avx512"
AMX_INTRIN = "tiletune_bf16_tile_16x16x32_amx"

# vdpbf16ps on operands TVM holds as int32 vectors (each lane a pair of bf16); inlined into the kernel
_LL_AVX512 = r"""
define linkonce_odr <16 x float> @tiletune_dpbf16ps(<16 x float> %c, <16 x i32> %a, <16 x i32> %b) alwaysinline {
  %a1 = bitcast <16 x i32> %a to <32 x bfloat>
  %b1 = bitcast <16 x i32> %b to <32 x bfloat>
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %c, <32 x bfloat> %a1, <32 x bfloat> %b1)
  ret <16 x float> %r
}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
"""

# one 16 x 16 x 32 step on tiles (``tiletune.schedules.x86_intrin``)
_LL_AMX = x86_intrin.step_llvm("tiletune_tdpbf16ps", "tdpbf16ps", "bfloat16", "float32")

_registered = False


def register_intrinsics() -> None:
    """Register the tensor intrinsics (once per process)."""
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    dot_desc = x86_intrin.dot_description("bfloat16", "bfloat16", "float32", 2, 2)

    @T.prim_func(s_tir=True)
    def dot_impl(A: T.Buffer((2,), "bfloat16", offset_factor=2), B: T.Buffer((16, 2), "bfloat16", offset_factor=2),
                 C: T.Buffer((16,), "float32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            # the same bytes as int32: one bf16 pair per element (A's offset is even: offset_factor=2)
            Ai = T.decl_buffer((1,), "int32", data=A.data, elem_offset=A.elem_offset // 2)
            Bi = T.decl_buffer((16,), "int32", data=B.data, elem_offset=B.elem_offset // 2)
            C[T.ramp(T.int32(0), 1, 16)] = T.call_extern(
                "float32x16", "tiletune_dpbf16ps", C.vload([0], "float32x16"), T.broadcast(Ai[0], 16),
                Bi.vload([0], "int32x16"))

    TensorIntrin.register(AVX512_INTRIN, dot_desc, dot_impl, override=True)
    x86_intrin.register_step(AMX_INTRIN, "tiletune_tdpbf16ps", "bfloat16", "bfloat16", "float32")
    _registered = True


# ---- which workloads, which path --------------------------------------------------------------------------

@dataclass(frozen=True)
class Operands:
    """The anchor's outer-product structure (see the module docstring): the vectorized axis ``vec`` (the last
    spatial), the paired reduction axis ``pair``, the vector operand ``packed`` (its dimensions' axes ``dims``) and
    the broadcast operands ``broadcast``."""
    vec: str
    pair: str
    packed: str
    dims: tuple[str, ...]
    broadcast: tuple[str, ...]


def operands(workload: Workload) -> Operands | None:
    """The outer-product structure of ``workload``'s anchor that the instruction needs, or None."""
    axes = workload.axes_no_tvm()
    spatial = [a.name for a in axes if a.kind == "S"]
    reduction = {a.name for a in axes if a.kind == "R"}
    if not spatial or not reduction:
        return None
    try:
        accesses = tensor_accesses(workload)
    except TiletuneError:
        return None
    inputs = [t for t in accesses if t.role == "input"]
    params = set(workload.input_names()) if isinstance(workload, PrimFuncWorkload) else None
    vec = spatial[-1]
    vector = [t for t in inputs if any(vec in d.axes for d in t.dims)]
    bcast = [t for t in inputs if t not in vector]
    if len(vector) != 1 or not bcast:
        return None
    v = vector[0]
    if params is not None and v.name not in params:  # an inlined producer's buffer: not packed here
        return None
    if not all(len(d.terms) == 1 and d.terms[0][1] == 1 for d in v.dims) or v.dims[-1].terms != ((vec, 1),):
        return None
    dims = tuple(d.terms[0][0] for d in v.dims)
    lasts = {t.dims[-1].terms for t in bcast}
    if len(lasts) != 1:
        return None
    (last,) = lasts
    if len(last) != 1 or last[0][1] != 1 or last[0][0] not in reduction or last[0][0] not in dims:
        return None
    pair = last[0][0]
    if any(pair in d.axes for t in bcast for d in t.dims[:-1]):
        return None
    return Operands(vec, pair, v.name, dims, tuple(t.name for t in bcast))


def path(workload: Workload, target: dict[str, Any] | None) -> str | None:
    """"amx", "avx512" or None (see the module docstring): from the target's features, not this machine's."""
    if workload.dtype != "bfloat16" or (target or {}).get("kind", "llvm") != "llvm":
        return None
    key = (workload.key, json.dumps(target, sort_keys=True, default=str))
    if key not in _PATHS:
        _PATHS[key] = _path(workload, target)
    return _PATHS[key]


_PATHS: dict[tuple[str, str], str | None] = {}


def _path(workload: Workload, target: dict[str, Any] | None) -> str | None:
    ops = operands(workload)
    if ops is None:
        return None
    ext = {a.name: a.extent for a in workload.axes_no_tvm()}
    if ext[ops.vec] % LANES or ext[ops.pair] % PAIR:
        return None
    feats = cpu_features.target_features(target)
    if "amx_bf16" in feats and amx_shape(workload, ops) and _tensorizes(workload, "amx"):
        return "amx"
    if "avx512_bf16" in feats and _tensorizes(workload, "avx512"):
        return "avx512"
    return None


def _tensorizes(workload: Workload, kind: str) -> bool:
    """Whether the instruction matches the anchor once its producers are inlined: always for the named families; for
    a PrimFunc whose broadcast operand comes through a producer (a convolution's ``pad_temp``), only when that
    producer is a plain copy (a padding's bounds check is no plain load): scheduled once, on the smallest
    configuration."""
    ops = operands(workload)
    if not isinstance(workload, PrimFuncWorkload) or set(ops.broadcast) <= set(workload.input_names()):
        return True
    space = make_space(workload, None, None, kind=kind)
    config = space.from_dict({k.name: (k.extent,) + (1,) * (k.levels - 1) if isinstance(k, SplitKnob) else k.values[0]
                              for k in space.knobs})
    register_intrinsics()
    try:
        (_schedule_amx if kind == "amx" else _schedule_avx512)(workload, space, config)
    except Exception:  # noqa: BLE001  (TVM's ScheduleError: the block does not match the instruction)
        return False
    return True


def amx_shape(workload: Workload, ops: Operands) -> bool:
    """Whether the AMX template schedules ``workload``: a GEMM or batched GEMM (one broadcast operand [.., m, k],
    spatial axes b.., m, n) whose m and n are whole 16-row tiles and k whole 32-wide steps."""
    axes = workload.axes_no_tvm()
    spatial = [a for a in axes if a.kind == "S"]
    red = [a for a in axes if a.kind == "R"]
    if len(red) != 1 or len(spatial) < 2 or len(ops.broadcast) != 1:
        return False
    m, n = spatial[-2], spatial[-1]
    return m.extent % TILE_ROWS == 0 and n.extent % LANES == 0 and red[0].extent % TILE_K == 0


def refusal(workload: Workload, target: dict[str, Any] | None) -> str | None:
    """Why a bf16 ``workload`` gets no bf16 instruction on ``target`` (None when it gets one, or is not bf16)."""
    if workload.dtype != "bfloat16" or path(workload, target) is not None:
        return None
    ops = operands(workload)
    if ops is None:
        return f"{workload.key}: the anchor is no outer product along its last spatial axis"
    ext = {a.name: a.extent for a in workload.axes_no_tvm()}
    if ext[ops.vec] % LANES or ext[ops.pair] % PAIR:
        return (f"{workload.key}: {ops.vec}={ext[ops.vec]} is no multiple of {LANES} or {ops.pair}={ext[ops.pair]} "
                f"no multiple of {PAIR}")
    if not cpu_features.target_features(target) & {"avx512_bf16", "amx_bf16"}:
        return f"{workload.key}: the target enables neither avx512bf16 nor amx-bf16"
    return (f"{workload.key}: the instruction does not match the anchor once its producers are inlined (a padding "
            "inside the kernel)")


# ---- the space -------------------------------------------------------------------------------------------

def unit(name: str, ops: Operands) -> int:
    """The instruction's tile along axis ``name``: 16 on the vectorized axis, 2 on the paired one, else 1."""
    return LANES if name == ops.vec else PAIR if name == ops.pair else 1


def knob_axes(workload: Workload, ops: Operands) -> list[Axis]:
    """The axes of the space, in units of the instruction's tile: ``n`` as ``n16``, ``k`` as ``k2``."""
    out = []
    for a in workload.axes_no_tvm():
        u = unit(a.name, ops)
        out.append(Axis(a.name + (str(u) if u > 1 else ""), a.extent // u, a.kind))
    return out


@dataclass(frozen=True)
class RegisterTile:
    """The register tile of the AVX512-BF16 template (the innermost spatial level, S3): P rows x V vectors of 16
    columns need P V accumulators + V vector operands + 1 broadcast pair, at most ``registers`` - 1 (one left to
    LLVM, as in ``cpu.RegisterTile``)."""
    registers: int
    spatial: tuple[int, ...]  # knob positions of the spatial knobs, the vectorized one last

    def need(self, config: Config) -> int:
        vals = config.values
        rows = math.prod(vals[i][-1] for i in self.spatial[:-1])
        vectors = vals[self.spatial[-1]][-1]
        return rows * vectors + vectors + 1

    def __call__(self, space: Space, config: Config) -> bool:
        return self.need(config) <= self.registers - 1

    def why(self, space: Space, config: Config) -> str:
        return (f"bf16 register tile needs {self.need(config)} vector registers > {self.registers - 1} "
                f"({self.registers} on this target, one left to the compiler)")

    def describe(self) -> str:
        return (f"constraint: the vdpbf16ps register tile (rows x 16-column vectors accumulators, the vectors and "
                f"one broadcast) fits {self.registers - 1} of the {self.registers} vector registers")


@dataclass(frozen=True)
class TileBudget:
    """The AMX template's tile-register budget: a block of tm x tn C tiles with its tm A and tn B tiles, at most
    ``TILE_REGISTERS``; the innermost tiles of m and n are in units of 16 rows and 16 columns."""
    m: int  # knob position of m (units of 16 rows)
    n: int  # knob position of n16

    def need(self, config: Config) -> int:
        tm, tn = config.values[self.m][-1], config.values[self.n][-1]
        return tm * tn + tm + tn

    def __call__(self, space: Space, config: Config) -> bool:
        return self.need(config) <= TILE_REGISTERS

    def why(self, space: Space, config: Config) -> str:
        return f"AMX block needs {self.need(config)} tile registers > {TILE_REGISTERS}"

    def describe(self) -> str:
        return f"constraint: C, A and B tiles of the innermost block fit the {TILE_REGISTERS} AMX tile registers"


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None, *, kind: str | None = None
               ) -> Space:
    """The space of a bf16 workload on its path (``path``; ``kind`` given: that path's), in units of the
    instruction's tile."""
    kind = kind or path(workload, target)
    if kind is None:
        raise TiletuneError(refusal(workload, target) or f"{workload.key}: not a bf16 workload")
    ops = operands(workload)
    axes = knob_axes(workload, ops)
    if kind == "amx":  # m in 16-row tiles, k in 32-wide steps (16 pairs)
        m_name = [a.name for a in workload.axes_no_tvm() if a.kind == "S"][-2]
        axes = [Axis(a.name + "16", a.extent // TILE_ROWS, "S") if a.name == m_name else
                Axis(a.name[:-1] + "32", a.extent // (TILE_K // PAIR), "R") if a.kind == "R" else a for a in axes]
    space = Space.from_axes(axes, levels=levels, choices={"unroll": DEFAULT_UNROLL})
    spatial = tuple(i for i, k in space.split_knobs if k.kind == "S")
    if min(space.knobs[i].levels for i in spatial) < 2:
        raise TiletuneError(f"{workload.key}: the bf16 template needs at least 2 spatial tile levels (the "
                            "accumulator tile)")
    if kind == "amx":
        space.constraint = TileBudget(spatial[-2], spatial[-1])
    else:
        space.constraint = RegisterTile(vector_file(target or {"mcpu": "znver4"})[0], spatial)
    return space


def check(workload: Workload, space: Space, config: Config) -> None:
    if space.constraint is not None and not space.constraint(space, config):
        raise InvalidConfig(space.constraint.why(space, config))


# ---- start points -----------------------------------------------------------------------------------------

#: register tiles (P rows, V 16-column vectors) of the AVX512-BF16 starts, each within 31 of 32 registers
#: (P V + V + 1), largest first; AMX block tiles (tm, tn) within the 8 tile registers
START_TILES = ((6, 4), (4, 6), (8, 3), (4, 4), (2, 8))
AMX_START_TILES = ((2, 2), (1, 4), (4, 1))
#: bytes of the packed vector operand that one pass of the last reduction level (R1) streams per register tile:
#: V vectors x R1 pairs x 64 bytes, kept within a 48 KiB L1 beside the broadcast rows
PANEL_BYTES = 24 * 1024


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, max(1, min(n, at_most)) + 1) if n % d == 0)


def starts(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> list[Config]:
    """The template's own start points, which the constructive start measures before the constructions (those model
    axes in elements, not in the instruction's units): for each register tile of ``START_TILES`` (AMX:
    ``AMX_START_TILES``) that the shape allows, S3 = (P rows of the last row axis, V column vectors), R1 = the pairs
    whose packed panel fills ``PANEL_BYTES``, the row axes' remaining tiles outermost and parallel, the column
    vectors' in S1. [] for spaces of other level counts."""
    split = [k for k in space.knobs if isinstance(k, SplitKnob)]
    spatial = [k for k in split if k.kind == "S"]
    red = [k for k in split if k.kind == "R"]
    if any(k.levels != 4 for k in spatial) or any(k.levels != 2 for k in red) or not spatial or not red:
        return []
    col, rows = spatial[-1], spatial[:-1]
    amx = path(workload, target) == "amx"
    step = TILE_K if amx else PAIR  # bytes per column vector per reduction unit: 16 lanes x step x 2
    out: list[Config] = []
    for p, v in (AMX_START_TILES if amx else START_TILES):
        v = _largest_divisor(col.extent, v)
        last = rows[-1] if rows else None
        p = _largest_divisor(last.extent, p) if last else 1
        d: dict[str, Any] = {col.name: [1, col.extent // v, 1, v]}
        for k in rows:
            tile = p if k is last else 1
            d[k.name] = [k.extent // tile, 1, 1, tile]
        r1 = _largest_divisor(red[-1].extent, max(1, PANEL_BYTES // (v * LANES * step * 2)))
        d[red[-1].name] = [red[-1].extent // r1, r1]
        for k in red[:-1]:  # a convolution's window axes: walked whole inside
            d[k.name] = [1, k.extent]
        for k in space.knobs:
            if not isinstance(k, SplitKnob):
                d[k.name] = k.values[0]
        config = space.from_dict(d)
        if config not in out and (space.constraint is None or space.constraint(space, config)):
            out.append(config)
    return out


# ---- the pair-interleaved layout ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PairPanels:
    """The layout the instruction reads its vector operand in: dimension ``vec`` split into ``vec // 16`` (placed
    before the first reduction dimension, ``first_red``) and ``vec % 16``, dimension ``pair`` into ``pair // 2`` (in
    its place) and ``pair % 2``; the two remainders last: ``[lead.., n // 16, rest.. (k // 2), n % 16, k % 2]``."""
    vec: int
    pair: int
    first_red: int

    def index_map(self, *iv):
        lead = [iv[i] for i in range(self.first_red) if i != self.vec]
        rest = [iv[i] // PAIR if i == self.pair else iv[i] for i in range(self.first_red, len(iv)) if i != self.vec]
        return tuple(lead + [iv[self.vec] // LANES] + rest + [iv[self.vec] % LANES, iv[self.pair] % PAIR])

    def pack(self, array: np.ndarray) -> np.ndarray:
        """``array`` (numpy) in this layout: what the packing stage computes."""
        shape = array.shape
        grid = np.indices(shape, sparse=False)
        out_idx = self.index_map(*grid)
        out_shape = tuple(int(x.max()) + 1 for x in out_idx)
        out = np.empty(out_shape, dtype=array.dtype)
        out[tuple(out_idx)] = array
        return out


def pair_panels(workload: Workload, ops: Operands) -> PairPanels:
    red = {a.name for a in workload.axes_no_tvm() if a.kind == "R"}
    first_red = min(i for i, a in enumerate(ops.dims) if a in red)
    return PairPanels(ops.dims.index(ops.vec), ops.dims.index(ops.pair), first_red)


def prepacked(workload: Workload, space: Space, config: Config, target: dict[str, Any]) -> dict[int, PairPanels]:
    """The input (by position) a measured kernel takes packed: the vector operand when it is a model's weight."""
    ops = operands(workload)
    if ops is None or ops.packed not in getattr(workload, "weights", frozenset()):
        return {}
    return {workload.input_names().index(ops.packed): pair_panels(workload, ops)}


# ---- the schedules ---------------------------------------------------------------------------------------

def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None):
    """The TensorIR schedule of ``config`` on the workload's path (``path``)."""
    kind = path(workload, target)
    if kind is None:
        raise TiletuneError(refusal(workload, target) or f"{workload.key}: not a bf16 workload")
    register_intrinsics()
    return (_schedule_amx if kind == "amx" else _schedule_avx512)(workload, space, config)


def _prepare(workload: Workload, ops: Operands):
    """The schedule with producers inlined (a convolution's padding written to a buffer instead: the instruction
    reads plain loads) and the vector operand packed; returns (sch, anchor block, pad block or None)."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func()}))
    out = workload.anchor_name()
    pad = "pad" if getattr(workload, "pad", 0) and not isinstance(workload, PrimFuncWorkload) else None
    inline_producers(sch, out, keep=workload.epilogue_blocks() + ((pad,) if pad else ()))
    block = sch.get_sblock(out)
    reads = [r.source.name for r in sch.get(block).reads]
    packed = sch.cache_read(block, reads.index(ops.packed), "global")
    sch.transform_layout(packed, ("write", 0), pair_panels(workload, ops).index_map)
    if ops.packed in getattr(workload, "weights", frozenset()):
        sch.annotate(packed, PREPACK, True)
    loops = sch.get_loops(packed)
    sch.parallel(loops[0])
    if pad:
        pad_loops = sch.get_loops(sch.get_sblock(pad))
        sch.parallel(sch.fuse(*pad_loops[:2]))
        sch.vectorize(pad_loops[-1])
    return sch, block


def _tile(sch, block, workload: Workload, space: Space, config: Config, units: dict[str, int]):
    """Split the anchor's loops into the config's levels (in units ``units[axis]``, the unit loops innermost) and
    order them S0 S1 R0 S2 R1 S3 [units]; returns (spatial tiles, reduction tiles, unit loops by axis)."""
    d = space.to_dict(config)
    knobs = [k for k in space.knobs if isinstance(k, SplitKnob)]
    spatial_tiles, reduce_tiles, inner = [], [], {}
    for loop, ax, knob in zip(sch.get_loops(block), workload.axes_no_tvm(), knobs):
        u = units.get(ax.name, 1)
        if u > 1:
            loop, inner[ax.name] = sch.split(loop, factors=[None, u])
        factors = list(d[knob.name])
        parts = sch.split(loop, factors=factors) if len(factors) > 1 else [loop]
        (spatial_tiles if ax.kind == "S" else reduce_tiles).append(list(parts))
    ls, lr = len(spatial_tiles[0]), len(reduce_tiles[0])
    so = outer_levels(ls)
    order = [t[lv] for lv in range(so) for t in spatial_tiles]
    order += [t[lv] for lv in range(lr - 1) for t in reduce_tiles]
    order += [t[lv] for lv in range(so, ls - 1) for t in spatial_tiles]
    order += [t[lr - 1] for t in reduce_tiles]
    order += [t[ls - 1] for t in spatial_tiles]
    return spatial_tiles, reduce_tiles, inner, order


def _outer(sch, block, workload: Workload, space: Space, config: Config, spatial_tiles, attach_level: int):
    """Parallel S0, the unroll knob, the fp32 accumulator (local) attached at ``attach_level`` with the epilogue
    fused into its write-back; returns the fused parallel loop."""
    d = space.to_dict(config)
    outer = [t[0] for t in spatial_tiles]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(fused)
    if d.get("unroll"):
        sch.annotate(fused, "pragma_auto_unroll_max_step", int(d["unroll"]))
        sch.annotate(fused, "pragma_unroll_explicit", 1)
    attach = fused if attach_level == 0 else spatial_tiles[-1][attach_level]
    wb = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(wb, attach, preserve_unit_loops=True)
    if workload.epilogue_blocks():
        fuse_epilogue(sch, workload.epilogue_blocks())
    vectorize_lanes(sch, sch.get_loops(wb)[-1], LANES)
    return fused


def _schedule_avx512(workload: Workload, space: Space, config: Config):
    ops = operands(workload)
    sch, block = _prepare(workload, ops)
    spatial_tiles, reduce_tiles, inner, order = _tile(sch, block, workload, space, config,
                                                      {ops.vec: LANES, ops.pair: PAIR})
    sch.reorder(*order, inner[ops.vec], inner[ops.pair])
    ls = len(spatial_tiles[0])
    fused = _outer(sch, block, workload, space, config, spatial_tiles, outer_levels(ls) - 1)
    sch.annotate(fused, "pragma_import_llvm", _LL_AVX512)
    init = sch.decompose_reduction(block, reduce_tiles[0][0])
    vectorize_lanes(sch, sch.get_loops(init)[-1], LANES)
    sch.tensorize(inner[ops.vec], AVX512_INTRIN)
    for t in spatial_tiles:  # the register tile: its accumulators named by constants, kept in registers
        sch.unroll(t[-1])
    return sch


def _schedule_amx(workload: Workload, space: Space, config: Config):
    ops = operands(workload)
    sch, block = _prepare(workload, ops)
    m_name = [a.name for a in workload.axes_no_tvm() if a.kind == "S"][-2]
    units = {m_name: TILE_ROWS, ops.vec: LANES, ops.pair: TILE_K}
    spatial_tiles, reduce_tiles, inner, order = _tile(sch, block, workload, space, config, units)
    sch.reorder(*order, inner[m_name], inner[ops.vec], inner[ops.pair])
    ls = len(spatial_tiles[0])
    fused = _outer(sch, block, workload, space, config, spatial_tiles, outer_levels(ls) - 1)
    sch.annotate(fused, "pragma_import_llvm", _LL_AMX)
    init = sch.decompose_reduction(block, reduce_tiles[0][0])
    vectorize_lanes(sch, sch.get_loops(init)[-1], LANES)
    sch.tensorize(inner[m_name], AMX_INTRIN)
    for t in spatial_tiles:
        sch.unroll(t[-1])
    return sch


# ---- running ---------------------------------------------------------------------------------------------

def prepare_run(workload: Workload, target: dict[str, Any] | None) -> None:
    """Before a kernel of the bf16 template runs in this process: a one-line TiletuneError unless this machine has
    the path's instruction; for AMX, ask Linux for the tile state (``cpu_features.request_amx``)."""
    kind = path(workload, target)
    if kind == "amx":
        cpu_features.require("amx_bf16", f"the bf16 AMX kernel of {workload.key}")
        cpu_features.request_amx()
    elif kind == "avx512":
        cpu_features.require("avx512_bf16", f"the bf16 AVX512-BF16 kernel of {workload.key}")
