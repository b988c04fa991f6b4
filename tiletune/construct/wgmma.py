"""Constructions for the Hopper template (``tiletune.schedules.cuda_wgmma``): Gensor's annealed Markov walk and
Roller's rTile construction over its knobs, without measurement, on the kernel's own state and analytic model
(``tiletune.analytic.wgmma.WgmmaModel``: a state is a configuration; its two scheduled memory levels are a
consumer warpgroup's accumulators and the block's shared memory), as ``tiletune.construct.mma`` does for the
mma.sync template.

Gensor (``WgmmaGensorWalk``: Algorithms 1 and 2 of ``tiletune.construct.gensor`` on these states). Actions at the
current level: level 0 grows or shrinks the warpgroup tile, its rows (``block_m`` with the consumers kept) or its
columns (``block_n``, to the next value of the knob), ``wgmma_n`` following (the widest value that divides
``block_n``); cache moves from level 0 to level 1; level 1 doubles or halves the consumer warpgroups (the block
tile's rows with them: each warpgroup's tile kept), and moves ``block_k``, ``stages``, ``wgmma_n``, ``group_m``,
``persistent`` and ``stage_c`` to a neighbouring value. Benefits: formula (1) for the tile actions (Q the traffic
into the level: level 0 S Mp Np Kp (1/bn + consumers/bm) elements from shared memory to the tensor cores, level 1 S
Mp Np Kp (1/bn + 1/bm) from global memory to shared memory; F its footprint: the warpgroup's accumulators, the
stages; C its capacity: ``ACC_REGS`` fp32 per thread of a warpgroup, the block's shared-memory limit); formula (2)
for cache; for the knobs that move no data between levels, the acceleration ratio t(e) / t(e') of the analytic time.
States the space does not allow get probability 0. The walk starts from the smallest state (one consumer of 64 x 64,
2 stages).

Roller (``WgmmaRollerTree``): rTiles aligned to the hardware (the warpgroup tile to m64 rows and whole 64-column
swizzle atoms), scaled up greedily by data reuse: the warpgroup tile (x2 of its rows or its columns) until its
accumulators reach their capacity or its arithmetic intensity passes the SM's tensor rate over the shared-memory
bandwidth, then the block tile by consumer warpgroups while at least as many tiles as SMs remain (Roller's
parallelism rule); a 64-deep k-tile and 2 stages (Roller's double buffer), the widest ``wgmma_n``, the output staged
through shared memory where it fits (whole-sector stores). Leaves ranked
by the analytic time.

Both rank equal analytic times by the wider wgmma first, then more stages (``_rank``): the model's latency term
rarely separates them, and deeper rings hide the loaded memory latency it does not model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..analytic.wgmma import KNOBS, WgmmaModel
from ..space import Config, Space
from .gensor import roulette

T0, THRESHOLD, WALKS, BRANCH = 1.0, 1e-30, 4, 2


@dataclass(frozen=True)
class State:
    knobs: tuple  # the values in KNOBS order
    level: int

    @property
    def d(self) -> dict:
        return dict(zip(KNOBS, self.knobs))


def _state(d: dict, level: int) -> State:
    return State(tuple(d[k] for k in KNOBS), level)


def _step(values: tuple, v, up: bool):
    """The neighbouring value of ``v`` in a knob's sorted values, or ``v`` at the end."""
    vs = sorted(values)
    i = vs.index(v) if v in vs else 0
    j = i + 1 if up else i - 1
    return vs[j] if 0 <= j < len(vs) else v


def _widest_wgmma(model: WgmmaModel, d: dict) -> int:
    fits = [n for n in model.values["wgmma_n"] if d["block_n"] % n == 0]
    return max(fits) if fits else d["wgmma_n"]


