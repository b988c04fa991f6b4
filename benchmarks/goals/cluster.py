"""The cluster path (tiletune.measure.cluster) against the local worker pool on this machine, and by simulation,
trials/s against the size of a cluster of machines like this one (up to 64 nodes).

    python benchmarks/goals/cluster.py measure [--rounds 3] [--workload gemm:M=1024,N=1024,K=1024] [--configs 32]
    python benchmarks/goals/cluster.py costs [--model resnet50] [--per-task 2]
    python benchmarks/goals/cluster.py simulate

``measure``: each round measures the same ``--configs`` configurations (random, seed = round) in batches of
``--batch`` with the local pool and with the cluster path, each in its own process, taking turns (the order
alternates by round); the cluster is a one-node Ray cluster on 127.0.0.1 with this machine's cores, started and
stopped by that process. Both pools are warm before the clock (workers started, TVM imported). One JSON line per
(mode, round) in ``throughput.jsonl``: wall seconds of the measure calls, trials/s, every trial's build and run
seconds; the cluster's process also measures Ray's per-call cost (sequential no-op actor calls: round trip; 1000
calls in flight: the driver's cost per call) and the bytes a trial sends (its configuration, its result) and a
job's context (sent once). A (mode, round) already there is skipped.

``costs``: the compile and run seconds of ``--per-task`` random configurations of every task of ``--model``
(measured here with the local pool), and the tuning loop's own cost per trial on the driver (random search, a
cost function instead of the hardware, records written): ``model-costs.json``, ``driver.json``.

``simulate``: trials/s of a tuning run on N nodes (each this machine: its cores as build workers; N = 1..64) from
the measured inputs, for GEMM 1024^3 (the per-trial costs of ``measure``) and for resnet50's tasks (``costs``).
The model is the cluster path as implemented: a batch of B = 4 x workers configurations is built over every
worker (list scheduling; each call one Ray round trip plus its bytes over the network), then run one at a time per
node (each node its own kernels); the driver spends the measured Ray per-call cost on every call and its per-trial
loop cost after every batch, serially. resnet50: the rounds go to the tasks in turn (each round one batch of one
task). Assumed, not measured: the network (NETWORK_RTT_S round trip, NETWORK_BPS), identical nodes.
Efficiency(N) = trials/s(N) / (N x trials/s(1)). Writes ``scaling.json`` and prints the table.

Everything goes to benchmarks/out/cluster/ (``--out``); ``throughput.jsonl`` is committed as ``throughput.jsonl.gz``
(written back to the plain file before a run appends to it).
"""
from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import numpy as np

from tiletune.bench.results import read_jsonl
from tiletune.measure.base import MeasureSettings
from tiletune.measure.cluster import STEAL_MIN
from tiletune.measure.local import LocalMeasurer, WorkerPool
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.schedules import make_space
from tiletune.strategies import create
from tiletune.target import host_cores, host_target
from tiletune.tune import tune
from tiletune.workloads import parse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # benchmarks/common/: gzjsonl
from gzjsonl import unpack  # noqa: E402  (throughput.jsonl is committed as throughput.jsonl.gz)

OUT = Path(__file__).resolve().parents[1] / "out" / "cluster"
NETWORK_RTT_S = 200e-6  # assumed: a round trip between two machines of one rack/LAN
NETWORK_BPS = 1e9 / 8  # assumed: 1 Gbit/s per node
NODES = (1, 2, 4, 8, 16, 32, 64)
BATCH_PER_WORKER = (4, 16)  # configurations per batch and worker of the cluster (--batch-size, --round)
BATCH_MEASURED = 8  # the batch size of 'measure' (its first batch runs before the early cut-off has a best)


# ---- measure: local pool vs cluster path on this machine ---------------------------------------------------

def _configs(workload: str, n: int, seed: int):
    wl = parse(workload)
    space = make_space(wl, target=host_target())
    return wl, space, space.sample_unique(np.random.default_rng(seed), n)


def _ray_costs(ray) -> dict:
    """Ray's cost per actor call here: sequential round trip, and the driver's cost per call with many in flight."""

    @ray.remote(num_cpus=0)
    class Noop:
        def call(self, x):
            return x

    actors = [Noop.remote() for _ in range(2)]
    ray.get([a.call.remote(0) for a in actors])
    t0 = time.perf_counter()
    for i in range(300):
        ray.get(actors[i % 2].call.remote(i))
    rtt = (time.perf_counter() - t0) / 300
    t0 = time.perf_counter()
    ray.get([actors[i % 2].call.remote(i) for i in range(1000)])
    per_call = (time.perf_counter() - t0) / 1000
    for a in actors:
        ray.kill(a)
    return {"ray_call_rtt_s": rtt, "ray_driver_s_per_call": per_call}


