"""Config -> TensorIR schedule for LLVM CPU targets, for every workload.

Structure (Ansor's CPU multi-level tiling "S S R S R S"): each spatial axis x is split into
[x0, x1, x2, x3] and each reduction axis r into [r0, r1] (the Config's factors, outermost first), and
the loops are ordered

    S0(all spatial)  S1(all spatial)  R0(all reduction)  S2(all spatial)  R1(all reduction)  S3(all spatial)

- The S0 loops are fused and run in parallel over the cores; S1 and R0 iterate over cache tiles.
- A local accumulator (cache_write, scope "local") is attached under the last S1 loop: it holds the
  S2*S3 output tile across the whole reduction, and is written back (vectorized) after it.
- The reduction is decomposed so that the accumulator's zeroing is a separate, vectorizable loop nest.
- The innermost S3 loop of the last spatial axis (the contiguous dimension of the output) is
  vectorized; ``unroll`` sets ``pragma_auto_unroll_max_step`` on the outer loop. A vectorized loop longer than
  a register whose length is not a power of two (48, 24, 80 floats) is split into an unrolled loop of
  power-of-two vectors of at most one register and at least half of one (3 x 16, 3 x 8; 20 stays whole;
  ``vectorize_lanes``): LLVM compiles such a vector of one loop into much slower code than the same tile in
  register-wide pieces (docs/decisions/register-tile.md, "Vectors of odd lengths").
- Padding stages (conv2d, pooling) are inlined into the main block; for NHWC convolutions the
  ``pad_buffer`` knob may instead write the padded input to a buffer first (parallel over rows, vectorized
  over channels), which takes the bounds checks of the inlined padding out of the inner loop, where they
  guard every broadcast input element (TVM's x86 conv2d schedules pad into a buffer too).
- PrimFunc workloads (``tiletune.workloads.primfunc``): the anchor block is tiled like a TE family's output
  stage; the blocks before it are inlined, and its elementwise epilogue (bias add, residual add, ReLU, SiLU,
  GELU: a chain or a DAG) is fused into the accumulator's write-back (``tiletune.workloads.epilogue``), so
  the write-back computes the function's output. Without a write-back (one spatial level) the epilogue
  blocks stay separate loop nests. ``pack`` applies as for the families, to inputs that are parameters.
- The register tile (NHWC conv2d, and fused kernels whose anchor is an outer product; ``register_rule``): the innermost spatial level S3 sits inside the last
  reduction level R1, so its accumulators are the ones that must stay in vector registers across R1, which
  is an outer product: per reduction step, one input element per output pixel is broadcast and V =
  ceil(k3 / lanes) weight vectors along the output channels are loaded, for P x V FMAs into P x V
  accumulators (P = n3 p3 q3 output pixels). It needs P V accumulators + min(P, V) operand registers held
  across the other operand + 1 streamed operand; oneDNN's AVX2 direct convolution sizes its register
  block by the same count (ur_w x nb_oc_blocking accumulators + ur_w broadcasts + 1 weight <= 16). Our
  code goes through LLVM, which keeps one more register for its own scheduling, so the rule leaves one
  free: need <= registers - 1 (``tiletune.hardware.vector_file``: 16 on AVX2, 32 on AVX-512;
  docs/decisions/register-tile.md). The space of an NHWC conv2d carries the rule as its constraint, so strategies do not propose
  spilling configurations and ``check`` reports them ``invalid`` without building. So does the space of a
  PrimFunc workload whose anchor is such an outer product (a model's NHWC convolutions and matmuls). The
  named GEMM family, NCHW and depthwise spaces carry no constraint (as before).
- The weight block (a model's matmul with a weight [K, N], ``weight_reuse``): the S1 row loops re-read, per
  iteration, the weight of the chunk's columns over the whole reduction; the space refuses configurations that
  re-read a block larger than half of one core's L2, and a parallel split of the rows while the whole weight is
  larger than the L2 (each core would stream all of it) (``WeightReuse``, part of the register-tile constraint;
  docs/decisions/weight-block.md).
- ``pack`` (only for inputs that a reduction walks across while the vectorized axis indexes their
  contiguous dimension, i.e. GEMM's and batch_matmul's B[.., k, n]): a stage before the compute copies
  the input into panels ``Bp[.., n // n3, k, n % n3]`` (n3 = the innermost tile of the vectorized axis),
  so that the micro-kernel reads B contiguously instead of one cache line per 4 KiB row (which also
  thrashes the L1 sets at power-of-two strides). OpenBLAS packs for the same reason. The copy costs
  O(K N) against O(M N K) arithmetic and is parallel over panels. When the input is a weight of the model
  (``PrimFuncWorkload.weights``) the copy is annotated ``PREPACK``: the model build runs it once, on the
  constant (TVM's ``SplitLayoutRewritePreproc`` + ``FoldConstant``, MetaSchedule's weight layout rewrite),
  and the measurement times the kernel without it, on the packed weight (``prepacked``). A weight whose reduction
  is one dimension keeps that dimension as ``WEIGHT_STREAMS`` interleaved streams (``Panels``).

Other level counts work too: with Ls spatial levels the first ceil(Ls/2) form the outer part
(parallel + cache tiles) and the rest the inner part; with Lr reduction levels the first Lr-1 are
outside the inner spatial tiles and the last is inside.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import TiletuneError
from ..hardware import l2_bytes, vector_file
from ..space import DEFAULT_UNROLL, Config, Space, SplitKnob
from ..workloads.access import tensor_accesses
from ..workloads.base import Workload
from ..workloads.primfunc import PrimFuncWorkload
from ..workloads.epilogue import fuse_epilogue

# the innermost vectorized loop is capped to keep codegen sane; longer ones are "invalid"
MAX_VECTOR = 128
# the accumulator tile must fit a generous stack/L2-sized buffer
MAX_LOCAL_ELEMS = 64 * 1024


class InvalidConfig(ValueError):
    """The configuration cannot be scheduled (reported as error kind 'invalid', nothing is built)."""


def packable_inputs(workload: Workload) -> list[str]:
    """Inputs read with plain axis indices that include the last spatial axis and a reduction axis."""
    axes = workload.axes_no_tvm()
    spatial = [a.name for a in axes if a.kind == "S"]
    reduction = {a.name for a in axes if a.kind == "R"}
    if not spatial or not reduction:
        return []
    out = []
    params = set(workload.input_names()) if isinstance(workload, PrimFuncWorkload) else None
    try:
        accesses = tensor_accesses(workload)
    except TiletuneError:  # a PrimFunc whose indices are not affine has no access model: nothing to pack
        return []
    for t in accesses:
        if t.role != "input" or (params is not None and t.name not in params):  # not an inlined producer's
            continue
        plain = all(len(d.terms) == 1 and d.terms[0][1] == 1 for d in t.dims)
        names = [d.terms[0][0] for d in t.dims] if plain else []
        if plain and spatial[-1] in names and reduction & set(names) and names[-1] == spatial[-1]:
            out.append(t.name)
    return out


def bufferable_pad(workload: Workload) -> str | None:
    """The padding stage that the ``pad_buffer`` knob may compute into a buffer instead of inlining: that of
    NHWC convolutions with padding (NCHW spaces stay as they were)."""
    if getattr(workload, "layout", None) == "NHWC" and getattr(workload, "pad", 0) and not isinstance(
            workload, PrimFuncWorkload):
        return "pad"
    return None


def choice_knobs(workload: Workload) -> dict[str, tuple]:
    """The template's categorical knobs for this workload."""
    knobs: dict[str, tuple] = {"unroll": DEFAULT_UNROLL}
    if packable_inputs(workload):
        knobs["pack"] = (0, 1)
    if bufferable_pad(workload):
        knobs["pad_buffer"] = (0, 1)
    return knobs


