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
ranked by the same analytic (roofline) performance model as Gensor's (tiletune.cost_model.etir.
Model.time, standing in for Roller's micro-performance model), and only the top ``k`` are measured
(Roller measures its top 10 by default; the tree often has fewer distinct leaves than that). The
ETIR -> Config map is Gensor's (register tile -> S3 / R1 level, L1 -> S2, L2 -> S1, cores -> S0).
"""
from __future__ import annotations

from ..cost_model.etir import ETIR, Model
from ..space import Config, Space

#: enlargements kept per scale-up step besides the greedy path (the strategy ``roller``'s default)
BRANCH = 3


class RollerTree:
    """The rTile construction tree of one space, with the analytic ``model`` of that space."""

    def __init__(self, space: Space, model: Model, *, branch: int = BRANCH):
        self.space, self.model, self.branch = space, model, branch
        self._ranked: list[tuple[float, Config]] | None = None

    # ---- rTile construction ----------------------------------------------------------------------
    def align(self, i: int, level: int) -> int:
        return self.model.unit(level) if i == self.model.inner else 1

    def initial(self) -> ETIR:
        m = self.model
        e = m.initial()
        if m.inner is not None and m.mode(m.inner, 0) == "free":
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
            unique = {e.tiles: e for e in done}
            frontier = sorted(unique.values(), key=m.time)[: 2 * B]
        best: dict[Config, float] = {}
        for e in frontier:
            c = m.to_config(e)
            if self.space.is_legal(c):
                best[c] = min(m.time(e), best.get(c, float("inf")))
        self._ranked = sorted(((t, c) for c, t in best.items()), key=lambda tc: (tc[0], tc[1]))
        return list(self._ranked)
