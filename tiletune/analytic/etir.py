"""Gensor's ETIR state and the analytic model of a space (Liu et al., 2025), used by the constructive
strategies Gensor (tiletune.strategies.gensor) and Roller (tiletune.strategies.roller).

ETIR (the state). For every loop axis a and every scheduled memory level l = 0..n-1 (n = the private
levels of the target that the space can express: registers, L1, L2 on a CPU; registers, shared memory on
a GPU) the cumulative tile size T_a^l, nested T_a^0 | T_a^1 | ... | E_a; the current memory level c; the
virtual-thread count V. Levels above c are not scheduled yet and follow c. In the CPU template (loop order
S0 S1 R0 S2 R1 S3) these are the working sets of its loop bodies:
  level 0 registers: body of R1 - spatial S3, reduction 1;
  level 1 L1:        body of R0 - spatial S2*S3, reduction R1;
  level 2 L2:        body of S0 - spatial S1*S2*S3, the whole reduction;
and the map to a Config is S3 = T^0, S2 = T^1/T^0, S1 = T^2/T^1, S0 = E/T^2 (S0 is fused and parallel over
the cores), R1 = T_r^1, R0 = E/T_r^1. Tiles move along divisors of the extent (every split is exact), so
every constructed state is a legal Config, also for prime extents (divisors 1 and E). Other level counts
follow the same rule: the spatial level l sets factor L_a-1-l, the reduction level l >= 1 sets factor
L_r-l; a reduction tile is 1 at level 0 and the whole extent at levels >= L_r.

The analytic time is a roofline over the levels: max(compute, max_l Q(T^l) / BW_{l+1}, DRAM traffic /
BW_DRAM), compute = FLOPs / (peak x load balance of the S0 tiles over the cores x vector-lane use of the
innermost register tile x FMA-pipe use, min(1, V x accumulator vectors / (chains x FMA units)), where chains is
the independent accumulators one FMA pipe needs to hide its latency: 2 on a GPU (the paper's), and on a CPU its
latency in cycles, ``CPU_FMA_CHAINS`` = 4 (an FMA takes 4 cycles on Intel's cores since Skylake and on AMD's
since Zen 2, at one per cycle per pipe; docs/decisions/analytic-model.md). On a CPU the lane use and the
accumulators count the
registers LLVM actually uses for the vectorised axis (``vector_registers``: 14 lanes are three registers,
not one), and a register tile must fit the vector registers (``registers_fit``; NHWC conv2d has the
template's own rule). On a CPU, where an L1 tile holds several register tiles, their accumulators' round trips
to L1 (``accumulator_trips``) are added to that maximum: they take the slots the FMAs' operand loads need.

The data-movement terms F(t) (footprint) and Q(t) (traffic) come from tiletune.workloads.access.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from ..errors import TiletuneError
from ..hardware import detect_cpu, for_target
from ..schedules.cpu import RegisterTile
from ..schedules.cuda import LimitRule
from ..space import ChoiceKnob, Config, Space, SplitKnob
from ..workloads.access import (compulsory_bytes, footprint_bytes, generic_accesses, tensor_accesses,
                                traffic_bytes)
from ..workloads.base import Axis


def longest_reduction(space: Space) -> str | None:
    """The reduction axis of ``space`` that is longer than every other, where there are two or more reduction
    axes and one of them is the longest; else None (the axis a direct loop order holds whole in R1)."""
    red = [k for _, k in space.split_knobs if k.kind == "R"]
    longest = [k.axis for k in red if k.extent == max(r.extent for r in red)]
    return longest[0] if len(red) >= 2 and len(longest) == 1 else None


@dataclass(frozen=True)
class ETIR:
    """tiles[i][l]: cumulative tile of the i-th split knob's axis at scheduled level l; level: current."""

    tiles: tuple[tuple[int, ...], ...]
    level: int = 0
    vthread: int = 1


#: independent accumulators per FMA pipe on a CPU: its FMA latency in cycles (module docstring)
CPU_FMA_CHAINS = 4


