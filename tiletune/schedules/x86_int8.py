"""Config -> TensorIR schedule of int8 matrix products on x86 CPUs: uint8 activations times int8 weights accumulated
in int32 by ``vpdpbusd`` (AVX512-VNNI), one instruction per 16 int32 lanes x 4 products along the reduction.

Which kernels: a workload whose anchor block accumulates ``int32(A[.., m, k]) * int32(W[.., k, n])`` with ``A``
uint8 and ``W`` int8 (the quantized families ``qgemm``/``qbatch_matmul``, and a model's fused kernels of that form,
``tiletune.model.passes.quantized``), the last spatial axis ``n`` a multiple of 16 and the reduction ``k`` of 4.
The epilogue after the accumulator (zero point, dequantize or requantize, bias, activation) is fused into its
write-back as in the float template (``tiletune.workloads.epilogue``).

- **Weight layout.** ``W`` is copied into ``[.., n // 16, k // 4, n % 16, k % 4]``: each 64-byte row holds, for 16
  output columns, 4 consecutive reduction elements, the operand ``vpdpbusd`` multiplies with 4 bytes of ``A``
  broadcast to all lanes. For a model's weight the copy is annotated ``PREPACK`` (``tiletune.schedules.cpu``): the
  model build runs it once, on the constant, and the tuner measures the kernel on the packed weight
  (``prepacked``); an activation operand (``qbatch_matmul``) is packed by the kernel on every call.
- **Knobs in units of the instruction's tile.** The space splits ``n`` in units of 16 columns and ``k`` in units of
  4 (``make_space``: axes of ``N / 16`` and ``K / 4``); the other axes as the float template does. The loop order
  is the float template's ``S0 S1 R0 S2 R1 S3``, then the instruction's own 16 x 4: the S3 tiles are the register
  tile (rows x 16-column vectors of int32 accumulators), R1 the reduction steps over which they stay in registers.
- **Register rule** (``VnniTile``): ``P x V`` accumulators (P rows, V vectors of 16 columns in the S3 tile), ``V``
  weight vectors reused across the rows or ``P`` broadcasts across the vectors, and one streamed operand, within
  the 32 AVX-512 registers less one for LLVM: ``P V + min(P, V) + 1 <= 31`` (the float template's outer-product
  rule, ``tiletune.schedules.cpu``).
- **The instruction.** TVM's own ``dot_16x4_vnni`` (``tvm.s_tir.tensor_intrin.x86``) passes its operands as
  ``<16 x i32>``, which the LLVM bundled with TVM 0.27 rejects for ``llvm.x86.avx512.vpdpbusd.512`` ("Call parameter
  type does not match function signature": it takes ``<64 x i8>``), and it matches only a global accumulator; this
  module registers the same description with a ``local`` accumulator and the ``<64 x i8>`` operands
  (``VNNI_INTRIN``).
- **AMX** (``tdpbusd``, ``schedule_amx``): where the target enables ``amx_int8`` and the rows, columns and reduction
  are whole tiles (16, 16, 64), the same loop order over 16 x 16 x 64 tile steps: S3 is a block of tm x tn int32
  accumulator tiles in the local accumulator, each step loads C, A (16 rows x 64 uint8) and B (16 rows of 64 bytes of
  the same ``VnniLayout``: a 64-deep slice of 16 packed columns is 1 KiB contiguous) and runs ``tdpbusd``, through a
  short LLVM function linked into the kernel (``_LL_AMX``), written as the bf16 template writes its ``tdpbf16ps``
  (``tiletune.schedules.x86_bf16``), so that LLVM's tile configuration pass emits one ``ldtilecfg`` per kernel. The
  space is in tiles (rows / 16, columns / 16, reduction / 64) with the rule tm tn + tm + tn <= 8 tile registers
  (``AmxTiles``). The process that builds (and runs) the kernel asks Linux for the tile state first
  (``cpu_features.request_amx``).
- **CPU features** (``tiletune.cpu_features``): the target must enable ``avx512_vnni`` (``+avx512vnni``; Zen 4 and
  later, Ice Lake and later), else the space is refused in one line; an AMX target on a machine without
  ``amx_int8`` is refused in one line too (its kernels cannot be measured here; ``schedule_amx`` still compiles
  them, which ``tests/test_int8.py`` does to read their assembly).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import cpu_features
from ..errors import TiletuneError
from ..space import DEFAULT_UNROLL, Config, Space, SplitKnob
from ..workloads.base import Axis, Workload
from ..workloads.epilogue import fuse_epilogue
from ..workloads.primfunc import is_load, walk_expr
from . import x86_intrin
from .cpu import (MAX_LOCAL_ELEMS, PREPACK, InvalidConfig, inline_producers, loop_order, outer_levels,
                  vectorize_lanes)

#: the tile of one ``vpdpbusd``: 16 int32 lanes, each summing 4 u8 x s8 products along the reduction
LANES, DEPTH = 16, 4
VNNI_INTRIN = "tiletune_vnni_u8s8i32_16x4_local"
AMX_INTRIN = "tiletune_amx_u8s8i32_tile_16x16x64"
#: an AMX int8 step: C (16 x 16 int32) += A (16 rows x 64 uint8) B (16 rows of 16 columns x 4 int8: the same
#: ``VnniLayout``); 8 tile registers per kernel
TILE_ROWS, TILE_K, TILE_REGISTERS = 16, 64, 8

# one 16 x 16 x 64 step on tiles (``tiletune.schedules.x86_intrin``, as the bf16 template's ``tdpbf16ps``)
_LL_AMX = x86_intrin.step_llvm("tiletune_tdpbusd", "tdpbusd", "uint8", "int32")
#: AVX-512's vector registers; one is left to LLVM (docs/decisions/register-tile.md)
REGISTERS = 32


def _register_intrinsics() -> None:
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    desc = x86_intrin.dot_description("uint8", "int8", "int32", 4, 1)

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((4,), "uint8", offset_factor=1), B: T.Buffer((16, 4), "int8", offset_factor=1),
             C: T.Buffer((16,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a4 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), C.vload([0], dtype="int32x16"),
                T.reinterpret(T.broadcast(a4, 16), dtype="int8x64"), B.vload([0, 0], dtype="int8x64"),
                dtype="int32x16")

    TensorIntrin.register(VNNI_INTRIN, desc, impl, override=True)
    x86_intrin.register_step(AMX_INTRIN, "tiletune_tdpbusd", "uint8", "int8", "int32")


_registered = False


def _intrinsics() -> None:
    global _registered
    if not _registered:
        _register_intrinsics()
        _registered = True


# ---- which kernels ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Operands:
    """The anchor's operands: ``act`` (uint8, [.., m, k]) and ``weight`` (int8, [.., k, n]) by buffer name, the
    names of the axes ``n`` (the weight's columns, last spatial) and ``k`` (the reduction)."""
    act: str
    weight: str
    n: str
    k: str


def operands(workload: Workload) -> Operands | None:
    """The int8 operands of ``workload``'s anchor (``Operands``), or None when it is no u8 x s8 -> i32 product."""
    if getattr(workload, "acc_dtype", None) != "int32":
        return None
    axes = workload.axes_no_tvm()
    spatial = [a.name for a in axes if a.kind == "S"]
    reduction = [a.name for a in axes if a.kind == "R"]
    if len(reduction) != 1 or not spatial:
        return None
    loads = _anchor_loads(workload)
    if loads is None:
        return None
    names = [a.name for a in axes]
    act = weight = None
    for buf, dtype, idx in loads:  # idx: the axis name of each index, or None where it is not a plain axis
        if dtype == "uint8" and len(idx) >= 2 and idx[-1] == reduction[0] and idx[-2] in spatial:
            act = act or buf
        elif dtype == "int8" and len(idx) >= 2 and idx[-2] == reduction[0] and idx[-1] == spatial[-1]:
            weight = weight or buf
    if act is None or weight is None or len(loads) != 2 or len(names) != len(set(names)):
        return None
    return Operands(act, weight, spatial[-1], reduction[0])


def _anchor_loads(workload: Workload):
    """[(buffer name, dtype, axis name per index)] of the anchor's update, from its TE compute or its PrimFunc."""
    store = getattr(workload, "_store", None)
    if store is not None:  # a PrimFunc workload
        var_names = {str(v): a.name for v, a in zip(workload._iter_vars, workload.axes_no_tvm())}
        value = store.value
    else:
        try:
            out = workload.anchor_tensor()
        except Exception:  # noqa: BLE001  (a workload without a TE compute)
            return None
        body = out.op.body[0]
        var_names = {str(iv.var): a.name for iv, a in zip(list(out.op.axis) + list(out.op.reduce_axis),
                                                           workload.axes_no_tvm())}
        value = body.source[0] if hasattr(body, "source") else body
    loads: list = []

    def visit(e) -> None:
        if is_load(e) and not e.source.same_as(store.buffer):  # a PrimFunc's BufferLoad (not the accumulator's)
            buf, indices = e.source, e.indices
        elif type(e).__name__ == "Call" and "tensor_load" in str(getattr(e, "op", "")):  # TE: tensor_load(T, i..)
            buf, indices = e.args[0], e.args[1:]
        else:
            return
        name = buf.name if hasattr(buf, "name") else buf.op.name
        idx = tuple(var_names.get(str(i)) if type(i).__name__ == "Var" else None for i in indices)
        loads.append((name, str(buf.dtype), idx))

    walk_expr(value, visit)
    return loads


def applies(workload: Workload, target: dict[str, Any] | None) -> bool:
    """Whether the int8 template schedules ``workload`` on ``target`` (an LLVM target and a u8 x s8 -> i32
    anchor); its space then refuses a target without VNNI or shapes the instruction does not tile."""
    if target is not None and target.get("kind") != "llvm":
        return False
    return operands(workload) is not None


def _extents(workload: Workload) -> dict[str, int]:
    return {a.name: a.extent for a in workload.axes_no_tvm()}


def _m_axis(workload: Workload) -> str | None:
    """The row axis of an AMX tile: the spatial axis just before ``n``."""
    ops = operands(workload)
    spatial = [a.name for a in workload.axes_no_tvm() if a.kind == "S" and a.name != ops.n]
    return spatial[-1] if spatial else None


def amx_shape(workload: Workload) -> bool:
    """Whether the shape is made of whole AMX tiles: rows by 16, columns by 16, the reduction by 64."""
    ops, ext, m = operands(workload), _extents(workload), _m_axis(workload)
    return m is not None and ext[m] % TILE_ROWS == 0 and ext[ops.n] % LANES == 0 and ext[ops.k] % TILE_K == 0


def path(workload: Workload, target: dict[str, Any] | None) -> str:
    """"amx" where the target enables amx_int8 and the shape is whole tiles, else "vnni"."""
    return "amx" if amx_shape(workload) and "amx_int8" in cpu_features.target_features(target) else "vnni"


def refusal(workload: Workload, target: dict[str, Any] | None) -> str:
    """Why the int8 template cannot schedule ``workload`` for ``target`` on this machine (one line), or "": a shape
    the instruction does not tile, a target without VNNI, or an AMX target on a CPU without AMX (its kernels cannot
    be measured or run here; ``schedule_amx`` still compiles them, for reading their code)."""
    ops, ext = operands(workload), _extents(workload)
    if ext[ops.n] % LANES or ext[ops.k] % DEPTH:
        return (f"{workload.key}: the int8 kernel tiles the columns by {LANES} and the reduction by {DEPTH} "
                f"(vpdpbusd); n={ext[ops.n]}, k={ext[ops.k]}")
    try:
        if path(workload, target) == "amx":
            cpu_features.require("amx_int8", "the int8 AMX kernel (tdpbusd)", target)
        else:
            cpu_features.require("avx512_vnni", "the int8 kernel (vpdpbusd)", target, machine=False)
    except TiletuneError as e:
        return f"{workload.key}: {e}"
    return ""


# ---- space --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VnniTile:
    """The register rule of the module docstring: ``P V + min(P, V) + 1 <= REGISTERS - 1``."""
    n_knob: str
    row_knobs: tuple[str, ...]

    def accumulators(self, space: Space, config: Config) -> tuple[int, int]:
        d = space.to_dict(config)
        p = 1
        for name in self.row_knobs:
            p *= d[name][-1]
        return p, d[self.n_knob][-1]

    def __call__(self, space: Space, config: Config) -> bool:
        p, v = self.accumulators(space, config)
        return p * v + min(p, v) + 1 <= REGISTERS - 1

    def why(self, space: Space, config: Config) -> str:
        p, v = self.accumulators(space, config)
        return (f"register tile of {p} rows x {v} vectors of {LANES} int32 needs {p * v + min(p, v) + 1} vector "
                f"registers > {REGISTERS - 1}")

    def describe(self) -> str:
        return (f"constraint: rows x vectors of the innermost tile + min of the two + 1 <= {REGISTERS - 1} "
                f"AVX-512 registers (vpdpbusd register tile)")


@dataclass(frozen=True)
class AmxTiles:
    """The AMX rule: tm x tn accumulator tiles, tm A tiles and tn B tiles within the 8 tile registers."""
    m_knob: str
    n_knob: str

    def tiles(self, space: Space, config: Config) -> tuple[int, int]:
        d = space.to_dict(config)
        return d[self.m_knob][-1], d[self.n_knob][-1]

    def __call__(self, space: Space, config: Config) -> bool:
        tm, tn = self.tiles(space, config)
        return tm * tn + tm + tn <= TILE_REGISTERS

    def why(self, space: Space, config: Config) -> str:
        tm, tn = self.tiles(space, config)
        return f"{tm} x {tn} accumulator tiles need {tm * tn + tm + tn} tile registers > {TILE_REGISTERS}"

    def describe(self) -> str:
        return f"constraint: tm tn + tm + tn <= {TILE_REGISTERS} AMX tile registers"


def unit_axes(workload: Workload, kind: str = "vnni") -> list[Axis]:
    """The workload's axes in units of the instruction's tile: ``n`` by 16 columns and ``k`` by 4 (``vpdpbusd``); for
    AMX also the rows by 16 and ``k`` by 64."""
    ops = operands(workload)
    unit = {ops.n: LANES, ops.k: DEPTH} if kind == "vnni" else {ops.n: LANES, ops.k: TILE_K,
                                                                   _m_axis(workload): TILE_ROWS}
    return [Axis(a.name, a.extent // unit.get(a.name, 1), a.kind) for a in workload.axes()]


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None, *,
               kind: str | None = None) -> Space:
    """The int8 kernel's space (the module docstring) for the target's path (``kind`` forces one); a one-line
    TiletuneError where it cannot run (``refusal``)."""
    if kind is None:
        why = refusal(workload, target)
        if why:
            raise TiletuneError(why)
        kind = path(workload, target)
    ops = operands(workload)
    space = Space.from_axes(unit_axes(workload, kind), levels=levels, choices={"unroll": DEFAULT_UNROLL})
    spatial = [k for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "S"]
    if min(k.levels for k in spatial) >= 2:
        space.constraint = (VnniTile(f"tile_{ops.n}", tuple(k.name for k in spatial if k.axis != ops.n))
                            if kind == "vnni" else AmxTiles(f"tile_{_m_axis(workload)}", f"tile_{ops.n}"))
    return space


def check(workload: Workload, space: Space, config: Config) -> None:
    """InvalidConfig outside the register rule or beyond the accumulator tile's limit."""
    if space.constraint is not None and not space.constraint(space, config):
        raise InvalidConfig(space.constraint.why(space, config))
    _check_limits(workload, space, config)


def _check_limits(workload: Workload, space: Space, config: Config) -> None:
    d = space.to_dict(config)
    ops = operands(workload)
    local = 1
    for k in space.knobs:
        if isinstance(k, SplitKnob) and k.kind == "S":
            f = d[k.name]
            for x in f[outer_levels(len(f)):]:
                local *= x * (LANES if k.axis == ops.n else 1)
    if local > MAX_LOCAL_ELEMS:
        raise InvalidConfig(f"accumulator tile of {local} elements > {MAX_LOCAL_ELEMS}")


def _divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, max(1, min(n, cap)) + 1) if n % d == 0)


