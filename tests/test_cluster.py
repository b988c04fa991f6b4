"""The cluster path (tiletune.measure.cluster) on a real Ray cluster of this machine: a head and a second node,
every Ray process on 127.0.0.1, started by this module and stopped by it (and by a timer, should a test hang).

The options and errors that need no cluster run first; they run where Ray is missing too."""
from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from tiletune.cli import main
from tiletune.errors import TiletuneError
from tiletune.measure.base import MeasureSettings
from tiletune.measure.cluster import RayPool, cluster_address, import_ray, resource_name
from tiletune.measure.factory import check_sources, make_measurer
from tiletune.measure.local import LocalMeasurer
from tiletune.records import load
from tiletune.schedules import make_space
from tiletune.strategies import create
from tiletune.target import host_target
from tiletune.tune import tune
from tiletune.workloads import parse
from tiletune.workloads.primfunc import PrimFuncWorkload
from tests.test_primfunc import MATMUL

ROOT = Path(__file__).resolve().parents[1]
SPEC = "gemm:M=32,N=32,K=32"
FAST = MeasureSettings(repeat=1, min_repeat_ms=1, build_timeout=60, run_timeout=60)
CLUSTER_LIFETIME_S = 300  # the cluster is shut down after this, whatever the tests are doing
HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300, "health_check_failure_threshold": 3}


# ---- no cluster needed ---------------------------------------------------------------------------------------

def test_the_cluster_comes_from_the_flag_then_the_environment():
    env = {"TILETUNE_CLUSTER": "10.0.0.5:6379", "RAY_ADDRESS": "10.0.0.6:6379"}
    assert cluster_address("1.2.3.4:6379", env) == "1.2.3.4:6379"
    assert cluster_address(None, env) == "10.0.0.5:6379"
    assert cluster_address(None, {"RAY_ADDRESS": "10.0.0.6:6379"}) == "10.0.0.6:6379"
    assert cluster_address(None, {}) is None
    assert cluster_address("none", env) is None  # this machine, whatever the environment says
    assert cluster_address(None, env, elsewhere=True) is None  # --replay / --rpc: the environment does not apply
    with pytest.raises(TiletuneError, match="needs an address"):
        cluster_address(" ", env)


