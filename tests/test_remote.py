"""The remote measurer and the GPU-side runner, exercised on the CPU: LLVM-target kernels run by
gpu_runner.py with device "cpu" (load, run, check against torch, time, JSON), transports, the runner's
isolation, the CUDA build/export path, and the runtime-only TVM bundle."""
import json
import os
import sys

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.measure import gpu_runner
from tiletune.measure.base import MeasureSettings
from tiletune.measure.remote import (RUNNER, CommandTransport, HandoffTransport, LocalTransport, RemoteMeasurer,
                                     cuda_available, make_measurer, write_batch)
from tiletune.schedules import make_space
from tiletune.target import host_target
from tiletune.workloads import parse

pytestmark = pytest.mark.tvm

FAST = MeasureSettings(repeat=2, min_repeat_ms=1, run_timeout=30)
SM90 = {"kind": "cuda", "arch": "sm_90"}

REFERENCE_SPECS = [
    "gemm:M=7,N=5,K=3",
    "batch_matmul:B=2,M=3,N=4,K=5",
    "gemv:M=6,K=4",
    "conv2d:N=2,C=3,H=9,W=8,K=4,R=3,S=2,stride=2,pad=1,dilation=2",
    "depthwise_conv2d:N=1,C=3,H=7,W=7,R=3,S=3,stride=2,pad=1",
    "avgpool2d:N=1,C=2,H=7,W=9,kernel=3,stride=2,pad=1",
    "avgpool2d:N=1,C=2,H=6,W=6,kernel=3,stride=1,pad=2",  # pad > kernel / 2
]


@pytest.fixture(scope="module")
def pool():
    from tiletune.measure.local import WorkerPool

    p = WorkerPool(1)
    yield p
    p.close()


@pytest.mark.parametrize("spec", REFERENCE_SPECS)
def test_torch_references_match_the_workloads(spec):
    torch = pytest.importorskip("torch")
    wl = parse(spec)
    inputs = gpu_runner.make_inputs(wl.input_shapes(), wl.dtype, 0)
    for a, b in zip(inputs, wl.make_inputs(seed=0)):
        np.testing.assert_array_equal(a, b)  # the runner draws exactly the workload's inputs
    ref = gpu_runner.reference(wl.op, wl.values, [torch.from_numpy(x).double() for x in inputs], torch).numpy()
    np.testing.assert_allclose(ref, wl.reference(*inputs), rtol=1e-5, atol=1e-5)


def _valid(space, rng, n, check):
    from tiletune.schedules.cpu import InvalidConfig

    out = []
    while len(out) < n:
        c = space.sample(rng)
        try:
            check(c)
        except InvalidConfig:
            continue
        if c not in out:
            out.append(c)
    return out


def test_remote_measurer_through_the_runtime_only_bundle(pool, tmp_path):
    """The whole path on the CPU: build here -> batch dir -> the bundle's run.sh (tvm without its compiler,
    runtime-only import) runs gpu_runner.py (isolated child) -> results JSON -> MeasureResults."""
    pytest.importorskip("torch")
    from tiletune.measure.gpu_bundle import make_bundle
    from tiletune.schedules.cpu import check

    info = make_bundle(tmp_path / "bundle", ffi_from_installed=True)
    site = tmp_path / "bundle" / "site"
    assert not (site / "tvm" / "lib" / "libtvm_compiler.so").exists()
    assert not any((site / "tvm" / d).exists() for d in ("3rdparty", "include", "src", "web"))
    assert (site / "tvm" / "lib" / "libtvm_runtime_cuda.so").exists()
    assert info["bytes"] < 64 * 2**20

    wl = parse("gemm:M=32,N=32,K=16")
    target = host_target()
    space = make_space(wl, None, target)
    good = _valid(space, np.random.default_rng(0), 3, lambda c: check(wl, space, c))
    tr = CommandTransport(f"PYTHON={sys.executable} sh {tmp_path / 'bundle' / 'run.sh'} {{dir}} --device cpu")
    with RemoteMeasurer(wl, space, target, FAST, tr, pool=pool, keep=True, workdir=str(tmp_path / "work")) as m:
        res = m.measure(good)
        info = m.last_info
    assert all(r.ok for r in res), [(r.error, r.message) for r in res]
    assert all(len(r.costs) == 2 and r.extra["device"] == "cpu" for r in res)
    assert info["device"] == "cpu" and info["done"]
    assert info["tvm_runtime_only"] and info["tvm_path"].startswith(str(site))
    (batch,) = list((tmp_path / "work").iterdir())
    man = json.loads((batch / "manifest.json").read_text())
    assert man["workload"]["key"] == wl.key and man["device"] == "cpu" and len(man["kernels"]) == 3
    assert man["kernels"][0]["config"] == space.to_dict(good[0])
    assert all((batch / k["file"]).is_file() for k in man["kernels"])


