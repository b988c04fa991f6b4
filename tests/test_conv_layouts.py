"""conv2d and depthwise_conv2d in NHWC (layout=NHWC): spec, reference, access model, real builds, vendor."""
import numpy as np
import pytest

from tiletune.bench import vendor
from tiletune.errors import TiletuneError
from tiletune.measure import MeasureSettings
from tiletune.schedules import make_space
from tiletune.schedules.cpu import packable_inputs
from tiletune.workloads import parse
from tiletune.workloads.access import tensor_accesses

CONV = "conv2d:N=2,C=5,H=9,W=11,K=7,R=3,S=3,stride=2,pad=1"
DW = "depthwise_conv2d:N=1,C=6,H=9,W=11,R=3,S=3,stride=2,pad=1"


def direct_nhwc(x, w, stride, pad, dil=1, depthwise=False):
    """Direct NHWC convolution in numpy (weight HWIO, or HWC for depthwise), written independently of the
    workloads' NCHW reference."""
    N, H, W, C = x.shape
    R, S = w.shape[:2]
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    P = (H + 2 * pad - dil * (R - 1) - 1) // stride + 1
    Q = (W + 2 * pad - dil * (S - 1) - 1) // stride + 1
    out = np.zeros((N, P, Q, C if depthwise else w.shape[3]))
    for r in range(R):
        for s in range(S):
            patch = xp[:, r * dil: r * dil + stride * (P - 1) + 1: stride, s * dil: s * dil + stride * (Q - 1) + 1: stride]
            out += patch * w[r, s] if depthwise else patch @ w[r, s]
    return out


def test_layout_in_the_spec_and_the_key():
    wl = parse(CONV + ",layout=nhwc")
    assert wl.layout == "NHWC" and wl.key == CONV + ",dilation=1,layout=NHWC"
    assert parse(wl.key) == wl
    # NCHW is the default and keeps the key it always had, given or not
    assert parse(CONV).key == parse(CONV + ",layout=NCHW").key == CONV + ",dilation=1"
    assert parse(CONV).layout == "NCHW"
    assert wl.input_shapes() == [(2, 9, 11, 5), (3, 3, 5, 7)] and wl.output_shape() == (2, 5, 6, 7)
    dw = parse(DW + ",layout=NHWC")
    assert dw.input_shapes() == [(1, 9, 11, 6), (3, 3, 6)] and dw.output_shape() == (1, 5, 6, 6)
    assert dw.buffer_shapes()["padded input"] == (1, 11, 13, 6)


@pytest.mark.parametrize("spec,match", [
    (CONV + ",layout=NCHWc", r"conv2d: unknown layout 'NCHWc'; accepted: NCHW, NHWC"),
    (DW + ",layout=", r"bad item"),
    ("gemm:M=4,N=4,K=4,layout=NHWC", r"gemm has no layout parameter"),
    (CONV + ",layout=NHWC,layout=NCHW", r"layout given twice"),
])
def test_bad_layouts_are_one_line_errors(spec, match):
    with pytest.raises(TiletuneError, match=match) as e:
        parse(spec)
    assert "\n" not in str(e.value)


def test_nhwc_axes_put_the_channels_innermost_and_the_weight_is_packable():
    wl = parse(CONV + ",layout=NHWC")
    assert [(a.name, a.kind) for a in wl.axes_no_tvm()] == [
        ("n", "S"), ("p", "S"), ("q", "S"), ("k", "S"), ("r", "R"), ("s", "R"), ("c", "R")]
    assert packable_inputs(wl) == ["weight"] and packable_inputs(parse(CONV)) == []
    dw = parse(DW + ",layout=NHWC")
    assert [a.name for a in dw.axes_no_tvm()] == ["n", "p", "q", "c", "r", "s"]
    assert packable_inputs(dw) == ["weight"]
    # the NHWC template's knobs: pack (the weight) and pad_buffer (padding written to a buffer first); NCHW
    # spaces are what they were
    assert [k.name for k in make_space(wl).knobs][-3:] == ["unroll", "pack", "pad_buffer"]
    assert [k.name for k in make_space(parse(CONV)).knobs][-1] == "unroll"
    assert "pad_buffer" not in [k.name for k in make_space(parse(CONV.replace("pad=1", "pad=0") + ",layout=NHWC")).knobs]


def test_nhwc_access_model():
    acc = {t.name: [d.terms for d in t.dims] for t in tensor_accesses(parse(CONV + ",layout=NHWC"))}
    assert acc == {"data": [(("n", 1),), (("p", 2), ("r", 1)), (("q", 2), ("s", 1)), (("c", 1),)],
                   "weight": [(("r", 1),), (("s", 1),), (("c", 1),), (("k", 1),)],
                   "conv": [(("n", 1),), (("p", 1),), (("q", 1),), (("k", 1),)]}
    dw = {t.name: t for t in tensor_accesses(parse(DW + ",layout=NHWC"))}
    assert [d.terms for d in dw["weight"].dims] == [(("r", 1),), (("s", 1),), (("c", 1),)]
    assert [d.size for d in dw["data"].dims] == [1, 11, 13, 6]
    # a tile of 2 output rows, 3 columns and 4 channels with the whole window reads a 5x7x4 input patch
    tiles = {"p": 2, "q": 3, "c": 4, "r": 3, "s": 3}
    assert dw["data"].tile_elements(tiles) == 5 * 7 * 4


