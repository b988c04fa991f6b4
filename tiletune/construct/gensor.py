"""Gensor's construction (Liu et al., 2025): graph-based construction with Markov analysis, the algorithm
behind the strategy ``gensor`` and the constructive start ``start=gensor`` of the local searches.

A tensor program under construction is a state of a Markov chain (an ETIR); scheduling primitives are
the edges. From a state, Algorithm 2 (``policy``) scores every action with the paper's benefit formulas,
sets the probability of actions that overflow the memory level to 0, normalises the benefits into
transition probabilities and picks one by roulette. Algorithm 1 (``walk``) anneals: the temperature T
halves every step, the cache action's probability is multiplied by T0/T (so the walk is pushed to the next
memory level as it cools), and every new state joins the top results with the acceptance probability
below. The walk stops when T falls below ``threshold`` (1e-30 by default: 100 steps from T0 = 1, the
paper's count).
The best constructed states (by the analytic performance of the state) are mapped to Configs of the CPU
space (``GensorWalk.pool``); the strategy measures only the top ``k``. The first construction pools the top
results of ``walks`` (default 4) independent walks from the initial state (our choice: one ~100-step walk
spends only a few steps per memory level, and a few walks stay within the paper's "milliseconds to
seconds" budget).

ETIR (the state) and the analytic model, shared with Roller, live in ``tiletune.analytic.etir``: per loop
axis and scheduled memory level the cumulative tile size, the current level c, the virtual-thread count V;
footprints, traffic, the analytic (roofline) time of a state, and the map of a state to a Config.

Actions at the current level c: tile / inverse tile (grow / shrink one axis's T_a^c to the next / previous
divisor of E_a that is a multiple of T_a^(c-1)), cache (c -> c+1; level c is then frozen), set vthread
(V -> 2V or V/2, at levels >= 1). On a CPU the vectorised axis moves to the next / previous divisor that is a
whole number of vectors, where there is one (``GensorWalk.align``; Roller aligns the same axis): a tile of 20
lanes between 16 and 32 (a channel count of 1280) costs a second register for a quarter of its lanes, saves
no traffic in vector units, and gets benefit 0, so walks that had to pass through it never reached 32 lanes.

Data movement (tiletune.workloads.access): F(t) = footprint of the tile's tensor slices, Q(t) = traffic
into the memory that holds the tile over the whole computation, both counted in the level's transfer
units (the contiguous dimension rounded up to whole vectors for registers, whole lines for caches);
Q_min = every tensor moved once; C_l = capacity of memory level l. The paper's formulas (their symbols
are lost in our copy; reconstructed from the text, in its notation):

(1) tiling, e -> e' at level l (reduction in memory traffic per increase in footprint):
        B_tile = ((Q - Q') / Q_min) / ((F' - F) / C_l)
    Q, Q' are measured in units of the compulsory traffic and F, F' in units of the level's capacity, so
    that the ratio is dimensionless like the other benefits ("each action's benefit is an acceleration
    ratio"). For the inverse tiling the same ratio is read the other way (footprint freed per traffic
    added): B_inv = ((F - F') / C_l) / ((Q' - Q) / Q_min). Read literally, (Q-Q')/(F'-F) is also positive
    for a shrink and, traffic being convex in the tile size, larger than for the matching grow, which would
    drive every walk back to 1x1 tiles. A growth that saves no traffic and a shrink that frees no
    footprint get 0; a growth that adds no footprint (still within the same lines) or a shrink that adds
    no traffic gets one element in the zero denominator (a large benefit).
(2) caching, level l -> l+1 (speed-up in access time of the tile's data D = F(T^l)):
        B_cache = (lat_{l+1} + D / BW_{l+1}) / (lat_l + D / BW_l) x (T0 / T)
    the factor T0/T is the annealing boost ("the probability of the cache action increases as T falls").
(3) vthread, V -> V' (ratio of bank conflicts before and after):
        B_vt = (ceil(x / W) * ceil(y / V)) / (ceil(x / W) * ceil(y / V'))
    x, y: the level-1 tile (the tile staged in shared memory / L1 and processed in parallel) of the
    innermost and the next spatial axis; W: the bank count; the y rows that fall on the same banks are
    spread over V virtual threads; V' must divide y / T_y^0.
Every transition whose new state's footprint exceeds C_l at any scheduled level <= c gets probability 0.

Acceptance into the top results (Algorithm 1): with t(e) the analytic time of a state (``Model.time``),
    P_accept = 1 if t(e') <= t(e), else exp(-((t(e') - t(e)) / t(e)) / T).

CPU mapping (the paper targets GPUs): L1 plays the role of shared memory (the level whose tile is staged
for the inner kernel, with the local accumulator); a vector load of ``simd_lanes`` 4-byte words is the
analog of one conflict-free bank access (W = simd_lanes). The CPU template has no vthread loop, and L1 is a
hardware cache without programmer-visible banks, so ``vthread=auto`` drops the action on CPU targets (keeps
it for GPU hardware specs); ``vthread=on`` keeps it, and V is then realised the way TVM lowers virtual
threads (InjectVirtualThread replicates the body V times in one thread): through the ``unroll`` knob. The
unroll knob is set to the largest value <= V x the micro-kernel's loop steps (R1 x S3 points, the vectorised
axis counted in vectors): the register tile is unrolled, never beyond it; a ``vthread`` choice knob, if a
space has one, gets V; other choice knobs (the CPU template's ``pack``) keep their first value. The
closest CPU analog of bank conflicts is L1 set conflicts of tile rows at power-of-two strides, which the
template fixes with ``pack``, not with threads; the model does not capture it.

Ablations: ``cache_moves="off"`` replaces the annealed cache action by a fixed schedule (the level
advances every steps/n iterations); ``vthread="off"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..analytic.etir import ETIR, Model
from ..space import Config, Space

#: the construction's defaults (the strategy ``gensor`` declares them as its options)
T0, THRESHOLD, WALKS, MAX_VTHREAD = 1.0, 1e-30, 4, 8


def roulette(rng: np.random.Generator, probs: Sequence[float]) -> int:
    """The index drawn by roulette from transition probabilities that sum to 1 (one draw of ``rng``)."""
    r = float(rng.random())
    acc = 0.0
    for i, p in enumerate(probs):
        acc += p
        if r < acc:
            return i
    return max(i for i, p in enumerate(probs) if p > 0)


@dataclass(frozen=True)
class Move:
    kind: str  # "tile" | "inv_tile" | "cache" | "vthread"
    axis: int = -1
    value: int = 0


class GensorWalk:
    """Algorithms 1 and 2 over the ETIR states of one space, with the analytic ``model`` of that space.

    ``vthread`` is "auto" (the setVthread action on GPU hardware only), "on" or "off"; ``cache_moves``
    "on" (the annealed cache action) or "off" (a fixed level schedule). ``rng`` draws the roulette and
    the acceptance tests."""

    def __init__(self, space: Space, model: Model, rng: np.random.Generator, *, t0: float = T0,
                 threshold: float = THRESHOLD, vthread: str = "auto", cache_moves: str = "on",
                 max_vthread: int = MAX_VTHREAD):
        self.space, self.model, self.rng = space, model, rng
        self.t0, self.threshold = t0, threshold
        self.cache_moves, self.max_vthread = cache_moves, max_vthread
        self.use_vthread = (vthread == "on") or (vthread == "auto" and model.hw.kind == "gpu")
        self.steps = max(1, math.ceil(math.log2(t0 / threshold)))

    # ---- Algorithm 2: getProgPolicy --------------------------------------------------------------
    def moves(self, e: ETIR) -> list[tuple[Move, ETIR]]:
        m = self.model
        out: list[tuple[Move, ETIR]] = []
        for i in range(len(m.knobs)):
            if m.mode(i, e.level) != "free":
                continue
            for d, kind in ((+1, "tile"), (-1, "inv_tile")):
                v = m.step_tile(e, i, d, self.align(i))
                if v is not None:
                    out.append((Move(kind, i, v), m.with_tile(e, i, v)))
        if self.cache_moves == "on" and e.level + 1 < m.n:
            out.append((Move("cache"), m.normalize(e.tiles, e.level + 1, e.vthread)))
        if self.use_vthread and e.level >= 1 and m.outer is not None:
            room = e.tiles[m.outer][1] // e.tiles[m.outer][0]
            for v in (e.vthread * 2, e.vthread // 2):
                if 1 <= v <= self.max_vthread and room % v == 0:
                    out.append((Move("vthread", value=v), replace(e, vthread=v)))
        return out

    def align(self, i: int) -> int:
        """The step of a tile move on knob ``i`` (``Model.step_tile``): on a CPU the vectorised axis moves in whole
        vectors (``Model.unit(0)`` lanes, where the extent has such divisors), every other axis along all its
        divisors. Our choice for the CPU mapping (see the module docstring); on a GPU the paper's moves."""
        m = self.model
        return m.unit(0) if m.hw.kind == "cpu" and i == m.inner else 1

    def benefit(self, e: ETIR, mv: Move, e2: ETIR, T: float) -> float:
        m = self.model
        l = e.level
        if mv.kind in ("tile", "inv_tile"):
            Q, Q2 = m.traffic(e, l), m.traffic(e2, l)
            F, F2 = m.footprint(e, l), m.footprint(e2, l)
            C = m.capacity(l)
            eps = m.elem_bytes
            if mv.kind == "tile":  # formula (1)
                if Q2 >= Q:
                    return 0.0
                return ((Q - Q2) / m.q_min) / (max(F2 - F, eps) / C)
            if F2 >= F:  # inverse tiling that frees nothing
                return 0.0
            return ((F - F2) / C) / (max(Q2 - Q, eps) / m.q_min)
        if mv.kind == "cache":  # formula (2) with the annealing boost
            D = m.footprint(e, l)
            slow, fast = m.mem[l + 1], m.mem[l]
            return slow.access_time_ns(D) / fast.access_time_ns(D) * (self.t0 / T)
        # formula (3)
        W = max(1, m.hw.bank_count or m.hw.simd_lanes)
        x = e.tiles[m.inner][1]
        y = e.tiles[m.outer][1]
        before = math.ceil(x / W) * math.ceil(y / e.vthread)
        after = math.ceil(x / W) * math.ceil(y / e2.vthread)
        return before / after

    def policy(self, e: ETIR, T: float) -> tuple[list[tuple[Move, ETIR]], list[float]]:
        """Actions from e and their transition probabilities (normalised benefits; 0 if over capacity)."""
        acts = self.moves(e)
        m = self.model
        ben = []
        for mv, e2 in acts:
            ok = m.fits(e2, e2.level)
            ben.append(self.benefit(e, mv, e2, T) if ok else 0.0)
        total = sum(ben)
        if total <= 0 or not math.isfinite(total):
            return acts, [0.0] * len(acts)
        return acts, [b / total for b in ben]

    def roulette(self, probs: Sequence[float]) -> int:
        return roulette(self.rng, probs)

    # ---- Algorithm 1: the annealed walk ----------------------------------------------------------
    def walk(self) -> list[tuple[float, ETIR]]:
        m = self.model
        T = self.t0
        e = m.initial()
        t_e = m.time(e)
        top: list[tuple[float, ETIR]] = [(t_e, e)]
        it = 0
        per_level = max(1, self.steps // m.n)
        while T > self.threshold:
            if self.cache_moves == "off" and it and it % per_level == 0 and e.level + 1 < m.n:
                cached = m.normalize(e.tiles, e.level + 1, e.vthread)
                if m.fits(cached, cached.level):
                    e, t_e = cached, m.time(cached)
                    top.append((t_e, e))
            acts, probs = self.policy(e, T)
            if any(p > 0 for p in probs):
                mv, e2 = acts[self.roulette(probs)]
                t2 = m.time(e2)
                accept = 1.0 if t2 <= t_e else math.exp(-((t2 - t_e) / t_e) / T)
                if float(self.rng.random()) < accept:
                    top.append((t2, e2))
                e, t_e = e2, t2
            T /= 2.0
            it += 1
        return top

    def add_walk(self, seen: set[Config]) -> dict[Config, float]:
        """One walk's states as legal Configs not in ``seen``, each with its best analytic time."""
        fresh: dict[Config, float] = {}
        for t, e in self.walk():
            c = self.model.to_config(e)
            if c in seen or not self.space.is_legal(c):
                continue
            fresh[c] = min(t, fresh.get(c, math.inf))
        return fresh

    def pool(self, walks: int = WALKS) -> list[tuple[float, Config]]:
        """The first construction: the states of ``walks`` independent walks, (analytic time, config), best
        first, without duplicates."""
        found: dict[Config, float] = {}
        for _ in range(walks):
            for c, t in self.add_walk(set(found)).items():
                found[c] = t
        return sorted(((t, c) for c, t in found.items()), key=lambda tc: (tc[0], tc[1]))
