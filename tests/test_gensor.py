import math

import pytest

from tiletune.analytic.etir import ETIR, Model
from tiletune.errors import TiletuneError
from tiletune.hardware import HardwareSpec, MemoryLevel, preset
from tiletune.measure import FunctionMeasurer
from tiletune.space import Space
from tiletune.strategies import TuneContext, create
from tiletune.construct.gensor import Move
from tiletune.strategies.gensor import Gensor
from tiletune.tune import tune
from tiletune.workloads import parse
from tiletune.workloads.access import (compulsory_bytes, footprint_bytes, generic_accesses, tensor_accesses,
                                       traffic_bytes)

SHAPES = [
    "gemm:M=64,N=48,K=32",
    "gemm:M=97,N=89,K=101",  # prime extents: divisors 1 and E only
    "conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=2,pad=1",
    "gemv:M=256,K=128",
    "avgpool2d:N=1,C=16,H=16,W=16,kernel=3,stride=2",
]


def cpu() -> HardwareSpec:
    """A fixed AVX2 machine, so that the tests do not depend on the CPU they run on."""
    g = 2.5
    return HardwareSpec(
        name="test-avx2", kind="cpu", cores=4, simd_lanes=8, fma_units=2, freq_ghz=g, peak_gflops=4 * 8 * 2 * 2 * g,
        memory=(MemoryLevel("register", 512, 96 * g, 1 / g, 32), MemoryLevel("L1", 32768, 64 * g, 4 / g, 64),
                MemoryLevel("L2", 524288, 32 * g, 14 / g, 64), MemoryLevel("L3", 16 << 20, 64 * g, 20, 64, True),
                MemoryLevel("DRAM", None, 20.0, 90.0, 64, True)),
        vector_registers=16, bank_count=8)


def make(spec, **opts):
    wl = parse(spec)
    sp = Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    return wl, sp, Gensor(sp, seed=opts.pop("seed", 0), context=TuneContext(workload=wl, hardware=cpu()), **opts)


# ---- access model -------------------------------------------------------------------------------------
def test_access_descriptions():
    g = tensor_accesses(parse("gemm:M=8,N=4,K=2"))
    assert [(t.name, t.role, [d.axes for d in t.dims]) for t in g] == [
        ("A", "input", [("m",), ("k",)]), ("B", "input", [("k",), ("n",)]), ("C", "output", [("m",), ("n",)])]
    conv = tensor_accesses(parse("conv2d:C=4,H=9,W=9,K=2,R=3,S=3,stride=2,dilation=1"))
    data = conv[0]
    assert data.dims[2].terms == (("p", 2), ("r", 1))
    assert data.tile_elements({"p": 2, "r": 3, "q": 1, "s": 1}) == 2 * 1 + 1 * 2 + 1  # rows of the window
    assert data.tile_elements({"q": 3, "s": 1}, unit=8) == 8  # 5 contiguous elements -> one vector
    pool = tensor_accesses(parse("avgpool2d:C=2,H=8,W=8,kernel=2,stride=2"))
    assert [t.role for t in pool] == ["input", "output"]
    assert [d.axes for d in tensor_accesses(parse("gemv:M=4,K=4"))[1].dims] == [("k",)]


