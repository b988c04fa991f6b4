"""Constructions for the tensor-core template (``tiletune.schedules.cuda_mma``): an analytic model of its kernel,
and Gensor's annealed Markov walk and Roller's rTile construction over its knobs, without measurement.

The template's space holds choice knobs, not tile factors (block_m, block_n, warp_m, warp_n, chunk_k, stages,
vector), so the ETIR of ``tiletune.cost_model.etir`` cannot describe it; this module applies the two methods to
the tensor-core kernel's own state. A state is a configuration (a dict of the knobs); its two scheduled memory
levels are the warp's registers (level 0: the warp tile wm x wn of fp32 accumulators and its A and B fragments,
in steps of the 16x16x16 MMA tile) and the block's shared memory (level 1: the block tile bm x bn with its k-chunk
ck, times the pipeline's stages). Problem: the template's normalised GEMM (S batches of I x J over K).

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

Gensor (``MmaGensorWalk``: Algorithms 1 and 2 of ``tiletune.construct.gensor`` on these states). Actions at the
current level: level 0 grows or shrinks wm or wn (x2 / /2; the block tile follows so that the warp tile
divides it), level 1 grows or shrinks bm, bn or ck, adds or removes a stage, doubles or halves the vector;
cache moves from level 0 to level 1. Benefits: formula (1) for the tile actions on wm, wn, bm, bn, with Q the
traffic into the level (level 0: S Ip Jp Kp (1/wn + 1/wm) elements from shared memory to registers; level 1: S
Ip Jp Kp (1/bn + 1/bm) from global to shared memory), F its footprint (level 0: the warp's accumulators and its
double-buffered fragments; level 1: stages x (bm (ck + 8) + ck (bn + 8)) elements) and C its capacity (255
registers x 32 lanes x 4 bytes per warp; the block's shared-memory limit); formula (2) for cache; and, for ck,
stages and vector, which move no data between levels, the acceleration ratio t(e) / t(e') of the analytic time
(our choice: the paper's benefits are acceleration ratios). States the space does not allow (its
``MmaLimitRule``) get probability 0. The walk starts from the smallest tiles (16 x 16 warp and block tiles,
ck 16, 2 stages, 16-byte copies).

Roller (``MmaRollerTree``: Zhu et al., OSDI'22, on tensor cores): rTiles aligned to the hardware (the warp
tile to the MMA tile, the block tile to the warp tile, the shared tile's rows to whole 32-byte transactions:
ck >= 16 elements), scaled up level by level from the register level to shared memory, greedily by data
reuse: at each step the enlargement (x2 of one dimension) with the largest reduction of the level's traffic
per byte of footprint added, the ``branch`` best kept; a level stops growing at its capacity, where its tile's
arithmetic intensity (FLOPs per byte moved into the level) passes the device's ratio of tensor FLOPs to that
level's bandwidth, or (shared level) where fewer blocks than SMs would remain (Roller's parallelism rule). The
k-chunk is the largest of 32, 16, 64 elements that fits; stages 2 (Roller's double buffer); 16-byte copies. The
leaves are ranked by the analytic time (Roller ranks its candidates with its micro-performance model).

Both rank equal analytic times by the wider copy first (``_rank``): the model sees the copies' instruction count
only, and 16-byte copies are the memory transaction's width.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
import numpy as np

from .. import hardware
from ..errors import TiletuneError
from ..schedules import cuda_mma
from ..space import Config, Space
from .gensor import roulette

#: the fraction of the data sheet's dense tensor rate that ``mma.sync`` reaches: Hopper's full rate needs
#: ``wgmma`` (warp-group MMA), which the template does not emit
MMA_SYNC_SHARE = {"sm_90": 2 / 3}
LAUNCH_S = 3e-6
KNOBS = ("block_m", "block_n", "warp_m", "warp_n", "chunk_k", "stages", "vector")
T0, THRESHOLD, WALKS, BRANCH = 1.0, 1e-30, 4, 2


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
        ip, jp, kp = self._padded(d)
        m, n = (d["warp_m"], d["warp_n"]) if level == 0 else (d["block_m"], d["block_n"])
        return g.S * ip * jp * kp * g.in_bytes * (1 / n + 1 / m)

    def footprint(self, d: dict, level: int) -> float:
        g = self.gemm
        if level == 0:
            return d["warp_m"] * d["warp_n"] * 4 + 2 * (d["warp_m"] + d["warp_n"]) * 16 * g.in_bytes
        ck, pad = d["chunk_k"], cuda_mma.SMEM_ROW_PAD
        return d["stages"] * (d["block_m"] * (ck + pad) + ck * (d["block_n"] + pad)) * g.in_bytes

    def _padded(self, d: dict) -> tuple[int, int, int]:
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
        ip, jp, kp = self._padded(d)
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


# ---- Gensor ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class State:
    knobs: tuple  # the values in KNOBS order
    level: int

    @property
    def d(self) -> dict:
        return dict(zip(KNOBS, self.knobs))


def _state(d: dict, level: int) -> State:
    return State(tuple(d[k] for k in KNOBS), level)


class MmaGensorWalk:
    """Gensor's annealed walk (Algorithms 1 and 2) over tensor-core states; the interface of
    ``tiletune.construct.gensor.GensorWalk`` (``pool``, ``add_walk``)."""

    def __init__(self, space: Space, model: MmaModel, rng: np.random.Generator, *, t0: float = T0,
                 threshold: float = THRESHOLD):
        self.space, self.model, self.rng = space, model, rng
        self.t0, self.threshold = t0, threshold

    def moves(self, e: State) -> list[tuple[str, State]]:
        d, out = e.d, []

        def add(kind: str, **change):
            new = dict(d, **change)
            if e.level == 0:  # the block tile follows the warp tile
                new["block_m"], new["block_n"] = max(new["block_m"], new["warp_m"]), max(new["block_n"], new["warp_n"])
            out.append((kind, _state(new, e.level)))

        if e.level == 0:
            for k in ("warp_m", "warp_n"):
                add("tile", **{k: d[k] * 2})
                add("inv_tile", **{k: d[k] // 2})
            out.append(("cache", State(e.knobs, 1)))
        else:
            for k, low in (("block_m", d["warp_m"]), ("block_n", d["warp_n"])):
                add("tile", **{k: d[k] * 2})
                if d[k] // 2 >= low:
                    add("inv_tile", **{k: d[k] // 2})
            for k, step in (("chunk_k", 2), ("vector", 2)):
                add("ratio", **{k: d[k] * step})
                add("ratio", **{k: d[k] // step})
            add("ratio", stages=d["stages"] + 1)
            add("ratio", stages=d["stages"] - 1)
        return [(kind, s) for kind, s in out if s != e and self.model.allowed(s.d)]

    def benefit(self, e: State, kind: str, e2: State, T: float) -> float:
        m, l = self.model, e.level
        if kind == "cache":  # formula (2) with the annealing boost
            D = m.footprint(e.d, 0)
            fast, slow = m.hw.level("register"), m.hw.level("shared")
            return slow.access_time_ns(D) / fast.access_time_ns(D) * (self.t0 / T)
        if kind == "ratio":
            t, t2 = m.time(e.d), m.time(e2.d)
            return t / t2 if math.isfinite(t2) and t2 > 0 else 0.0
        Q, Q2 = m.traffic(e.d, l), m.traffic(e2.d, l)
        F, F2 = m.footprint(e.d, l), m.footprint(e2.d, l)
        C, eps = m.capacity[l], m.gemm.in_bytes
        if kind == "tile":  # formula (1)
            return 0.0 if Q2 >= Q else ((Q - Q2) / m.q_min) / (max(F2 - F, eps) / C)
        return 0.0 if F2 >= F else ((F - F2) / C) / (max(Q2 - Q, eps) / m.q_min)

    def walk(self) -> list[tuple[float, State]]:
        m = self.model
        T = self.t0
        e = _state(m.initial(), 0)
        if not m.allowed(e.d):
            return []
        t_e = m.time(e.d)
        top = [(t_e, e)]
        while T > self.threshold:
            acts = self.moves(e)
            ben = [self.benefit(e, kind, s, T) for kind, s in acts]
            total = sum(ben)
            if total > 0 and math.isfinite(total):
                _, e2 = acts[roulette(self.rng, [b / total for b in ben])]
                t2 = m.time(e2.d)
                accept = 1.0 if t2 <= t_e else math.exp(-((t2 - t_e) / t_e) / T)
                if float(self.rng.random()) < accept:
                    top.append((t2, e2))
                e, t_e = e2, t2
            T /= 2.0
        return top

    def add_walk(self, seen: set[Config]) -> dict[Config, float]:
        fresh: dict[Config, float] = {}
        for t, e in self.walk():
            c = self.model.config(e.d)
            if c in seen or not math.isfinite(t):
                continue
            fresh[c] = min(t, fresh.get(c, math.inf))
        return fresh

    def pool(self, walks: int = WALKS) -> list[tuple[float, Config]]:
        found: dict[Config, float] = {}
        for _ in range(walks):
            found.update(self.add_walk(set(found)))
        return _rank(self.model, found)


def _rank(model: MmaModel, times: dict[Config, float]) -> list[tuple[float, Config]]:
    """(time, config), fastest first; equal times: the wider copy first, then the config's order."""
    vi = model.names.index("vector")
    return sorted(((t, c) for c, t in times.items() if math.isfinite(t)), key=lambda tc: (tc[0], -tc[1].values[vi], tc[1]))


