"""bf16 kernels on x86's matrix instructions (tiletune.schedules.x86_bf16) and the CPU feature checks
(tiletune.cpu_features): the AVX512-BF16 path builds and matches numpy where this CPU has it; the AMX path compiles
to tile instructions on any machine and runs only where the CPU has AMX, refused in one line elsewhere."""
from __future__ import annotations

import numpy as np
import pytest

from tiletune import cpu_features
from tiletune.errors import TiletuneError
from tiletune.measure.local import WrongAnswer, check_output
from tiletune.model.build import RTOL, Chosen, ModelRunner, check, compile_module, scheduled_module
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.target import check_dtype_for
from tiletune.schedules import build, make_space, starts, x86_bf16
from tiletune.target import parse_target
from tiletune.workloads.base import parse

ZEN4 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
SPR = {"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}
HASWELL = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}

needs_avx512_bf16 = pytest.mark.skipif("avx512_bf16" not in cpu_features.machine_features(),
                                       reason="this CPU has no avx512_bf16")


def fake_cpu(monkeypatch, name: str, flags: str) -> None:
    monkeypatch.setattr(cpu_features, "cpuinfo", lambda: {"model name": name, "flags": flags})


# ---- cpu_features --------------------------------------------------------------------------------------

def test_target_features_from_mcpu_and_mattr():
    pytest.importorskip("tvm")
    spr = cpu_features.target_features(SPR)
    assert {"amx_tile", "amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f"} <= spr
    zen4 = cpu_features.target_features(ZEN4)
    assert "avx512_bf16" in zen4 and not zen4 & {"amx_tile", "amx_bf16", "amx_int8"}
    assert not cpu_features.target_features(HASWELL) & {"avx512f", "avx512_bf16"}
    assert cpu_features.target_features({**ZEN4, "mattr": ["+amx-bf16", "-avx512bf16"]}) >= {"amx_bf16"}
    assert "avx512_bf16" not in cpu_features.target_features({**ZEN4, "mattr": ["-avx512bf16"]})
    assert cpu_features.target_features({"kind": "cuda", "arch": "sm_90"}) == frozenset()
    assert cpu_features.llvm_attrs("amx_bf16", "avx512_bf16") == ["+amx-bf16", "+avx512bf16"]


def test_require_names_the_cpu_and_the_flag_in_one_line(monkeypatch):
    fake_cpu(monkeypatch, "Test Zen 3", "fpu avx2 fma")
    assert cpu_features.machine_features() == frozenset()
    with pytest.raises(TiletuneError) as e:
        cpu_features.require("avx512_bf16", "the bf16 kernel")
    msg = str(e.value)
    assert "\n" not in msg and "Test Zen 3" in msg and "avx512_bf16" in msg and "the bf16 kernel" in msg
    with pytest.raises(TiletuneError, match="amx_tile"):
        cpu_features.request_amx()
    fake_cpu(monkeypatch, "Test Xeon", "avx512f avx512_bf16 amx_tile amx_bf16")
    cpu_features.require("avx512_bf16", "x")  # the machine has it, no target given
    with pytest.raises(TiletuneError, match="mcpu=haswell.*\\+avx512bf16"):
        cpu_features.require("avx512_bf16", "x", HASWELL)
    with pytest.raises(TiletuneError, match="unknown CPU feature"):
        cpu_features.require("avx9000", "x")


def test_amx_permission_is_refused_or_granted():
    if "amx_tile" in cpu_features.machine_features():
        cpu_features.request_amx()  # Linux >= 5.16 grants it
        cpu_features.request_amx()  # once per process
    else:
        with pytest.raises(TiletuneError, match=r"has no amx_tile flag") as e:
            cpu_features.request_amx()
        assert "\n" not in str(e.value)


# ---- which path ---------------------------------------------------------------------------------------

def test_path_follows_the_target_and_the_shape():
    pytest.importorskip("tvm")
    gemm = parse("gemm:M=32,N=32,K=64,dtype=bfloat16")
    assert x86_bf16.path(gemm, ZEN4) == "avx512"
    assert x86_bf16.path(gemm, SPR) == "amx"
    assert x86_bf16.path(gemm, HASWELL) is None
    assert "neither avx512bf16 nor amx-bf16" in x86_bf16.refusal(gemm, HASWELL)
    odd = parse("gemm:M=32,N=20,K=64,dtype=bfloat16")  # 20 columns: no whole 16-lane vector
    assert x86_bf16.path(odd, ZEN4) is None and "multiple of 16" in x86_bf16.refusal(odd, ZEN4)
    assert x86_bf16.path(parse("gemm:M=32,N=32,K=64"), ZEN4) is None  # fp32 keeps the fp32 template
    assert x86_bf16.path(parse("gemv:M=32,K=64,dtype=bfloat16"), ZEN4) is None  # no outer product
    # AMX needs whole tiles (m % 16, k % 32); otherwise AVX512-BF16 on the same target
    assert x86_bf16.path(parse("gemm:M=24,N=32,K=64,dtype=bfloat16"), SPR) == "avx512"
    conv = parse("conv2d:C=8,H=6,W=6,K=16,R=3,S=3,pad=1,layout=NHWC,dtype=bfloat16")
    assert x86_bf16.operands(conv) == x86_bf16.Operands("k", "c", "weight", ("r", "s", "c", "k"), ("data",))
    assert x86_bf16.path(conv, SPR) == "avx512"  # a convolution is no GEMM for the AMX template


