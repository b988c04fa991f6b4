"""The register-tile rule of NHWC conv2d (tiletune.schedules.cpu.RegisterTile): derived from the target's
vector register file, carried by the space as its constraint, honoured by sampling, every strategy, the
template's check and the constructions; other spaces unchanged."""
import platform

import numpy as np
import pytest

from tiletune.construct import constructions
from tiletune.hardware import vector_file
from tiletune.measure import FunctionMeasurer
from tiletune.schedules import make_space
from tiletune.schedules.cpu import InvalidConfig, RegisterTile, check
from tiletune.space import Space
from tiletune.target import host_target
from tiletune.strategies import create, registry
from tiletune.tune import tune
from tiletune.workloads import parse

AVX2 = {"kind": "llvm", "mcpu": "haswell", "num-cores": 1}
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}
CONV = "conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,layout=NHWC"


def with_tile(space, q3: int, k3: int, p3: int = 1):
    """The untiled configuration with a register tile of p3 x q3 pixels x k3 channels."""
    d = space.to_dict(space.untiled())
    for name, inner in (("tile_p", p3), ("tile_q", q3), ("tile_k", k3)):
        extent = space.knobs[space.names.index(name)].extent
        d[name] = [extent // inner, 1, 1, inner]
    return space.from_dict(d)


def test_vector_file_from_the_target():
    assert vector_file(AVX2) == (16, 8)
    assert vector_file(AVX512) == (32, 16)
    regs, lanes = vector_file({"kind": "llvm"})  # this machine's
    assert regs in (16, 32) and lanes in (4, 8, 16)


def test_tiles_that_exceed_the_register_file_are_illegal_and_invalid():
    wl = parse(CONV)
    space = make_space(wl, None, AVX2)
    rule = space.constraint
    assert isinstance(rule, RegisterTile) and (rule.registers, rule.lanes) == (16, 8)
    # 4 pixels x 16 channels: 8 accumulators + 2 weight vectors + 1 broadcast = 11 of the 15 allowed
    ok = with_tile(space, q3=4, k3=16)
    assert rule.need(ok) == 11 and space.is_legal(ok)
    check(wl, space, ok)
    assert space.is_legal(with_tile(space, q3=1, k3=64))  # 8 accumulators, each weight vector used once: 10
    # 14 x 8: 14 + 1 + 1 = 16 (the whole file: LLVM spills it; one register is left to the compiler);
    # 8 x 16: 16 accumulators alone fill the file; 2 x 2 x 32: 16 + 4 + 1
    for bad, need in ((with_tile(space, q3=14, k3=8), 16), (with_tile(space, q3=8, k3=16), 19),
                      (with_tile(space, q3=2, p3=2, k3=32), 21)):
        assert rule.need(bad) == need and not space.is_legal(bad)
        with pytest.raises(InvalidConfig, match=f"register tile needs {need} vector registers > 15"):
            check(wl, space, bad)
    # the same 8 x 16 tile is one zmm per pixel on AVX-512: 8 + 1 + 1 of 31
    wide = make_space(wl, None, AVX512)
    assert (wide.constraint.registers, wide.constraint.lanes) == (32, 16)
    assert wide.is_legal(with_tile(wide, q3=8, k3=16))
    assert wide.is_legal(with_tile(wide, q3=28, k3=16))  # 28 + 1 + 1
    assert not wide.is_legal(with_tile(wide, q3=8, k3=64))  # 32 + 4 + 1 > 31


@pytest.mark.tvm
def test_a_config_outside_the_rule_still_builds_from_old_records():
    """Records measured before the rule keep their meaning: their configurations still schedule and build
    (``tiletune build``, ``model build``); only measurement refuses them."""
    from tiletune.schedules import build

    target = {"kind": "llvm", "mcpu": "haswell", "num-cores": 1}
    wl = parse("conv2d:N=1,C=4,H=6,W=8,K=16,R=3,S=3,pad=1,layout=NHWC")
    space = make_space(wl, None, target)
    old = with_tile(space, q3=8, k3=16)  # 8 x 16: 19 registers
    assert not space.is_legal(old)
    with pytest.raises(InvalidConfig):
        check(wl, space, old)
    x, w = wl.make_inputs(seed=1)
    import tvm

    lib = build(wl, space, old, target).mod
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), wl.reference(x, w), rtol=1e-4, atol=1e-4)


