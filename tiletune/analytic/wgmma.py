"""The analytic model of the Hopper template's kernel (``tiletune.schedules.cuda_wgmma``), ``WgmmaModel``: it ranks
the constructions on the template's space (``tiletune.construct.wgmma``) and gives the seven analytical features
their figures (``wgmma_features``).

A state is a configuration (a dict of the knobs). Its two scheduled memory levels: level 0, the consumer
warpgroup's accumulators (``block_m / consumers`` x ``block_n`` fp32 in registers, fed from shared memory by
``wgmma`` per 16-deep step); level 1, the block's shared memory (``stages`` x (``block_m`` x ``block_k`` +
``block_k`` x ``block_n``) elements, fed by the TMA from L2/DRAM). Problem: the template's GEMM (S batches of
M x N over K; an NHWC convolution as M = N P Q output pixels, N = K channels, K = R S C), padded to whole tiles
(the TMA's zero fill computes the padding; a convolution's block tiles are rectangles of output pixels, its
k-tiles one (r, s) and ``block_k`` channels).

Analytic time (``WgmmaModel.time``), following the kernel's structure:

- tiles = S x ceil(M / bm) x ceil(N / bn); blocks resident per SM: the fewest that threads, shared memory (the
  stages + 1 KiB reserved) and registers allow (two consumer warpgroups take the SM's whole register file:
  setmaxnreg sizes them for one block; one consumer: ``acc + REGS_BESIDES_ACC`` registers for all its threads);
- per wave (up to SMs x resident tiles; persistent: the same tiles per SM, each SM walking its share), on its
  busiest SM (``a`` tiles):
  - tensor: a x 2 bm bn Kp FLOPs at the SM's dense tensor rate (``tensor_flops_per_clock_sm``: the full rate,
    which ``wgmma`` reaches), plus ``WGMMA_ISSUE_CLOCKS`` per wgmma instruction (descriptor arithmetic and
    issue; a guess until measured);
  - shared memory: per 16-deep step every wgmma reads its 64 x 16 slice of A and its 16 x ``wgmma_n`` slice of
    B (a consumer's A rows are read once per ``wgmma_n`` column slice), and the TMA writes the block's operand
    tiles once, at the SM's shared-memory bandwidth;
  - memory: the wave's operand tiles, (bm + bn) x Kp elements per tile: the bytes distinct within the wave
    (``group_m`` block-rows walked together share B's columns, the rest of the wave shares A's rows) from DRAM,
    the re-reads from L2 (at the L2 bandwidth);
  - latency: the producer keeps ``stages - 1`` k-tiles in flight while the consumers read one, so each k-tile
    waits at least the DRAM latency / (stages - 1), and a tile's first k-tile the whole latency (persistent: once
    per SM, the producer loading the next tile while the consumers store);
  the wave takes the largest of these, plus its epilogue (bm bn output elements per tile to DRAM, not
  overlapped with the tensor cores: one consumer role; ``stage_c`` 0 at ``DIRECT_STORE_COST`` times the bytes, as
  its 4-byte stores fill half of each 32-byte sector; ``stage_c`` 1 at the bytes plus a write and a read of shared
  memory); the total adds the waves and one launch.
"""
from __future__ import annotations

import math

import numpy as np

from .. import hardware
from ..errors import TiletuneError
from ..schedules import cuda_wgmma
from ..space import Config, Space

LAUNCH_S = 3e-6
#: clocks an SM spends per wgmma instruction besides the tensor work (descriptors, issue); a guess until measured
WGMMA_ISSUE_CLOCKS = 8
#: registers a consumer thread holds besides its accumulators (descriptors, addresses, loop state)
REGS_BESIDES_ACC = 40
#: the DRAM time of the direct epilogue's stores relative to whole-sector stores (16 of each 32-byte sector written)
DIRECT_STORE_COST = 2.0
KNOBS = tuple(cuda_wgmma.KNOBS)