def test_one_place_to_measure_and_a_clear_line_for_a_bad_address(tmp_path, capsys):
    with pytest.raises(TiletuneError, match="--replay and --cluster each say where to measure"):
        check_sources(replay="t.jsonl", cluster="127.0.0.1:6379")
    assert main(["tune", SPEC, "-n", "1", "-o", str(tmp_path / "r.jsonl"), "--cluster", "nowhere", "-q"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    assert resource_name({"kind": "llvm", "mcpu": "znver4"}) == "tiletune-llvm-znver4"
    assert resource_name({"kind": "cuda", "arch": "sm_80"}) == "tiletune-cuda-sm_80"


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(TiletuneError, match=r"tiletune\[cluster\]"):
        import_ray()


def test_an_address_where_no_head_answers_is_one_line(tmp_path, capsys):
    pytest.importorskip("ray")
    assert main(["tune", SPEC, "-n", "1", "-o", str(tmp_path / "r.jsonl"), "--cluster", "127.0.0.1:1", "-q"]) == 2
    err = capsys.readouterr().err
    assert "no Ray head answers there" in err and len(err.strip().splitlines()) == 1


# ---- a real cluster ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(Cluster, marks folder): a head and a second node of one CPU each on 127.0.0.1; the cluster_faults builders
    write the process id of the worker that ran them into the marks folder."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # every Ray process on the loopback address: Ray treats the host as one machine (read when ray is imported,
    # so also set on the imported module; the nodes' processes read the variable)
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
    marks = tmp_path_factory.mktemp("marks")
    node_home = tmp_path_factory.mktemp("node-home")  # the nodes' HOME: a PrimFunc cache of their own
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "TILETUNE_TEST_MARKS": str(marks),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the nodes' processes inherit it
    driver_home = os.environ["HOME"]
    os.environ["HOME"] = str(node_home)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                      "include_dashboard": False, "_system_config": HEALTH})
    guard = threading.Timer(CLUSTER_LIFETIME_S, lambda: (c.shutdown(), _thread.interrupt_main()))
    guard.daemon = True
    guard.start()
    try:
        c.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        c.wait_for_nodes()
        os.environ["HOME"] = driver_home
        c.node_home = node_home
        yield c, marks
    finally:
        os.environ["HOME"] = driver_home
        guard.cancel()
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cluster_workers(marks) -> list[psutil.Process]:
    """The processes of this module's cluster (their environment names its ``marks`` folder) that are tiletune's
    Ray actors."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any("ClusterWorker" in part for part in p.info["cmdline"] or ()) \
                    and p.environ().get("TILETUNE_TEST_MARKS") == str(marks):
                found.append(p)
        except (psutil.Error, TypeError):
            continue
    return found


def _records(path) -> list[tuple]:
    return [(r.trial, r.config, r.error, r.seed, r.strategy) for r in load(path)]


def test_a_seeded_cluster_run_gives_the_configurations_and_records_of_a_local_run(cluster, tmp_path):
    c, marks = cluster
    args = [SPEC, "-s", "random", "-n", "4", "--batch-size", "2", "--seed", "7", "--no-vendor", "-q",
            "--repeat", "1", "--min-repeat-ms", "1"]
    assert main(["tune", *args, "-o", str(tmp_path / "local.jsonl"), "--cluster", "none"]) == 0
    assert main(["tune", *args, "-o", str(tmp_path / "cluster.jsonl"), "--cluster", c.address]) == 0
    local, remote = load(tmp_path / "local.jsonl"), load(tmp_path / "cluster.jsonl")
    assert _records(tmp_path / "local.jsonl") == _records(tmp_path / "cluster.jsonl")
    assert len(remote) == 4 and all(r.error is None and r.median_s > 0 for r in remote)
    assert {r.measurer for r in local} == {"local"} and {r.measurer for r in remote} == {"cluster"}
    deadline = time.monotonic() + 20  # Ray reaps a killed actor's process asynchronously
    while _cluster_workers(marks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _cluster_workers(marks)  # the run's actors ended with it


def test_the_benchmark_driver_runs_its_suite_on_the_cluster(cluster, tmp_path, capsys):
    """`tiletune bench --cluster`: every run of the suite built and measured on the cluster's nodes (one pool for
    the bench), the baselines, measured on this machine, left out by default and refused when asked for."""
    c, _ = cluster
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "two", "description": "a cluster check", "strategies": ["random"],
                                 "workloads": [SPEC, "gemm:M=16,N=32,K=32"], "seeds": 1, "budget": 2}))
    out = tmp_path / "bench"
    args = ["bench", str(suite), "-o", str(out), "--no-plots", "-q", "--repeat", "1", "--min-repeat-ms", "1"]
    assert main([*args, "--cluster", c.address, "--baselines", "vendor"]) == 2
    assert "--cluster measures on other machines" in capsys.readouterr().err
    assert main([*args, "--cluster", c.address]) == 0
    recs = load(out / "records.jsonl")
    assert len(recs) == 4 and {r.measurer for r in recs} == {"cluster"} and all(r.error is None for r in recs)
    assert json.loads((out / "bench.json").read_text())["cluster"] == c.address


DRIVER = """
import sys
from tiletune.measure.base import MeasureSettings
from tiletune.measure.cluster import RayPool
from tiletune.measure.local import LocalMeasurer
from tiletune.schedules import make_space
from tiletune.target import host_target
from tiletune.workloads import parse
import numpy as np
wl = parse(sys.argv[2])
space = make_space(wl, target=host_target())
pool = RayPool(sys.argv[1], host_target())
print("workers", pool.size, flush=True)
m = LocalMeasurer(wl, space, host_target(), MeasureSettings(build_timeout=600), pool=pool,
                  builder="tests.cluster_faults:hanging_build")
try:
    m.measure(space.sample_unique(np.random.default_rng(0), pool.size))
finally:
    pool.close()
