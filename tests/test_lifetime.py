"""Worker processes end with their parent, however it ends, and enforce their own job deadlines."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tiletune.lifetime import EXIT_DEADLINE, EXIT_ORPHANED, job_deadline
from tiletune.measure.local import LocalMeasurer, WorkerPool
from tiletune.schedules.cpu import choice_knobs
from tiletune.space import Space
from tiletune.target import host_target
from tiletune.workloads import parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _python(code: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=ENV, stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, **kw)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs and is not a zombie (a process that exits while it is looked at does not run)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_within(pids, seconds: float) -> list[int]:
    """The pids still running (not zombies) after ``seconds``."""
    end = time.monotonic() + seconds
    left = list(pids)
    while left and time.monotonic() < end:
        left = [p for p in left if _running(p)]
        time.sleep(0.1)
    return left


def _kill_all(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


CHILD = """
    import sys, time
    from tiletune.lifetime import die_with_parent
    die_with_parent(death_signal={death_signal})
    print("child up", flush=True)
    time.sleep(60)
"""

PARENT = """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", {child!r}], stdout=sys.stdout)
    print(child.pid, flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("death_signal", [True, False])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_child_ends_with_its_killed_parent(sig, death_signal):
    """With the parent-death signal, and with the watchdog thread alone."""
    parent = _python(PARENT.format(child=textwrap.dedent(CHILD.format(death_signal=death_signal))))
    child = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline().strip() == "child up"
        os.kill(parent.pid, sig)
        parent.wait(5)
        assert _gone_within([child], 3.0) == []
    finally:
        _kill_all([child, parent.pid])


def test_an_overrun_job_ends_the_process():
    p = _python("""
        import time
        from tiletune.lifetime import die_with_parent
        line = die_with_parent()
        line.arm(0.3, "test job")
        time.sleep(0.1)
        line.disarm()      # a job within its deadline: nothing happens
        time.sleep(0.5)
        line.arm(0.3, "test job")
        time.sleep(30)
    """, stderr=subprocess.PIPE)
    try:
        assert p.wait(10) == EXIT_DEADLINE
        assert "test job exceeded its deadline" in p.stderr.read()
    finally:
        _kill_all([p.pid])


def test_a_multiprocessing_child_watches_its_multiprocessing_parent(tmp_path):
    """A forkserver child's parent is the fork server: the owner is the multiprocessing parent."""
    script = tmp_path / "mp.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, os, sys, time
        from tiletune.lifetime import die_with_parent

        def child(q):
            line = die_with_parent()
            q.put((line.owner, line.parent, os.getpid()))
            time.sleep(60)

        if __name__ == "__main__":
            ctx = multiprocessing.get_context("forkserver")
            q = ctx.Queue()
            ctx.Process(target=child, args=(q,)).start()
            owner, parent, pid = q.get(timeout=60)
            print(owner == os.getpid(), parent != os.getpid(), pid, flush=True)
            time.sleep(60)
    """))
    p = subprocess.Popen([sys.executable, str(script)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        same, other, pid = parent_line = p.stdout.readline().split()
        assert (same, other) == ("True", "True"), parent_line
        os.kill(p.pid, signal.SIGKILL)
        p.wait(5)
        assert _gone_within([int(pid)], 3.0) == []
    finally:
        _kill_all([p.pid])


def test_orphan_exit_code():
    """A process whose owner is already gone exits at once."""
    p = _python("""
        from tiletune.lifetime import die_with_parent
        die_with_parent(2 ** 22 + 12345)  # no such process
        print("still here")
    """)
    assert p.wait(10) == EXIT_ORPHANED
    assert p.stdout.read() == ""


TUNING = """
    import sys
    from tiletune.measure import MeasureSettings
    from tiletune.measure.local import LocalMeasurer
    from tiletune.schedules.cpu import choice_knobs
    from tiletune.space import Space
    from tiletune.target import host_target
    from tiletune.workloads import parse

    wl = parse("gemm:M=16,N=16,K=8")
    space = Space.from_axes(wl.axes(), choices=choice_knobs(wl))
    d = space.to_dict(space.get(3))
    d["unroll"] = 64  # tiletune.testing: the build (faulty_build) or the run (faulty_run) hangs
    settings = MeasureSettings(repeat=1, min_repeat_ms=0, build_timeout=600, run_timeout=600)
    m = LocalMeasurer(wl, space, host_target(), settings, build_workers=2, builder={builder!r},
                      runner={runner!r})
    m.warm_up()
    print(" ".join(str(w.proc.pid) for w in m.pool.workers), flush=True)
    m.measure([space.from_dict(d)])
"""


@pytest.mark.tvm
@pytest.mark.parametrize("phase,sig", [("build", signal.SIGKILL), ("run", signal.SIGTERM)])
def test_no_worker_outlives_a_killed_tuning_process(phase, sig):
    builder, runner = (("tiletune.testing:faulty_build", "tiletune.measure.local:run_kernel") if phase == "build"
                       else ("tiletune.testing:faulty_build_marking", "tiletune.testing:faulty_run"))
    p = _python(TUNING.format(builder=builder, runner=runner))
    workers: list[int] = []
    try:
        workers = [int(x) for x in p.stdout.readline().split()]
        assert len(workers) == 2
        time.sleep(2.5)  # the workers are warm: one is inside the hung job by now
        os.kill(p.pid, sig)
        p.wait(5)
        assert _gone_within(workers, 5.0) == []
    finally:
        _kill_all(workers + [p.pid])


@pytest.mark.tvm
def test_a_worker_ends_a_job_past_its_deadline_by_itself():
    """The parent is stuck (it does not kill the worker at the timeout): the worker exits on its own."""
    wl = parse("gemm:M=16,N=16,K=8")
    space = Space.from_axes(wl.axes(), choices=choice_knobs(wl))
    d = space.to_dict(space.get(3))
    d["unroll"] = 64  # faulty_build hangs
    pool = WorkerPool(1)
    try:
        m = LocalMeasurer(wl, space, host_target(), pool=pool, builder="tiletune.testing:faulty_build")
        w = pool.workers[0]
        assert w.wait_ready()
        t0 = time.monotonic()
        w.send(("build", m._blob, 1, space.from_dict(d), 0.5))
        assert w.proc.wait(job_deadline(0.5) + 10) == EXIT_DEADLINE
        assert time.monotonic() - t0 >= job_deadline(0.5) - 0.5
    finally:
        pool.close()


FEATURES = """
import sys, threading, time
from tiletune.features import TVMExtractor, itervar
from tiletune.schedules.cpu import choice_knobs
from tiletune.space import Space
from tiletune.target import host_target
from tiletune.workloads import parse

itervar.lower = lambda *a, **k: time.sleep(3600)  # a hung lowering (the fork server imports this module)

if __name__ == "__main__":
    wl = parse("gemm:M=16,N=16,K=8")
    space = Space.from_axes(wl.axes(), choices=choice_knobs(wl))
    ext = TVMExtractor("curve", space, wl, host_target(), workers=2)
    ext.start()
    threading.Thread(target=ext.extract, args=([space.get(1), space.get(2)],), daemon=True).start()
    print(" ".join(str(p.pid) for p in ext._pool._pool), flush=True)
    time.sleep(60)
"""


@pytest.mark.tvm
def test_no_feature_worker_outlives_a_killed_tuning_process(tmp_path):
    script = tmp_path / "features_hang.py"
    script.write_text(FEATURES)
    p = subprocess.Popen([sys.executable, str(script)], env=ENV, stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        workers = [int(x) for x in p.stdout.readline().split()]
        assert len(workers) == 2
        time.sleep(5.0)  # the workers import TVM, then hang in the lowering
        os.kill(p.pid, signal.SIGKILL)
        p.wait(5)
        assert _gone_within(workers, 5.0) == []
    finally:
        _kill_all(workers + [p.pid])