class WgmmaModel:
    """The analytic model of the wgmma kernel for one space (see the module docstring); the interface of
    ``tiletune.analytic.mma.MmaModel`` (time, traffic, footprint, capacity, allowed, config)."""

    def __init__(self, space: Space, workload, hardware_spec=None, target: dict | None = None):
        if not cuda_wgmma.owns(space):
            raise TiletuneError("the wgmma constructions need the wgmma template's space")
        if workload is None:
            raise TiletuneError("the wgmma constructions need the workload")
        self.space, self.workload, self.target = space, workload, target
        self.prob = cuda_wgmma.problem(workload)
        hw = hardware_spec or hardware.for_target(target or {"kind": "cuda", "arch": "sm_90a"},
                                                  measure_bandwidth=False, cache=False)
        if hw.kind != "gpu" or not hw.tensor_flops_per_clock_sm:
            raise TiletuneError(f"hardware {hw.name} has no tensor cores in its spec")
        self.hw = hw
        self.names = space.names
        self.values = {k.name: tuple(k.values) for k in space.knobs}
        self.clock = hw.freq_ghz * 1e9
        self.tensor_rate = hw.tensor_flops_per_clock_sm * self.clock  # FLOP/s per SM
        self.smem_bw = hw.level("shared").bandwidth_gbs * 1e9  # per SM
        self.l2_bw = hw.level("L2").bandwidth_gbs * 1e9
        self.l2_bytes = hw.level("L2").size_bytes or 0
        self.dram_bw = hw.dram_bandwidth_gbs * 1e9
        self.dram_lat = hw.level("DRAM").latency_ns * 1e-9
        p = self.prob
        self.in_bytes, self.out_bytes = hw_bytes(p.dtype), hw_bytes(p.out_dtype)
        self.q_min = p.operand_elems * self.in_bytes
        # level 0: a warpgroup's accumulators (ACC_REGS fp32 per thread); level 1: the block's shared memory
        self.capacity = (cuda_wgmma.ACC_REGS * 4 * cuda_wgmma.WARPGROUP, space.constraint.limits.max_smem)
        self._times: dict[Config, float] = {}

    # ---- states ----------------------------------------------------------------------------------
    def config(self, d: dict) -> Config:
        return Config(tuple(d[n] for n in self.names))

    def allowed(self, d: dict) -> bool:
        if any(d[n] not in self.values[n] for n in self.names):
            return False
        return self.space.allows(self.config(d))

    def initial(self) -> dict:
        """The smallest state: one consumer of 64 x 64, a 64-deep k-tile, 2 stages, no grouping, not
        persistent."""
        v = self.values
        return {"block_m": min(v["block_m"]), "block_n": min(v["block_n"]), "block_k": min(v["block_k"]),
                "stages": min(v["stages"]), "consumers": 1, "wgmma_n": min(v["wgmma_n"]), "group_m": 1,
                "persistent": 0, "stage_c": 0}

    # ---- data movement ---------------------------------------------------------------------------
    def padded(self, d: dict) -> tuple[int, int, int]:
        p = self.prob
        return (p.m_tiles(d["block_m"]) * d["block_m"], math.ceil(p.N / d["block_n"]) * d["block_n"],
                p.k_tiles(d["block_k"]) * d["block_k"])

    def traffic(self, d: dict, level: int) -> float:
        """Bytes moved into the level over the whole kernel (level 0: shared memory -> tensor cores, per
        consumer warpgroup; level 1: L2/DRAM -> shared memory)."""
        mp, np_, kp = self.padded(d)
        m = d["block_m"] // d["consumers"] if level == 0 else d["block_m"]
        return self.prob.S * mp * np_ * kp * self.in_bytes * (1 / d["block_n"] + 1 / m)

    def footprint(self, d: dict, level: int) -> float:
        if level == 0:
            return d["block_m"] // d["consumers"] * d["block_n"] * 4
        return d["stages"] * (d["block_m"] * d["block_k"] + d["block_k"] * d["block_n"]) * self.in_bytes

    # ---- time ------------------------------------------------------------------------------------
    def time(self, d: dict) -> float:
        c = self.config(d)
        if c not in self._times:
            self._times[c] = self._time(d, c)
        return self._times[c]

    def config_time(self, config: Config) -> float:
        return self.time(dict(zip(self.names, config.values)))

    def resident(self, info: "cuda_wgmma.TileInfo", consumers: int) -> int:
        hw = self.hw
        if consumers > 1:
            regs_ok = 1  # setmaxnreg hands the whole register file to one block
        else:
            regs = -(-(info.acc_regs + REGS_BESIDES_ACC) // 8) * 8
            regs_ok = (hw.registers_per_sm or 65536) // (regs * info.threads)
        return min((hw.max_threads_per_sm or 2048) // info.threads,
                   (hw.shared_mem_per_sm or 233472) // (info.smem_bytes + cuda_wgmma.BARRIER_BYTES), regs_ok)

    def _time(self, d: dict, c: Config) -> float:
        p, hw = self.prob, self.hw
        try:
            info = cuda_wgmma.tile_info(self.workload, self.space, c, self.target, self.prob)
        except cuda_wgmma.InvalidWgmmaConfig:
            return math.inf
        bm, bn, bk, st, nc = d["block_m"], d["block_n"], d["block_k"], d["stages"], d["consumers"]
        resident = self.resident(info, nc)
        if resident < 1:
            return math.inf
        mp, np_, kp = self.padded(d)
        tm, tn = mp // bm, np_ // bn
        sms = max(1, hw.cores)
        eb = self.in_bytes
        wgmmas_per_tile = (kp // 16) * nc * info.m_atoms * info.n_atoms

        def distinct(tiles: int) -> float:
            """Operand bytes of ``tiles`` consecutive tiles that no earlier tile of them read: row-major
            (group_m 1), or down ``group_m`` block-rows, then across (the kernel's rasterization)."""
            g = max(1, min(d["group_m"], tm))
            if g == 1:
                rows, cols = min(tm, math.ceil(tiles / tn)), min(tn, tiles)
            elif tiles <= g * tn:
                rows, cols = min(g, tiles), min(tn, math.ceil(tiles / g))
            else:
                rows, cols = min(tm, math.ceil(tiles / (g * tn)) * g), tn
            return (rows * bm + cols * bn) * kp * eb

        def wave(tiles: int, first: bool) -> float:
            a = math.ceil(tiles / sms)
            t_tc = a * (2 * bm * bn * kp / self.tensor_rate + wgmmas_per_tile * WGMMA_ISSUE_CLOCKS / self.clock)
            # per 16-step each wgmma reads its m64 x 16 slice of A and its 16 x wgmma_n slice of B
            reads = nc * info.m_atoms * (info.n_atoms * 64 + bn) * 16
            smem = a * ((kp // 16) * reads + (bm + bn) * kp) * eb
            t_smem = smem / self.smem_bw
            moved = tiles * (bm + bn) * kp * eb
            fresh = min(moved, distinct(tiles))
            t_mem = fresh / self.dram_bw + (moved - fresh) / self.l2_bw
            k_tiles = kp // bk
            first_load = self.dram_lat if first or not d["persistent"] else 0.0
            t_lat = first_load * a + k_tiles * a * self.dram_lat / (st - 1)
            out = a * bm * bn * self.out_bytes
            if d["stage_c"]:  # through shared memory (written and read once), then whole 32-byte sectors
                t_epi = out / (self.dram_bw / sms) + 2 * out / self.smem_bw
            else:  # a warp's 4-byte stores cover half of each 32-byte sector they touch
                t_epi = DIRECT_STORE_COST * out / (self.dram_bw / sms)
            return max(t_tc, t_smem, t_mem, t_lat) + t_epi

        per_wave = sms * resident
        full, rest = divmod(info.tiles, per_wave)
        total = sum(wave(per_wave, i == 0) for i in range(full)) + (wave(rest, full == 0) if rest else 0.0)
        return total + LAUNCH_S


def hw_bytes(dtype: str) -> int:
    return {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]


def wave_efficiency(m: int, n: int) -> float:
    return (m / n) / math.ceil(m / n) if m > 0 and n > 0 else 0.0


def wgmma_features(model: WgmmaModel, config: Config) -> np.ndarray:
    """The seven analytical features of a wgmma configuration, from its model's quantities: OI_Global_Mem =
    FLOPs per 128-byte TMA transaction of the block tiles; OI_Shared_Mem = FLOPs per 128 bytes the wgmmas read
    from shared memory (the 128-byte swizzle: conflict free); Reg_Reuse_Factor = FLOPs per element the
    warpgroups read; ILP = wgmma instructions in flight per consumer warpgroup and k-tile (block_k / 16 x m64 rows
    x wgmma_n columns), scaled down where the accumulators pass ``ACC_REGS``; WLP = resident warps per SM;
    Estimated_Occupancy = min(resident blocks, tiles per SM) x warps / max warps; Wave_Efficiency = (m / n) /
    ceil(m / n), m tiles on n SMs."""
    d = dict(zip(model.names, config.values))
    info = cuda_wgmma.tile_info(model.workload, model.space, config, model.target, model.prob)
    flops = 2.0 * model.prob.S * math.prod(model.padded(d))
    hw = model.hw
    oi_global = flops / max(model.traffic(d, 1) / 128, 1.0)
    oi_shared = flops / max(model.traffic(d, 0) / 128, 1.0)
    reg_reuse = flops / max(model.traffic(d, 0) / model.in_bytes, 1.0)
    ilp = d["block_k"] / 16 * info.m_atoms * info.n_atoms * min(1.0, cuda_wgmma.ACC_REGS / max(info.acc_regs, 1))
    resident = max(0, model.resident(info, d["consumers"]))
    warps = info.threads // 32
    sms = max(1, hw.cores)
    max_warps = max(1, (hw.max_threads_per_sm or 2048) // 32)
    occupancy = min(resident, math.ceil(info.tiles / sms)) * warps / max_warps
    return np.asarray([oi_global, oi_shared, reg_reuse, ilp, float(resident * warps), occupancy,
                       wave_efficiency(info.tiles, sms)], dtype=np.float64)
