"""The analytic model of the tensor-core template's kernel (``tiletune.schedules.cuda_mma``), ``MmaModel``: it
ranks the constructions on the template's space (``tiletune.construct.mma``) and gives the analytic features
their figures (``tiletune.features.analytical``).

The template's space holds choice knobs, not tile factors (block_m, block_n, warp_m, warp_n, chunk_k, stages,
vector), so the ETIR of ``tiletune.analytic.etir`` cannot describe it; this model has the tensor-core kernel's
own state. A state is a configuration (a dict of the knobs); its two scheduled memory levels are the warp's
registers (level 0: the warp tile wm x wn of fp32 accumulators and its A and B fragments, in steps of the
16x16x16 MMA tile) and the block's shared memory (level 1: the block tile bm x bn with its k-chunk ck, times the
pipeline's stages). Problem: the template's normalised GEMM (S batches of I x J over K).

Analytic time (``MmaModel.time``), following the kernel's structure:

- padded problem Ip, Jp, Kp (I, J, K rounded up to bm, bn, ck); blocks = S x Ip/bm x Jp/bn;
- blocks resident per SM: the fewest that threads (the preset's per-SM limit), shared memory (the template's
  estimate + 1 KiB reserved per block), registers (65536 / (threads x registers per thread, rounded up to 8))
  and 32 allow; 0 makes the configuration infinitely slow;
- per wave (up to SMs x resident blocks), on its busiest SM (``a`` blocks):
  - tensor: a x 2 bm bn Kp FLOPs at the SM's tensor rate (``tensor_flops_per_clock_sm`` x clock x
    ``MMA_SYNC_SHARE``), slowed by warps / 4 where fewer than 4 warps (one per sub-partition) issue MMAs;
  - shared memory: every warp reads its A and B fragments once per 16-deep step, (wm + wn) x 16 elements, and
    the block writes its operand tiles once, (bm + bn) x Kp elements, at the SM's shared-memory bandwidth;
  - instruction issue: the warp instructions of the copies ((bm x ck / vector_a + ck x bn / vector_b) / 32 per
    chunk and block), of the fragment loads (one ldmatrix.x4 per 16 x 16 operand tile and 16-deep step) and of
    the MMAs (one m16n8k16 per 16 x 8 x 16), 4 issued per clock and SM;
  - memory: the wave's operand tiles, (bm + bn) x Kp elements per block, the compulsory share (every operand
    element once over the grid) from DRAM and the rest from L2, and its output from DRAM;
  - latency: the pipeline keeps stages - 1 chunks in flight, so each of the Kp / ck chunks waits at least the
    DRAM latency / (stages - 1), and the first chunk the whole latency;
  the wave takes the largest of these; the total adds the waves and one launch (``LAUNCH_S``).
"""
from __future__ import annotations

import math

from .. import hardware
from ..errors import TiletuneError
from ..schedules import cuda_mma
from ..space import Config, Space

#: the fraction of the data sheet's dense tensor rate that ``mma.sync`` reaches: Hopper's full rate needs
#: ``wgmma`` (warp-group MMA), which the template does not emit
MMA_SYNC_SHARE = {"sm_90": 2 / 3, "sm_90a": 2 / 3}
LAUNCH_S = 3e-6
KNOBS = ("block_m", "block_n", "warp_m", "warp_n", "chunk_k", "stages", "vector")


