"""The analytic model's register tile on a CPU: the registers LLVM uses for a vectorised row, the register fit
of spaces without the template's own rule, the accumulators' round trips per R0 iteration when register tiles take
turns, and Gensor's moves of
the vectorised axis in whole vectors."""
import math
from dataclasses import replace

import numpy as np

from tiletune.construct import constructions
from tiletune.construct.gensor import GensorWalk
from tiletune.analytic.etir import Model
from tiletune.hardware import HardwareSpec, MemoryLevel, preset
from tiletune.space import Config, Space
from tiletune.workloads import parse
from tiletune.workloads.access import traffic_bytes


def avx512() -> HardwareSpec:
    """A fixed AVX-512 machine (32 registers of 16 fp32 lanes), so that the tests do not depend on this CPU."""
    g = 2.5
    return HardwareSpec(
        name="test-avx512", kind="cpu", cores=2, simd_lanes=16, fma_units=2, freq_ghz=g,
        peak_gflops=2 * 16 * 2 * 2 * g,
        memory=(MemoryLevel("register", 2048, 192 * g, 1 / g, 64), MemoryLevel("L1", 49152, 128 * g, 4 / g, 64),
                MemoryLevel("L2", 1 << 20, 32 * g, 14 / g, 64), MemoryLevel("L3", 32 << 20, 64 * g, 20, 64, True),
                MemoryLevel("DRAM", None, 20.0, 90.0, 64, True)),
        vector_registers=32, bank_count=16)


def model(spec: str, hw=None):
    wl = parse(spec)
    sp = Space.from_axes(wl.axes_no_tvm(), levels=(4, 2), choices={"unroll": (0, 16, 64, 512)})
    return wl, sp, Model(sp, wl, hw or avx512())


def config(sp: Space, **tiles) -> Config:
    d = sp.to_dict(sp.untiled())
    d.update(tiles)
    return sp.from_dict(d)


def test_vector_registers_split_a_row_into_power_of_two_pieces():
    _, _, m = model("gemm:M=64,N=64,K=64")
    assert [m.vector_registers(x) for x in (1, 2, 8, 14, 16, 32, 56, 7)] == [1, 1, 1, 3, 1, 2, 4, 3]
    # a GPU's lanes are threads: whole lane groups, as before
    _, _, g = model("gemm:M=64,N=64,K=64", preset("a100"))
    assert [g.vector_registers(x) for x in (14, 32, 33)] == [1, 1, 2]


def test_lane_use_counts_the_pieces():
    """14 lanes in three registers use 14 of 48 lanes: an x of 16 is faster in the model, all else equal."""
    _, sp, m = model("gemm:M=64,N=112,K=64")
    t14 = m.config_time(config(sp, tile_m=(8, 1, 1, 8), tile_n=(8, 1, 1, 14), tile_k=(8, 8)))
    _, sp16, m16 = model("gemm:M=64,N=128,K=64")
    t16 = m16.config_time(config(sp16, tile_m=(8, 1, 1, 8), tile_n=(8, 1, 1, 16), tile_k=(8, 8)))
    # per FLOP (the GEMMs differ in N by 112 : 128)
    assert t14 / 112 > 2 * t16 / 128


def test_register_tile_must_fit_the_vector_registers():
    _, sp, m = model("gemm:M=64,N=64,K=64")
    fits = lambda **t: m.registers_fit(m.from_config(config(sp, **t)))  # noqa: E731
    assert fits(tile_m=(8, 1, 1, 8), tile_n=(2, 1, 1, 32), tile_k=(8, 8))      # 8 x 2: 16 + 8 + 2 + 1 = 27
    assert not fits(tile_m=(4, 1, 1, 16), tile_n=(2, 1, 1, 32), tile_k=(8, 8))  # 16 x 2: 51 > 32
    # the NCHW conv2d of the assembly: 4 x 3 (14 lanes) fits, 8 x 3 does not
    _, sp, m = model("conv2d:N=1,C=32,H=28,W=28,K=64,R=3,S=3,stride=2,pad=1")
    assert m.registers_fit(m.from_config(config(sp, tile_k=(16, 1, 1, 4), tile_q=(1, 1, 1, 14))))
    assert not m.registers_fit(m.from_config(config(sp, tile_k=(8, 1, 1, 8), tile_q=(1, 1, 1, 14))))
    # a GPU space is not held to it
    _, _, g = model("gemm:M=64,N=64,K=64", preset("a100"))
    assert g.cpu_registers == 0