#: register tiles (rows P, vectors V) tried first, within the register rule: 4 x 4 (21 registers) to 8 x 3 (28)
START_TILES = ((4, 4), (6, 4), (8, 3), (4, 6), (3, 8), (2, 8), (12, 2))
#: bytes of the weight panel one R1 step range streams through (its k1 x 4 x V x 16 bytes), half of a 32 KiB L1D
PANEL_BYTES = 16 * 1024


def starts(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> list[Config]:
    """The template's own start points (measured first by the constructive start): for each register tile of
    ``START_TILES`` that the shape allows, S3 = (P rows, V vectors), R1 = the reduction steps whose weight panel
    fills ``PANEL_BYTES``, the rows' remaining tiles outermost and parallel, the columns' in S1 (each parallel
    chunk of rows walks all columns). Constructions model the axes in elements, not in the instruction's units."""
    ops = operands(workload)
    knobs = {k.axis: k for k in space.knobs if isinstance(k, SplitKnob)}
    if any(k.levels != (4 if k.kind == "S" else 2) for k in knobs.values()):
        return []
    ext = {a: k.extent for a, k in knobs.items()}
    rows = [a for a, k in knobs.items() if k.kind == "S" and a != ops.n]
    out: list[Config] = []
    seen = set()
    for p, v in START_TILES:
        v = _divisor_at_most(ext[ops.n], v)
        last = rows[-1] if rows else None
        p = _divisor_at_most(ext[last], p) if last else 1
        if (p, v) in seen:
            continue
        seen.add((p, v))
        k1 = _divisor_at_most(ext[ops.k], max(1, PANEL_BYTES // (DEPTH * v * LANES)))
        d: dict[str, Any] = {f"tile_{ops.k}": [ext[ops.k] // k1, k1],
                             f"tile_{ops.n}": [1, ext[ops.n] // v, 1, v]}
        for a in rows:
            tile = p if a == last else 1
            d[f"tile_{a}"] = [ext[a] // tile, 1, 1, tile]
        for k in space.knobs:
            if not isinstance(k, SplitKnob):
                d[k.name] = k.values[0]
        c = space.from_dict(d)
        if space.is_legal(c) and c not in out:
            out.append(c)
    return out


# ---- weight layout ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VnniLayout:
    """``W[.., k, n]`` -> ``[.., n // 16, k // 4, n % 16, k % 4]``: what ``vpdpbusd`` reads as one 64-byte operand."""

    def index_map(self, *iv):
        *lead, k, n = iv
        return (*lead, n // LANES, k // DEPTH, n % LANES, k % DEPTH)

    def pack(self, array):
        """``array`` (numpy, [.., K, N]) in this layout."""
        import numpy as np

        *lead, K, N = array.shape
        split = array.reshape(*lead, K // DEPTH, DEPTH, N // LANES, LANES)
        r = len(lead)
        return np.ascontiguousarray(split.transpose(*range(r), r + 2, r, r + 3, r + 1))


def prepacked(workload: Workload, space: Space, config: Config) -> dict[int, VnniLayout]:
    """The inputs (by position) a measured kernel takes packed: the weight operand when it is a model's weight."""
    ops = operands(workload)
    if ops.weight not in getattr(workload, "weights", frozenset()):
        return {}
    return {workload.input_names().index(ops.weight): VnniLayout()}


# ---- schedule -----------------------------------------------------------------------------------------------------
def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None, func=None):
    """The TensorIR schedule of ``config`` for the target's path (the module docstring). Before an AMX kernel is
    built in a process, this machine's AMX tile state is requested (``cpu_features.request_amx``): the kernel runs in
    the process that builds it."""
    if path(workload, target) == "amx":
        cpu_features.request_amx()
        return schedule_amx(workload, space, config, func)
    return schedule_vnni(workload, space, config, func)


def _prepare(workload: Workload, func):
    """The schedule with the producers inlined and the weight copied into ``VnniLayout`` (a ``PREPACK`` stage for
    a model's weight); (schedule, anchor block)."""
    import tvm
    from tvm import s_tir

    _intrinsics()
    ops = operands(workload)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func() if func is None else func}))
    anchor, epilogue = workload.anchor_name(), workload.epilogue_blocks()
    inline_producers(sch, anchor, keep=epilogue)
    block = sch.get_sblock(anchor)
    reads = [r.source.name for r in sch.get(block).reads]
    packed = sch.cache_read(block, reads.index(ops.weight), "global")
    sch.transform_layout(packed, ("write", 0), VnniLayout().index_map)
    if ops.weight in getattr(workload, "weights", frozenset()):
        sch.annotate(packed, PREPACK, True)
    sch.parallel(sch.get_loops(packed)[0])
    return sch, block


def schedule_amx(workload: Workload, space: Space, config: Config, func=None):
    """The AMX kernel of ``config`` (``make_space(kind="amx")``): the float template's loop order over 16 x 16 x 64
    tile steps, S3 = (tm x tn) accumulator tiles in the int32 local accumulator, each step ``tdpbusd`` on tiles
    loaded from it, from A and from the packed weight (``_LL_AMX``, linked into the kernel)."""
    _check_limits(workload, space, config)
    ops = operands(workload)
    d = space.to_dict(config)
    sch, block = _prepare(workload, func)
    m = _m_axis(workload)
    unit = {m: TILE_ROWS, ops.n: LANES, ops.k: TILE_K}
    spatial_tiles, reduce_tiles, inner = [], [], {}
    for loop, ax in zip(sch.get_loops(block), workload.axes()):
        factors = list(d[f"tile_{ax.name}"])
        if ax.name in unit:
            parts = sch.split(loop, factors=factors + [unit[ax.name]])
            inner[ax.name], parts = parts[-1], parts[:-1]
        else:
            parts = sch.split(loop, factors=factors) if len(factors) > 1 else [loop]
        (spatial_tiles if ax.kind == "S" else reduce_tiles).append(list(parts))
    order = loop_order(spatial_tiles, reduce_tiles)
    sch.reorder(*order, inner[m], inner[ops.n], inner[ops.k])
    fused = _outer(sch, block, workload, d, spatial_tiles)
    sch.annotate(fused, "pragma_import_llvm", _LL_AMX)
    init = sch.decompose_reduction(block, reduce_tiles[0][0])
    vectorize_lanes(sch, sch.get_loops(init)[-1], LANES)
    sch.tensorize(inner[m], AMX_INTRIN)
    return sch


def _outer(sch, block, workload: Workload, d: dict, spatial_tiles):
    """Parallel S0, the unroll knob, the int32 accumulator (local) under the last S1 loop with the epilogue fused
    into its write-back; the fused parallel loop."""
    ls = len(spatial_tiles[0])
    s_outer = outer_levels(ls)
    outer = [t[0] for t in spatial_tiles]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(fused)
    if d.get("unroll"):
        sch.annotate(fused, "pragma_auto_unroll_max_step", int(d["unroll"]))
        sch.annotate(fused, "pragma_unroll_explicit", 1)
    attach = fused if s_outer == 1 or ls == 1 else spatial_tiles[-1][s_outer - 1]
    wb = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(wb, attach, preserve_unit_loops=True)
    if workload.epilogue_blocks():
        fuse_epilogue(sch, workload.epilogue_blocks())
    vectorize_lanes(sch, sch.get_loops(wb)[-1], LANES)
    return fused


def schedule_vnni(workload: Workload, space: Space, config: Config, func=None):
    """The VNNI kernel of ``config`` (the module docstring)."""
    _check_limits(workload, space, config)
    ops = operands(workload)
    d = space.to_dict(config)
    sch, block = _prepare(workload, func)  # the weight in the instruction's layout

    axes = workload.axes()
    loops = sch.get_loops(block)
    spatial_tiles, reduce_tiles = [], []
    lane = depth = None
    for loop, ax in zip(loops, axes):
        factors = list(d[f"tile_{ax.name}"])
        if ax.name == ops.n:
            parts = sch.split(loop, factors=factors + [LANES])
            lane, parts = parts[-1], parts[:-1]
        elif ax.name == ops.k:
            parts = sch.split(loop, factors=factors + [DEPTH])
            depth, parts = parts[-1], parts[:-1]
        else:
            parts = sch.split(loop, factors=factors) if len(factors) > 1 else [loop]
        (spatial_tiles if ax.kind == "S" else reduce_tiles).append(list(parts))
    ls = len(spatial_tiles[0])
    s_outer = outer_levels(ls)
    sch.reorder(*loop_order(spatial_tiles, reduce_tiles), lane, depth)

    outer = [t[0] for t in spatial_tiles]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(fused)
    if d.get("unroll"):
        sch.annotate(fused, "pragma_auto_unroll_max_step", int(d["unroll"]))
        sch.annotate(fused, "pragma_unroll_explicit", 1)

    attach = fused if s_outer == 1 or ls == 1 else spatial_tiles[-1][s_outer - 1]
    wb = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(wb, attach, preserve_unit_loops=True)
    if workload.epilogue_blocks():
        fuse_epilogue(sch, workload.epilogue_blocks())
    vectorize_lanes(sch, sch.get_loops(wb)[-1], LANES)

    init = sch.decompose_reduction(block, reduce_tiles[0][0])
    vectorize_lanes(sch, sch.get_loops(init)[-1], LANES)
    sch.tensorize(lane, VNNI_INTRIN)
    return sch