def measure_one(args) -> dict:
    """One (mode, round) in this process."""
    wl, space, configs = _configs(args.workload, args.configs, args.round)
    target = host_target()
    settings = MeasureSettings()
    extra: dict = {}
    ray = None
    if args.mode == "cluster":
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray process on 127.0.0.1
        import ray

        from tiletune.measure.cluster import RayPool

        ray.init(address="local", num_cpus=host_cores(), include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False, logging_level="WARNING", configure_logging=False)
        pool = RayPool("auto", target)
    else:
        pool = WorkerPool(host_cores(), threads=host_cores())
    try:
        pool.warm_up()
        m = LocalMeasurer(wl, space, target, settings, pool=pool)
        results, t = [], 0.0
        for i in range(0, len(configs), args.batch):
            t0 = time.perf_counter()
            results += m.measure(configs[i:i + args.batch])
            t += time.perf_counter() - t0
        if ray is not None:
            extra = _ray_costs(ray)
            extra["config_bytes"] = statistics.mean(len(cloudpickle.dumps(c)) for c in configs)
            extra["result_bytes"] = statistics.mean(len(cloudpickle.dumps(("ok", list(r.costs)))) for r in results)
            extra["context_bytes"] = len(m._blob)
    finally:
        pool.close()
        if ray is not None:
            ray.shutdown()
    return {"mode": args.mode, "round": args.round, "workload": args.workload, "trials": len(configs),
            "errors": sum(1 for r in results if not r.ok), "wall_s": t, "trials_per_s": len(configs) / t,
            "build_s": [r.build_s for r in results], "run_s": [r.run_s for r in results],
            "machine": f"{host_cores()} cores", "date": time.strftime("%Y-%m-%d"), **extra}


