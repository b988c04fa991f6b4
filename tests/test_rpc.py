"""Measurement through TVM's RPC tracker: a tracker and two servers on 127.0.0.1, started here (bounded in
time, always stopped), measure small GEMMs and convolutions; devices share the batches, a lost device's
kernels become errors and the run goes on, results match local measurement."""
from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest

from tiletune.cli import main as cli
from tiletune.errors import TiletuneError
from tiletune.measure.base import MeasureSettings
from tiletune.measure.factory import make_measurer
from tiletune.measure.local import LocalMeasurer, WorkerPool
from tiletune.measure.rpc import RPCMeasurer
from tiletune.records import load
from tiletune.schedules import make_space
from tiletune.session import RunSpec, run
from tiletune.target import host_target
from tiletune.tune import Callback
from tiletune.workloads import parse

from .rpc_farm import HOST, KEY, _free_port, _stop, start

pytest.importorskip("tornado", reason="the RPC tracker needs tornado (pip install -e '.[rpc]')")
pytestmark = pytest.mark.tvm

FAST = MeasureSettings(repeat=2, min_repeat_ms=5, run_timeout=20.0, cutoff=0)


@pytest.fixture(scope="module")
def farm(request):
    f = start(2)  # stops what it started if start-up fails
    request.addfinalizer(f.stop)  # always stopped
    return f


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2, threads=1)
    yield p
    p.close()


def _space(wl):
    return make_space(wl, (2, 1), host_target())


class KillAfter(Callback):
    """Kills a server after the first batch (a device that disappears in the middle of a run)."""

    def __init__(self, proc: subprocess.Popen, after: int):
        self.proc, self.after, self.seen = proc, after, 0

    def on_start(self, run) -> None: ...

    def on_trial(self, run, record, measured) -> None:
        self.seen += 1
        if self.seen == self.after:
            _stop(self.proc)

    def on_end(self, run) -> None: ...


def _untiled(space, config):
    """``config`` with every axis untiled (all of it in the outermost level: scalar inner loops), no unroll, no
    packing: many times slower than a vectorized tiling."""
    d = space.to_dict(config)
    for k, v in d.items():
        if k.startswith("tile_"):
            d[k] = [int(np.prod(v))] + [1] * (len(v) - 1)
    return space.from_dict({**d, "unroll": 0, **({"pack": 0} if "pack" in d else {})})


def test_gemm_and_conv_through_two_servers_match_local_measurement(farm, pool):
    """Both servers measure (records name them), every output is checked against the reference, and on a
    tiny space (the best of the sampled configurations measured here, and the untiled one) the devices
    find the same best as local measurement. Each side keeps a configuration's faster median of two
    measurements (a busy machine only makes a kernel slower; this 2-core machine is shared)."""
    for spec in ("gemm:M=64,N=64,K=64", "conv2d:N=1,C=8,H=8,W=8,K=16,R=3,S=3,pad=1"):
        wl = parse(spec)
        space = _space(wl)
        configs = list(dict.fromkeys(space.sample(np.random.default_rng(i)) for i in range(12)))[:8]
        with LocalMeasurer(wl, space, host_target(), FAST, pool=pool) as m:
            local = m.measure(configs)
            best = min(local, key=lambda r: r.median).config
            tiny = [best, _untiled(space, best)]
            here = [min(a.median, b.median) for a, b in zip(m.measure(tiny), m.measure(tiny))]
        assert all(r.ok for r in local)
        with RPCMeasurer(wl, space, host_target(), FAST, rpc=farm.rpc, pool=pool) as m:
            assert m.devices == 2
            remote = m.measure(configs)
            used = dict(m.stats["devices"])
            there = [min(a.median, b.median) for a, b in zip(m.measure(tiny), m.measure(tiny))]
        assert all(r.ok for r in remote), [r.message for r in remote if not r.ok]
        assert len(used) == 2 and sum(used.values()) == len(configs), used  # both servers got work
        assert {r.extra["device"] for r in remote} == set(used)
        assert all(d.startswith(KEY + "@127.0.0.1:") for d in used)
        assert all(len(r.costs) == FAST.repeat for r in remote)
        assert here[0] < here[1] and there[0] < there[1], (here, there)


def test_tune_through_rpc_records_the_device_and_resumes(farm, tmp_path):
    recs = tmp_path / "r.jsonl"
    spec = RunSpec(workload="gemm:M=32,N=32,K=32", strategy="random", trials=10, batch_size=5, levels=(2, 1),
                   records=str(recs), settings=FAST, rpc=farm.rpc)
    res = run(spec)
    assert res.trials == 10 and res.best is not None
    rows = load(recs)
    assert {r.measurer for r in rows} == {"rpc"} and all(r.device and r.device.startswith(KEY) for r in rows if r.ok)
    again = run(spec)  # the same command resumes from the records
    assert again.measured == 0 and again.recalled == 10


