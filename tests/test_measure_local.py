"""Real TVM builds on small shapes and fault handling of the local measurer."""
import importlib.util
import os

import numpy as np
import pytest

from tiletune.measure import MeasureSettings
from tiletune.measure.local import LocalMeasurer
from tiletune.schedules import make_space
from tiletune.space import Config
from tiletune.strategies import create
from tiletune.target import host_target
from tiletune.tune import tune
from tiletune.workloads import parse

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def pool():
    from tiletune.measure.local import WorkerPool

    p = WorkerPool(2)
    yield p
    p.close()

WORKLOADS = [
    "gemm:M=32,N=24,K=16",
    "batch_matmul:B=2,M=8,N=16,K=12",
    "gemv:M=48,K=20",
    "conv2d:N=1,C=4,H=9,W=9,K=8,R=3,S=3,stride=2,pad=1",
    "depthwise_conv2d:N=1,C=6,H=10,W=10,R=3,S=3,stride=1,pad=1",
    "avgpool2d:N=1,C=3,H=9,W=9,kernel=3,stride=2,pad=1",
    "gemm:M=13,N=17,K=7",  # prime extents
]


@pytest.mark.parametrize("spec", WORKLOADS)
def test_random_configs_compile_and_match_numpy(spec, pool):
    wl = parse(spec)
    space = make_space(wl)
    rng = np.random.default_rng(0)
    configs = [space.untiled()] + space.sample_unique(rng, 3)
    settings = MeasureSettings(repeat=1, min_repeat_ms=0)
    with LocalMeasurer(wl, space, host_target(), settings, pool=pool) as m:
        results = m.measure(configs)
    for r in results:
        assert r.error in (None, "invalid"), (spec, r.config, r.error, r.message)
    ok = [r for r in results if r.ok]
    assert ok, spec
    for r in ok:
        assert all(c > 0 for c in r.costs)
        assert r.gflops(wl.flops) > 0


def _gemm_space():
    wl = parse("gemm:M=16,N=16,K=8")
    return wl, make_space(wl)


def _cfg(space, unroll, i=0):
    d = space.to_dict(space.get(i))
    d["unroll"] = unroll
    return space.from_dict(d)


def test_build_faults_are_recorded_and_the_run_goes_on(pool):
    wl, space = _gemm_space()
    settings = MeasureSettings(repeat=1, min_repeat_ms=0, build_timeout=4, run_timeout=10)
    configs = [_cfg(space, 0, 1), _cfg(space, 16, 2), _cfg(space, 64, 3), _cfg(space, 512, 4), _cfg(space, 0, 5)]
    pool.warm_up()
    with LocalMeasurer(wl, space, host_target(), settings, pool=pool,
                       builder="tiletune.testing:faulty_build") as m:
        res = m.measure(configs)
        assert [r.error for r in res] == [None, "build-error", "build-timeout", "wrong-answer", None]
        assert "crashed" in res[1].message
        assert "max abs error" in res[3].message
        assert m.stats["worker_restarts"] >= 2
        # replaced workers keep working
        again = m.measure([_cfg(space, 0, 6)])
        assert again[0].ok


def test_run_faults_are_recorded(pool):
    wl, space = _gemm_space()
    settings = MeasureSettings(repeat=1, min_repeat_ms=0, build_timeout=20, run_timeout=3)
    configs = [_cfg(space, 16, 1), _cfg(space, 64, 2), _cfg(space, 0, 3)]
    pool.warm_up()
    with LocalMeasurer(wl, space, host_target(), settings, pool=pool,
                       builder="tiletune.testing:faulty_build_marking", runner="tiletune.testing:faulty_run") as m:
        res = m.measure(configs)
    assert [r.error for r in res] == ["run-error", "run-timeout", None]


def test_tuning_run_survives_faults_and_records_them(tmp_path, pool):
    wl, space = _gemm_space()
    settings = MeasureSettings(repeat=1, min_repeat_ms=0, build_timeout=4, run_timeout=10)
    pool.warm_up()
    rec = tmp_path / "r.jsonl"
    strat = create("grid", space, options={"stride": "97"})
    with LocalMeasurer(wl, space, host_target(), settings, pool=pool,
                       builder="tiletune.testing:faulty_build") as m:
        run = tune(space=space, strategy=strat, measurer=m, workload=wl.key, flops=wl.flops, trials=8,
                   batch_size=8, records=rec)
    kinds = {r.error for r in run.history}
    assert run.trials == 8 and run.best is not None
    assert {"build-error", "build-timeout", "wrong-answer"} <= kinds
    from tiletune.records import load

    assert len(load(rec)) == 8


