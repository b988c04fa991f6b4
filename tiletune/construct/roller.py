"""Roller-style tree construction (Zhu et al., OSDI'22), the baseline of the Gensor paper: the algorithm behind
the strategy ``roller`` and the constructive start ``start=roller`` of the local searches.

Roller builds an rTile per memory level, from the registers outwards, with no search:

1. align: the initial register tile holds one full vector along the innermost (vectorised, contiguous)
   spatial axis (the largest divisor of its extent <= the SIMD width), every other tile is 1; at every
   level, enlargements of that axis step to multiples of the level's transfer unit (vector for registers,
   cache line for caches) whenever the extent has such a divisor;
2. scale up greedily by data reuse: at the current level, for every axis the next aligned tile T'_i (next
   divisor of the extent, a multiple of the tile one level down) gets Roller's reuse score
       S_i = (Q(T) - Q(T'_i)) / (F(T'_i) - F(T))
   (traffic saved per byte of footprint added, tiletune.workloads.access); the enlargement with the largest
   positive score whose footprint fits the level's capacity is taken, until none fits or none reuses;
3. recurse to the next memory level with the finished tile as its start (the level's tile contains the
   previous one), until the private levels are done (registers, L1, L2 on a CPU); the outermost factor
   (S0) is what remains of each extent and runs in parallel over the cores.

Roller keeps several rPrograms, not one: at every scale-up step the ``branch`` best-scoring enlargements
(over all tiles being grown) are kept, besides the pure greedy path from every start; the finished tiles
of a level (at most 2 x branch, the fastest by the model) each start the next level; the leaves are
ranked by the same analytic (roofline) performance model as Gensor's (tiletune.analytic.etir.
Model.time, standing in for Roller's micro-performance model), and only the top ``k`` are measured
(Roller measures its top 10 by default; the tree often has fewer distinct leaves than that). The
ETIR -> Config map is Gensor's (register tile -> S3 / R1 level, L1 -> S2, L2 -> S1, cores -> S0).

On a GPU a thread's register tile starts from one element and grows element-wise (its registers are scalar;
the SIMD width of the hardware spec, 32, is the warp's threads, which the block level aligns to), and three of the
paper's rules apply besides: a level stops growing once its tile's arithmetic intensity
(FLOPs per byte moved into it) passes the ratio of the SM's peak to the bandwidth that feeds the level (shared
memory for the per-thread register tile, DRAM for the block tile): the tile then saturates the compute, and a
larger one only costs registers or shared memory; an enlargement of the block tile (the last scheduled level)
that would leave fewer thread blocks than SMs is not taken (the rTiles of the outer level must fill the device),
nor a register tile that would leave fewer threads than a warp per SM;
and where some leaves have blocks of whole warps (threads a multiple of 32) only those are kept. Without them the tree grew block tiles until shared memory was full, e.g. 32 blocks of 256 threads for
GEMM 1024^3 on an H100's 132 SMs (measured: docs/gpu.md).
"""
from __future__ import annotations

import math

from ..analytic.etir import ETIR, Model
from ..space import Config, Space

#: enlargements kept per scale-up step besides the greedy path (the strategy ``roller``'s default)
BRANCH = 3