def test_other_spaces_carry_no_constraint_and_keep_their_size():
    for spec in ("gemm:M=64,N=64,K=64", CONV.replace(",layout=NHWC", ""),
                 "depthwise_conv2d:N=1,C=32,H=14,W=14,R=3,S=3,pad=1,layout=NHWC"):
        space = make_space(parse(spec), None, AVX2)
        assert space.constraint is None, spec
    # the NHWC space keeps its knobs and size (records keep their keys and indices)
    wl = parse(CONV)
    plain = Space.from_axes(wl.axes_no_tvm(), choices={"unroll": (0, 16, 64, 512), "pack": (0, 1), "pad_buffer": (0, 1)})
    space = make_space(wl, None, AVX2)
    assert space.names == plain.names and space.size == plain.size
    bad = with_tile(space, q3=8, k3=16)
    assert space.from_dict(space.to_dict(bad)) == bad and space.index(bad) == plain.index(bad)


def test_sampling_honours_the_rule():
    space = make_space(parse(CONV), None, AVX2)
    rng = np.random.default_rng(0)
    samples = space.sample_unique(rng, 300)
    assert len(samples) == 300 and all(space.constraint.need(c) <= 15 for c in samples)


def tight_space(width: int = 4):
    """A small NHWC conv2d space whose rule (4 registers of 8 lanes, 3 usable) allows only register tiles
    of one pixel x at most 8 channels: most of the space is forbidden."""
    space = make_space(parse(f"conv2d:N=1,C=2,H=2,W={width},K=32,R=1,S=1,layout=NHWC"), None, AVX2)
    space.constraint = RegisterTile(4, 8, space.constraint.spatial)
    return space


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_strategy_proposes_only_tiles_that_fit(name):
    space = tight_space()
    legal = sum(space.is_legal(space.get(i)) for i in range(space.size))
    assert 0 < legal < space.size // 2
    m = FunctionMeasurer(lambda c: 1e-3 * (1 + (space.index(c) * 7919) % 97))
    strat = create(name, space, seed=0)
    r = tune(space=space, strategy=strat, measurer=m, workload="synthetic", flops=1, trials=30, batch_size=5)
    strat.close()
    assert r.best is not None and m.calls and all(space.constraint(space, c) for c in m.calls)


def test_grid_and_random_enumerate_only_legal_configurations_of_a_small_space():
    space = tight_space(width=2)
    legal = [space.get(i) for i in range(space.size) if space.is_legal(space.get(i))]
    for name in ("grid", "random"):
        strat = create(name, space, seed=0)
        seen = []
        while True:
            batch = strat.ask(4096)
            if not batch:
                break
            seen += batch
        assert sorted(seen) == sorted(legal), name


@pytest.mark.parametrize("method", ["roller", "gensor"])
def test_constructions_propose_fitting_register_tiles_and_pack_the_weight(method):
    wl = parse(CONV)
    space = make_space(wl, None, AVX2)
    out = constructions(method, space, workload=wl, target=AVX2, k=4, rng=np.random.default_rng(0))
    assert out
    for c in out:
        d = space.to_dict(c)
        assert space.constraint.need(c) <= 15 and d["pack"] == 1, d
        assert d["tile_k"][-1] % 8 == 0  # whole vectors along the output channels
        # enough independent accumulators to keep both FMA pipes busy (the analytic model's rule)
        pixels = d["tile_n"][-1] * d["tile_p"][-1] * d["tile_q"][-1]
        assert pixels * d["tile_k"][-1] // 8 >= 4, d
        # the unroll depth unrolls the tile's pixel loops, not the reduction loop around them; where no depth
        # stays under that loop's steps, the smallest non-zero one: the tile is always unrolled
        inner = next(d[k][-1] for k in ("tile_c", "tile_s", "tile_r") if d[k][-1] > 1)
        depths = [v for v in next(k for k in space.knobs if k.name == "unroll").values if v]
        assert d["unroll"] < pixels * inner or d["unroll"] == min(depths), d
        assert d["unroll"] > 0, d


