"""Whole models for a CUDA target without a GPU (issue 40): every kernel lowers for sm_90 (fused tasks on the CUDA
templates, the rest on dlight's rules), `tiletune model build --target cuda:sm_90` exports a library here in
float32 and float16, nvcc compiles the tasks' kernels, and --dtype casts the model within its tolerance (checked
on the CPU, where the same cast module runs). The GPU runs skip where there is no GPU."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from tiletune.api import load_model
from tiletune.cli import main
from tiletune.errors import TiletuneError
from tiletune.model.build import (RTOL, ModelRunner, check, compare, compile_module, constructed_configs,
                                  scheduled_module)
from tiletune.model.kernels.gpu_default import RULES, has_gpu
from tiletune.model.passes.pipeline import prepare
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.schedules.cuda import cuda_source
from tiletune.target import parse_target

from .test_cuda_mma import _cuda_bin

CUDA = parse_target("cuda:sm_90")
# the built-in tiny model (conv, attention, layer norm, pooling), a CNN with a DAG epilogue (SiLU), a transformer MLP
MODELS = ["tiny", "family:conv_silu", "family:gelu_mlp"]


@pytest.fixture(scope="module")
def sources():
    return {m: load(m) for m in MODELS}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("model", MODELS)
def test_every_kernel_lowers_for_sm90(model, dtype, sources):
    """Tasks get the CUDA templates (tensor cores for the half GEMMs), the rest a dlight rule; the whole module
    compiles for sm_90, each kernel's CUDA source is there."""
    tasks = model_tasks(sources[model], CUDA, "NHWC", dtype)
    assert tasks.tasks and tasks.dtype == dtype
    for k in tasks.kernels:
        assert k.tunable or k.rule in RULES, (k.name, k.reason)
    chosen = constructed_configs(tasks, "gensor", {})
    assert len(chosen) == len(tasks.tasks)
    mod, how = scheduled_module(tasks, chosen)
    assert sum(h.startswith("constructed") for h in how.values()) == sum(len(k.names) for k in tasks.tasks)
    src = cuda_source(compile_module(mod, CUDA))
    kernels = set(re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", src))
    for k in tasks.tasks:  # every task is a kernel of its own (reshapes may become views: no kernel)
        assert any(f"{n}_kernel" in kernels for n in k.names), (k.name, sorted(kernels))
    if dtype == "float16" and model != "family:gelu_mlp":
        assert "mma.sync" in src  # the convolutions' and attention's GEMMs on tensor cores
    if dtype == "float32":
        assert "half" not in src.split("extern \"C\"", 1)[-1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_nvcc_compiles_the_tasks_kernels(sources, tmp_path):
    """The tuned (constructed) kernels of a float16 model compile with nvcc for sm_90: no ptxas error, no spill."""
    tasks = model_tasks(sources["tiny"], CUDA, "NHWC", "float16")
    chosen = constructed_configs(tasks, "gensor", {})
    mod, _ = scheduled_module(tasks, chosen)
    cu = tmp_path / "model.cu"
    cu.write_text(cuda_source(compile_module(mod, CUDA)))
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "model.cubin"),
                        str(cu)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    objdump, disasm = _cuda_bin("cuobjdump"), _cuda_bin("nvdisasm")
    if objdump and disasm:
        env = {**os.environ, "PATH": f"{os.path.dirname(disasm)}{os.pathsep}{os.environ.get('PATH', '')}"}
        sass = subprocess.run([objdump, "-sass", str(tmp_path / "model.cubin")], capture_output=True, text=True,
                              env=env, timeout=120).stdout
        assert re.search(r"\bHMMA\b", sass)
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", r.stderr)]
    assert spills and max(spills) == 0


MLP = """
import torch
from torch import nn


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).eval(), (torch.randn(1, 32, 64),)
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_nvcc_compiles_a_tensor_core_kernel_with_a_fused_gelu(tmp_path):
    """A float16 matmul whose epilogue (bias, GELU's erf) computes in float32 on the tensor-core template: found on
    an H200, an 8-lane float32 constant that TVM prints as make_ulonglong4 of 8 floats, which does not compile."""
    (tmp_path / "mlp.py").write_text(MLP)
    tasks = model_tasks(load(f"{tmp_path / 'mlp.py'}:mlp"), CUDA, "NHWC", "float16")
    assert any("gelu" in t.name for t in tasks.tasks)
    mod, how = scheduled_module(tasks, constructed_configs(tasks, "gensor", {}))
    src = cuda_source(compile_module(mod, CUDA))
    assert "mma.sync" in src
    cu = tmp_path / "mlp.cu"
    cu.write_text(src)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / "mlp.cubin"), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_model_build_exports_a_cuda_library_without_a_gpu(dtype, tmp_path, capsys):
    out = tmp_path / "tiny.so"
    assert main(["model", "build", "tiny", "--target", "cuda:sm_90", "--dtype", dtype, "--construct", "gensor",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    meta = json.loads((tmp_path / "tiny.so.json").read_text())
    assert out.stat().st_size > 0 and meta["target"]["kind"] == "cuda" and meta["dtype"] == dtype
    assert meta["constructed"] == meta["tasks"] and meta["tuned"] == 0
    assert any(v.startswith("default (dlight ") for v in meta["kernels"].values())
    if not has_gpu():
        assert "waits for a GPU" in text and meta["check_error"] is None
        with pytest.raises(TiletuneError, match="built for a CUDA GPU"):
            load_model(str(out))


def test_cuda_graph_builds_capture_the_inference_and_refuse_a_cpu(sources, tmp_path, capsys):
    """--cuda-graph: the compiled VM captures each inference's kernels into a CUDA graph (TVM's RewriteCUDAGraph)
    and the library says so; without it none; on a CPU target one line."""
    tasks = model_tasks(sources["tiny"], CUDA, "NHWC", "float16")
    mod, _ = scheduled_module(tasks, constructed_configs(tasks, "roller", {}))
    assert "cuda_graph.run_or_capture" in compile_module(mod, CUDA, cuda_graph=True).as_text()
    assert "cuda_graph" not in compile_module(mod, CUDA).as_text()
    out = tmp_path / "tiny.so"
    assert main(["model", "build", "tiny", "--target", "cuda:sm_90", "--dtype", "float16", "--construct", "gensor",
                 "--seed", "3", "--cuda-graph", "-o", str(out)]) == 0
    meta = json.loads((tmp_path / "tiny.so.json").read_text())
    assert meta["cuda_graph"] is True and meta["seed"] == 3
    capsys.readouterr()
    assert main(["model", "build", "tiny", "--cuda-graph", "-o", str(tmp_path / "cpu.so")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cuda-graph is for a CUDA target" in err[0]


@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_on_a_gpu_a_cuda_graph_replays_new_inputs_right(tmp_path):
    """The graph is captured at the first call; later calls replay it on other inputs and still match torch."""
    out = tmp_path / "tiny.so"
    assert main(["model", "build", "tiny", "--target", "cuda:sm_90", "--dtype", "float16", "--construct", "roller",
                 "--cuda-graph", "-o", str(out)]) == 0
    model, src = load_model(str(out)), load("tiny")
    for seed in (3, 4, 5):
        x = src.random_inputs(seed)
        assert compare(model(*x), src.reference(x)) <= RTOL["float16"], seed


def test_model_tasks_names_the_dlight_rule_and_dtype(capsys):
    assert main(["model", "tasks", "tiny", "--target", "cuda:sm_90", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "cuda sm_90, bfloat16" in out
    assert "dlight GeneralReduction" in out and "dlight Fallback" in out


def test_model_tune_on_cuda_without_a_gpu_is_one_line(tmp_path, capsys):
    if has_gpu():
        pytest.skip("this machine has a GPU")
    assert main(["model", "tune", "tiny", "--target", "cuda:sm_90", "-n", "4", "-r", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "none was found" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.jsonl").exists()


def test_half_dtypes_are_for_cuda_targets_and_checked(capsys):
    assert main(["model", "tasks", "tiny", "--dtype", "float16"]) == 2
    assert "--dtype float16 is for CUDA targets" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["model", "tasks", "tiny", "--target", "cuda", "--dtype", "float64"])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cast_model_matches_float32_within_its_tolerance(dtype, sources):
    """The cast module (what the GPU build compiles) run on the CPU: within RTOL[dtype] of torch in float32, and
    not bit-identical to the float32 build (the cast happened)."""
    src = sources["family:conv_silu"]
    host = parse_target("llvm")
    runner = ModelRunner(compile_module(scheduled_module(model_tasks(src, host, "NHWC", dtype), {})[0], host))
    err = check(src, runner, dtype=dtype)
    assert 0 < err <= RTOL[dtype]
    x = src.random_inputs(1)
    assert compare(runner(*x), src.reference(x)) <= RTOL[dtype]


def test_cast_rewrites_clip_bounds_and_keeps_integer_inputs():
    """ReLU6 (clip with scalar bounds) and an int64 token input survive the cast; the weights become half."""
    src = load("family:embedding")
    tasks = model_tasks(src, CUDA, "NHWC", "float16")
    assert any(k.workload.dtype == "float16" for k in tasks.tasks)
    mod = prepare(load("family:activations"), "bfloat16").mod
    text = mod.script()
    assert "R.clip" not in text and "bfloat16" in text and 'dtype="float16"' not in text
    assert str(mod["main"].params[0].ty.dtype) == "float32"


@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_on_a_gpu_the_built_model_matches_torch(dtype, tmp_path):
    out = tmp_path / "tiny.so"
    assert main(["model", "build", "tiny", "--target", "cuda:sm_90", "--dtype", dtype, "--construct", "gensor",
                 "-o", str(out)]) == 0
    model = load_model(str(out))
    src = load("tiny")
    x = src.random_inputs(3)
    assert model.gpu and compare(model(*x), src.reference(x)) <= RTOL[dtype]
    assert isinstance(model(*x)[0], np.ndarray)
    import torch

    if torch.cuda.is_available():  # a tensor already on the GPU passes without a copy
        got = model(*[torch.from_numpy(a).cuda() for a in x])
        assert compare(got, src.reference(x)) <= RTOL[dtype]


def test_a_cuda_target_is_measured_on_this_machines_gpu(capsys):
    """Without --rpc a CUDA target is measured here: refused in one line where there is no GPU; with one, the
    warm workers build in parallel and the kernels run on the GPU, checked against the CPU reference."""
    wl = "gemm:M=64,N=64,K=64,dtype=float16,out_dtype=float32"
    if not has_gpu():
        assert main(["tune", wl, "--target", "cuda:sm_90", "-n", "2", "-q", "-o", "/dev/null"]) == 2
        assert "none was found" in capsys.readouterr().err
        return
    assert main(["tune", wl, "--target", "cuda:sm_90", "-n", "4", "-q", "-o", "/dev/null"]) == 0


def test_model_build_construct_on_the_cpu_matches_torch(tmp_path, capsys):
    """--construct gives every task its top construction without a record (no measurement) on a CPU too."""
    out = tmp_path / "tiny.so"
    assert main(["model", "build", "tiny", "--construct", "roller", "-o", str(out)]) == 0
    meta = json.loads((tmp_path / "tiny.so.json").read_text())
    assert meta["constructed"] == meta["tasks"] > 0 and meta["check_error"] < RTOL["float32"]
    assert "constructed by roller" in capsys.readouterr().out
    src = load("tiny")
    x = src.random_inputs(2)
    assert compare(load_model(str(out))(*x), src.reference(x)) <= RTOL["float32"]


def test_measuring_workers_run_cuda_kernels_on_the_gpu():
    from tiletune.schedules import build, make_space
    from tiletune.schedules.cuda import cuda_module
    from tiletune.workloads import parse

    wl = parse("gemm:M=32,N=32,K=32")
    for target, gpu in ((CUDA, True), (parse_target(None), False)):
        space = make_space(wl, None, target)
        assert (cuda_module(build(wl, space, space.sample(np.random.default_rng(0)), target).mod) is not None) is gpu
