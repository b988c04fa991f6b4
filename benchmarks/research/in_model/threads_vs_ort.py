"""A model built from records against ONNX Runtime at one and at two threads: whether a gap lies in the kernels
(both thread counts) or in the second thread (not a test).

    python benchmarks/research/in_model/threads_vs_ort.py --model resnet50 \
        -r [LAYOUT[+padkernels][+direct][+spinN][+thp]=]RECORDS [-r ...] [--threads 1,2] \
        [--alternate [--baselines torch,torch-compile,ort+thp] [--raw FILE.json]]

Each side in a child process of its own, one after the other, ``--rounds`` times alternating: ours (the model
built from the records in their layout, NHWC unless ``LAYOUT=`` names another, TVM_NUM_THREADS = the thread
count; one side per ``-r``; ``+padkernels``: the pads left kernels of their own, ``scheduled_module``'s
``fuse_pads=False``; ``+direct``: the 3x3 convolutions direct, not by Winograd's transforms,
``tiletune.model.passes.winograd.WINOGRAD`` off; ``+spinN``: TVM's pool threads spin N times after a parallel
call before they sleep, ``TVM_THREAD_POOL_SPIN_COUNT=N``, TVM's default 300,000; ``+thp``: glibc's allocations on
transparent huge pages, ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``) and ONNX Runtime (intra-op threads = the
thread count, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset as for every vendor baseline). A child times
``--calls`` single inferences after 10 warm ones and prints their min, 10th percentile, median and 90th
percentile in ms: on a shared host the minimum is the kernels' speed and the upper percentiles are the
neighbours'. The table goes to standard output. ``--alternate``: every side alive in its own process at once,
taking turns of ``--calls`` inferences, ``--rounds`` turns each (so that a drift of the host's speed falls on all
sides alike), with the speed ratio against ONNX Runtime per round; ``--baselines torch,torch-compile`` adds PyTorch
eager and torch.compile as sides of their own (as ``model bench`` runs them), ``ort+thp`` a second ONNX Runtime side
with ``+thp``; ``--raw FILE.json`` keeps every inference's time, per side and round.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tiletune.bench.vendor import UNSET_ENV  # noqa: E402


def parse_side(rec: str) -> tuple[str, list[str], str]:
    """``[LAYOUT[+MOD...]=]RECORDS`` as (LAYOUT, [MOD, ...], RECORDS)."""
    layout, _, records = rec.rpartition("=")
    layout, *mods = layout.split("+")
    return layout, mods, records


def setup(side: str, model: str, records: str, threads: int):
    """One single inference of ``side`` as a callable (ours: the model built from ``records``), warmed up."""
    layout, mods, records = parse_side(records)
    from tiletune.model.frontend.source import export_onnx, load, onnx_session

    src = load(model)
    if side in ("torch", "torch-compile"):
        from tiletune.model.evaluate.baselines import _torch_method

        prepare, call, _ = _torch_method(src, threads, compiled=side == "torch-compile")
        inputs = prepare(src.random_inputs(0))
        run = lambda: call(inputs)  # noqa: E731
    elif side == "ort":
        path = os.path.join(tempfile.mkdtemp(), "m.onnx")
        export_onnx(src, path)
        s = onnx_session(path, threads)
        feed = dict(zip([i.name for i in s.get_inputs()], src.random_inputs(0)))
        run = lambda: s.run(None, feed)  # noqa: E731
    else:
        import tvm

        from tiletune.model.build import ModelRunner, best_configs, compile_module, scheduled_module
        from tiletune.model.kernels.tasks import model_tasks
        from tiletune.target import host_target

        from tiletune.model.passes import winograd

        winograd.WINOGRAD = "direct" not in mods
        tasks = model_tasks(src, host_target(), layout or "NHWC", "float32")
        runner = ModelRunner(compile_module(scheduled_module(tasks, best_configs(tasks, records),
                                                                fuse_pads="padkernels" not in mods)[0], tasks.target))
        x = [tvm.runtime.tensor(a, runner.dev) for a in src.random_inputs(0)]
        run = lambda: runner.vm["main"](*x)  # noqa: E731
    for _ in range(10):
        run()
    return run


def timed(run, calls: int) -> list[float]:
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        run()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def child(side: str, model: str, records: str, threads: int, calls: int, serve: bool) -> None:
    """One side: ``calls`` single inferences, their min and percentiles printed; or (``serve``) "ready", then
    for every "run" line ``calls`` more, their times printed on one line, until the input ends."""
    run = setup(side, model, records, threads)
    if not serve:
        ts = timed(run, calls)
        print(" ".join(f"{v:.2f}" for v in (min(ts), *np.percentile(ts, [10, 50, 90]))))
        return
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            print(" ".join(f"{v:.3f}" for v in timed(run, calls)), flush=True)


class Turns:
    """Children alive at once, each started in its serving mode: it says "ready" when set up, then answers every
    "run" line with one line, and finishes when its input ends. ``turn(i)``: one turn of child ``i``, its answer;
    leaving the ``with`` closes every child's input and waits for it (killed after 2 minutes)."""

    def __init__(self, commands: list[tuple[list[str], dict]]):
        self.kids = [subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                     for cmd, env in commands]

    def __enter__(self):
        for i, k in enumerate(self.kids):
            if k.stdout.readline().strip() != "ready":
                self.__exit__()
                raise SystemExit(f"child {i} failed to start")
        return self

    def turn(self, i: int) -> str:
        self.kids[i].stdin.write("run\n")
        self.kids[i].stdin.flush()
        line = self.kids[i].stdout.readline()
        if not line:
            raise SystemExit(f"child {i} stopped")
        return line

    def __exit__(self, *exc) -> None:
        for k in self.kids:
            if not k.stdin.closed:
                k.stdin.close()
            try:
                k.wait(timeout=120)
            except subprocess.TimeoutExpired:
                k.kill()