@pytest.mark.tvm
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_tiles_within_the_rule_keep_their_accumulators_in_registers():
    """The rule's evidence, in the assembly for AVX2 (znver3): a tile the rule refuses stores ymm registers
    to the stack throughout the kernel (6 or more stores); the constructed ones (within it) at most 3. Since the
    analytic model asks for 8 accumulators (a CPU FMA pipe's latency), Roller's top tile here is 2 x 2 pixels x 2
    vectors (need 11 of 16), which LLVM compiles with 3 stores, where its 2 x 4 had 1 (6% slower alone, 1 thread;
    docs/decisions/analytic-model.md)."""
    import re

    from tiletune.schedules import build

    target = {"kind": "llvm", "mcpu": "znver3", "num-cores": 1}
    wl = parse("conv2d:N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=1,pad=1,layout=NHWC")
    space = make_space(wl, None, target)
    rule, space.constraint = space.constraint, None  # build the refused tile too

    def spills(config) -> int:
        asm = build(wl, space, config, target).mod.inspect_source("s")
        return len(re.findall(r"vmov\w+\s+%ymm\d+, -?\d*\(%rsp\)", asm))

    refused = space.from_dict({**space.to_dict(with_tile(space, q3=7, k3=16)), "tile_c": [1, 16], "unroll": 16})
    assert rule.need(refused) == 17 and spills(refused) >= 6
    space.constraint = rule
    for c in constructions("roller", space, workload=wl, target=target, k=2):
        assert spills(c) <= 3, space.to_dict(c)