@pytest.mark.parametrize("spec", [CONV, CONV.replace("pad=1", "pad=2") + ",dilation=2", DW, DW.replace("stride=2", "stride=1")])
def test_nhwc_reference_matches_a_direct_convolution(spec):
    wl = parse(spec + ",layout=NHWC")
    x, w = wl.make_inputs(seed=1)
    want = direct_nhwc(x, w, wl.stride, wl.pad, wl.dilation, depthwise=wl.op == "depthwise_conv2d")
    np.testing.assert_allclose(wl.reference(x, w), want, rtol=1e-5, atol=1e-5)


@pytest.mark.tvm
@pytest.mark.parametrize("spec", [CONV, DW])
def test_nhwc_kernels_build_and_match_numpy(spec):
    import tvm

    from tiletune.schedules import build, schedule
    from tiletune.target import host_target

    wl = parse(spec + ",layout=NHWC")
    space = make_space(wl)
    x, w = wl.make_inputs(seed=2)
    want = direct_nhwc(x, w, wl.stride, wl.pad, depthwise=wl.op == "depthwise_conv2d")
    last = [k.name for k in space.knobs if getattr(k, "kind", "") == "S"][-1]
    assert last == ("tile_k" if wl.op == "conv2d" else "tile_c")
    chans = wl.output_shape()[-1]
    configs = [space.untiled(),
               # channels split over all four levels, the innermost vectorized; the weight packed
               space.from_dict({**space.to_dict(space.untiled()), last: (1, 1, 1, chans), "pack": 1, "unroll": 16,
                                "pad_buffer": 1}),
               *space.sample_unique(np.random.default_rng(0), 3)]
    for config in configs:
        sch = schedule(wl, space, config, host_target())
        if space.to_dict(config)[last][-1] > 1:  # the vectorized loop runs over the channels' inner tile
            assert "T.vectorized(" + str(space.to_dict(config)[last][-1]) + ")" in sch.mod.script()
        lib = build(wl, space, config, host_target()).mod
        out = tvm.runtime.tensor(np.zeros(wl.output_shape(), "float32"))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=str(space.to_dict(config)))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spec", [CONV, DW])
def test_vendor_times_both_torch_memory_formats(spec, layout):
    pytest.importorskip("torch")
    wl = parse(f"{spec},layout={layout}")
    r = vendor.vendor(wl, MeasureSettings(repeat=1, min_repeat_ms=0))
    assert r.ok, (r.error, r.message)
    formats = r.extra["formats"]
    assert set(formats) == {"contiguous", "channels_last"} and all(v > 0 for v in formats.values())
    assert r.extra["format"] == min(formats, key=formats.get)
    assert r.median_s == formats[r.extra["format"]] and r.extra["format"] in r.label


def test_vendor_without_torch_computes_nhwc_with_numpy(monkeypatch):
    monkeypatch.setattr(vendor, "optional_torch", lambda: None)
    for spec in (CONV, DW):
        r = vendor.vendor(spec + ",layout=NHWC", MeasureSettings(repeat=1, min_repeat_ms=0))
        assert r.ok and "torch not installed" in r.label and not r.extra, (spec, r.error, r.message)


@pytest.mark.parametrize("name", ["gensor", "roller", "evo-af", "xgb"])
def test_model_based_strategies_run_on_nhwc(name):
    """The strategies that read the access model (gensor, roller, the analytical features) on NHWC spaces."""
    from tiletune.hardware import HardwareSpec, MemoryLevel
    from tiletune.measure import FunctionMeasurer
    from tiletune.space import Space
    from tiletune.strategies import TuneContext, create
    from tiletune.tune import tune

    g = 2.5
    hw = HardwareSpec(
        name="test-avx512", kind="cpu", cores=2, simd_lanes=16, fma_units=2, freq_ghz=g, peak_gflops=2 * 16 * 2 * 2 * g,
        memory=(MemoryLevel("register", 2048, 96 * g, 1 / g, 64), MemoryLevel("L1", 32768, 64 * g, 4 / g, 64),
                MemoryLevel("L2", 1 << 20, 32 * g, 14 / g, 64), MemoryLevel("DRAM", None, 20.0, 90.0, 64, True)),
        vector_registers=32, bank_count=8)
    for spec in ("conv2d:N=1,C=32,H=14,W=14,K=64,R=3,S=3,pad=1,layout=NHWC",
                 "depthwise_conv2d:N=1,C=64,H=14,W=14,R=3,S=3,stride=2,pad=1,layout=NHWC"):
        wl = parse(spec)
        space = Space.from_axes(wl.axes_no_tvm(), choices={"unroll": (0, 16), "pack": (0, 1)})
        m = FunctionMeasurer(lambda c: 1e-3 * (1 + abs(space.to_dict(c)[space.knobs[3].name][-1] - 16)))
        strat = create(name, space, seed=0, context=TuneContext(workload=wl, hardware=hw, target={"kind": "llvm"}),
                       options={"feature": "analytical"} if name == "xgb" else None)
        r = tune(space=space, strategy=strat, measurer=m, workload=wl.key, flops=wl.flops, trials=8, batch_size=4)
        strat.close()
        assert r.best is not None and r.best.ok and len(set(m.calls)) == len(m.calls) <= 8