"""


def test_interrupting_the_driver_leaves_nothing_running_on_the_cluster(cluster):
    c, marks = cluster
    before = set(os.listdir(marks))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, c.address, SPEC], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not [m for m in set(os.listdir(marks)) - before if m.startswith("hang")]:
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate(timeout=5)
            time.sleep(0.1)
        hung = [int((marks / m).read_text()) for m in set(os.listdir(marks)) - before if m.startswith("hang")]
        assert all(psutil.pid_exists(p) for p in hung) and _cluster_workers(marks)  # found while they run
        driver.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode != 0 and "KeyboardInterrupt" in err
    deadline = time.monotonic() + 20
    while (any(_alive(p) for p in hung) or _cluster_workers(marks)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in hung)  # the hanging builds were stopped
    assert not _cluster_workers(marks)  # and no worker of the run is left


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(scope="module")
def pool(cluster):
    p = RayPool(cluster[0].address, host_target())
    yield p
    p.close()


def test_a_hanging_build_is_cut_by_the_build_timeout_and_its_worker_replaced(pool):
    wl = parse(SPEC)
    space = make_space(wl, target=host_target())
    configs = space.sample_unique(np.random.default_rng(1), 1)
    settings = MeasureSettings(repeat=1, min_repeat_ms=1, build_timeout=2, run_timeout=60)
    restarts = pool.restarts
    with LocalMeasurer(wl, space, host_target(), settings, pool=pool, builder="tests.cluster_faults:hanging_build") as m:
        t0 = time.monotonic()
        hung = m.measure(configs)
        assert time.monotonic() - t0 < 30
    assert [r.error for r in hung] == ["build-timeout"]
    assert pool.restarts == restarts + 1 and pool.size == 2  # replaced on its node
    with make_measurer(wl, space, host_target(), settings=FAST, pool=pool) as m:  # the replacements measure
        assert all(r.ok for r in m.measure(configs))


def test_a_models_task_is_measured_on_nodes_whose_cache_never_held_it(cluster, pool, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # the driver's own PrimFunc cache
    wl = PrimFuncWorkload.from_text(MATMUL)
    space = make_space(wl, target=host_target())
    with make_measurer(wl, space, host_target(), settings=FAST, pool=pool) as m:
        results = m.measure(space.sample_unique(np.random.default_rng(0), 2))
        assert m.kind == "cluster"
    assert all(r.ok for r in results), [r.message for r in results]
    assert (cluster[0].node_home / ".cache" / "tiletune" / "primfuncs" / f"{wl.hash}.py").is_file()  # sent with the job


def test_a_worker_node_killed_mid_run_loses_no_trial_and_records_none_twice(cluster, pool, tmp_path):
    c, marks = cluster
    wl = parse(SPEC)
    target = host_target()
    space = make_space(wl, target=target)
    second = next(n for n in c.worker_nodes)
    before = set(os.listdir(marks))

    def kill_when_building():  # the second node goes while both nodes hold builds
        deadline = time.monotonic() + 60
        while len([m for m in set(os.listdir(marks)) - before if m.startswith("slow")]) < 2:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        time.sleep(0.3)
        c.remove_node(second, allow_graceful=False)

    killer = threading.Thread(target=kill_when_building, daemon=True)
    lost = pool.lost
    with LocalMeasurer(wl, space, target, FAST, pool=pool, builder="tests.cluster_faults:slow_build") as m:
        killer.start()
        run = tune(space=space, strategy=create("random", space, seed=3), measurer=m, workload=wl.key, flops=wl.flops,
                   trials=6, batch_size=3, records=tmp_path / "r.jsonl")
    killer.join(timeout=60)
    records = load(tmp_path / "r.jsonl")
    assert pool.lost > lost  # the node held trials when it went: they were built again on the head
    assert len(records) == 6 == len({r.trial for r in records}) and run.trials == 6
    assert len({json.dumps(r.config, sort_keys=True) for r in records}) == 6  # none recorded twice
    assert all(r.error is None for r in records), [r.message for r in records if r.error]
    assert pool.size == 1  # the head's worker; the second node's is gone with it