def test_constructed_register_tiles_fit():
    for spec in ("gemm:M=128,N=128,K=64", "conv2d:N=1,C=32,H=28,W=28,K=64,R=3,S=3,stride=2,pad=1"):
        wl, sp, m = model(spec)
        for method in ("gensor", "roller"):
            for c in constructions(method, sp, workload=wl, hardware=avx512(), k=4):
                e = m.from_config(c)
                x = e.tiles[m.inner][0]
                P = math.prod(e.tiles[i][0] for i in m.spatial if i != m.inner)
                V = m.vector_registers(x)
                assert P * V + P + V + 1 <= 32, (method, sp.to_dict(c))


def test_accumulators_return_once_per_r0_iteration():
    """Level-0 traffic: when the L1 tile holds two register tiles (S2 = 2 along k) they take turns in the
    registers, going back to L1 once per R0 iteration: a longer R1 (c1 = 32 against 1) keeps them longer. With
    one register tile per L1 tile (S2 = 1) or the whole reduction in R1 they never leave (the count once per
    tile)."""
    _, sp, m = model("conv2d:N=1,C=32,H=28,W=28,K=64,R=3,S=3,stride=2,pad=1")
    base = dict(tile_k=(8, 1, 2, 4), tile_q=(1, 1, 1, 14))
    short = m.from_config(config(sp, tile_c=(32, 1), **base))
    long = m.from_config(config(sp, tile_c=(1, 32), **base))
    assert m.accumulator_trips(short) > m.accumulator_trips(long) > 1
    assert m.traffic(short, 0) > m.traffic(long, 0)
    once = lambda e: traffic_bytes(m.accesses, m.axes, m.tile_map(e, 0), m.unit(0))  # noqa: E731
    whole = m.from_config(config(sp, tile_c=(1, 32), tile_r=(1, 3), tile_s=(1, 3), **base))
    assert m.traffic(whole, 0) == once(whole)
    alone = m.from_config(config(sp, tile_c=(32, 1), tile_k=(16, 1, 1, 4), tile_q=(1, 1, 1, 14)))
    assert m.accumulator_trips(alone) == 1 and m.traffic(alone, 0) == once(alone)


def test_register_tiles_taking_turns_cost_time():
    """Bert-small's FFN matmul 256 x 2048 x 512 (batch 4, seq 64) on the Xeon: two 8 x 32 register tiles taking
    turns every 4 reduction steps ran 1.66x slower than the same tile alone in its L1 tile (4158 against 2497 us;
    docs/decisions/analytic-model.md): the model ranks it slower, by the round trips' time, and without the rule
    (``accumulator_turns`` False) it did not."""
    _, sp, m = model("gemm:M=256,N=512,K=2048")
    turns = m.from_config(config(sp, tile_m=(2, 16, 1, 8), tile_n=(8, 1, 2, 32), tile_k=(512, 4)))
    alone = m.from_config(config(sp, tile_m=(2, 16, 1, 8), tile_n=(8, 2, 1, 32), tile_k=(512, 4)))
    assert m.accumulator_trips(turns) == 2 * 512 - 1 and m.accumulator_trips(alone) == 1
    assert m.time(turns) > 1.2 * m.time(alone)
    m.accumulator_turns = False
    assert m.time(turns) <= m.time(alone)