#: the annotation of a packing stage that the model build runs once, on the weight, instead of every call
#: (MetaSchedule's name, which TVM's ``SplitLayoutRewritePreproc`` and ``RemoveWeightLayoutRewriteBlock`` read)
PREPACK = "meta_schedule.layout_rewrite_preproc"


#: a model weight whose reduction is one dimension (a 1x1 convolution's input channels, a matmul's K) is packed with
#: that dimension as this many interleaved streams, channel c in stream c % WEIGHT_STREAMS: the kernel, reading a few
#: consecutive channels per reduction step, then walks that many sequential streams of the weight at once instead of
#: one, which the hardware prefetchers fetch from DRAM in parallel (docs/decisions/weight-streams.md)
WEIGHT_STREAMS = 4


@dataclass(frozen=True)
class Panels:
    """The panel layout of a packed input: its dimension ``nd`` (the vectorized axis) split into
    ``nd // inner`` and ``nd % inner``, the panel index placed before the first dimension that a reduction
    walks (``first_red``) and the lane index last: ``[lead.., n // inner, rest.., n % inner]``. With
    ``streams`` > 1 the last of ``rest`` (c) is itself split, ``[.., c % streams, c // streams, n % inner]``."""
    nd: int
    first_red: int
    inner: int
    streams: int = 1

    def index_map(self, *iv):
        lead = [iv[i] for i in range(self.first_red) if i != self.nd]
        rest = [iv[i] for i in range(self.first_red, len(iv)) if i != self.nd]
        if self.streams > 1:
            rest = rest[:-1] + [rest[-1] % self.streams, rest[-1] // self.streams]
        return tuple(lead + [iv[self.nd] // self.inner] + rest + [iv[self.nd] % self.inner])

    def pack(self, array):
        """``array`` (numpy) in this layout: what the packing stage computes."""
        import numpy as np

        shape = array.shape
        if shape[self.nd] % self.inner:
            raise TiletuneError(f"panels of {self.inner} do not divide dimension {self.nd} of {shape}")
        split = array.reshape(shape[:self.nd] + (shape[self.nd] // self.inner, self.inner) + shape[self.nd + 1:])
        old = lambda i: i if i < self.nd else i + 1  # noqa: E731  (an axis of ``array`` in ``split``)
        order = [old(i) for i in range(self.first_red) if i != self.nd] + [self.nd]
        order += [old(i) for i in range(self.first_red, len(shape)) if i != self.nd] + [self.nd + 1]
        out = split.transpose(order)
        if self.streams > 1:  # [.., c, lane] -> [.., c % streams, c // streams, lane]
            *head, c, lane = out.shape
            out = out.reshape(*head, c // self.streams, self.streams, lane).swapaxes(-3, -2)
        return np.ascontiguousarray(out)


def _panels(workload: Workload, name: str, inner: int) -> Panels:
    """The panels of input ``name``; a weight of the model (``PrimFuncWorkload.weights``) in ``WEIGHT_STREAMS``
    streams when its reduction walks one dimension (the others of ``rest`` of size 1) that divides into them; a 3x3
    convolution's weights keep one stream (docs/decisions/weight-streams.md)."""
    axes = workload.axes_no_tvm()
    last = [a.name for a in axes if a.kind == "S"][-1]
    reduction = {a.name for a in axes if a.kind == "R"}
    acc = next(t for t in tensor_accesses(workload) if t.name == name)
    names = [d.terms[0][0] for d in acc.dims]
    nd, first_red = names.index(last), min(i for i, a in enumerate(names) if a in reduction)
    rest = [i for i in range(first_red, len(names)) if i != nd]
    streams = 1
    if (name in getattr(workload, "weights", frozenset()) and rest and names[rest[-1]] in reduction
            and acc.dims[rest[-1]].size % WEIGHT_STREAMS == 0 and all(acc.dims[i].size == 1 for i in rest[:-1])):
        streams = WEIGHT_STREAMS
    return Panels(nd, first_red, inner, streams)


def prepacked(workload: Workload, space: Space, config: Config) -> dict[int, Panels]:
    """The inputs (by position) that a kernel of ``config`` takes in panels, packed once when the model is built:
    with ``pack`` on, the packable inputs that are the model's weights (``PrimFuncWorkload.weights``).
    A measured kernel takes them packed (``tiletune.schedules.build(prepacked=True)``), so the tuner times what
    the model runs."""
    d = space.to_dict(config)
    weights = getattr(workload, "weights", frozenset())
    if not d.get("pack") or not weights:
        return {}
    last = [k for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "S"][-1]
    names = workload.input_names()
    return {names.index(n): _panels(workload, n, d[last.name][-1]) for n in packable_inputs(workload)
            if n in weights}


def _pack(sch, block, workload: Workload, name: str, inner: int, read_name: str | None, lanes: int) -> None:
    """Copy input ``name`` into panels [.., n // inner, k, n % inner] read by ``block`` (as ``read_name`` when
    the scheduled function names its buffers otherwise; the lane loop vectorized by ``vectorize_lanes`` for
    ``lanes``). For a weight of the model the copy is annotated ``PREPACK``: the model build folds it into the
    constant, the measurement gives it packed."""
    reads = [r.source.name for r in sch.get(block).reads]
    idx = reads.index(read_name or name)
    panels = _panels(workload, name, inner)
    nd, first_red = panels.nd, panels.first_red

    packed = sch.cache_read(block, idx, "global")
    sch.transform_layout(packed, ("write", 0), panels.index_map)
    if name in getattr(workload, "weights", frozenset()):
        sch.annotate(packed, PREPACK, True)
    # loop nest in the packed (write) order: leading dims, panel, rest, lane; parallel over the outer
    # loops, vectorized over the n3 lanes of a panel row
    loops = sch.get_loops(packed)
    panel_outer, lane = sch.split(loops[nd], factors=[None, inner])
    order = [loops[i] for i in range(first_red) if i != nd] + [panel_outer]
    order += [loops[i] for i in range(first_red, len(loops)) if i != nd] + [lane]
    sch.reorder(*order)
    n_outer = sum(1 for i in range(first_red) if i != nd) + 1
    sch.parallel(sch.fuse(*order[:n_outer]) if n_outer > 1 else order[0])
    if inner > 1:
        vectorize_lanes(sch, lane, lanes)


BLOCK_SHARE = 0.5  # of one core's L2 that a re-read weight block may take: docs/decisions/weight-block.md


@dataclass(frozen=True)
class WeightReuse:
    """The weight-block rule of a model's matmul (docs/decisions/weight-block.md): in the template's loop order
    ``S0 S1 R0 S2 R1 S3`` the S1 loops of the row axes (the spatial axes the weight does not read) re-read, for each
    of their iterations, the weight block of the parallel chunk's columns over the whole reduction: K x (the
    column knob's tiles below S0) x the dtype's bytes. When they re-read it (their S1 tiles multiply to more than
    one), that block has to stay in one core's L2 (``l2_bytes``) beside what the same loops stream through it (the
    activations' rows, the outputs): the block may take half of the L2 (``BLOCK_SHARE``); beyond it, every row block
    streams the weights again from the shared cache or DRAM. The same holds one level up: a parallel (S0) split of
    the rows gives every core row chunks over all the columns, so each core streams the whole weight; while the
    weight (K x N) is larger than one core's L2, the cores split only the columns. Only matmuls' 2-D weights [K, N]
    (the reduction, then the vectorized columns) carry the rule; convolutions' weights are not measured with it."""

    l2_bytes: int
    rows: tuple[int, ...]  # knob positions of the spatial axes the weight does not read
    cols: int  # knob position of the vectorized (column) axis
    col_bytes: int  # the weight's bytes per column: the whole reduction x the dtype's bytes
    outer: int  # tile levels of a spatial axis outside the accumulator (S0 and S1: ``outer_levels``)

    def rereads(self, config: Config) -> int:
        return math.prod(x for i in self.rows for x in config.values[i][1:self.outer])

    def row_chunks(self, config: Config) -> int:
        """How many parallel chunks the rows are split into (S0)."""
        return math.prod(config.values[i][0] for i in self.rows)

    def block(self, config: Config) -> int:
        """Bytes of the weight block that the row loops re-read."""
        return self.col_bytes * math.prod(config.values[self.cols][1:])

    def weight(self, config: Config) -> int:
        """Bytes of the whole weight."""
        return self.col_bytes * math.prod(config.values[self.cols])

    @property
    def block_bytes(self) -> int:
        """The most bytes a re-read block may take."""
        return int(self.l2_bytes * BLOCK_SHARE)

    def __call__(self, space: Space, config: Config) -> bool:
        return ((self.rereads(config) <= 1 or self.block(config) <= self.block_bytes)
                and (self.row_chunks(config) <= 1 or self.weight(config) <= self.l2_bytes))

    def why(self, space: Space, config: Config) -> str:
        if self.row_chunks(config) > 1 and self.weight(config) > self.l2_bytes:
            return (f"the cores split the rows {self.row_chunks(config)} ways, so each streams the whole weight of "
                    f"{self.weight(config) / 2**20:.2f} MiB, more than one core's L2 ({self.l2_bytes / 2**20:.2f} MiB)")
        return (f"the row loops re-read a weight block of {self.block(config) / 2**20:.2f} MiB "
                f"{self.rereads(config)} times, more than {BLOCK_SHARE:.0%} of one core's L2 "
                f"({self.block_bytes / 2**20:.2f} MiB)")

    def describe(self) -> str:
        return (f"the weight block that row loops re-read fits {BLOCK_SHARE:.0%} of one core's L2 "
                f"({self.block_bytes / 2**20:.2f} MiB), and the cores split the rows only of a weight that fits the L2 "
                f"({self.l2_bytes / 2**20:.2f} MiB)")


def weight_reuse(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> WeightReuse | None:
    """The weight-block rule (``WeightReuse``) of a model's matmul for ``target``, or None: a PrimFunc workload with
    one 2-D weight read as [reduction, vectorized axis], on a CPU whose L2 is known (``l2_bytes``)."""
    if not isinstance(workload, PrimFuncWorkload) or not workload.weights:
        return None
    spatial = [(i, k) for i, k in space.split_knobs if k.kind == "S"]
    if len(spatial) < 2 or min(k.levels for _, k in spatial) < 2:
        return None
    try:
        accesses = [t for t in tensor_accesses(workload) if t.role == "input" and t.name in workload.weights]
    except TiletuneError:
        return None
    reductions = {a.name for a in workload.axes_no_tvm() if a.kind == "R"}
    last = spatial[-1][1].axis
    if len(accesses) != 1 or len(accesses[0].dims) != 2:
        return None
    k_dim, n_dim = accesses[0].dims
    if n_dim.terms != ((last, 1),) or not k_dim.axes or not set(k_dim.axes) <= reductions:
        return None
    rows = tuple(i for i, k in spatial if k.axis not in accesses[0].axes)
    outer = outer_levels(spatial[0][1].levels)
    if (l2 := l2_bytes(target)) is None:
        return None
    return WeightReuse(l2, rows, spatial[-1][0], k_dim.size * accesses[0].dtype_bytes, outer)


@dataclass(frozen=True)
class RegisterTile:
    """The register-tile rule as a space constraint (see the module docstring): the innermost tile of the
    spatial knobs at positions ``spatial`` (the last one vectorized) needs P V + min(P, V) + 1 vector
    registers of ``lanes`` fp32 lanes, at most ``registers`` - 1 of the target's ``registers``. The knobs at
    positions ``channel`` are spatial axes that the broadcast operand does not read (a blocked convolution's
    output-channel block, ``tiletune.model.passes.nchwc``): their tiles multiply the weight vectors V, not the pixels P;
    with such knobs the vectorized axis is the block itself, whose innermost tile must then be all of it (one
    register of a 16-channel block; a part of it would leave lanes idle)."""

    registers: int
    lanes: int
    spatial: tuple[int, ...]  # knob positions of the spatial split knobs, the vectorized axis last
    channel: tuple[int, ...] = ()  # knob positions of the spatial axes that multiply V
    reuse: WeightReuse | None = None  # a matmul's weight-block rule, checked with the register tile

    def need_tile(self, pixels: int, channels: int, blocks: int = 1) -> int:
        """Vector registers of a register tile of ``pixels`` output pixels x ``blocks`` x ``channels`` output
        channels."""
        vectors = -(-channels // self.lanes) * blocks
        return pixels * vectors + min(pixels, vectors) + 1

    def need(self, config: Config) -> int:
        vals = config.values
        pixels = blocks = 1
        for i in self.spatial[:-1]:
            if i in self.channel:
                blocks *= vals[i][-1]
            else:
                pixels *= vals[i][-1]
        return self.need_tile(pixels, vals[self.spatial[-1]][-1], blocks)

    @property
    def budget(self) -> int:
        """Registers a tile may use: all but one, which LLVM keeps for its scheduling."""
        return self.registers - 1

    def fits(self, pixels: int, channels: int, blocks: int = 1) -> bool:
        return self.need_tile(pixels, channels, blocks) <= self.budget

    def whole_block(self, space: Space, config: Config) -> bool:
        last = self.spatial[-1]
        return not self.channel or config.values[last][-1] == space.knobs[last].extent

    def __call__(self, space: Space, config: Config) -> bool:
        return (self.need(config) <= self.budget and self.whole_block(space, config)
                and (self.reuse is None or self.reuse(space, config)))

    def why(self, space: Space, config: Config) -> str:
        if self.reuse is not None and not self.reuse(space, config):
            return self.reuse.why(space, config)
        if not self.whole_block(space, config):
            return (f"the vectorized channel block's innermost tile is {config.values[self.spatial[-1]][-1]}, "
                    f"not the whole block of {space.knobs[self.spatial[-1]].extent}")
        return (f"register tile needs {self.need(config)} vector registers > {self.budget} "
                f"({self.registers} {self.lanes}-lane registers on this target, one left to the compiler)")

    def describe(self) -> str:
        return (f"constraint: the register tile (innermost spatial level) fits {self.budget} of the "
                f"{self.registers} vector registers of {self.lanes} fp32 lanes"
                + (", the vectorized channel block whole" if self.channel else "")
                + (f"; {self.reuse.describe()}" if self.reuse is not None else ""))


def outer_product_anchor(workload: Workload) -> bool:
    """Is ``workload``'s main computation an outer product along its vectorized axis (the last spatial
    axis)? One input is read without that axis (a scalar per output pixel, broadcast over the lanes), and
    one with that axis alone, with coefficient 1, as its last dimension (vector loads): NHWC conv2d
    (data[n, h + r, w + s, c] x weight[r, s, c, k]) and GEMM (A[m, k] x B[k, n]). Depthwise convolutions
    and pooling (every input indexed by the vectorized axis) are not."""
    return _broadcast_reads(workload) is not None


def _broadcast_reads(workload: Workload) -> set[str] | None:
    """The axes that the broadcast operands (the inputs read without the vectorized axis) of an outer-product
    anchor read (``outer_product_anchor``); None when the anchor is not one."""
    axes = workload.axes_no_tvm()
    spatial = [a.name for a in axes if a.kind == "S"]
    if not spatial or not any(a.kind == "R" for a in axes):
        return None
    try:
        accesses = [t for t in tensor_accesses(workload) if t.role == "input"]
    except TiletuneError:  # indices that are not affine: no access model, no rule
        return None
    last = spatial[-1]
    broadcast = [t for t in accesses if all(last not in d.axes for d in t.dims)]
    vector = any(t.dims and t.dims[-1].terms == ((last, 1),) for t in accesses)
    return {a for t in broadcast for d in t.dims for a in d.axes} if broadcast and vector else None


def register_rule(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> RegisterTile | None:
    """The register-tile constraint of ``workload``'s CPU space for ``target``, or None: for NHWC conv2d, and
    for PrimFunc workloads (fused kernels of a model) whose anchor is an outer product along the vectorized
    axis (``outer_product_anchor``: the convolutions of an NHWC model, its matmuls), with at least two
    spatial levels (the register tile is then inside the last reduction level). The named GEMM and
    batch_matmul families keep their unconstrained spaces (their records predate the rule, and their best
    kernels fit it: docs/decisions/register-tile.md), NCHW and depthwise have no outer-product register tile.
    The spatial axes that no broadcast operand reads (a blocked convolution's output-channel block) are the
    rule's ``channel`` axes."""
    read = None
    if isinstance(workload, PrimFuncWorkload):
        if (read := _broadcast_reads(workload)) is None:
            return None
    elif getattr(workload, "op", None) != "conv2d" or getattr(workload, "layout", None) != "NHWC":
        return None
    spatial = tuple(i for i, k in space.split_knobs if k.kind == "S")
    if not spatial or min(space.knobs[i].levels for i in spatial) < 2:
        return None
    channel = () if read is None else tuple(i for i in spatial[:-1] if space.knobs[i].axis not in read)
    reuse = weight_reuse(workload, space, target)
    registers, lanes = vector_file(target)
    return RegisterTile(registers, lanes, spatial, channel, reuse)


def loop_order(spatial_tiles: list, reduce_tiles: list) -> list:
    """The template's loop order of the tiles (each axis' loops, outermost first): the outer spatial levels
    (``outer_levels``), the outer reduction levels, the inner spatial levels but the last, the last reduction level,
    the last spatial level (S0 S1 R0 S2 R1 S3 for (4, 2) levels)."""
    ls = len(spatial_tiles[0]) if spatial_tiles else 1
    lr = len(reduce_tiles[0]) if reduce_tiles else 1
    s_outer = outer_levels(ls)
    order: list = []
    for lv in range(s_outer):
        order += [t[lv] for t in spatial_tiles]
    for lv in range(lr - 1):
        order += [t[lv] for t in reduce_tiles]
    for lv in range(s_outer, ls - 1):
        order += [t[lv] for t in spatial_tiles]
    order += [t[lr - 1] for t in reduce_tiles]
    if ls > s_outer:
        order += [t[ls - 1] for t in spatial_tiles]
    return order


def outer_levels(levels: int) -> int:
    """How many of a spatial axis' tile levels form the outer part (parallel + cache tiles); the rest is
    the accumulator tile."""
    return (levels + 1) // 2


def check(workload: Workload, space: Space, config: Config) -> None:
    """Raise InvalidConfig for configurations that are not measured: outside the space's register-tile
    rule, or beyond the template's limits (``check_limits``)."""
    if isinstance(space.constraint, RegisterTile) and not space.constraint(space, config):
        raise InvalidConfig(space.constraint.why(space, config))
    check_limits(workload, space, config)


def check_limits(workload: Workload, space: Space, config: Config) -> None:
    """Raise InvalidConfig for configurations the template cannot schedule. (``schedule`` checks only
    these: a configuration measured before the register-tile rule, as in an old records file, still
    builds into the same kernel.)"""
    d = space.to_dict(config)
    spatial = [k for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "S"]
    if spatial:
        last = d[spatial[-1].name]
        if last[-1] > MAX_VECTOR:
            raise InvalidConfig(f"innermost vector length {last[-1]} > {MAX_VECTOR}")
        local = 1
        for k in spatial:
            f = d[k.name]
            for x in f[outer_levels(len(f)):]:
                local *= x
        if local > MAX_LOCAL_ELEMS:
            raise InvalidConfig(f"accumulator tile of {local} elements > {MAX_LOCAL_ELEMS}")


def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None, func=None):
    """Build the TensorIR schedule of ``config``. ``func``: schedule this PrimFunc instead of the workload's, one
    with the same blocks and loops whose extents may be symbolic (``tiletune.model.dynamic.shape_rule``): a symbolic
    loop keeps the configuration's inner factors and its outermost one is left to TVM (ceil-divided, the tail
    predicated)."""
    import tvm
    from tvm import s_tir

    check_limits(workload, space, config)
    d = space.to_dict(config)
    lanes = vector_file(target)[1]
    mod = tvm.IRModule({"main": workload.prim_func() if func is None else func})
    sch = s_tir.Schedule(mod)
    out_name = workload.anchor_name()
    epilogue = workload.epilogue_blocks()
    pad_buffer = bufferable_pad(workload) if d.get("pad_buffer") else None
    inline_producers(sch, out_name, keep=epilogue + ((pad_buffer,) if pad_buffer else ()))
    block = sch.get_sblock(out_name)
    if d.get("pack"):
        last = [k for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "S"][-1]
        own = [p.name for p in workload.prim_func().params if hasattr(p, "shape")]
        given = [p.name for p in func.params if hasattr(p, "shape")] if func is not None else own
        for name in packable_inputs(workload):
            _pack(sch, block, workload, name, d[last.name][-1], dict(zip(own, given)).get(name), lanes)

    axes = workload.axes()
    loops = sch.get_loops(block)
    assert len(loops) == len(axes), (loops, axes)
    unroll = d.get("unroll", 0)

    spatial_tiles: list[list] = []
    reduce_tiles: list[list] = []
    for loop, ax in zip(loops, axes):
        factors = d[f"tile_{ax.name}"]
        if func is not None and not isinstance(sch.get(loop).extent, tvm.tirx.IntImm):
            factors = [None, *factors[1:]]
        parts = sch.split(loop, factors=list(factors)) if len(factors) > 1 else [loop]
        (spatial_tiles if ax.kind == "S" else reduce_tiles).append(list(parts))

    ls = len(spatial_tiles[0]) if spatial_tiles else 1
    s_outer = outer_levels(ls)
    sch.reorder(*loop_order(spatial_tiles, reduce_tiles))

    # parallel outer loops (before the reduction is decomposed: parallel needs a reduction block)
    fused = None
    if spatial_tiles:
        outer = [t[0] for t in spatial_tiles]
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.parallel(fused)
        if unroll:
            sch.annotate(fused, "pragma_auto_unroll_max_step", int(unroll))
            sch.annotate(fused, "pragma_unroll_explicit", 1)

    # local accumulator attached under the last outer spatial loop, written back vectorized
    # (with a single outer level that loop is now part of the fused parallel loop)
    attach = None
    if spatial_tiles and ls > 1:
        attach = fused if s_outer == 1 else spatial_tiles[-1][s_outer - 1]
    if reduce_tiles and attach is not None:
        wb = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(wb, attach, preserve_unit_loops=True)
        if epilogue:  # elementwise consumers (PrimFunc workloads) computed by the write-back
            fuse_epilogue(sch, epilogue)
        vectorize_lanes(sch, sch.get_loops(wb)[-1], lanes)

    # vectorize the innermost spatial loop of the compute (contiguous dimension of the output)
    if spatial_tiles and ls > 1:
        vectorize_lanes(sch, spatial_tiles[-1][-1], lanes)

    # zero the accumulator in its own loop nest, vectorized like the update
    if reduce_tiles and spatial_tiles:
        init = sch.decompose_reduction(block, reduce_tiles[0][0])  # the first reduction loop in ``order``
        if ls > 1:
            vectorize_lanes(sch, sch.get_loops(init)[-1], lanes)
    if pad_buffer:  # the padded input written once, parallel over (batch, rows), vectorized over channels
        pad_loops = sch.get_loops(sch.get_sblock(pad_buffer))
        sch.parallel(sch.fuse(*pad_loops[:2]))
        sch.vectorize(pad_loops[-1])
    return sch


def vectorize_lanes(sch, loop, lanes: int) -> None:
    """Vectorize ``loop``; one longer than ``lanes`` whose length is not a power of two becomes an unrolled loop
    over vectors of its largest power-of-two divisor, at most ``lanes`` and at least half of it (see the module
    docstring). A loop whose extent is not a constant (a symbolic shape's) is vectorized as it is."""
    extent = sch.get(loop).extent
    n = int(extent) if hasattr(extent, "value") else None
    if n is not None and n > lanes and n & (n - 1):
        chunk = min(lanes, n & -n)  # n & -n: the largest power of two dividing n
        if chunk >= max(2, lanes // 2):  # narrower pieces (20 -> 5 x 4) measured slower than LLVM's own vector
            outer, loop = sch.split(loop, factors=[None, chunk])
            sch.unroll(outer)
    sch.vectorize(loop)


def inline_producers(sch, out_name: str, keep: tuple[str, ...] = ()) -> None:
    root = sch.get_sblock("root") if has_root(sch) else None
    blocks = sch.get_child_blocks(root) if root is not None else []
    for b in blocks:
        name = sch.get(b).name_hint
        if name != out_name and name not in keep:
            sch.compute_inline(b)


def has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except Exception:
        return False
