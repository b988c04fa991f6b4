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

from ..analytic.wgmma import KNOBS, WgmmaModel
from ..space import Config, Space
from .mma import MmaGensorWalk

BRANCH = 2  # Roller's (the walk's constants are construct.mma's)


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


class WgmmaGensorWalk(MmaGensorWalk):
    """Gensor's annealed walk over wgmma states: the tensor-core walk (``construct.mma.MmaGensorWalk``: its
    benefits, acceptance and pool) with the wgmma template's states, moves and ranking."""

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

    @staticmethod
    def state(d: dict, level: int) -> State:
        return _state(d, level)

    def rank(self, times: dict[Config, float]) -> list[tuple[float, Config]]:
        return _rank(self.model, times)


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
