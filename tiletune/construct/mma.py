"""Constructions for the tensor-core template (``tiletune.schedules.cuda_mma``): Gensor's annealed Markov walk and
Roller's rTile construction over its knobs, without measurement, on the kernel's own state and analytic model
(``tiletune.analytic.mma.MmaModel``: a state is a configuration, a dict of the knobs; its two scheduled memory
levels are the warp's registers and the block's shared memory).

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

from ..analytic.mma import KNOBS, MmaModel
from ..space import Config, Space
from .gensor import roulette

T0, THRESHOLD, WALKS, BRANCH = 1.0, 1e-30, 4, 2


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
    ``tiletune.construct.gensor.GensorWalk`` (``pool``, ``add_walk``). A template's walk (``construct.wgmma``) is
    this one with its own states (``state``), moves and ranking (``rank``)."""

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
        C, eps = m.capacity[l], m.in_bytes
        if kind == "tile":  # formula (1)
            return 0.0 if Q2 >= Q else ((Q - Q2) / m.q_min) / (max(F2 - F, eps) / C)
        return 0.0 if F2 >= F else ((F - F2) / C) / (max(Q2 - Q, eps) / m.q_min)

    def walk(self) -> list[tuple[float, State]]:
        m = self.model
        T = self.t0
        e = self.state(m.initial(), 0)
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
        return self.rank(found)

    @staticmethod
    def state(d: dict, level: int) -> State:
        return _state(d, level)

    def rank(self, times: dict[Config, float]) -> list[tuple[float, Config]]:
        return _rank(self.model, times)


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
                        ip, jp, _ = m.padded(new)
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