def test_gensor_moves_the_vectorised_axis_in_whole_vectors_on_a_cpu():
    """1280 columns: the next divisor after 16 is 20, a tile that saves no traffic in vector units; on a CPU
    Gensor's walk steps 16 <-> 32 instead (Roller's alignment), elsewhere along every divisor (the paper)."""
    def inner_moves(hw):
        wl, sp, m = model("gemm:M=49,N=1280,K=320", hw)
        walk = GensorWalk(sp, m, np.random.default_rng(0))
        at = {16: replace(m.from_config(config(sp, tile_m=(1, 1, 7, 7), tile_n=(1, 1, 80, 16))), level=0),
              32: replace(m.from_config(config(sp, tile_m=(1, 1, 7, 7), tile_n=(1, 1, 40, 32))), level=0)}
        return {t: sorted((mv.kind, mv.value) for mv, _ in walk.moves(e) if mv.axis == m.inner)
                for t, e in at.items()}, (wl, sp, m)

    moves, (wl, sp, m) = inner_moves(None)
    assert ("tile", 32) in moves[16] and ("inv_tile", 16) in moves[32]
    assert all(v % 16 == 0 for ms in moves.values() for kind, v in ms if v >= 16)
    for c in constructions("gensor", sp, workload=wl, hardware=avx512(), k=4, rng=np.random.default_rng(1)):
        assert m.from_config(c).tiles[m.inner][0] % 16 == 0, sp.to_dict(c)
    gpu, _ = inner_moves(preset("a100"))
    assert ("tile", 20) in gpu[16]


def test_a_cpu_fma_pipe_needs_as_many_accumulators_as_its_latency():
    """Two FMA pipes of 4-cycle latency need 8 independent accumulators: a register tile of 4 rows x 1 vector
    computes at half the peak (before, 2 chains per pipe were counted, and its time was its L1 traffic's, 213 of
    320 GFLOPS here); 4 rows x 2 vectors and 8 x 2 reach the peak's compute rate."""
    _, sp, m = model("gemm:M=2048,N=2048,K=2048")
    peak = m.hw.peak_gflops

    def rate(rows: int, n3: int) -> float:
        c = config(sp, tile_m=(16, 128 // rows, 1, rows), tile_n=(16, 128 // n3, 1, n3), tile_k=(256, 8))
        return 2 * 2048 ** 3 / m.config_time(c)

    assert m.cpu_fma_chains == 4
    assert math.isclose(rate(4, 16), peak / 2)
    assert rate(8, 32) == peak and rate(4, 16) < rate(8, 16) < rate(8, 32)


def test_the_register_rule_alone_decides_the_register_level_of_an_outer_product():
    """A 14-pixel x 2-vector tile of an NHWC 1x1 convolution takes 28 accumulators + 2 + 1 registers: the template's
    rule admits it (31 of 32, one left to LLVM), and so does the model. The level-0 footprint counted each of the 14
    broadcast scalars as a vector register (44 > 32) and kept every construction below it."""
    from unittest import mock

    from tiletune.schedules import make_space

    wl = parse("conv2d:N=1,C=256,H=14,W=14,K=128,R=1,S=1,layout=NHWC")
    sp = make_space(wl, None, {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2})
    m = Model(sp, wl, avx512())
    assert m.register_rule is not None
    d = sp.to_dict(sp.untiled())
    axes = {k.axis: k.name for _, k in sp.split_knobs}
    spatial = [k for _, k in sp.split_knobs if k.kind == "S"]
    # 7 rows x 2 columns of output pixels, 32 output channels (2 vectors), the channel reduction whole in R1
    d.update({axes[spatial[1].axis]: (1, 2, 1, 7), axes[spatial[2].axis]: (1, 7, 1, 2),
              axes[spatial[3].axis]: (2, 2, 1, 32)})
    red = next(k for _, k in sp.split_knobs if k.kind == "R" and k.extent == 256)
    d[red.name] = (1, 256)
    c = sp.from_dict(d)
    assert sp.allows(c)
    e = m.from_config(c)
    assert m.fits(e, m.n - 1)
    with mock.patch.object(Model, "rule_registers", False):
        assert not m.fits(e, m.n - 1)