@pytest.mark.tvm
def test_constructed_nhwc_kernels_build_and_match_numpy():
    import tvm

    from tiletune.schedules import build
    from tiletune.target import host_target

    target = host_target()
    wl = parse("conv2d:N=1,C=8,H=9,W=10,K=32,R=3,S=3,stride=1,pad=1,layout=NHWC")
    space = make_space(wl, None, target)
    x, w = wl.make_inputs(seed=3)
    want = wl.reference(x, w)
    configs = constructions("roller", space, workload=wl, target=target, k=2)
    assert configs
    for config in configs:
        lib = build(wl, space, config, target).mod
        out = tvm.runtime.tensor(np.zeros(wl.output_shape(), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=str(space.to_dict(config)))


def _te_primfunc(kind: str):
    """A fused kernel as Relax's NHWC model path produces it, built from TE: conv2d_nhwc + bias + ReLU, a
    depthwise NHWC convolution, or matmul + bias."""
    from tvm import te, topi

    from tiletune.workloads.primfunc import PrimFuncWorkload

    x = te.placeholder((1, 9, 9, 16), name="x")
    if kind == "conv":
        w, b = te.placeholder((3, 3, 16, 24), name="w"), te.placeholder((24,), name="b")
        out = topi.nn.relu(topi.add(topi.nn.conv2d_nhwc(x, w, 1, 1, 1), b))
        args = [x, w, b, out]
    elif kind == "depthwise":
        w = te.placeholder((3, 3, 16, 1), name="w")
        out = topi.nn.depthwise_conv2d_nhwc(x, w, 1, 1, 1)
        args = [x, w, out]
    else:
        a, w, b = te.placeholder((12, 20), name="a"), te.placeholder((20, 24), name="w"), te.placeholder((24,), name="b")
        out = topi.add(topi.matmul(a, w), b)
        args = [a, w, b, out]
    return PrimFuncWorkload.from_prim_func(te.create_prim_func(args), f"fused_{kind}")


@pytest.mark.tvm
def test_fused_outer_product_kernels_carry_the_rule_and_others_do_not():
    from tiletune.schedules.cpu import outer_product_anchor

    conv, dw, mm = (_te_primfunc(k) for k in ("conv", "depthwise", "matmul"))
    assert outer_product_anchor(conv) and outer_product_anchor(mm) and not outer_product_anchor(dw)
    space = make_space(conv, None, AVX2)
    rule = space.constraint
    assert isinstance(rule, RegisterTile) and (rule.registers, rule.lanes) == (16, 8)
    # the vectorized axis (output channels, the last spatial axis) is the rule's channel axis
    assert space.knobs[rule.spatial[-1]].name == "tile_ff"
    d = space.to_dict(space.untiled())
    d["tile_xx"], d["tile_ff"] = [1, 1, 1, 9], [1, 1, 1, 24]  # 9 pixels x 3 vectors: 27 + 3 + 1 registers
    with pytest.raises(InvalidConfig, match="register tile needs 31 vector registers"):
        check(conv, space, space.from_dict(d))
    d["tile_xx"], d["tile_ff"] = [3, 1, 1, 3], [1, 1, 1, 24]  # 3 x 3: 9 + 3 + 1 = 13 <= 15
    check(conv, space, space.from_dict(d))
    assert isinstance(make_space(mm, None, AVX512).constraint, RegisterTile)
    assert make_space(dw, None, AVX2).constraint is None
    # sampling a fused conv's space proposes only fitting tiles
    assert all(rule(space, c) for c in space.sample_unique(np.random.default_rng(0), 100))


@pytest.mark.tvm
@pytest.mark.parametrize("n3", [48, 24, 32, 12, 40, 20])
def test_vectors_of_odd_lengths_are_split_into_register_sized_pieces(n3):
    """A vectorized tile longer than a register whose length is not a power of two runs as an unrolled loop of
    power-of-two vectors (48 -> 3 x 16, 24 -> 3 x 8, 40 -> 5 x 8 on AVX-512); powers of two, tiles within a
    register and those whose pieces would be narrower than half a register (20 -> 5 x 4) keep one vector loop.
    Either way the kernel computes the GEMM."""
    import re

    import tvm

    from tiletune.schedules import build
    from tiletune.schedules.cpu import schedule

    target = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 1}
    wl = parse("gemm:M=8,N=480,K=16")
    space = make_space(wl, None, target)
    space.constraint = None
    d = space.to_dict(space.untiled())
    d.update(tile_m=[2, 1, 1, 4], tile_n=[480 // n3, 1, 1, n3], tile_k=[4, 4], pack=0)
    config = space.from_dict(d)
    vectors = [int(v) for v in re.findall(r"T\.vectorized\((\d+)\)", schedule(wl, space, config, target).mod.script())]
    want = {48: 16, 24: 8, 32: 32, 12: 12, 40: 8, 20: 20}[n3]
    assert vectors and set(vectors) == {want}, vectors

    host = host_target()
    if vector_file(host)[1] < 16:
        return  # the numbers below need the AVX-512 target to run here
    a, b = wl.make_inputs(seed=1)
    lib = build(wl, space, config, target).mod
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_a_blocked_convolution_counts_its_channel_block_as_weight_vectors(tmp_path):
    """NCHW16c (tiletune.model.passes.nchwc): the output-channel block axis ``o`` is read by the weight only, so its
    tile multiplies the weight vectors V, not the pixels P; the vectorized 16-channel block must be whole."""
    import tvm
    from tvm import te

    from tiletune.model.passes.nchwc import conv2d_nchwc
    from tiletune.workloads import PrimFuncWorkload

    data = te.placeholder((1, 4, 7, 7, 16), name="data")
    weight = te.placeholder((8, 4, 1, 1, 16, 16), name="weight")
    out = conv2d_nchwc(data, weight, (1, 1), (0, 0, 0, 0), (1, 1), None)
    wl = PrimFuncWorkload.from_prim_func(te.create_prim_func([data, weight, out]), name="blocked")
    target = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}  # 32 registers of 16 lanes
    space = make_space(wl, None, target)
    rule = space.constraint
    assert isinstance(rule, RegisterTile) and [space.knobs[i].axis for i in rule.channel] == ["o"]
    base = {"tile_b": [1, 1, 1, 1], "tile_y": [1, 1, 7, 1], "tile_x": [1, 1, 1, 7], "tile_k": [1, 1, 1, 16],
            "tile_rc": [4, 1], "tile_ry": [1, 1], "tile_rx": [1, 1], "tile_rb": [1, 16], "unroll": 0, "pack": 0}
    cfg = lambda **kw: space.from_dict({**base, **kw})  # noqa: E731
    # 7 pixels x 1 block: 7 accumulators + min(7, 1) + 1 = 9 registers; 7 x 4 blocks: 28 + 4 + 1 = 33 > 31
    assert rule.need(cfg(tile_o=[8, 1, 1, 1])) == 7 + 1 + 1
    assert rule.need(cfg(tile_o=[1, 1, 2, 4])) == 33 and not space.allows(cfg(tile_o=[1, 1, 2, 4]))
    assert space.allows(cfg(tile_o=[2, 1, 2, 2]))
    half = cfg(tile_o=[8, 1, 1, 1], tile_k=[1, 1, 2, 8])  # half a block per vector: refused, and says why
    assert not space.allows(half)
    with pytest.raises(InvalidConfig, match="channel block's innermost tile is 8, not the whole block of 16"):
        check(wl, space, half)