@pytest.mark.parametrize("levels", [(2, 1), (1, 1), (3, 3), (5, 2)])
def test_other_level_counts_compile_and_match_numpy(levels, pool):
    """--levels other than (4, 2): the template must still build correct kernels (2 spatial levels used
    to fail: the accumulator's attach loop had been fused into the parallel loop)."""
    settings = MeasureSettings(repeat=1, min_repeat_ms=0)
    for spec in ("gemm:M=24,N=20,K=18", "conv2d:N=1,C=4,H=9,W=9,K=6,R=3,S=3,stride=2,pad=1"):
        wl = parse(spec)
        space = make_space(wl, levels)
        configs = space.sample_unique(np.random.default_rng(1), 3)
        with LocalMeasurer(wl, space, host_target(), settings, pool=pool) as m:
            results = m.measure(configs)
        assert all(r.error in (None, "invalid") for r in results), [(r.error, r.message) for r in results]
        assert any(r.ok for r in results)


def test_early_cut_off_uses_the_measurers_best_so_far(pool):
    """The first kernel gets every sample and becomes the best so far; a kernel clearly slower than the
    best gets one sample (its warm-up), one not slower gets every sample; cutoff=0 turns it off."""
    wl, space = _gemm_space()
    configs = [_cfg(space, 0, i) for i in (1, 2, 3, 4)]
    settings = MeasureSettings(repeat=3, min_repeat_ms=2)
    with LocalMeasurer(wl, space, host_target(), settings, pool=pool) as m:
        (first,) = m.measure(configs[:1])
        assert first.ok and len(first.costs) == 3 and m.best_s == first.median
        m.best_s = first.median / 1000  # as if a kernel 1000x faster had been measured
        (slow,) = m.measure(configs[1:2])
        assert slow.ok and len(slow.costs) == 1 and slow.costs[0] > 0
        m.best_s = 10.0  # every kernel of this size is faster than 10 s
        (fast,) = m.measure(configs[2:3])
        assert fast.ok and len(fast.costs) == 3 and m.best_s == fast.median
    with LocalMeasurer(wl, space, host_target(), MeasureSettings(repeat=3, min_repeat_ms=2, cutoff=0),
                       pool=pool) as m:
        m.best_s = 1e-12
        (off,) = m.measure(configs[3:4])
        assert off.ok and len(off.costs) == 3


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or not os.path.isdir("/proc/self"),
                    reason="needs torch installed and /proc")
def test_workers_do_not_load_torch(pool):
    """tvm_ffi imports torch when it is installed (most of TVM's import time); the workers never use it."""
    pool.warm_up()
    for w in pool.workers:
        with open(f"/proc/{w.proc.pid}/maps") as f:
            assert "libtorch" not in f.read()


def test_measurement_builds_leave_out_argument_checks_that_user_libraries_keep():
    import tvm

    from tiletune.measure.local import build_kernel, run_kernel
    from tiletune.schedules import build

    wl = parse("gemm:M=16,N=16,K=8")
    space, target = make_space(wl), host_target()
    config = space.untiled()
    user = build(wl, space, config, target).mod
    with pytest.raises(ValueError, match="argument #0"):  # a wrong argument is refused, not read out of bounds
        user["main"](*(tvm.runtime.tensor(np.zeros((4, 4), "float32")) for _ in range(3)))
    measured = build_kernel(wl, space, config, target)
    assert "Expected" in user.inspect_source("ll") and "Expected" not in measured.inspect_source("ll")
    assert len(run_kernel(wl, measured, MeasureSettings(repeat=1, min_repeat_ms=1))) == 1  # and it is right


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_a_worker_goes_quiet_after_running_a_kernel(monkeypatch):
    """TVM's pool threads spin after every parallel call (TVM's default: ~250 ms of a core); in a worker
    they must go to sleep within milliseconds, or they compete with the other workers' builds and timings."""
    import time

    from tiletune.measure.local import WorkerPool

    monkeypatch.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
    wl, space = _gemm_space()
    pool = WorkerPool(1, threads=2)
    try:
        with LocalMeasurer(wl, space, host_target(), MeasureSettings(repeat=1, min_repeat_ms=1), pool=pool) as m:
            config = space.from_dict({**space.to_dict(_cfg(space, 16)), "tile_m": (2, 1, 1, 8)})  # parallel
            (r,) = m.measure([config])
            assert r.ok
            pid = pool.workers[0].proc.pid
            before = _cpu_seconds(pid)
            time.sleep(1.0)
            assert _cpu_seconds(pid) - before < 0.08
    finally:
        pool.close()