def side_env(side: str, n: int, rec: str = "") -> dict:
    """The environment of a side's child at ``n`` threads: TVM_NUM_THREADS, TVM_THREAD_POOL_SPIN_COUNT where ``rec``
    names ``+spinN``, and for ONNX Runtime and torch, as for every vendor baseline, without ``UNSET_ENV``."""
    env = dict(os.environ, TVM_NUM_THREADS=str(n))
    for mod in parse_side(rec)[1]:
        if mod.startswith("spin"):
            env["TVM_THREAD_POOL_SPIN_COUNT"] = mod[4:]
        if mod == "thp":
            env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    if side != "ours":
        for v in UNSET_ENV:
            env.pop(v, None)
    return env


def _name(side: str, rec: str) -> str:
    if side != "ours":
        mods = parse_side(rec)[1]
        return ({"ort": "ONNX Runtime", "torch": "PyTorch eager", "torch-compile": "torch.compile"}[side]
                + "".join(f" +{m}" for m in mods))
    return f"ours ({rec.rpartition('=')[0] or 'NHWC'}, {Path(rec).name})"


def alternating(a, sides, n: int) -> None:
    """Every side alive in its own process at once; ``--rounds`` turns each of ``--calls`` inferences, the order
    rotating; per side the min and percentiles over all its inferences, and for each side but ONNX Runtime the speed
    ratio against it round by round (ORT's median over the side's, the median and range over the rounds)."""
    times = [[] for _ in sides]  # per side, per round, the turn's times
    order: list[str] = []  # the sides in the order their turns ran
    with Turns([([sys.executable, __file__, "--model", a.model, "-r", rec, "--calls", str(a.calls), "--side", side,
                  "--n", str(n), "--serve"], side_env(side, n, rec)) for side, rec in sides]) as turns:
        for r in range(a.rounds):
            for i in (list(range(len(sides)))[r % len(sides):] + list(range(len(sides)))[:r % len(sides)]):
                times[i].append([float(v) for v in turns.turn(i).split()])
                order.append(_name(*sides[i]))
    if a.raw:
        raw = json.loads(Path(a.raw).read_text()) if Path(a.raw).exists() else {}
        raw[str(n)] = {"turns": order, **{_name(side, rec): ts for (side, rec), ts in zip(sides, times)}}
        Path(a.raw).write_text(json.dumps(raw))
    for (side, rec), ts in zip(sides, times):
        flat = [v for t in ts for v in t]
        stats = (min(flat), *np.percentile(flat, [10, 50, 90]))
        row = f"| {n} | {_name(side, rec)} | " + " | ".join(f"{v:.2f}" for v in stats)
        if side == "ort":
            print(row + " | - |", flush=True)
            continue
        ratios = [np.median(o) / np.median(t) for o, t in zip(times[0], ts)]
        by_min = min(v for t in times[0] for v in t) / min(flat)
        print(row + f" | {np.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}); by the minima {by_min:.3f} |",
              flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-r", "--records", required=True, action="append", help="[LAYOUT=]RECORDS, one side each")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=150)
    ap.add_argument("--alternate", action="store_true",
                    help="every side alive at once, taking turns of --calls inferences, --rounds turns each")
    ap.add_argument("--baselines", default="", help="with --alternate: more sides, of torch and torch-compile")
    ap.add_argument("--raw", help="with --alternate: write every inference's time (ms) to this JSON file, per thread "
                                  "count and side, per round, in the order the turns ran")
    ap.add_argument("--side", choices=("ours", "ort", "torch", "torch-compile"),
                    help=argparse.SUPPRESS)  # a child's side (ours: its one -r)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a child of --alternate
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)  # a child's thread count
    a = ap.parse_args()
    if a.side:
        child(a.side, a.model, a.records[0], a.n, a.calls, a.serve)
        return 0
    sides = [("ort", "-")] + [("ours", r) for r in a.records]
    if a.alternate:
        for b in filter(None, a.baselines.split(",")):  # NAME[+MOD...]: e.g. ort+thp, a second ONNX Runtime side
            name, _, mods = b.partition("+")
            sides.append((name, f"+{mods}=-" if mods else "-"))
        print(f"{a.rounds} alternating rounds of {a.calls} single inferences per side\n\n"
              "| threads | side | min ms | p10 | median | p90 | vs ONNX Runtime: per round (range); by the minima |\n"
              "|---:|---|---:|---:|---:|---:|---|")
        for n in (int(t) for t in a.threads.split(",")):
            alternating(a, sides, n)
        return 0
    print(f"| round | threads | side | min ms | p10 | median | p90 |\n|---:|---:|---|---:|---:|---:|---:|")
    for r in range(1, a.rounds + 1):
        for n in (int(t) for t in a.threads.split(",")):
            for side, rec in (sides[1:] + sides[:1] if r % 2 else sides[::-1]):
                out = subprocess.run([sys.executable, __file__, "--model", a.model, "-r", rec, "--calls", str(a.calls),
                                      "--side", side, "--n", str(n)],
                                     env=side_env(side, n, rec), check=True, capture_output=True, text=True).stdout.split()
                print(f"| {r} | {n} | {_name(side, rec)} | " + " | ".join(out[-4:]) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