class Model:
    """Axes, accesses, hardware and the level plan of one space; footprints, traffic, analytic time,
    and the ETIR <-> Config map. ``in_direct_order`` gives the same model with its reduction tiles fixed in a
    direct loop order (``direct_orders``), so that a construction chooses the spatial tiles only."""

    #: ``time``: the independent accumulators a CPU's FMA pipe needs (its latency in cycles; module docstring)
    cpu_fma_chains = CPU_FMA_CHAINS
    #: ``unroll_value``: an outer-product register tile is unrolled at least the smallest non-zero depth
    #: (docs/decisions/register-tile.md; False only to measure the floor: benchmarks/research/construct_change.py)
    unroll_floor = True
    #: ``accumulator_trips``/``time``: a CPU register tile's accumulators leave the registers only when the L1 tile
    #: holds several register tiles, and those round trips add to the time (False only to measure the rule:
    #: every tile's counted once per R0 iteration, overlapping the compute; benchmarks/research/construct_change.py)
    accumulator_turns = True
    #: ``fits``: in a space with the template's register-tile rule, the rule alone decides whether the level-0 tile
    #: fits the registers (the footprint counted P broadcast scalars as P vector registers, while the code reloads
    #: one; False only to measure the rule: benchmarks/research/construct_change.py)
    rule_registers = True

    def __init__(self, space: Space, workload=None, hardware=None, target=None):
        self.space = space
        # a direct loop order (``in_direct_order``): the reduction axes R1 holds whole, the others held in R0
        self.r1_whole: tuple[str, ...] = ()
        # the row order (``in_row_order``): the vectorised axis whole in S1, no S2 / S3 tiles, the window in R1
        self.row = False
        if hardware is None:
            # no HardwareSpec given: the target's (a CUDA arch -> its preset), else this CPU, never measuring
            hardware = (for_target(target, measure_bandwidth=False) if isinstance(target, dict)
                        else detect_cpu(measure_bandwidth=False))
        self.hw = hardware
        self.knobs: list[tuple[int, SplitKnob]] = space.split_knobs
        if not self.knobs:
            raise TiletuneError("gensor/roller need a space with split (tile) knobs")
        self.axes = [Axis(k.axis, k.extent, k.kind) for _, k in self.knobs]
        names = {a.name for a in self.axes}
        acc = None
        if workload is not None:
            try:
                acc = tensor_accesses(workload)
            except (AttributeError, TypeError, ValueError):
                acc = None
            if acc is not None and not {a for t in acc for a in t.axes} <= names:
                acc = None  # the space was built from other axes
        self.accesses = acc if acc is not None else generic_accesses(self.axes)
        self.elem_bytes = self.accesses[0].dtype_bytes
        self.q_min = compulsory_bytes(self.accesses)
        self.flops = float(getattr(workload, "flops", 0) or 2 * math.prod(a.extent for a in self.axes))
        private = [m for m in self.hw.memory if not m.shared and m.size_bytes is not None]
        spatial_levels = [k.levels for _, k in self.knobs if k.kind == "S"]
        self.n = max(1, min(len(private), max(spatial_levels, default=2) - 1))
        self.mem = self.hw.memory  # level l of the plan is mem[l]
        self.spatial = [i for i, (_, k) in enumerate(self.knobs) if k.kind == "S"]
        self.inner = self.spatial[-1] if self.spatial else None  # vectorised axis
        self.outer = self.spatial[-2] if len(self.spatial) > 1 else None
        self.divs = [k.divisors for _, k in self.knobs]  # ascending
        # the CPU template's register-tile rule, where the space carries it (NHWC conv2d): constructed
        # register tiles obey it, and they pack the weight (see to_config)
        self.register_rule = space.constraint if isinstance(space.constraint, RegisterTile) else None
        # the GPU template's per-block limits (threads, shared memory, registers per thread, vthreads), where the
        # space carries them: a state whose configuration breaks one does not fit, as a cache overflow does not
        self.limit_rule = space.constraint if isinstance(space.constraint, LimitRule) else None
        # a CPU space without either rule: the register tile must fit the vector registers (registers_fit)
        self.cpu_registers = (self.hw.vector_registers if self.hw.kind == "cpu" and self.register_rule is None
                              and self.limit_rule is None else 0)
        # footprints and traffic by (level, that level's tiles[, output trips]): a walk meets the same tiles again
        # and again (shared by the copies of ``in_direct_order`` / ``in_row_order``: they depend on neither)
        self._footprints: dict[tuple, int] = {}
        self._traffic: dict[tuple, int] = {}
        self._modes: dict[tuple, list[list[str]]] = {}

    # ---- the direct loop orders --------------------------------------------------------------------
    def direct_orders(self) -> list[tuple[str, ...]]:
        """The direct loop orders of this space, as the reduction axes R1 holds whole (the others are held
        whole in R0): [] unless this is a CPU and the reduction has two or more axes with one longest; else
        first (the longest,), then (the longest, w) for each reduction axis w that indexes an input together
        with the vectorised spatial axis where that axis strides through it (a strided convolution's column
        window s when the output width is vectorised, as in NCHW: input[.., q * stride + s], stride > 1).

        The first is the loop nest of direct convolutions on CPUs (oneDNN's, TVM's x86 NCHWc schedules; BLIS's
        kc loop for GEMM): the accumulators of the register tile stay in registers over one long reduction axis
        (the input channels), and the short window axes (kernel rows and columns) run outside it. The analytic
        model does not build it: it places the window axes in R1 and the channels in R0, and scores these
        kernels below its own tops. The second keeps the column window inside R1 too: the vector loads of a
        strided convolution read every stride-th input column; it is built for strided convolutions only.
        Measurements: docs/decisions/direct-order.md."""
        main = longest_reduction(self.space)
        if main is None or self.hw.kind != "cpu":
            return []
        plans = [(main,)]
        reduction = {a.name for a in self.axes if a.kind == "R"} - {main}
        vec = self.axes[self.inner].name if self.inner is not None else None
        for t in self.accesses:
            if t.role != "input":
                continue
            for d in t.dims:
                if dict(d.terms).get(vec, 0) > 1:  # the vectorised axis strides through this input dimension
                    plans += [(main, w) for w in d.axes if w in reduction and (main, w) not in plans]
        return plans

    def in_direct_order(self, plan: tuple[str, ...]) -> "Model":
        """This model with its reduction tiles fixed in the direct loop order ``plan`` (one of
        ``direct_orders``); everything else shared (a model is not changed after it is built)."""
        m = copy.copy(self)
        m.r1_whole = tuple(plan)
        return m

    def row_order(self) -> bool:
        """Does the row order apply: a CPU plan whose top level is the vectorised axis' S1 (three scheduled levels
        for the template's four spatial ones: with fewer, the whole row would land in S2), a reduction made only
        of window axes
        (each reduction axis indexes an input together with a spatial axis, and one of them with the
        vectorised axis: a depthwise convolution or a pooling window in NCHW, input[.., p + r, q + s]), short
        enough that the micro-kernel can unroll all of it (the product of its extents <= the largest unroll
        depth of the space)?

        The row order (``in_row_order``) gives no explicit vector tile: the vectorised axis is whole in S1 and
        every other spatial axis has S2 = S3 = 1, the whole window sits in R1, and the unroll depth covers the
        body of one output point (``unroll_value``). The loop over the output row is then the innermost loop
        left after TVM's unrolling, with a straight-line body, and LLVM's loop vectoriser vectorises it, one
        accumulator per lane. An S3 tile on another axis under it stops LLVM from vectorising the row, so the
        order keeps S2 and S3 at 1 and leaves those tiles to the searches. The analytic model scores these
        kernels as scalar code (one lane), so it never builds them itself. Measurements:
        docs/decisions/row-order.md."""
        if self.hw.kind != "cpu" or self.inner is None or self.n != self.knobs[self.inner][1].levels - 1:
            return False
        reduction = {a.name for a in self.axes if a.kind == "R"}
        spatial = {a.name for a in self.axes if a.kind == "S"}
        unroll = next((k for k in self.space.knobs if isinstance(k, ChoiceKnob) and k.name == "unroll"), None)
        depths = [v for v in (unroll.values if unroll else ()) if isinstance(v, (int, float))]
        if not reduction or not depths:
            return False
        if math.prod(a.extent for a in self.axes if a.kind == "R") > max(depths):
            return False
        vec = self.axes[self.inner].name
        windowed, on_vec = set(), False
        for t in self.accesses:
            if t.role != "input":
                continue
            for d in t.dims:
                w = reduction & set(d.axes)
                if w and spatial & set(d.axes):
                    windowed |= w
                    on_vec = on_vec or vec in d.axes
        return windowed == reduction and on_vec

    def in_row_order(self) -> "Model":
        """This model with its tiles fixed in the row order (``row_order``): a construction chooses the S0 / S1
        split of the spatial axes other than the vectorised one only."""
        m = self.in_direct_order(tuple(a.name for a in self.axes if a.kind == "R"))
        m.row = True
        return m

    # ---- level modes ------------------------------------------------------------------------------
    def mode(self, i: int, l: int) -> str:
        """'free' (set by tile actions), 'copy' (follows level l-1), 'one' or 'full'."""
        k = self.knobs[i][1]
        if k.kind == "S":
            if k.levels == 1:
                return "one"
            if self.row and l < self.n - 1:  # the row order: no S3 / S2 tiles; the vectorised axis whole in S1
                return "one"
            if self.row and i == self.inner:
                return "full"
            return "free" if l <= k.levels - 2 else "copy"
        if l == 0:
            return "one"
        if self.r1_whole and l <= k.levels - 1:  # a direct order: R1 holds these axes whole, R0 the others
            return "full" if k.axis in self.r1_whole else "one"
        return "free" if l <= k.levels - 1 else "full"

    def initial(self) -> ETIR:
        """The unscheduled state: no partitioning (every tile 1), level 0, no virtual threads."""
        return self.normalize(tuple((1,) * self.n for _ in self.knobs), 0, 1)

    def modes(self) -> list[list[str]]:
        """``mode(i, l)`` of every axis i and level l (kept per loop order)."""
        key = (self.r1_whole, self.row)
        out = self._modes.get(key)
        if out is None:
            out = self._modes[key] = [[self.mode(i, l) for l in range(self.n)] for i in range(len(self.knobs))]
        return out

    def normalize(self, tiles, level: int, vthread: int) -> ETIR:
        out = []
        modes = self.modes()
        for i, (_, k) in enumerate(self.knobs):
            row = []
            for l in range(self.n):
                m = modes[i][l]
                if m == "one":
                    v = 1
                elif m == "full":
                    v = k.extent
                elif m == "copy" or l > level:
                    v = row[l - 1] if l else 1
                else:
                    v = tiles[i][l]
                row.append(v)
            out.append(tuple(row))
        return ETIR(tuple(out), level, vthread)

    def tile_map(self, e: ETIR, l: int) -> dict[str, int]:
        return {a.name: e.tiles[i][l] for i, a in enumerate(self.axes)}

    def unit(self, l: int) -> int:
        """Transfer unit of level l in elements: a vector for registers, a line for caches."""
        return max(1, self.mem[l].line_bytes // self.elem_bytes)

    def footprint(self, e: ETIR, l: int) -> int:
        key = (l, tuple(t[l] for t in e.tiles))
        out = self._footprints.get(key)
        if out is None:
            out = self._footprints[key] = footprint_bytes(self.accesses, self.tile_map(e, l), self.unit(l))
        return out

    def accumulator_trips(self, e: ETIR) -> int:
        """Times each register tile's accumulators move between the registers and the local buffer (L1) on a
        CPU. The template's R1 loop holds one register tile (S3); when the L1 tile holds several (S2 > 1) they
        take turns, each going back to the buffer and returning once per R0 iteration (a store and a load each
        time but the last). With one (S2 = 1) LLVM keeps it in registers across R0: 1. Measured on Bert-small's
        FFN matmul 256 x 2048 x 512 (docs/decisions/analytic-model.md, "Accumulator round trips")."""
        if self.hw.kind != "cpu" or self.n < 2:
            return 1
        turns = math.prod(e.tiles[i][1] // e.tiles[i][0] for i in self.spatial)
        if turns <= 1 and self.accumulator_turns:
            return 1
        rounds = math.prod(-(-a.extent // e.tiles[i][1]) for i, a in enumerate(self.axes) if a.kind == "R")
        return 2 * rounds - 1

    def traffic(self, e: ETIR, l: int, trips: int | None = None) -> int:
        """Q at level l; at the registers (l = 0) with the accumulators' round trips (``accumulator_trips``,
        or ``trips``)."""
        if trips is None:
            trips = self.accumulator_trips(e) if l == 0 else 1
        key = (l, tuple(t[l] for t in e.tiles), trips)
        out = self._traffic.get(key)
        if out is None:
            out = self._traffic[key] = traffic_bytes(self.accesses, self.axes, self.tile_map(e, l), self.unit(l),
                                                     output_trips=trips)
        return out

    def capacity(self, l: int) -> int:
        return int(self.mem[l].size_bytes)

    def fits(self, e: ETIR, upto: int) -> bool:
        if self.register_rule is not None and not self.register_fits(e):
            return False
        if self.cpu_registers and not self.registers_fit(e):
            return False
        if self.limit_rule is not None and not self.limit_rule(self.space, self.to_config(e)):
            return False
        first = 1 if self.register_rule is not None and self.rule_registers else 0
        return all(self.footprint(e, l) <= self.capacity(l) for l in range(first, upto + 1))

    def register_fits(self, e: ETIR) -> bool:
        """The space's register-tile rule (NHWC conv2d, ``tiletune.schedules.cpu.RegisterTile``) on the
        level-0 tile: its accumulators and operands fit the vector register file."""
        pixels = math.prod(e.tiles[i][0] for i in self.spatial if i != self.inner)
        channels = e.tiles[self.inner][0] if self.inner is not None else 1
        return self.register_rule.fits(pixels, channels)

    def vector_registers(self, x: int) -> int:
        """The vector registers one row of ``x`` lanes of the vectorised axis occupies. On a CPU LLVM
        splits a vector whose length is not a multiple of the register width into power-of-two pieces:
        whole registers, then one of each power of two in the remainder (x = 14 with 16 lanes: 8 + 4 + 2,
        a ymm and two xmm registers, three FMAs for 14 lanes; seen in the assembly of an NCHW conv2d on
        znver5). Elsewhere (a GPU's lanes are threads) ceil(x / lanes)."""
        lanes = self.hw.simd_lanes
        if self.hw.kind != "cpu":
            return -(-x // lanes)
        return x // lanes + bin(x % lanes).count("1")

    def registers_fit(self, e: ETIR) -> bool:
        """The register tile of a CPU space without the template's own rule (GEMM, NCHW and depthwise
        conv2d, ...): its P x V accumulators (P = points of the other spatial axes, V =
        ``vector_registers`` of the vectorised axis' tile) and one reduction step's operands, P broadcasts
        and V vector loads, all in registers: P V + P + V + 1 <= the architectural vector registers. A
        choice: the operands are counted in full because LLVM hoists them ahead of the FMAs (a tile that
        counted only its accumulators spilled; docs/decisions/analytic-model.md)."""
        if self.inner is None:
            return True
        x = e.tiles[self.inner][0]
        P = e.vthread * math.prod(e.tiles[i][0] for i in self.spatial if i != self.inner)
        V = self.vector_registers(x)
        return P * V + P + V + 1 <= self.cpu_registers

    # ---- moves along divisors ---------------------------------------------------------------------
    def step_tile(self, e: ETIR, i: int, direction: int, align: int = 1) -> int | None:
        """Next (+1) / previous (-1) divisor of E_i for T_i^c that is a multiple of T_i^(c-1) (and of
        ``align`` when such a divisor exists); None at the boundary."""
        c = e.level
        cur = e.tiles[i][c]
        lower = e.tiles[i][c - 1] if c > 0 else 1
        cands = [d for d in self.divs[i] if d % lower == 0 and (d > cur if direction > 0 else d < cur)]
        aligned = [d for d in cands if d % align == 0]
        cands = aligned or cands
        if not cands:
            return None
        return min(cands) if direction > 0 else max(cands)

    def with_tile(self, e: ETIR, i: int, value: int) -> ETIR:
        tiles = [list(r) for r in e.tiles]
        tiles[i][e.level] = value
        return self.normalize(tiles, e.level, e.vthread)

    # ---- analytic time ----------------------------------------------------------------------------
    def parallel_tiles(self, e: ETIR) -> int:
        top = self.n - 1
        return math.prod(-(-self.axes[i].extent // e.tiles[i][top]) for i in self.spatial) if self.spatial else 1

    def time(self, e: ETIR) -> float:
        hw = self.hw
        P = self.parallel_tiles(e)
        cores = hw.cores
        balance = P / (cores * -(-P // cores))
        active = min(cores, P)
        lanes = hw.simd_lanes
        points = math.prod(e.tiles[i][0] for i in self.spatial) if self.spatial else 1
        acc_vectors = e.vthread * max(1.0, points / lanes)  # points per lane group (a GPU)
        vec = 1.0 / lanes
        if self.inner is not None:
            x = e.tiles[self.inner][0]
            regs = self.vector_registers(x)
            vec = x / (lanes * regs)
            if self.hw.kind == "cpu":  # the accumulator registers LLVM uses
                acc_vectors = e.vthread * (points // x) * regs
        chains = self.cpu_fma_chains if self.hw.kind == "cpu" else 2
        pipes = min(1.0, acc_vectors / (chains * max(1, hw.fma_units)))
        t_comp = self.flops / (hw.peak_gflops * balance * vec * pipes)  # ns (GFLOP/s = FLOP/ns)
        times = [t_comp]
        round_trips = 0.0  # the accumulators' round trips take the load and store slots the FMAs' operands need
        trips = self.accumulator_trips(e)
        for l in range(self.n):
            nxt = self.mem[l + 1] if l + 1 < len(self.mem) else self.mem[-1]
            bw = nxt.bandwidth_gbs * (1 if nxt.shared else active)
            if l == 0 and self.accumulator_turns and trips > 1:
                moved = self.traffic(e, 0, trips=1)
                round_trips = (self.traffic(e, 0, trips=trips) - moved) / bw
                times.append(moved / bw)
                continue
            times.append(self.traffic(e, l, trips=trips if l == 0 else 1) / bw)
        q_last = self.traffic(e, self.n - 1)
        for j in range(self.n + 1, len(self.mem)):
            prev = self.mem[j - 1]
            q = self.q_min if (prev.size_bytes is not None and self.q_min <= prev.size_bytes) else q_last
            bw = self.mem[j].bandwidth_gbs * (1 if self.mem[j].shared else active)
            times.append(q / bw)
        return max(times) + round_trips

    # ---- ETIR -> Config ---------------------------------------------------------------------------
    def unroll_steps(self, e: ETIR) -> int:
        """Loop steps of the micro-kernel (the R1 and S3 loops inside one S2 iteration), counted in vector
        instructions along the vectorised axis, times V (virtual threads replicate the body)."""
        steps = e.vthread
        for i, (_, k) in enumerate(self.knobs):
            if k.kind == "S":
                t = e.tiles[i][0]
                steps *= -(-t // self.hw.simd_lanes) if i == self.inner else t
            elif self.n > 1:
                steps *= e.tiles[i][1]
        return steps

    def unroll_value(self, knob: ChoiceKnob, e: ETIR):
        """The largest allowed unroll depth that does not exceed the micro-kernel's steps (the smallest
        value if none does): unroll the register tile, never beyond it."""
        vals = sorted(v for v in knob.values if isinstance(v, (int, float)))
        if not vals:
            return knob.values[0]
        steps = self.unroll_steps(e)
        if self.row:  # the row order: the smallest depth that unrolls the body of one output point whole
            return next((v for v in vals if v >= steps), vals[-1])
        fitting = [v for v in vals if v <= steps]
        if self.register_rule is not None:
            # an outer-product register tile (NHWC conv2d): unroll the tile's P pixel loops but not the
            # reduction loop around them (TVM's auto-unroll takes a loop whose steps, P x its extent, are
            # <= the depth): unrolled reduction steps let LLVM hoist their loads and spill the accumulators
            # (seen on znver3: a 2 x 32 tile with c1 = 16 and depth 64, 61 ymm stack stores; depth 16 or 0, 1)
            # Not unrolled at all is worse still: where no depth stays under the reduction loop's steps, the
            # smallest non-zero depth (docs/decisions/register-tile.md)
            cap = self.reduction_unroll_steps(e)
            under = [v for v in fitting if cap is None or v < cap]
            if self.unroll_floor and steps > 1 and not any(under):
                under = [next((v for v in vals if v), vals[0])]
            fitting = under
        return fitting[-1] if fitting else vals[0]

    def reduction_unroll_steps(self, e: ETIR) -> int | None:
        """Steps of the innermost reduction loop (extent > 1) inside one register tile, counted as TVM's
        auto-unroll counts them: its extent x the tile's serial pixel loops (the vectorized loop is one
        step); None when the register tile sits inside no reduction loop."""
        if self.n < 2:
            return None
        pixels = math.prod(e.tiles[i][0] for i in self.spatial if i != self.inner)
        for i in reversed(range(len(self.knobs))):  # the template's reduction loops: axis order, last inner
            if self.knobs[i][1].kind == "R" and e.tiles[i][1] > 1:
                return e.tiles[i][1] * pixels
        return None

    def to_config(self, e: ETIR) -> Config:
        vals = list(self.space.untiled().values)
        for i, (ki, k) in enumerate(self.knobs):
            f = [1] * k.levels
            T = e.tiles[i]
            if k.kind == "S":
                last = min(self.n - 1, k.levels - 2)
                prev = 1
                for l in range(last + 1):
                    f[k.levels - 1 - l] = T[l] // prev
                    prev = T[l]
                f[0] = k.extent // prev
            else:
                last = min(self.n - 1, k.levels - 1)
                prev = 1
                for l in range(1, last + 1):
                    f[k.levels - l] = T[l] // prev
                    prev = T[l]
                f[0] = k.extent // prev
            vals[ki] = tuple(f)
        for ki, k in enumerate(self.space.knobs):
            if isinstance(k, ChoiceKnob):
                if k.name == "unroll":
                    vals[ki] = self.unroll_value(k, e)
                elif k.name == "vthread" and e.vthread in k.values:
                    vals[ki] = e.vthread
                elif k.name == "pack" and self.register_rule is not None and 1 in k.values:
                    # an outer-product register tile loads k3 weight lanes per reduction step: packed panels
                    # [k // k3, r, s, c, k3] make those loads contiguous across steps (oneDNN reorders the
                    # weight into such blocks for the same reason)
                    vals[ki] = 1
        return Config(tuple(vals))

    # ---- Config -> ETIR (the analytic time of any configuration) --------------------------------
    def from_config(self, c: Config) -> ETIR:
        """The fully scheduled state (level n-1) of a configuration: the inverse of ``to_config`` on the
        tile knobs (factors the level plan does not describe, between S1 and S0 for deeper spaces, count as
        outer loops); V from a ``vthread`` choice knob, else 1."""
        rows = []
        for ki, k in self.knobs:
            f = c.values[ki]
            L = k.levels
            row = []
            for l in range(self.n):
                if k.kind == "S":
                    last = min(self.n - 1, L - 2)
                    j = min(l, last)
                    row.append(math.prod(f[L - 1 - j:]) if L > 1 else 1)
                else:
                    last = min(self.n - 1, L - 1)
                    j = min(l, last)
                    row.append(math.prod(f[L - j:]) if j >= 1 else 1)
            rows.append(tuple(row))
        vt = 1
        for ki, k in enumerate(self.space.knobs):
            if isinstance(k, ChoiceKnob) and k.name == "vthread" and isinstance(c.values[ki], int):
                vt = max(1, c.values[ki])
        return self.normalize(tuple(rows), self.n - 1, vt)

    def config_time(self, c: Config) -> float:
        """The analytic (roofline) time of a configuration, in ns (``time`` of ``from_config``)."""
        return self.time(self.from_config(c))
