"""Foundation figures: measurement throughput and GEMM quality against numpy/OpenBLAS.

    python benchmarks/goals/foundation.py throughput [--trials 64 --size 256 --cutoff X --warmup-ms W --batch-size B]
        tunes GEMM size^3 with random search and prints trials per second, warm (workers started) and
        including the workers' start-up, with the build/run split (--cutoff: MeasureSettings.cutoff,
        0 = every kernel gets all its samples; --warmup-ms: MeasureSettings.warmup_ms).
    python benchmarks/goals/foundation.py quality [--strategy random --trials 200 --records g1024.jsonl]
        tunes GEMM 1024^3 (resumable through the records file), then times the best kernel in this process
        and numpy's matmul in its own process (tiletune.bench.vendor) alternately (--rounds times) and prints
        both and the ratio.
    python benchmarks/goals/foundation.py compile [--configs 48 --size 256]
        compiles the same random configurations of GEMM size^3 in this process with and without the
        entry function's argument checks (schedules.build's arg_checks), alternating, and prints the CPU
        seconds per configuration of each (lowering + LLVM, then machine code) and the ratio.

Not a test: it prints figures. The machine is shared and noisy, so compare the ratios of one run.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tiletune.measure.base import MeasureSettings
from tiletune.session import RunSpec, run
from tiletune.workloads import parse as parse_workload


def throughput(args) -> None:
    from tiletune.measure.factory import make_measurer
    from tiletune.schedules import make_space
    from tiletune.target import host_target
    from tiletune.workloads import parse

    wl = parse(f"gemm:M={args.size},N={args.size},K={args.size}")
    space = make_space(wl)
    settings = MeasureSettings(**{k: v for k, v in (("cutoff", args.cutoff), ("warmup_ms", args.warmup_ms))
                                  if v is not None})
    t_start = time.perf_counter()
    m = make_measurer(wl, space, host_target(), settings=settings)
    m.warm_up()
    startup = time.perf_counter() - t_start
    spec = RunSpec(workload=wl.key, strategy="random", trials=args.trials, seed=args.seed, records=None,
                   batch_size=args.batch_size)
    t0 = time.perf_counter()
    res = run(spec, measurer=m)
    wall = time.perf_counter() - t0
    m.close()
    print(f"GEMM {args.size}^3, random, {res.trials} trials ({res.errors} errors)")
    print(f"  worker start-up (once): {startup:.2f} s")
    print(f"  tuning wall time: {wall:.2f} s -> {res.trials / wall:.2f} trials/s warm, "
          f"{res.trials / (wall + startup):.2f} trials/s including start-up")
    print(f"  build phase {m.stats['build_s']:.2f} s (parallel over workers), run phase {m.stats['run_s']:.2f} s")
    print(f"  best {res.best_gflops:.1f} GFLOPS")


def compile_cost(args) -> None:
    import tvm

    from tiletune.schedules import build, make_space
    from tiletune.schedules.cpu import InvalidConfig, check
    from tiletune.target import host_target

    wl = parse_workload(f"gemm:M={args.size},N={args.size},K={args.size}")
    space, target = make_space(wl), host_target()
    rng, configs = np.random.default_rng(args.seed), []
    while len(configs) < args.configs:
        c = space.sample(rng)
        try:
            check(wl, space, c)
            configs.append(c)
        except InvalidConfig:
            pass
    cpu = {True: [], False: []}
    for c in configs:
        for checks in (True, False):
            t0 = time.process_time()
            build(wl, space, c, target, arg_checks=checks).mod["main"]  # look-up: machine code generated
            cpu[checks].append(time.process_time() - t0)
    with_, without = sum(cpu[True]) / len(configs), sum(cpu[False]) / len(configs)
    print(f"GEMM {args.size}^3, {len(configs)} random configurations, compiled in this process (tvm {tvm.__version__})")
    print(f"  with argument checks:    {with_ * 1e3:.0f} ms CPU per configuration "
          f"(median {statistics.median(cpu[True]) * 1e3:.0f})")
    print(f"  without (measurement):   {without * 1e3:.0f} ms CPU per configuration "
          f"(median {statistics.median(cpu[False]) * 1e3:.0f})")
    print(f"  ratio {without / with_:.2f}")


def _time(fn, n: int) -> float:
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def quality(args) -> None:
    from tiletune.api import export_best, load_kernel, set_threads

    set_threads()  # before TVM's thread pool starts in this process (see tiletune.api.set_threads)
    import tvm

    from tiletune.workloads import parse

    wl = parse(f"gemm:M={args.size},N={args.size},K={args.size}")
    spec = RunSpec(workload=wl.key, strategy=args.strategy, trials=args.trials, seed=args.seed,
                   records=args.records, options=dict(o.split("=", 1) for o in args.option))
    t0 = time.perf_counter()
    res = run(spec)
    print(f"tuned {wl.key} with {args.strategy}: {res.trials} trials ({res.measured} measured) in "
          f"{time.perf_counter() - t0:.0f} s; best during tuning {res.best_gflops:.1f} GFLOPS")
    lib = args.records + ".so"
    meta = export_best(args.records, lib)
    k = load_kernel(lib)
    dev = tvm.cpu()
    a, b = wl.make_inputs()
    ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
    tc = tvm.runtime.tensor(np.zeros((wl.M, wl.N), "float32"), dev)
    f = k._lib["main"]
    from tiletune.bench.vendor import vendor as vendor_baseline

    ours, vendor = [], []
    for _ in range(args.rounds):
        ours.append(wl.flops / _time(lambda: f(ta, tb, tc), 10) / 1e9)
        v = vendor_baseline(wl, MeasureSettings(repeat=10, min_repeat_ms=0))  # its own process, checked
        vendor.append(v.gflops(wl.flops))
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=1e-3, atol=1e-2)
    ratios = [o / v for o, v in zip(ours, vendor)]
    print(f"best config {meta['config']}")
    print(f"ours   GFLOPS per round: {[round(x, 1) for x in ours]}")
    print(f"numpy  GFLOPS per round: {[round(x, 1) for x in vendor]}  ({v.label})")
    print(f"ratio ours/numpy per round: {[round(x, 2) for x in ratios]}; median {statistics.median(ratios):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--trials", type=int, default=64)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--size", type=int, default=256, help="GEMM M = N = K (default: 256)")
    t.add_argument("--cutoff", type=float, default=None,
                   help="MeasureSettings.cutoff (default: its default; 0 = no early cut-off)")
    t.add_argument("--warmup-ms", type=float, default=None, help="MeasureSettings.warmup_ms (default: its default)")
    t.add_argument("--batch-size", type=int, default=RunSpec.batch_size, help="configurations per measured batch (default: random search's own)")
    q = sub.add_parser("quality")
    q.add_argument("--size", type=int, default=1024)
    q.add_argument("--strategy", default="random")
    q.add_argument("--option", action="append", default=[])
    q.add_argument("--trials", type=int, default=200)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--records", default="g1024.jsonl")
    q.add_argument("--rounds", type=int, default=5)
    c = sub.add_parser("compile")
    c.add_argument("--configs", type=int, default=48)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--size", type=int, default=256, help="GEMM M = N = K (default: 256)")
    args = p.parse_args()
    {"throughput": throughput, "quality": quality, "compile": compile_cost}[args.what](args)


if __name__ == "__main__":
    main()