def test_invalid_wrong_answer_and_build_errors_are_data(pool):
    """unroll 512 builds 2*A@B (wrong answer, found by the runner's torch check); unroll 16 crashes the build;
    a configuration over the template's limits is invalid; the good one runs."""
    pytest.importorskip("torch")
    wl = parse("gemm:M=16,N=16,K=8")
    target = host_target()
    space = make_space(wl, None, target)
    base = space.to_dict(space.sample(np.random.default_rng(1)))
    base.update(tile_m=[2, 2, 2, 2], tile_n=[1, 1, 2, 8], tile_k=[2, 4])
    good = space.from_dict({**base, "unroll": 0})
    wrong = space.from_dict({**base, "unroll": 512})
    crash = space.from_dict({**base, "unroll": 16})

    def notify(batch_dir, command):  # run the runner here, in-process, as a person would run the command
        assert "run.sh" in command
        gpu_runner.main([batch_dir, "--device", "cpu", "--no-isolate"])

    with RemoteMeasurer(wl, space, target, FAST, HandoffTransport(notify, poll_s=0.05), pool=pool,
                        builder="tiletune.testing:faulty_build") as m:
        res = m.measure([good, wrong, crash])
    assert res[0].ok, res[0].message
    assert res[1].error == "wrong-answer" and "max abs error" in res[1].message
    assert res[2].error == "build-error"


def test_failed_transport_is_a_run_error_for_every_kernel(pool):
    wl = parse("gemm:M=16,N=16,K=8")
    target = host_target()
    space = make_space(wl, None, target)
    c = space.from_dict({**space.to_dict(space.sample(np.random.default_rng(2))),
                         "tile_m": [2, 2, 2, 2], "tile_n": [1, 1, 2, 8], "tile_k": [2, 4]})
    with RemoteMeasurer(wl, space, target, FAST, CommandTransport("echo no gpu >&2; exit 7 # {dir}"),
                        pool=pool) as m:
        (r,) = m.measure([c])
    assert r.error == "run-error" and "code 7" in r.message and "no gpu" in r.message


def test_command_transport_needs_the_directory():
    with pytest.raises(TiletuneError, match="{dir}"):
        CommandTransport("ssh gpu python3 gpu_runner.py")


def test_cuda_kernels_are_built_exported_and_shipped(pool):
    """CUDA target without a GPU: the kernels are built and exported here (host code + device blob) and the
    batch is complete; the runner on this GPU-less machine reports each as a run error, not a crash."""
    wl = parse("gemm:M=64,N=64,K=32")
    space = make_space(wl, None, SM90)
    ok = space.from_dict({"tile_m": [2, 2, 4, 4], "tile_n": [2, 1, 8, 4], "tile_k": [4, 8], "unroll": 16})
    too_many_threads = space.from_dict({"tile_m": [1, 1, 64, 1], "tile_n": [1, 1, 32, 2], "tile_k": [4, 8],
                                        "unroll": 0})
    seen = {}

    def notify(batch_dir, command):
        man = json.load(open(os.path.join(batch_dir, "manifest.json")))
        seen["man"] = man
        so = open(os.path.join(batch_dir, man["kernels"][0]["file"]), "rb").read()
        seen["blob"] = b"main_kernel" in so and len(so) > 5000
        if not cuda_available():
            gpu_runner.worker(batch_dir, "cpu", os.path.join(batch_dir, "results.json"), isolated=False)
            data = gpu_runner.load_results(os.path.join(batch_dir, "results.json"))
            data["done"] = True
            gpu_runner.save_results(os.path.join(batch_dir, "results.json"), data)
        else:
            gpu_runner.main([batch_dir, "--device", "cuda"])

    with RemoteMeasurer(wl, space, SM90, FAST, HandoffTransport(notify, poll_s=0.05), pool=pool) as m:
        res = m.measure([ok, too_many_threads])
    assert res[1].error == "invalid" and "threads" in res[1].message
    assert seen["man"]["device"] == "cuda" and len(seen["man"]["kernels"]) == 1
    assert seen["blob"]
    if cuda_available():
        assert res[0].ok, res[0].message
    else:
        assert res[0].error == "run-error" and "cuda" in res[0].message.lower()