class RollerTree:
    """The rTile construction tree of one space, with the analytic ``model`` of that space."""

    def __init__(self, space: Space, model: Model, *, branch: int = BRANCH):
        self.space, self.model, self.branch = space, model, branch
        self._ranked: list[tuple[float, Config]] | None = None
        self._gpu = model.hw.kind == "gpu"

    def _saturation(self, level: int) -> float:
        """FLOPs per byte moved into ``level`` above which its bandwidth no longer bounds the compute: the SM's
        peak over the bandwidth of the level below (shared memory into registers, per SM; DRAM into shared
        memory, the whole device)."""
        hw = self.model.hw
        if level == 0:
            return hw.peak_gflops / max(1, hw.cores) / hw.level("shared").bandwidth_gbs
        return hw.peak_gflops / hw.dram_bandwidth_gbs

    def blocks(self, e: ETIR) -> int:
        """Tiles of the outermost scheduled level (thread blocks on a GPU, parallel tasks on a CPU)."""
        m = self.model
        return math.prod(m.knobs[i][1].extent // e.tiles[i][m.n - 1] for i in m.spatial)

    def tiles0(self, e: ETIR) -> int:
        """Register tiles over the whole output: the threads of the kernel on a GPU."""
        m = self.model
        return math.prod(m.knobs[i][1].extent // e.tiles[i][0] for i in m.spatial)

    def threads(self, e: ETIR) -> int:
        """Threads per block on a GPU: the block tile over the per-thread tile, per spatial axis."""
        m = self.model
        return math.prod(e.tiles[i][m.n - 1] // e.tiles[i][0] for i in m.spatial) if m.n > 1 else 1

    # ---- rTile construction ----------------------------------------------------------------------
    def align(self, i: int, level: int) -> int:
        if self._gpu and level == 0:
            return 1  # a GPU thread's registers are scalar: the warp's 32 threads are the lanes
        return self.model.unit(level) if i == self.model.inner else 1

    def initial(self) -> ETIR:
        m = self.model
        e = m.initial()
        if not self._gpu and m.inner is not None and m.mode(m.inner, 0) == "free":
            lanes = m.hw.simd_lanes
            v = max(d for d in m.divs[m.inner] if d <= lanes)
            aligned = m.with_tile(e, m.inner, v)
            if m.fits(aligned, 0):
                return aligned
        return e

    def enlargements(self, e: ETIR) -> list[tuple[float, ETIR]]:
        """Aligned one-step enlargements at the current level that fit, with their reuse scores, best first."""
        m = self.model
        l = e.level
        Q, F = m.traffic(e, l), m.footprint(e, l)
        if self._gpu and m.flops / max(Q, 1.0) >= self._saturation(l):
            return []  # Roller: the level's tile already feeds the compute at the level's bandwidth
        out = []
        for i in range(len(m.knobs)):
            if m.mode(i, l) != "free":
                continue
            v = m.step_tile(e, i, +1, self.align(i, l))
            if v is None:
                continue
            e2 = m.with_tile(e, i, v)
            if not m.fits(e2, l):
                continue
            if self._gpu and l == m.n - 1 and self.blocks(e2) < min(m.hw.cores, self.blocks(e)):
                continue  # Roller's parallelism rule: at least as many thread blocks as SMs
            if self._gpu and l == 0 and self.tiles0(e2) < min(m.hw.cores * (m.hw.warp_size or 32), self.tiles0(e)):
                continue  # and at least a warp of threads per SM
            dQ = Q - m.traffic(e2, l)
            if dQ <= 0:
                continue
            dF = max(m.footprint(e2, l) - F, m.elem_bytes)
            out.append((dQ / dF, e2))
        out.sort(key=lambda se: -se[0])
        return out

    def greedy(self, e: ETIR) -> ETIR:
        while True:
            ups = self.enlargements(e)
            if not ups:
                return e
            e = ups[0][1]

    def construct(self) -> list[tuple[float, Config]]:
        """All leaves of the construction tree, ranked by the analytic model (best first)."""
        if self._ranked is not None:
            return list(self._ranked)
        m = self.model
        B = self.branch
        frontier = [self.initial()]
        for level in range(m.n):
            beam: list[ETIR] = []
            done: list[ETIR] = []
            for e in frontier:
                if level > 0:
                    up = m.normalize(e.tiles, level, e.vthread)
                    if not m.fits(up, level):
                        done.append(e)  # the next level cannot hold the tile: it stays as it is
                        continue
                    e = up
                beam.append(e)
                done.append(self.greedy(e))  # the greedy path is always one of the branches
            while beam:  # scale up: the best-scoring enlargements, B of them per step (B=1: greedy)
                children: list[tuple[float, ETIR]] = []
                for e in beam:
                    ups = self.enlargements(e)
                    if ups:
                        children += ups
                    else:
                        done.append(e)
                children.sort(key=lambda se: -se[0])
                seen: set = set()
                beam = []
                for _, e in children:
                    if e.tiles not in seen and len(beam) < B:
                        seen.add(e.tiles)
                        beam.append(e)
            unique = list({e.tiles: e for e in done}.values())
            if self._gpu and level == m.n - 1:  # Roller's warp alignment: blocks of whole warps where any has them
                warp = m.hw.warp_size or 32
                unique = [e for e in unique if self.threads(e) % warp == 0] or unique
            frontier = sorted(unique, key=m.time)[: 2 * B]
        best: dict[Config, float] = {}
        for e in frontier:
            c = m.to_config(e)
            if self.space.is_legal(c):
                best[c] = min(m.time(e), best.get(c, float("inf")))
        self._ranked = sorted(((t, c) for c, t in best.items()), key=lambda tc: (tc[0], tc[1]))
        return list(self._ranked)
