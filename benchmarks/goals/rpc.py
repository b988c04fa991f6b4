"""Trials per second through TVM's RPC (loopback: one and two servers) against local measurement, on the same
workload, strategy, seed and trial budget.

    python benchmarks/goals/rpc.py --out rpc-bench.jsonl [--workload gemm:M=256,N=256,K=256] [--trials 64]
                             [--modes local,rpc1,rpc2] [--rounds 1]

For each mode and round it tunes the workload with random search (seed = round) and appends one JSON line to
--out: mode, trials, errors, wall seconds (warm: workers, tracker and servers started before the clock),
trials/s, build and run phase seconds, best GFLOPS, and how many kernels each device measured. A (mode, round)
already in --out is skipped, so an interrupted run resumes; at the end it prints the table of what --out holds.

The tracker and servers are started here on 127.0.0.1 (TVM's own, in their own process groups) and stopped at
the end of each mode, also on errors. On loopback the servers share this machine's cores with the build
workers: this measures the overhead of the RPC path (upload, load, round trips) and the overlap of several
devices, not a farm's speed-up. Each server runs kernels with TVM_NUM_THREADS = cores / servers, the local
workers with all cores (the local measurer runs one kernel at a time).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tiletune.bench.results import read_jsonl
from tiletune.measure.base import MeasureSettings
from tiletune.measure.factory import make_measurer
from tiletune.measure.rpc import RPCMeasurer, Tracker
from tiletune.schedules import make_space
from tiletune.session import RunSpec, run
from tiletune.target import host_cores, host_target
from tiletune.workloads import parse

HOST = "127.0.0.1"
KEY = "bench"
STARTUP_S = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _start(args: list[str], threads: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "TVM_NUM_THREADS": str(threads)})


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(10)


def _wait(what, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if what():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    raise TimeoutError("the RPC tracker or servers did not start")


def start_farm(servers: int, server_args: tuple[str, ...] = ()) -> tuple[str, list[subprocess.Popen]]:
    """A tracker and ``servers`` servers on 127.0.0.1: (``HOST:PORT:KEY``, their processes). ``server_args`` go
    to each ``tvm.exec.rpc_server`` (e.g. ``("--no-fork",)``)."""
    port = _free_port()
    procs = [_start(["tvm.exec.rpc_tracker", "--host", HOST, "--port", str(port), "--port-end", str(port + 1),
                     "--silent"], 1)]
    rpc = f"{HOST}:{port}:{KEY}"
    try:
        deadline = time.monotonic() + STARTUP_S
        _wait(lambda: Tracker.parse(rpc).summary(timeout=2.0) is not None, deadline)
        threads = max(1, host_cores() // servers)
        for _ in range(servers):
            sp = _free_port()
            procs.append(_start(["tvm.exec.rpc_server", "--host", HOST, "--port", str(sp), "--port-end", str(sp + 1),
                                 "--tracker", f"{HOST}:{port}", "--key", KEY, "--silent", *server_args], threads))
        _wait(lambda: len(Tracker.parse(rpc).servers()) >= servers, deadline)
    except BaseException:
        _stop(procs)
        raise
    return rpc, procs


def measure(mode: str, wl, trials: int, seed: int) -> dict:
    space = make_space(wl)
    target = host_target()
    settings = MeasureSettings()
    procs: list[subprocess.Popen] = []
    try:
        if mode == "local":
            m = make_measurer(wl, space, target, settings=settings)
        else:
            rpc, procs = start_farm(int(mode[3:]))
            m = RPCMeasurer(wl, space, target, settings, rpc=rpc)
        try:
            m.warm_up()
            spec = RunSpec(workload=wl, strategy="random", trials=trials, seed=seed, records=None, settings=settings)
            t0 = time.perf_counter()
            res = run(spec, measurer=m)
            wall = time.perf_counter() - t0
        finally:
            m.close()
    finally:
        _stop(procs)
    return {"mode": mode, "round": seed, "workload": wl.key, "trials": res.trials, "errors": res.errors,
            "wall_s": round(wall, 3), "trials_per_s": round(res.trials / wall, 3),
            "build_s": round(m.stats["build_s"], 3), "run_s": round(m.stats["run_s"], 3),
            "best_gflops": round(res.best_gflops, 2), "devices": m.stats.get("devices", {}),
            "cores": host_cores()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON Lines file, appended to (resumable)")
    ap.add_argument("--workload", default="gemm:M=256,N=256,K=256")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--modes", default="local,rpc1,rpc2", help="local, rpcN (N loopback servers), comma-separated")
    ap.add_argument("--rounds", type=int, default=1, help="runs per mode (seeds 0..N-1)")
    a = ap.parse_args(argv)
    modes = [x.strip() for x in a.modes.split(",") if x.strip()]
    for mode in modes:
        if mode != "local" and not (mode.startswith("rpc") and mode[3:].isdigit() and int(mode[3:]) >= 1):
            ap.error(f"unknown mode {mode!r}: local or rpcN")
    wl = parse(a.workload)
    out = Path(a.out)
    done = {(row["mode"], row["round"]) for row in read_jsonl(out)
            if row.get("workload") == wl.key and row.get("trials") == a.trials}
    for rnd in range(a.rounds):
        for mode in modes:
            if (mode, rnd) in done:
                continue
            row = measure(mode, wl, a.trials, rnd)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{mode:6s} round {rnd}: {row['trials_per_s']:.2f} trials/s ({row['trials']} trials, "
                  f"{row['errors']} errors, {row['wall_s']:.1f} s), best {row['best_gflops']:.1f} GFLOPS", flush=True)
    rows = read_jsonl(out)
    print(f"\n{'mode':6s} {'round':>5s} {'trials/s':>9s} {'build s':>8s} {'run s':>7s} {'GFLOPS':>7s}  devices")
    for r in rows:
        if r.get("workload") == wl.key:
            print(f"{r['mode']:6s} {r['round']:5d} {r['trials_per_s']:9.2f} {r['build_s']:8.1f} {r['run_s']:7.1f} "
                  f"{r['best_gflops']:7.1f}  {r['devices']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