class MmaModel:
    """The analytic model of the tensor-core kernel for one space (see the module docstring)."""

    def __init__(self, space: Space, workload, hardware_spec=None, target: dict | None = None):
        if not cuda_mma.owns(space):
            raise TiletuneError("the tensor-core constructions need the tensor-core template's space")
        if workload is None:
            raise TiletuneError("the tensor-core constructions need the workload")
        self.space, self.workload = space, workload
        self.gemm = cuda_mma.as_gemm(workload)
        hw = hardware_spec or hardware.for_target(target or {"kind": "cuda", "arch": "sm_90"},
                                                  measure_bandwidth=False, cache=False)
        if hw.kind != "gpu" or not hw.tensor_flops_per_clock_sm:
            raise TiletuneError(f"hardware {hw.name} has no tensor cores in its spec")
        self.hw = hw
        self.names = space.names
        self.values = {k.name: tuple(k.values) for k in space.knobs}
        arch = str((target or {}).get("arch") or hw.source.get("arch", ""))
        clock = hw.freq_ghz * 1e9
        self.tensor_rate = hw.tensor_flops_per_clock_sm * clock * MMA_SYNC_SHARE.get(arch, 1.0)  # FLOP/s per SM
        self.clock = clock
        self.smem_bw = hw.level("shared").bandwidth_gbs * 1e9  # per SM
        self.l2_bw = hw.level("L2").bandwidth_gbs * 1e9
        self.dram_bw = hw.dram_bandwidth_gbs * 1e9
        self.dram_lat = hw.level("DRAM").latency_ns * 1e-9
        g = self.gemm
        self.in_bytes = g.in_bytes
        self.q_min = g.S * (g.I * g.K + g.K * g.J) * g.in_bytes
        self.capacity = (hw.registers_per_thread * 4 * hw.warp_size, space.constraint.limits.max_smem)
        self._times: dict[Config, float] = {}

    # ---- states ----------------------------------------------------------------------------------
    def config(self, d: dict) -> Config:
        return Config(tuple(d[n] for n in self.names))

    def allowed(self, d: dict) -> bool:
        if any(d[n] not in self.values[n] for n in self.names):
            return False
        return self.space.allows(self.config(d))

    def initial(self) -> dict:
        v = self.values
        return {"block_m": min(v["block_m"]), "block_n": min(v["block_n"]), "warp_m": min(v["warp_m"]),
                "warp_n": min(v["warp_n"]), "chunk_k": min(v["chunk_k"]), "stages": min(v["stages"]),
                "vector": max(v["vector"])}

    # ---- data movement ---------------------------------------------------------------------------
    def traffic(self, d: dict, level: int) -> float:
        """Bytes moved into the level over the whole kernel (level 0 registers, 1 shared memory)."""
        g = self.gemm
        ip, jp, kp = self.padded(d)
        m, n = (d["warp_m"], d["warp_n"]) if level == 0 else (d["block_m"], d["block_n"])
        return g.S * ip * jp * kp * g.in_bytes * (1 / n + 1 / m)

    def footprint(self, d: dict, level: int) -> float:
        g = self.gemm
        if level == 0:
            return d["warp_m"] * d["warp_n"] * 4 + 2 * (d["warp_m"] + d["warp_n"]) * 16 * g.in_bytes
        ck, pad = d["chunk_k"], cuda_mma.SMEM_ROW_PAD
        return d["stages"] * (d["block_m"] * (ck + pad) + ck * (d["block_n"] + pad)) * g.in_bytes

    def padded(self, d: dict) -> tuple[int, int, int]:
        g = self.gemm
        return (math.ceil(g.I / d["block_m"]) * d["block_m"], math.ceil(g.J / d["block_n"]) * d["block_n"],
                math.ceil(g.K / d["chunk_k"]) * d["chunk_k"])

    # ---- time ------------------------------------------------------------------------------------
    def time(self, d: dict) -> float:
        c = self.config(d)
        if c not in self._times:
            self._times[c] = self._time(d, c)
        return self._times[c]

    def config_time(self, config: Config) -> float:
        return self.time(dict(zip(self.names, config.values)))

    def _time(self, d: dict, c: Config) -> float:
        g, hw = self.gemm, self.hw
        try:
            info = cuda_mma.tile_info(self.workload, self.space, c, g)
        except cuda_mma.InvalidMmaConfig:
            return math.inf
        bm, bn, wm, wn, ck, stages = (d[k] for k in KNOBS[:6])
        ip, jp, kp = self.padded(d)
        blocks = g.S * (ip // bm) * (jp // bn)
        regs = -(-info.registers // 8) * 8
        resident = min(hw.max_threads_per_sm // info.threads,
                       hw.shared_mem_per_sm // (info.smem_bytes + 1024),
                       hw.registers_per_sm // (regs * info.threads), 32)
        if resident < 1:
            return math.inf
        sms = hw.cores
        chunks = kp // ck
        operand_bytes = blocks * (bm + bn) * kp * g.in_bytes
        dram_share = min(1.0, self.q_min / operand_bytes) if operand_bytes else 1.0

        def wave(n_blocks: int) -> float:
            a = math.ceil(n_blocks / sms)
            warps = a * info.warps
            t_tc = a * 2 * bm * bn * kp / (self.tensor_rate * min(1.0, warps / 4))
            smem = a * (info.warps * (kp / 16) * (wm + wn) * 16 + (bm + bn) * kp) * g.in_bytes
            t_smem = smem / self.smem_bw
            copies = a * chunks * (bm * ck / info.vector_a + ck * bn / info.vector_b) / 32
            fragments = warps * (kp / 16) * (wm / 16 + wn / 16)  # ldmatrix.x4, one per 16x16 operand tile
            mmas = a * bm * bn * kp / (16 * 8 * 16)  # m16n8k16 instructions
            t_issue = (copies + fragments + mmas) / 4 / self.clock
            moved = n_blocks * (bm + bn) * kp * g.in_bytes
            t_mem = (moved * dram_share / self.dram_bw + moved * (1 - dram_share) / self.l2_bw
                     + n_blocks * bm * bn * g.out_bytes / self.dram_bw)
            t_lat = self.dram_lat + chunks * self.dram_lat / max(1, stages - 1)
            return max(t_tc, t_smem, t_issue, t_mem, t_lat)

        per_wave = sms * resident
        full, rest = divmod(blocks, per_wave)
        return full * wave(per_wave) + (wave(rest) if rest else 0.0) + LAUNCH_S