@pytest.mark.parametrize("spec", SHAPES)
def test_traffic_model(spec):
    wl = parse(spec)
    acc, axes = tensor_accesses(wl), wl.axes_no_tvm()
    full = {a.name: a.extent for a in axes}
    assert footprint_bytes(acc, full) <= compulsory_bytes(acc)
    assert traffic_bytes(acc, axes, full) == footprint_bytes(acc, full)  # one tile: moved once
    assert traffic_bytes(acc, axes, {}) >= traffic_bytes(acc, axes, full)
    # counting in lines never moves less than counting bytes
    half = {a.name: max(1, a.extent // 2) for a in axes}
    assert traffic_bytes(acc, axes, half, 16) >= traffic_bytes(acc, axes, half)


def test_generic_accesses_is_a_contraction():
    wl = parse("gemm:M=8,N=4,K=2")
    g = generic_accesses(wl.axes_no_tvm())
    assert [sorted(t.axes) for t in g] == [["k", "m"], ["k", "n"], ["m", "n"]]


# ---- formulas and the walk ----------------------------------------------------------------------------
def test_policy_probabilities_normalised_and_capacity_zero():
    wl, sp, g = make("gemm:M=64,N=48,K=32")
    m = g.model
    e = m.initial()
    acts, probs = g.walker.policy(e, 1.0)
    assert math.isclose(sum(probs), 1.0) and all(p >= 0 for p in probs)
    assert {mv.kind for mv, _ in acts} >= {"tile", "cache"}
    # a register tile at capacity: every growth overflows 512 B and must get probability 0
    i_m, i_n = 0, 1
    big = m.with_tile(m.with_tile(e, i_n, 16), i_m, 4)
    assert m.fits(big, 0)
    acts, probs = g.walker.policy(big, 1.0)
    for (mv, e2), p in zip(acts, probs):
        if not m.fits(e2, e2.level):
            assert p == 0.0
    grows = [(mv, p) for (mv, e2), p in zip(acts, probs) if mv.kind == "tile"]
    assert grows and all(p == 0.0 for _, p in grows)
    assert math.isclose(sum(probs), 1.0)


def test_formula1_tiling_grow_and_inverse():
    wl, sp, g = make("gemm:M=64,N=48,K=32")
    m = g.model
    e = m.with_tile(m.initial(), 1, 8)  # n register tile: one vector
    grow = m.with_tile(e, 1, 16)
    b_grow = g.walker.benefit(e, Move("tile", 1, 16), grow, 1.0)
    assert b_grow > 0
    assert m.traffic(grow, 0) < m.traffic(e, 0) and m.footprint(grow, 0) > m.footprint(e, 0)
    b_back = g.walker.benefit(grow, Move("inv_tile", 1, 8), e, 1.0)
    assert 0 < b_back < b_grow  # shrinking back is the reciprocal reading, less attractive here
    # growing gemm's k tile at L1 saves traffic only because A's rows then fill more of each line
    l1 = m.normalize(e.tiles, 1, 1)
    assert g.walker.benefit(l1, Move("tile", 2, 2), m.with_tile(l1, 2, 2), 1.0) > 0


def test_formula2_cache_speedup_and_annealing_boost():
    wl, sp, g = make("gemm:M=64,N=48,K=32")
    m = g.model
    e = m.initial()
    c = m.normalize(e.tiles, 1, 1)
    b1 = g.walker.benefit(e, Move("cache"), c, 1.0)
    b2 = g.walker.benefit(e, Move("cache"), c, 0.5)
    assert b1 > 1.0  # registers are faster than L1
    assert math.isclose(b2, 2 * b1)  # x T0/T


def test_formula3_vthread_ceil_ratio():
    wl, sp, g = make("gemm:M=64,N=48,K=32", vthread="on")
    m = g.model
    e = ETIR(m.normalize(m.initial().tiles, 0, 1).tiles, 0, 1)
    e = m.with_tile(e, 0, 2)  # m register tile 2
    e = m.normalize(e.tiles, 1, 1)
    e = m.with_tile(e, 0, 16)  # L1 tile of m (the outer spatial axis, y): 16 -> room 8
    vt = [(mv, e2) for mv, e2 in g.walker.moves(e) if mv.kind == "vthread"]
    assert [mv.value for mv, _ in vt] == [2]
    b = g.walker.benefit(e, vt[0][0], vt[0][1], 1.0)
    assert b == pytest.approx(16 / 8)  # ceil(y/1) / ceil(y/2) with the same ceil(x/W)
    off = make("gemm:M=64,N=48,K=32")[2]  # vthread=auto on a CPU: dropped
    assert not [mv for mv, _ in off.walker.moves(e) if mv.kind == "vthread"]


def test_temperature_schedule_about_100_steps(monkeypatch):
    wl, sp, g = make("gemm:M=64,N=48,K=32")
    temps = []
    orig = g.walker.policy

    def spy(e, T):
        temps.append(T)
        return orig(e, T)

    monkeypatch.setattr(g.walker, "policy", spy)
    g.walker.walk()
    assert len(temps) == 100 == g.walker.steps
    assert all(math.isclose(b, a / 2) for a, b in zip(temps, temps[1:]))
    assert temps[-1] > g.opts["threshold"] >= temps[-1] / 2


def test_walk_reaches_the_last_level_and_stays_within_capacity():
    wl, sp, g = make("gemm:M=64,N=48,K=32")
    m = g.model
    states = [e for _, e in g.walker.walk()]
    assert max(e.level for e in states) == m.n - 1 == 2
    assert all(m.fits(e, e.level) for e in states)


@pytest.mark.parametrize("spec", SHAPES)
@pytest.mark.parametrize("opts", [{}, {"vthread": "on"}, {"cache_moves": "off"}])
def test_constructed_configs_are_legal(spec, opts):
    wl, sp, g = make(spec, **opts)
    pool = g.construct()
    assert pool
    for t, c in pool:
        assert sp.is_legal(c) and t > 0
    assert [t for t, _ in pool] == sorted(t for t, _ in pool)
    first = g.ask(8)
    assert len(first) == 1 and first[0] == pool[0][1]


def test_topk_then_stop_or_continue():
    wl, sp, g = make("gemm:M=64,N=48,K=32", k=3, after_topk="stop")
    assert len(g.ask(8)) == 3
    assert g.ask(8) == []
    wl, sp, g = make("gemm:M=64,N=48,K=32", k=2)
    a, b = g.ask(8), g.ask(8)
    assert len(a) == 2 and len(b) >= 1 and not set(a) & set(b)


def test_tune_loop_measures_only_topk():
    wl, sp, _ = make("gemm:M=64,N=48,K=32")
    strat = create("gensor", sp, seed=1, context=TuneContext(workload=wl, hardware=cpu()),
                   options={"k": "2", "after_topk": "stop"})
    m = FunctionMeasurer(lambda c: 1e-3)
    r = tune(space=sp, strategy=strat, measurer=m, workload=wl.key, flops=wl.flops, trials=50, batch_size=8)
    assert r.trials == 2 and len(m.calls) == 2 and r.stopped == "exhausted"


def test_seed_reproduces_and_options_checked():
    a = make("conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=2,pad=1", seed=4)[2].construct()
    b = make("conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=2,pad=1", seed=4)[2].construct()
    assert a == b
    with pytest.raises(TiletuneError):
        make("gemm:M=8,N=8,K=8", k=11)
    with pytest.raises(TiletuneError):
        make("gemm:M=8,N=8,K=8", vthread="maybe")


def test_without_workload_or_hardware_and_on_gpu_preset():
    wl = parse("gemm:M=32,N=32,K=32")
    sp = Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    g = Gensor(sp, seed=0)  # generic access guess, this CPU detected without measuring
    assert all(sp.is_legal(c) for c in g.ask(4))
    h = Gensor(sp, seed=0, context=TuneContext(workload=wl, hardware=preset("rtx4090")))
    assert h.walker.use_vthread and h.model.n == 2  # registers and shared memory
    assert all(sp.is_legal(c) for _, c in h.construct())
    assert Model(sp, wl, cpu()).n == 3