def measure(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "throughput.jsonl"
    unpack(path)
    for r in range(args.rounds):
        modes = ("local", "cluster") if r % 2 == 0 else ("cluster", "local")
        for mode in modes:
            if any(x["mode"] == mode and x["round"] == r and x["workload"] == args.workload for x in read_jsonl(path)):
                continue
            cmd = [sys.executable, __file__, "measure-one", "--mode", mode, "--round", str(r), "--workload",
                   args.workload, "--configs", str(args.configs), "--batch", str(args.batch)]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            with open(path, "a") as f:
                f.write(line + "\n")
            row = json.loads(line)
            print(f"round {r} {mode:8s} {row['trials_per_s']:.3f} trials/s ({row['errors']} errors)", flush=True)
    throughput_table(path, args.workload)


def throughput_table(path: Path, workload: str) -> dict:
    rows = [x for x in read_jsonl(path) if x["workload"] == workload]
    by_round: dict[int, dict] = {}
    for x in rows:
        by_round.setdefault(x["round"], {})[x["mode"]] = x
    ratios, overhead = [], []
    for r, pair in sorted(by_round.items()):
        if len(pair) == 2:
            lo, cl = pair["local"], pair["cluster"]
            ratios.append(cl["trials_per_s"] / lo["trials_per_s"])
            overhead.append((cl["wall_s"] - lo["wall_s"]) / cl["trials"])
            print(f"round {r}: local {lo['trials_per_s']:.3f}, cluster {cl['trials_per_s']:.3f} trials/s, "
                  f"ratio {ratios[-1]:.3f}, overhead {overhead[-1] * 1e3:+.1f} ms/trial")
    if ratios:
        print(f"{workload}: cluster / local throughput, median of {len(ratios)} rounds: {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}); overhead per trial: median "
              f"{statistics.median(overhead) * 1e3:+.1f} ms")
    return {"ratios": ratios, "overhead_s": overhead}


# ---- costs: a model's tasks, the driver's loop ---------------------------------------------------------------

def costs(args) -> None:
    from tiletune.model.kernels.tasks import load_model_tasks

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = host_target()
    _, tasks = load_model_tasks(args.model, target)
    rows = []
    pool = WorkerPool(host_cores(), threads=host_cores())
    try:
        for k in tasks.tasks:
            space = make_space(k.workload, target=target)
            configs = space.sample_unique(np.random.default_rng(0), args.per_task)
            with LocalMeasurer(k.workload, space, target, MeasureSettings(), pool=pool) as m:
                res = m.measure(configs)
            rows.append({"task": k.name, "calls": k.calls, "flops": k.flops,
                         "build_s": [r.build_s for r in res], "run_s": [r.run_s for r in res],
                         "errors": [r.error for r in res]})
            print(f"{k.name[:50]:50s} build {statistics.mean(rows[-1]['build_s']):.2f} s, "
                  f"run {statistics.mean(rows[-1]['run_s']):.2f} s", flush=True)
    finally:
        pool.close()
    (out / "model-costs.json").write_text(json.dumps({"model": args.model, "per_task": args.per_task,
                                                      "machine": f"{host_cores()} cores",
                                                      "date": time.strftime("%Y-%m-%d"), "tasks": rows}, indent=1))
    (out / "driver.json").write_text(json.dumps(driver_cost(out), indent=1))


def driver_cost(out: Path, trials: int = 512) -> dict:
    """The tuning loop's own seconds per trial on the driver: random search over GEMM 1024^3's space, a cost
    function for the hardware, every record written (fsync'ed) as it comes."""
    wl = parse("gemm:M=1024,N=1024,K=1024")
    space = make_space(wl, target=host_target())
    path = out / "driver-records.tmp.jsonl"
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    tune(space=space, strategy=create("random", space, seed=0), measurer=FunctionMeasurer(lambda c: 1e-3),
         workload=wl.key, flops=wl.flops, trials=trials, batch_size=64, records=path)
    per_trial = (time.perf_counter() - t0) / trials
    path.unlink(missing_ok=True)
    print(f"driver: {per_trial * 1e3:.2f} ms per trial (random search, records written)")
    return {"driver_s_per_trial": per_trial, "trials": trials, "strategy": "random"}


# ---- simulate ------------------------------------------------------------------------------------------------

def simulate_batch(samples: list[tuple[float, float]], nodes: int, cores: int, inputs: dict) -> float:
    """Seconds for one batch (``samples``: (build, run) seconds of each trial) on ``nodes`` nodes of ``cores``
    workers, as ``cluster.RayPool`` does it: each free worker takes the next trial to build (one Ray call: the round
    trip and the bytes); once none is left to build, each node whose builds are over runs its own kernels one at a
    time, and a node with nothing left takes the last kernel waiting on the node with the most waiting (at least
    ``STEAL_MIN``), builds it again and runs it; the batch ends with the last run. The driver spends its cost per
    call on every call (submit and result of each build and run), and its loop's cost per trial after the batch,
    serially."""
    d = inputs["ray_driver_s_per_call"]
    call = inputs["ray_call_rtt_s"] + NETWORK_RTT_S + (inputs["config_bytes"] + inputs["result_bytes"]) / NETWORK_BPS
    workers = nodes * cores
    free = [0.0] * workers
    last_build = [0.0] * nodes
    queues: list[list[tuple[float, float]]] = [[] for _ in range(nodes)]
    queue_empty = 0.0
    for j, (build, run) in enumerate(samples):
        w = min(range(workers), key=free.__getitem__)
        start = max(free[w], 2 * d * j)  # the driver submits the calls one after another
        queue_empty = start
        free[w] = start + build + call
        last_build[w // cores] = max(last_build[w // cores], free[w])
        queues[w // cores].append((build, run))
    heap = [(max(queue_empty, last_build[k]), k) for k in range(nodes)]
    heapq.heapify(heap)
    end = 0.0
    while heap:
        t, k = heapq.heappop(heap)
        if queues[k]:
            t += queues[k].pop(0)[1] + call
        else:
            donor = max(range(nodes), key=lambda n: len(queues[n]))
            if len(queues[donor]) < STEAL_MIN:
                end = max(end, t)
                continue
            build, run = queues[donor].pop()
            t += build + call + run + call
        heapq.heappush(heap, (t, k))
    end = max(end, 4 * d * len(samples))
    return end + len(samples) * inputs["driver_s_per_trial"]


def simulate_run(pick, nodes: int, cores: int, inputs: dict, batches: int, per_worker: int, rng) -> float:
    """trials/s over ``batches`` batches of ``per_worker`` x workers trials, ``pick(rng, n, i)`` giving batch i's
    (build, run) samples."""
    b = per_worker * nodes * cores
    t = sum(simulate_batch(pick(rng, b, i), nodes, cores, inputs) for i in range(batches))
    return b * batches / t


def simulate(args) -> None:
    out = Path(args.out)
    unpack(out / "throughput.jsonl")
    rows = [x for x in read_jsonl(out / "throughput.jsonl") if x["mode"] == "cluster"]
    if not rows:
        raise SystemExit(f"no cluster rows in {out / 'throughput.jsonl'}: run 'measure' first")
    gemm_rows = [x for x in rows if x["workload"] == "gemm:M=1024,N=1024,K=1024"] or rows
    driver = json.loads((out / "driver.json").read_text())
    model = json.loads((out / "model-costs.json").read_text())
    inputs = {k: statistics.median(x[k] for x in rows) for k in ("ray_call_rtt_s", "ray_driver_s_per_call",
                                                                 "config_bytes", "result_bytes", "context_bytes")}
    inputs["driver_s_per_trial"] = driver["driver_s_per_trial"]
    cores = host_cores()
    # steady state: the trials after each round's first batch, which the early cut-off applies to (as in a long run)
    gemm = [(b, r) for x in gemm_rows for b, r in list(zip(x["build_s"], x["run_s"]))[BATCH_MEASURED:]]
    tasks = [list(zip(t["build_s"], t["run_s"])) for t in model["tasks"] if t["build_s"]]

    def pick_gemm(rng, n, _):
        return [gemm[i] for i in rng.integers(0, len(gemm), n)]

    def pick_model(rng, n, i):  # round i goes to task i mod tasks: one batch of one task
        t = tasks[i % len(tasks)]
        return [t[j] for j in rng.integers(0, len(t), n)]

    table = {}
    for per_worker in BATCH_PER_WORKER:
        for name, pick, batches in (("gemm1024", pick_gemm, 20), (model["model"], pick_model, 2 * len(tasks))):
            thr = {n: simulate_run(pick, n, cores, inputs, batches, per_worker, np.random.default_rng(0)) for n in NODES}
            table[f"{name}, batch {per_worker}x"] = {n: {"trials_per_s": thr[n], "efficiency": thr[n] / (n * thr[1])}
                                                     for n in NODES}
    summary = {
        "inputs": {**inputs, "network_rtt_s (assumed)": NETWORK_RTT_S, "network_bytes_per_s (assumed)": NETWORK_BPS,
                   "cores_per_node": cores, "batch": [f"{k} x workers" for k in BATCH_PER_WORKER],
                   "gemm1024 build_s median": statistics.median(b for b, _ in gemm),
                   "gemm1024 run_s median": statistics.median(r for _, r in gemm),
                   f"{model['model']} tasks": len(tasks),
                   f"{model['model']} build_s median": statistics.median(b for t in tasks for b, _ in t),
                   f"{model['model']} run_s median": statistics.median(r for t in tasks for _, r in t)},
        "scaling": table, "date": time.strftime("%Y-%m-%d")}
    (out / "scaling.json").write_text(json.dumps(summary, indent=1))
    for k, v in summary["inputs"].items():
        print(f"{k:40s} {v:.4g}" if isinstance(v, float) else f"{k:40s} {v}")
    print("trials/s (efficiency) by nodes:")
    print(f"{'':28s}" + "".join(f"{n:>13d}" for n in NODES))
    for name, row in table.items():
        print(f"{name:28s}" + "".join(f"{row[n]['trials_per_s']:7.2f} ({row[n]['efficiency']:.2f})" for n in NODES))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("measure", "measure-one"):
        m = sub.add_parser(name)
        m.add_argument("--workload", default="gemm:M=1024,N=1024,K=1024")
        m.add_argument("--configs", type=int, default=32)
        m.add_argument("--batch", type=int, default=8)
        m.add_argument("--rounds", type=int, default=3)
        m.add_argument("--mode", choices=("local", "cluster"))
        m.add_argument("--round", type=int, default=0)
        m.add_argument("--out", default=str(OUT))
    c = sub.add_parser("costs")
    c.add_argument("--model", default="resnet50")
    c.add_argument("--per-task", type=int, default=2)
    c.add_argument("--out", default=str(OUT))
    s = sub.add_parser("simulate")
    s.add_argument("--out", default=str(OUT))
    args = p.parse_args()
    if args.cmd == "measure-one":
        print(json.dumps(measure_one(args)))
    elif args.cmd == "measure":
        measure(args)
    elif args.cmd == "costs":
        costs(args)
    else:
        simulate(args)


if __name__ == "__main__":
    main()