def test_make_measurer_without_a_gpu_explains_the_transport():
    if cuda_available():
        pytest.skip("this machine has a GPU")
    wl = parse("gemm:M=16,N=16,K=8")
    with pytest.raises(TiletuneError, match="transport"):
        make_measurer(wl, make_space(wl, None, SM90), SM90)


def _cpu_batch(tmp_path, pool, settings):
    """Build one LLVM kernel and write a batch around it (kernel k0.so plus an unloadable k1.so)."""
    from tiletune.measure.local import build_kernel

    tmp_path.mkdir(parents=True, exist_ok=True)
    wl = parse("gemv:M=64,K=32")
    target = host_target()
    space = make_space(wl, None, target)
    c = space.from_dict({**space.to_dict(space.sample(np.random.default_rng(0))),
                         "tile_m": [2, 2, 2, 8], "tile_k": [4, 8]})
    build_kernel(wl, space, c, target).export_library(str(tmp_path / "k0.so"))
    (tmp_path / "k1.so").write_bytes(b"not a library")
    write_batch(str(tmp_path), wl, space, [("k0", "k0.so", c), ("k1", "k1.so", c)], settings, "cpu")
    return tmp_path


def test_runner_records_errors_and_resumes(tmp_path, pool):
    pytest.importorskip("torch")
    batch = _cpu_batch(tmp_path, pool, FAST)
    out = str(batch / "results.json")
    # a result already there is kept (resume); the unloadable kernel is a run error
    gpu_runner.save_results(out, {"version": 1, "done": False,
                                  "results": {"k0": {"costs": [1.0], "error": None, "message": ""}}})
    gpu_runner.main([str(batch), "--no-isolate"])
    data = gpu_runner.load_results(out)
    assert data["done"] and data["results"]["k0"]["costs"] == [1.0]
    assert data["results"]["k1"]["error"] == "run-error"
    os.remove(out)
    gpu_runner.main([str(batch), "--no-isolate"])
    data = gpu_runner.load_results(out)
    assert data["results"]["k0"]["error"] is None and len(data["results"]["k0"]["costs"]) == 2
    assert os.path.exists(batch / "reference.npy")  # computed once per batch


def test_runner_isolation_kills_a_kernel_over_its_timeout_and_goes_on(tmp_path, pool):
    """LocalTransport -> supervisor -> child: k0 outlives run_timeout (each timing sample lasts 400 ms) and
    is killed and recorded; a fresh child goes on with k1."""
    batch = _cpu_batch(tmp_path, pool, MeasureSettings(repeat=2, min_repeat_ms=400, run_timeout=0.2, check=False))
    np.save(batch / "reference.npy", np.zeros(64, "float32"))  # the children need no torch
    LocalTransport("cpu").run(str(batch), timeout=120)
    data = json.loads((batch / "results.json").read_text())
    assert data["done"]
    assert data["results"]["k0"]["error"] == "run-timeout"
    assert data["results"]["k1"]["error"] == "run-error"
    assert not os.path.exists(str(batch / "results.json") + ".current")


def test_bundle_without_ffi_says_how_to_get_it(tmp_path):
    from tiletune.measure.gpu_bundle import make_bundle

    info = make_bundle(tmp_path / "b")
    assert "pip download apache-tvm-ffi==0.1.14.post0 --python-version 3.12 --only-binary=:all:" in \
        info["next"].replace(sys.executable + " -m ", "")
    assert (tmp_path / "b" / "gpu_runner.py").read_text() == open(RUNNER).read()