class WgmmaGensorWalk:
    """Gensor's annealed walk over wgmma states; the interface of ``tiletune.construct.gensor.GensorWalk``
    (``pool``, ``add_walk``)."""

    def __init__(self, space: Space, model: WgmmaModel, rng: np.random.Generator, *, t0: float = T0,
                 threshold: float = THRESHOLD):
        self.space, self.model, self.rng = space, model, rng
        self.t0, self.threshold = t0, threshold

    def moves(self, e: State) -> list[tuple[str, State]]:
        d, v, out = e.d, self.model.values, []

        def add(kind: str, **change):
            new = dict(d, **change)
            if "block_n" in change:
                new["wgmma_n"] = _widest_wgmma(self.model, new)
            out.append((kind, _state(new, e.level)))

        if e.level == 0:
            for up in (True, False):
                kind = "tile" if up else "inv_tile"
                add(kind, block_m=d["block_m"] * 2 if up else d["block_m"] // 2)
                add(kind, block_n=_step(v["block_n"], d["block_n"], up))
            out.append(("cache", State(e.knobs, 1)))
        else:
            add("tile", consumers=d["consumers"] * 2, block_m=d["block_m"] * 2)
            add("inv_tile", consumers=d["consumers"] // 2, block_m=d["block_m"] // 2)
            for k in ("block_k", "stages", "wgmma_n", "group_m", "persistent", "stage_c"):
                for up in (True, False):
                    add("ratio", **{k: _step(v[k], d[k], up)})
        return [(kind, s) for kind, s in out if s != e and self.model.allowed(s.d)]

    def benefit(self, e: State, kind: str, e2: State, T: float) -> float:
        m, lv = self.model, e.level
        if kind == "cache":  # formula (2) with the annealing boost
            D = m.footprint(e.d, 0)
            fast, slow = m.hw.level("register"), m.hw.level("shared")
            return slow.access_time_ns(D) / fast.access_time_ns(D) * (self.t0 / T)
        if kind == "ratio":
            t, t2 = m.time(e.d), m.time(e2.d)
            return t / t2 if math.isfinite(t2) and t2 > 0 else 0.0
        Q, Q2 = m.traffic(e.d, lv), m.traffic(e2.d, lv)
        F, F2 = m.footprint(e.d, lv), m.footprint(e2.d, lv)
        C, eps = m.capacity[lv], m.in_bytes
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


def _rank(model: WgmmaModel, times: dict[Config, float]) -> list[tuple[float, Config]]:
    """(time, config), fastest first; equal times: the wider wgmma first, then more stages, then the config's
    order."""
    wi, si = model.names.index("wgmma_n"), model.names.index("stages")
    return sorted(((t, c) for c, t in times.items() if math.isfinite(t)),
                  key=lambda tc: (tc[0], -tc[1].values[wi], -tc[1].values[si], tc[1]))


class WgmmaRollerTree:
    """Roller's rTile construction on the wgmma kernel (see the module docstring); ``construct()`` gives the
    leaves (analytic time, config), best first."""

    def __init__(self, space: Space, model: WgmmaModel, branch: int = BRANCH):
        self.space, self.model, self.branch = space, model, branch

    def _intensity(self, d: dict, level: int) -> float:
        m = d["block_m"] // d["consumers"] if level == 0 else d["block_m"]
        n = d["block_n"]
        return 2 * m * n / ((m + n) * self.model.in_bytes)  # FLOPs per byte moved into the level, per k step

    def _limit(self, level: int) -> float:
        m = self.model
        return m.tensor_rate / (m.smem_bw if level == 0 else m.dram_bw / m.hw.cores)

    def _tiles(self, d: dict) -> int:
        mp, np_, _ = self.model.padded(d)
        return self.model.prob.S * (mp // d["block_m"]) * (np_ // d["block_n"])

    def _grow(self, starts: list[dict], level: int) -> list[dict]:
        m, v = self.model, self.model.values
        seen: dict[tuple, dict] = {}
        frontier = starts
        while frontier:
            nxt = []
            for d in frontier:
                seen[tuple(d[k] for k in KNOBS)] = d
                if self._intensity(d, level) > self._limit(level):
                    continue
                if level == 0:
                    cands = [dict(d, block_m=d["block_m"] * 2),
                             dict(d, block_n=_step(v["block_n"], d["block_n"], True))]
                    for c in cands:
                        c["wgmma_n"] = _widest_wgmma(m, c)
                else:
                    cands = [dict(d, consumers=d["consumers"] * 2, block_m=d["block_m"] * 2)]
                options = []
                for new in cands:
                    if new == d or not m.allowed(new) or m.footprint(new, level) > m.capacity[level]:
                        continue
                    if self._tiles(new) < m.hw.cores and self._tiles(new) < self._tiles(d):
                        continue  # fewer tiles than SMs
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
        base = m.initial()
        base["block_k"] = 64 if 64 in m.values["block_k"] else base["block_k"]
        base["stages"] = 2 if 2 in m.values["stages"] else base["stages"]
        base["wgmma_n"] = _widest_wgmma(m, base)
        if m.allowed(dict(base, stage_c=1)):  # whole-sector output stores (Roller's aligned transactions)
            base["stage_c"] = 1
        if not m.allowed(base):
            base = m.initial()
        groups = self._grow([base], 0) if m.allowed(base) else []
        blocks = self._grow(groups, 1)
        leaves = {m.config(d): m.time(d) for d in blocks if m.allowed(d)}
        return _rank(m, leaves)