def test_space_in_units_of_the_instruction():
    pytest.importorskip("tvm")

    space = make_space(parse("gemm:M=32,N=64,K=128,dtype=bfloat16"), target=ZEN4)
    assert {k.name: getattr(k, "extent", None) for k in space.knobs} == {
        "tile_m": 32, "tile_n16": 4, "tile_k2": 64, "unroll": None}
    big = space.from_dict({"tile_m": [1, 1, 1, 32], "tile_n16": [1, 1, 1, 4], "tile_k2": [64, 1], "unroll": 0})
    ok = space.from_dict({"tile_m": [2, 2, 2, 4], "tile_n16": [1, 1, 1, 4], "tile_k2": [64, 1], "unroll": 0})
    assert not space.constraint(space, big) and "register tile needs 133" in space.constraint.why(space, big)
    assert space.constraint(space, ok)
    amx = make_space(parse("gemm:M=32,N=64,K=128,dtype=bfloat16"), target=SPR)
    assert [k.name for k in amx.knobs] == ["tile_m16", "tile_n16", "tile_k32", "unroll"]
    over = amx.from_dict({"tile_m16": [1, 1, 1, 2], "tile_n16": [1, 1, 1, 4], "tile_k32": [4, 1], "unroll": 0})
    assert not amx.constraint(amx, over) and "14 tile registers" in amx.constraint.why(amx, over)


def test_template_starts_are_register_tiles_within_the_rule():
    pytest.importorskip("tvm")
    wl = parse("gemm:M=128,N=768,K=768,dtype=bfloat16")
    space = make_space(wl, target=ZEN4)
    first = starts(wl, space, ZEN4)
    assert len(first) >= 3 and all(space.constraint(space, c) for c in first)
    d = space.to_dict(first[0])
    assert d["tile_m"][-1] * d["tile_n16"][-1] >= 16  # a register tile of at least 16 accumulators
    assert d["tile_k2"][-1] * d["tile_n16"][-1] * 64 <= x86_bf16.PANEL_BYTES
    amx = make_space(wl, target=SPR)
    assert all(amx.constraint(amx, c) for c in starts(wl, amx, SPR))
    assert starts(parse("gemm:M=128,N=768,K=768"), make_space(parse("gemm:M=128,N=768,K=768"), target=ZEN4),
                  ZEN4) == []  # fp32: the constructions' business


def test_pair_interleaved_layout():
    b = np.arange(6 * 32).reshape(6, 32)  # [k, n]
    packed = x86_bf16.PairPanels(vec=1, pair=0, first_red=0).pack(b)
    assert packed.shape == (2, 3, 16, 2)
    k, n = np.indices(b.shape)
    assert (packed[n // 16, k // 2, n % 16, k % 2] == b).all()
    w = np.arange(3 * 3 * 4 * 16).reshape(3, 3, 4, 16)  # a convolution's [r, s, c, k]
    pw = x86_bf16.PairPanels(vec=3, pair=2, first_red=0).pack(w)
    assert pw.shape == (1, 3, 3, 2, 16, 2) and pw[0, 1, 2, 1, 5, 1] == w[1, 2, 3, 5]


# ---- real builds ----------------------------------------------------------------------------------------

def _run(wl, space, config, target):
    import tvm

    ex = build(wl, space, config, target)
    ins = wl.make_inputs(seed=3)
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype))
    ex.mod["main"](*[tvm.runtime.tensor(x) for x in ins], out)
    check_output(wl, out.numpy(), wl.reference(*ins))
    return ex.mod.inspect_source("asm")