def test_lost_devices_their_kernels_are_errors_and_the_run_goes_on(pool, request):
    """A farm of its own, three servers. (1) A kernel that kills the server's session process (abort()) is a
    run-error naming that device; the server stops serving (TVM's server ends with its session's failure) and
    the batch goes on. (2) Then, after the first batch of a tuning run, one of the two servers left is killed:
    the kernels sent to it are run-errors naming it, every later kernel is measured by the last one."""
    from tests.rpc_faults import CRASH_UNROLL
    from tiletune.strategies import create
    from tiletune.target import target_key
    from tiletune.tune import tune

    f = start(3)
    request.addfinalizer(f.stop)
    wl = parse("gemm:M=32,N=32,K=32")
    space = _space(wl)
    base = [space.to_dict(space.sample(np.random.default_rng(i))) for i in range(6)]
    configs = list(dict.fromkeys(space.from_dict({**d, "unroll": 16 if i else CRASH_UNROLL})
                                 for i, d in enumerate(base)))
    with RPCMeasurer(wl, space, host_target(), FAST, rpc=f.rpc, pool=pool, request_timeout=30.0,
                     builder="tests.rpc_faults:crash_unroll") as m:
        out = m.measure(configs)
    assert out[0].error == "run-error" and out[0].extra["device"] in out[0].message, (out[0].error, out[0].message)
    assert all(r.ok for r in out[1:]), [(r.error, r.message) for r in out[1:]]
    left = {int(a.rpartition(":")[2]) for a in f.wait_servers(2, exactly=True)}  # their ports
    assert int(out[0].extra["device"].rpartition(":")[2]) not in left

    victim = next(p for p in f.servers if f.ports[p.pid] in left)
    # both servers free again (the first measurer's sessions closed) before the run: a server still busy ending
    # its session left the whole first batch to the other one now and then
    f.wait_free(2)
    m = RPCMeasurer(wl, space, host_target(), FAST, rpc=f.rpc, pool=pool, request_timeout=30.0)
    try:
        res = tune(space=space, strategy=create("random", space, seed=0), measurer=m, workload=wl.key,
                   flops=wl.flops, target=target_key(host_target()), trials=24, batch_size=6,
                   callbacks=[KillAfter(victim, 6)])
    finally:
        m.close()
    assert res.trials == 24
    first, rest = res.history[:6], res.history[6:]
    assert all(r.ok for r in first) and len({r.device for r in first}) == 2
    lost = [r for r in rest if not r.ok]
    assert lost and all(r.error == "run-error" for r in lost), [(r.error, r.message) for r in lost]
    survivors = {r.device for r in rest if r.ok}
    assert survivors == {f"{KEY}@{HOST}:{p}" for p in left - {f.ports[victim.pid]}}
    assert all(r.device in r.message and r.device not in survivors for r in lost)