# ---- Roller ----------------------------------------------------------------------------------------
class MmaRollerTree:
    """Roller's rTile construction on the tensor-core kernel (see the module docstring); ``construct()`` gives
    the leaves (analytic time, config), best first."""

    def __init__(self, space: Space, model: MmaModel, branch: int = BRANCH):
        self.space, self.model, self.branch = space, model, branch

    def _intensity_limit(self, level: int) -> float:
        """FLOPs per byte at which a level's bandwidth stops bounding the tensor cores."""
        m = self.model
        bw = m.smem_bw if level == 0 else m.dram_bw / m.hw.cores
        return m.tensor_rate / bw

    def _intensity(self, d: dict, level: int) -> float:
        g = self.model.gemm
        m, n = (d["warp_m"], d["warp_n"]) if level == 0 else (d["block_m"], d["block_n"])
        return 2 * m * n / ((m + n) * g.in_bytes)  # FLOPs per byte moved into the level, per k step

    def _grow(self, starts: list[dict], level: int) -> list[dict]:
        m = self.model
        keys = ("warp_m", "warp_n") if level == 0 else ("block_m", "block_n")
        g = m.gemm
        seen: dict[tuple, dict] = {}
        frontier = starts
        while frontier:
            nxt = []
            for d in frontier:
                seen[tuple(d[k] for k in KNOBS)] = d
                if self._intensity(d, level) >= self._intensity_limit(level):
                    continue
                options = []
                for k in keys:
                    new = dict(d, **{k: d[k] * 2})
                    if level == 0:
                        new["block_m"], new["block_n"] = max(new["block_m"], new["warp_m"]), max(new["block_n"], new["warp_n"])
                    if not m.allowed(new) or m.footprint(new, level) > m.capacity[level]:
                        continue
                    if level == 1:
                        ip, jp, _ = m._padded(new)
                        if g.S * (ip // new["block_m"]) * (jp // new["block_n"]) < m.hw.cores:
                            continue  # fewer blocks than SMs
                    gain = m.traffic(d, level) - m.traffic(new, level)
                    cost = m.footprint(new, level) - m.footprint(d, level)
                    if gain > 0:
                        options.append((gain / max(cost, 1.0), new))
                options.sort(key=lambda x: -x[0])
                for _, new in options[: self.branch]:
                    if tuple(new[k] for k in KNOBS) not in seen:
                        nxt.append(new)
            frontier = nxt
        return list(seen.values())

    def construct(self) -> list[tuple[float, Config]]:
        m = self.model
        v = m.values
        base = m.initial()
        base["chunk_k"] = next((c for c in (32, 16, 64) if c in v["chunk_k"]), min(v["chunk_k"]))
        base["stages"] = 2 if 2 in v["stages"] else min(v["stages"])
        if not m.allowed(base):
            base = m.initial()
        warps = self._grow([base], 0) if m.allowed(base) else []
        blocks = self._grow(warps, 1)
        leaves: dict[Config, float] = {}
        for d in blocks:
            if m.allowed(d):
                leaves[m.config(d)] = m.time(d)
        return _rank(m, leaves)