@needs_avx512_bf16
@pytest.mark.parametrize("spec", [
    "gemm:M=24,N=32,K=40,dtype=bfloat16",
    "batch_matmul:B=2,M=8,N=16,K=12,dtype=bfloat16,out_dtype=float32",
    "conv2d:C=8,H=6,W=6,K=16,R=3,S=3,pad=1,layout=NHWC,dtype=bfloat16",
    "conv2d:C=4,H=5,W=5,K=32,R=1,S=1,stride=2,layout=NHWC,dtype=bfloat16,out_dtype=float32",
])
def test_avx512_bf16_builds_and_matches_numpy(spec):
    pytest.importorskip("tvm")

    wl = parse(spec)
    space = make_space(wl, target=ZEN4)
    rng = np.random.default_rng(0)
    for config in [space.sample(rng), space.sample(rng)] + starts(wl, space, ZEN4)[:1]:
        asm = _run(wl, space, config, ZEN4)
        assert "vdpbf16ps" in asm


def test_a_wrong_kernel_is_caught_at_bf16_tolerance():
    """The check the tests rely on fails for an output that ignores half of the reduction."""

    wl = parse("gemm:M=16,N=16,K=64,dtype=bfloat16")
    a, b = wl.make_inputs(seed=3)
    half = wl.reference(a[:, :32], b[:32])
    with pytest.raises(WrongAnswer):
        check_output(wl, half, wl.reference(a, b))


def test_amx_compiles_to_tile_instructions_and_runs_only_with_amx():
    pytest.importorskip("tvm")
    import tvm

    wl = parse("gemm:M=32,N=32,K=64,dtype=bfloat16,out_dtype=float32")
    space = make_space(wl, target=SPR)
    config = space.from_dict({"tile_m16": [1, 1, 1, 2], "tile_n16": [1, 1, 1, 2], "tile_k32": [1, 2], "unroll": 0})
    asm = tvm.compile(x86_bf16.schedule(wl, space, config, SPR).mod, target=tvm.target.Target(SPR)).mod \
        .inspect_source("asm")
    assert "tdpbf16ps" in asm and asm.count("ldtilecfg") == 1
    if {"amx_bf16", "amx_tile"} <= cpu_features.machine_features():
        assert "tdpbf16ps" in _run(wl, space, config, SPR)
    else:
        with pytest.raises(TiletuneError, match="has no amx_bf16 flag") as e:
            build(wl, space, config, SPR)
        assert "\n" not in str(e.value)


def test_avx512_kernel_is_refused_on_a_cpu_without_it(monkeypatch):
    pytest.importorskip("tvm")

    wl = parse("gemm:M=16,N=16,K=16,dtype=bfloat16")
    space = make_space(wl, target=ZEN4)
    fake_cpu(monkeypatch, "Test Zen 3", "avx2 fma")
    with pytest.raises(TiletuneError, match="Test Zen 3.*no avx512_bf16 flag"):
        build(wl, space, space.sample(np.random.default_rng(0)), ZEN4)


# ---- a model in bf16 --------------------------------------------------------------------------------------

def test_model_dtype_bfloat16_needs_the_instruction_on_a_cpu():
    pytest.importorskip("tvm")
    check_dtype_for("bfloat16", ZEN4)
    check_dtype_for("bfloat16", SPR)
    with pytest.raises(TiletuneError, match="needs avx512bf16 or amx-bf16.*mcpu=haswell") as e:
        check_dtype_for("bfloat16", HASWELL)
    assert "\n" not in str(e.value)
    with pytest.raises(TiletuneError, match="float16 is for CUDA targets"):
        check_dtype_for("float16", ZEN4)


@needs_avx512_bf16
def test_bf16_model_built_with_the_bf16_template_matches_torch_fp32():
    """The model 'tiny' cast to bf16 (fp32 accumulation, norms in fp32) on this CPU: its convolutions and matmuls
    scheduled by the AVX512-BF16 template (one sampled configuration each), the rest by the default schedules; the
    whole model within bf16's tolerance (``RTOL``) of PyTorch in fp32."""
    pytest.importorskip("torch")

    host = parse_target("llvm")
    src = load("tiny")
    tasks = model_tasks(src, host, "NHWC", "bfloat16")
    rng = np.random.default_rng(0)
    chosen = {}
    for k in tasks.kernels:
        if k.workload is not None and x86_bf16.path(k.workload, host) == "avx512":
            space = make_space(k.workload, target=host)
            chosen[k.hash] = Chosen(k, space.sample(rng), space, 0.0, 0.0, "sampled")
    assert len(chosen) >= 4  # two convolutions and two matmuls of 'tiny' at least
    mod, how = scheduled_module(tasks, chosen)
    assert list(how.values()).count("sampled") >= 4
    err = check(src, ModelRunner(compile_module(mod, host)), dtype="bfloat16")
    assert 0 < err <= RTOL["bfloat16"]