def test_bad_rpc_values_and_an_unreachable_tracker_are_one_line(capsys):
    port = _free_port()  # nothing listens there
    for value, says in (("127.0.0.1:9190", "expected HOST:PORT:KEY"), ("127.0.0.1:x:k", "expected HOST:PORT:KEY"),
                        ("127.0.0.1:9190:a:b", "expected HOST:PORT:KEY"),
                        (f"127.0.0.1:{port}:k", "no RPC tracker at 127.0.0.1")):
        t0 = time.monotonic()
        assert cli(["tune", "gemm:M=32,N=32,K=32", "--rpc", value, "-o", os.devnull]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
        assert time.monotonic() - t0 < 10.0
    with pytest.raises(TiletuneError, match="no RPC tracker"):
        make_measurer(parse("gemm:M=32,N=32,K=32"), _space(parse("gemm:M=32,N=32,K=32")), host_target(),
                      rpc=f"127.0.0.1:{port}:k")


def test_a_tracker_without_the_key_and_a_cuda_target_without_rpc(farm, capsys):
    assert cli(["tune", "gemm:M=32,N=32,K=32", "--rpc", f"{HOST}:{farm.port}:no-such-key", "-o", os.devnull]) == 2
    assert "no server with key 'no-such-key'" in capsys.readouterr().err
    wl = parse("gemm:M=32,N=32,K=32")
    with pytest.raises(TiletuneError, match="--rpc"):
        make_measurer(wl, make_space(wl, None, {"kind": "cuda", "arch": "sm_90"}), {"kind": "cuda", "arch": "sm_90"})
    assert cli(["rpc", "query", f"{HOST}:{farm.port}", "--key", KEY]) == 0
    out = capsys.readouterr().out
    assert out.count(KEY) >= 2


def test_cuda_kernels_are_built_and_exported_here_for_an_rpc_device(pool, tmp_path):
    """The CUDA path through the same runner: built and exported here (TVM 0.27 keeps the CUDA C source in the
    library: no nvcc needed here); not run (no GPU here)."""
    from tiletune.measure.rpc import export_kernel
    from tiletune.schedules import build, check
    from tiletune.schedules.cpu import InvalidConfig

    sm90 = {"kind": "cuda", "arch": "sm_90"}
    wl = parse("gemm:M=64,N=64,K=64")
    space = make_space(wl, None, sm90)
    rng = np.random.default_rng(0)
    for _ in range(500):
        c = space.sample(rng)
        try:
            check(wl, space, c, sm90)
            break
        except InvalidConfig:
            continue
    lib = build(wl, space, c, sm90).mod
    path = tmp_path / "k.so"
    export_kernel(wl, lib, str(path))
    assert path.stat().st_size > 0 and b"__global__" in path.read_bytes()


def test_old_records_without_a_device_still_load(tmp_path):
    from tiletune.records import Record

    line = json.loads(Record(workload="w", target="t", config={}).to_json())
    del line["device"]
    p = tmp_path / "old.jsonl"
    p.write_text(json.dumps(line) + "\n")
    (r,) = load(p)
    assert r.device is None


def test_warm_runs_timed_follows_the_warm_up_rule():
    """Step 1 with calls timed on the device: at least ``warmup`` calls lasting ``min_repeat_ms``, asked for in
    as few round trips as the fastest call allows."""
    from tiletune.measure.timing import warm_runs_timed

    asked = []

    def timed(n):
        asked.append(n)
        return [2.0 ** -10] * n  # 0.98 ms each, exact in binary

    w = warm_runs_timed(timed, MeasureSettings(warmup=2, min_repeat_ms=10))
    assert asked == [2, 9] and w.calls == 11 and w.fastest == 2.0 ** -10 and w.total == 11 * 2.0 ** -10
    asked.clear()
    w = warm_runs_timed(timed, MeasureSettings(warmup=3, min_repeat_ms=0))
    assert asked == [3] and w.calls == 3


def test_the_tracker_command_names_the_extra_when_tornado_is_missing(monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "tornado", None)
    assert cli(["rpc", "tracker", "--port", str(_free_port())]) == 2
    assert 'pip install -e ".[rpc]"' in capsys.readouterr().err
    assert cli(["rpc", "server", "--tracker", "127.0.0.1:9190", "--key", "k", "--print"]) == 0
    assert capsys.readouterr().out.startswith("TVM_NUM_THREADS=$(nproc) python3 -m tvm.exec.rpc_server --host 127.0.0.1 ")


@pytest.mark.parametrize("fork,gpu,spawned", [("auto", False, False), ("auto", True, True), ("no", False, True),
                                              ("yes", True, False)])
def test_the_server_spawns_its_sessions_on_a_gpu_machine(monkeypatch, capsys, fork, gpu, spawned):
    """Forked sessions failed CUDA's initialization on an H200: ``--fork auto`` spawns them (TVM's --no-fork)
    where an NVIDIA GPU is present, and forks elsewhere."""
    import tiletune.commands.rpc as rpc_cmd

    monkeypatch.setattr(rpc_cmd, "nvidia_gpu_here", lambda: gpu)
    assert cli(["rpc", "server", "--tracker", "127.0.0.1:9190", "--key", "k", "--print", "--fork", fork]) == 0
    assert capsys.readouterr().out.strip().endswith("--no-fork") == spawned


def test_bench_through_rpc(farm, tmp_path, capsys):
    """``bench --rpc``: the runs measure on the devices (records name them), baselines default to none; asking
    for a baseline (measured here) is refused in one line."""
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"name": "rpc-tiny", "description": "tiny", "workloads": ["gemm:M=32,N=32,K=32"],
                                 "strategies": ["random"], "seeds": 1, "budget": 4, "levels": "2,1"}))
    out = tmp_path / "out"
    assert cli(["bench", str(suite), "--rpc", farm.rpc, "--out", str(out), "--no-plots", "-q", "--repeat", "1",
                "--min-repeat-ms", "5"]) == 0
    rows = load(out / "records.jsonl")
    assert len(rows) == 4 and all(r.measurer == "rpc" and r.device.startswith(KEY + "@") for r in rows)
    assert json.loads((out / "bench.json").read_text())["rpc"] == farm.rpc
    capsys.readouterr()
    assert cli(["bench", str(suite), "--rpc", farm.rpc, "--out", str(out), "--baselines", "vendor", "-q"]) == 2
    assert "--baselines none" in capsys.readouterr().err


def test_model_tune_through_rpc(farm, tmp_path):
    """``model tune --rpc``: every task's kernels are measured on the farm's devices (a task's sessions are
    released when the next round goes to another task, so the tasks never wait for each other's devices)."""
    pytest.importorskip("torch")
    from tiletune.model.passes.pipeline import prepare
    from tiletune.model.frontend.source import load as load_model_source
    from tiletune.model.kernels.tasks import extract, fuse
    from tiletune.model.tuning.tuner import tune_model

    tasks = extract(fuse(prepare(load_model_source("tiny")).mod, host_target()), host_target())
    recs = tmp_path / "m.jsonl"
    result = tune_model(tasks, strategy="random", trials=2 * len(tasks.tasks), records=str(recs), round_trials=2,
                        batch_size=2, settings=FAST, rpc=farm.rpc, scheduler="flops")
    assert result.trials == 2 * len(tasks.tasks)
    rows = load(recs)
    assert len({r.workload for r in rows}) >= 2  # several tasks measured
    assert all(r.measurer == "rpc" and r.device.startswith(KEY + "@") for r in rows if r.ok) and any(r.ok for r in rows)
