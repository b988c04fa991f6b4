"""Roller-style tree construction (Zhu et al., OSDI'22), the baseline of the Gensor paper.

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
After the top-k, ``after_topk=continue`` proposes the remaining leaves in rank order, then returns [];
``after_topk=stop`` returns [] at once.
"""
from __future__ import annotations

from typing import Sequence

from ..cost_model.etir import ETIR, Model
from ..space import Config, Space
from .base import Option, Strategy, Trial, register
from .common import after_topk_option, topk_option


@register
class Roller(Strategy):
    name = "roller"
    summary = "Roller-style construction: hardware-aligned rTiles scaled up greedily by data reuse, top-k measured"
    constructive = True
    options = (
        topk_option(10),
        Option("branch", 3, "enlargements kept per scale-up step besides the greedy path", int,
               check=lambda v: 1 <= v <= 4, check_help="must be 1..4"),
        after_topk_option("the remaining constructed leaves"),
    )

    def __init__(self, space: Space, **kw):
        super().__init__(space, **kw)
        self.model = Model(space, self.context.workload, self.context.hardware, self.context.target)
        self._ranked: list[tuple[float, Config]] | None = None
        self._served = 0
        self._proposed: set[Config] = set()

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
        B = self.opts["branch"]
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

    # ---- ask / tell ------------------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        ranked = self.construct()
        k = self.opts["k"]
        if self._served >= k and self.opts["after_topk"] == "stop":
            return []
        want = min(n, k - self._served) if self._served < k else n
        out = []
        for _, c in ranked:
            if len(out) >= want:
                break
            if c not in self._proposed:
                self._proposed.add(c)
                out.append(c)
        self._served += len(out)
        return out

    def tell(self, trials: Sequence[Trial]) -> None:
        pass  # construction only; the loop records the measurements

    def exhausted_reason(self) -> str:
        k, n = self.opts["k"], len(self._proposed)
        if self.opts["after_topk"] == "stop" and n >= k:
            return f"roller measured its top {k} constructed configuration(s) and stops there (after_topk=stop)"
        return f"roller's construction tree has only {n} distinct leaves for this space, all of them proposed"