def test_runner_imports_only_runtime_numpy_and_torch():
    import ast

    tree = ast.parse(open(RUNNER).read())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods.add((node.module or "").split(".")[0] if node.level == 0 else "<relative>")
    assert mods <= {"argparse", "ctypes", "json", "os", "signal", "subprocess", "sys", "time", "numpy", "torch", "tvm",
                    "__future__"}


def test_prepare_run_elsewhere_collect(pool, tmp_path):
    """The two-phase flow for a GPU reached by hand (or by an agent's device tool): prepare a batch here,
    run the runner on it, collect the results from the directory alone, in the order of the configs."""
    pytest.importorskip("torch")
    from tiletune.measure.remote import collect, handoff_command

    wl = parse("gemm:M=16,N=256,K=8")
    target = host_target()
    space = make_space(wl, None, target)
    base = space.to_dict(space.sample(np.random.default_rng(4)))
    good = space.from_dict({**base, "tile_m": [2, 2, 2, 2], "tile_n": [4, 2, 4, 8], "tile_k": [2, 4]})
    invalid = space.from_dict({**base, "tile_m": [2, 2, 2, 2], "tile_n": [1, 1, 1, 256], "tile_k": [2, 4]})
    with RemoteMeasurer(wl, space, target, FAST, pool=pool, workdir=str(tmp_path)) as m:
        batch = m.prepare([invalid, good])
    man = json.loads(open(os.path.join(batch, "manifest.json")).read())
    assert [e["id"] for e in man["entries"]] == ["k0", "k1"] and [k["id"] for k in man["kernels"]] == ["k1"]
    before, _ = collect(batch, space)  # nothing run yet: the built kernel has no result
    assert before[0].error == "invalid" and before[1].error == "run-error" and "results" in before[1].message
    gpu_runner.main([batch, "--device", "cpu", "--no-isolate"])
    res, info = collect(batch, space)
    assert res[0].error == "invalid" and res[0].config == invalid
    assert res[1].ok and res[1].config == good and res[1].build_s > 0
    assert info["device_name"] == "cpu"
    assert handoff_command(batch, "gpu-bundle").startswith("sh gpu-bundle/run.sh ")
    # the command-line collect writes records
    from tiletune.measure.remote import _main
    from tiletune.records import load

    assert _main(["collect", batch, "--records", str(tmp_path / "r.jsonl")]) == 0
    recs = load(tmp_path / "r.jsonl")
    assert [r.error for r in recs] == ["invalid", None] and recs[1].measurer == "remote" and recs[1].gflops > 0


def test_runner_start_up_failure_is_reported_per_kernel(tmp_path, pool):
    """No CUDA device (here): the child exits before any kernel; every kernel gets the reason."""
    if cuda_available():
        pytest.skip("this machine has a GPU")
    batch = _cpu_batch(tmp_path, pool, FAST)
    data = gpu_runner.supervise(str(batch), "cuda", str(batch / "results.json"))
    assert {r["error"] for r in data["results"].values()} == {"run-error"}
    assert "no CUDA device" in data["results"]["k0"]["message"]


def test_measurement_does_not_import_the_session():
    """No import cycle measure <-> session: the measurers (and the factory that picks one) load without it."""
    import subprocess

    code = ("import sys, tiletune.measure.remote, tiletune.measure.factory, tiletune.measure.replay; "
            "sys.exit('tiletune.session' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_factory_picks_the_measurer(tmp_path):
    from tiletune.measure.factory import make_measurer as pick
    from tiletune.measure.replay import ReplayMeasurer
    from tiletune.records import Record, RecordWriter

    wl = parse("gemm:M=8,N=8,K=8")
    space = make_space(wl, (2, 2))
    table = str(tmp_path / "t.jsonl")
    with RecordWriter(table) as w:
        w.write(Record(workload=wl.key, target="llvm", config=space.to_dict(space.get(0)), costs=(1e-3,),
                       median_s=1e-3, gflops=1.0, strategy="grid", trial=0))
    assert isinstance(pick(wl, space, host_target(), replay=table), ReplayMeasurer)
    with pick(wl, space, host_target(), transport="true {dir}") as m:
        assert isinstance(m, RemoteMeasurer) and isinstance(m.transport, CommandTransport)
