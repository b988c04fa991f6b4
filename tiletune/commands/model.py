"""tiletune model tasks|tune|build|bench MODEL: tune a whole model and run it with the tuned kernels."""
from __future__ import annotations

import argparse
import math
import os

from ..api import set_threads
from ..db.store import Database
from ..errors import TiletuneError
from ..hardware import detect_cpu
from ..measure.base import MeasureSettings
from ..measure.cluster import CLUSTER_HELP, cluster_address
from ..measure.factory import check_sources, shared_pool
from ..model.evaluate.baselines import METHODS
from ..model.evaluate.bench import bench_model, bench_model_shapes, parse_methods
from ..model.kernels.gpu_default import has_gpu
from ..model.kernels import pad_fusion
from ..model.passes.layout import DEFAULT_LAYOUT, LAYOUTS, check_layout
from ..model.frontend.calibrate import calibrated
from ..model.passes.precision import DTYPES
from ..model.build import CHECK_WAITS, best_configs, kernel_latencies
from ..model.library import build_model
from ..model.tuning.progress import ModelProgress
from ..model.frontend.source import short_name
from ..model.tuning.scheduler import SCHEDULERS
from ..model.dynamic.shapes import best_configs_shaped, parse_shapes, shape_tasks
from ..model.dynamic.shape_transfer import DEFAULT as SHAPE_TRANSFER, shape_transfer
from ..model.dynamic.shared_search import shared_search
from ..model.frontend.source import load as load_source
from ..model.kernels.tasks import ModelTasks, model_tasks
from ..model.tuning.confirm import CONFIRM_DEFAULT, check_top
from ..model.tuning.tuner import DEFAULT_STRATEGY, MODEL_START, MODEL_START_K, SIBLING_SEEDS, tune_model
from ..model.frontend.zoo import MODELS
from ..paths import check_output
from ..target import check_dtype_for, check_local_target, is_cuda, parse_target
from .common import (HelpFormatter, add_measure_arguments, add_option_argument, add_output_argument, measure_settings,
                     options_for, rpc_address)

MODEL_HELP = (f"a built-in model ({', '.join(MODELS)}), path/to/file.py:function returning "
              "(torch.nn.Module, example_inputs[, dynamic_shapes]), or a .onnx file")
SHAPES_HELP = ("a model with symbolic dimensions: the shapes to tune / build, NAME=V1,V2,... (repeat it for "
               "another dimension: every combination; a dimension not given takes the example's size; default: "
               "the example's shape)")


def add_parser(sub) -> None:
    p = sub.add_parser("model", help="tune a whole model and build it with the tuned kernels",
                       formatter_class=HelpFormatter,
                       description="Import a model (PyTorch or ONNX) into TVM Relax, fuse it into kernels, tune "
                       "the tiling tasks under one budget, and build the model with the best kernels.")
    msub = p.add_subparsers(dest="model_command", metavar="COMMAND")
    msub.required = True

    t = msub.add_parser("tasks", help="list the model's kernels and how each is handled", formatter_class=HelpFormatter,
                        description="Every distinct kernel of the fused model: shapes, FLOPs, calls, share of the "
                        "model's FLOPs, whether it is tuned or gets the default (parallel, vectorized) schedule.")
    _common(t)
    t.add_argument("--measure", action="store_true",
                   help="also time every kernel (tuned schedule from --records, else the default) and show its "
                   "share of the model's latency")
    t.add_argument("--records", "-r", default=None, metavar="RECORDS.jsonl", help="records of 'model tune' (with --measure)")
    t.add_argument("--shapes", action="append", default=None, metavar="NAME=V1,V2", help=SHAPES_HELP)
    t.set_defaults(func=run_tasks)

    u = msub.add_parser("tune", help="tune every task of a model under one trial budget", formatter_class=HelpFormatter,
                        description="A task scheduler spreads --trials (the whole model's) over the tasks in "
                        "rounds; every result is appended to the records file; re-running the same command resumes.")
    _common(u)
    u.add_argument("--trials", "-n", type=int, default=None, help="trials for the whole model (>= 1)")
    u.add_argument("--seconds", type=float, default=None, help="wall-time budget in seconds (> 0)")
    u.add_argument("--records", "-r", "-o", "--output", dest="records", required=True, metavar="RECORDS.jsonl",
                   help="records file to append to (one file for all tasks)")
    u.add_argument("--strategy", "-s", default=DEFAULT_STRATEGY,
                   help="strategy of every task (see 'tiletune strategies'); the local searches start from the "
                   f"task's top {MODEL_START_K} constructions (start={MODEL_START}: Gensor's and Roller's alternating; "
                   "-O start=..., -O start_k=... change it)")
    add_option_argument(u, "an option of the strategy, e.g. k=3 or gensor.k=3 (repeatable)")
    u.add_argument("--scheduler", default="gradient", choices=sorted(SCHEDULERS),
                   help="task scheduler: Ansor's gradient-based one, or rounds in proportion to FLOPs x calls")
    u.add_argument("--round", type=int, default=8, dest="round_trials", help="trials per round of one task")
    u.add_argument("--seed", type=int, default=0, help="seed of the strategies and the scheduler")
    u.add_argument("--hardware", default=None, metavar="SPEC.json", help="HardwareSpec for gensor/roller/*-af")
    u.add_argument("--confirm", type=int, default=None, metavar="K",
                   help=f"after the budget, measure every task's K fastest kernels again, side by side (2 rounds, "
                   f"no early cut-off), and build with the fastest of these measurements (default {CONFIRM_DEFAULT}: "
                   "on a shared machine the fastest single measurement is often a lucky one); 0: off "
                   "(--shared-search: always off)")
    add_measure_arguments(u, batch_size=8)
    u.add_argument("--cluster", default=None, metavar="ADDRESS", help=CLUSTER_HELP + "; the tasks' batches are "
                   "built and measured over its nodes")
    u.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    u.add_argument("--shapes", action="append", default=None, metavar="NAME=V1,V2",
                   help=SHAPES_HELP + "; every shape's tasks share the budget and the records file, and a later run "
                   "with another shape measures only its new kernels")
    u.add_argument("--shape-transfer", dest="shape_transfer", action="store_true", default=SHAPE_TRANSFER,
                   help="with --shapes: each task learns from the records of the same kernel at other shapes in RECORDS "
                   "(its cost model's transfer data) and measures their best configurations first"
                   + (" (the default)" if SHAPE_TRANSFER else ""))
    u.add_argument("--no-shape-transfer", dest="shape_transfer", action="store_false", default=argparse.SUPPRESS,
                   help="tune each shape alone")
    u.add_argument("--sibling-seeds", type=int, default=SIBLING_SEEDS, metavar="N",
                   help="tasks with the same main computation and space (one convolution fused with two epilogues) "
                   f"measure each other's N best configurations first in each round (default {SIBLING_SEEDS}: off; "
                   "docs/decisions/sibling-seeds.md)")
    u.add_argument("--shared-search", action="store_true",
                   help="opt-in, with two or more --shapes: a DietCode-like shared search instead of one search per "
                   "shape: per kernel, one search for all its shapes, whose candidates (tile sizes) are measured at one "
                   "shape each and an XGBoost model over (candidate, shape) predicts the others; at the end every "
                   "shape measures its best predicted candidates and builds with its fastest measured kernel. "
                   "--trials is the whole budget; the kernels that do not change with the shapes are tuned with "
                   "--strategy as usual")
    u.set_defaults(func=run_tune)

    b = msub.add_parser("build", help="build the model with its best kernels and export it", formatter_class=HelpFormatter,
                        description="Compile the model with the best kernel of every task in RECORDS (the default "
                        "schedule for the rest), check it against PyTorch / ONNX Runtime on random inputs and "
                        "export one library that tiletune.api.load_model() runs. Needs a C compiler.")
    _common(b)
    b.add_argument("--records", "-r", default=None, metavar="RECORDS.jsonl",
                   help="records of 'model tune' (without: every kernel gets the default schedule)")
    b.add_argument("--output", "-o", required=True, metavar="MODEL.so", help="the library to write")
    b.add_argument("--database", default=None, metavar="DIR",
                   help="also write the tuned kernels as a MetaSchedule JSON database in DIR "
                   "(apply them with relax.transform.MetaScheduleApplyDatabase)")
    b.add_argument("--construct", default=None, choices=("gensor", "roller"),
                   help="give every task without a record the top construction of this method (no measurement: "
                   "seconds per task; Gensor's Markov walk or Roller's rTile tree)")
    b.add_argument("--seed", type=int, default=0, help="with --construct gensor: the seed of its random walks "
                   "(each kernel draws from the seed and its structural hash)")
    b.add_argument("--no-check", action="store_true", help="skip the comparison with the original framework")
    b.add_argument("--cuda-graph", action="store_true",
                   help="a CUDA target: each shape's inference one CUDA graph, captured at its first call and "
                   "replayed after (one launch instead of one per kernel; TVM's RewriteCUDAGraph)")
    b.add_argument("--shapes", action="append", default=None, metavar="NAME=V1,V2",
                   help=SHAPES_HELP + "; these shapes get their tuned kernels, every other shape within the bounds "
                   "the symbolic model with the default schedule, in the same library")
    b.set_defaults(func=run_build)

    e = msub.add_parser("bench", help="time the tuned model against PyTorch, torch.compile, ONNX Runtime, TVM",
                        formatter_class=HelpFormatter,
                        description="Each method in its own process, one after another (run it on an idle machine): "
                        "our build from RECORDS, torch eager, torch.compile, ONNX Runtime (CPU), TVM's default build and, "
                        "with --metaschedule-trials, MetaSchedule tune_relax; with --target cuda on this machine's GPU "
                        "in --dtype: ours, torch eager, torch.compile, TVM's default build (dlight). Results are appended to "
                        "OUT/results.jsonl (a second run skips what is done); OUT/<model>.md and .png are the report.")
    _common(e)
    e.add_argument("--records", "-r", default=None, metavar="RECORDS.jsonl", help="records of 'model tune' (ours)")
    add_output_argument(e, "--out", dest="out", default="model-bench", metavar="DIR",
                        help="where results, report and plot go")
    e.add_argument("--methods", default=None, help="comma-separated subset of: " + ", ".join(METHODS))
    e.add_argument("--metaschedule-trials", type=int, default=0,
                   help="also tune with MetaSchedule's tune_relax at this many trials (0: skip it)")
    e.add_argument("--construct", default=None, choices=("gensor", "roller"),
                   help="our build gives the tasks without records this method's top construction (no measurement); "
                   "with --shapes and no -r, ours is constructed at every listed shape")
    e.add_argument("--cuda-graph", action="store_true", help="our build with --cuda-graph (model build), and "
                   "torch.compile in its mode='reduce-overhead' (CUDA graphs too)")
    e.add_argument("--timeout", type=float, default=3600.0, help="seconds per method")
    e.add_argument("--repeat", type=int, default=10, help="timing samples per method")
    e.add_argument("--min-repeat-ms", type=int, default=200, help="minimum duration of one sample in ms")
    e.add_argument("--shapes", action="append", default=None, metavar="NAME=V1,V2",
                   help="a model with symbolic dimensions: time every method at each of these shapes, NAME=V1,V2,... "
                   "(repeat it for another dimension: every combination; a dimension not given takes the example's "
                   "size); a shape need not be tuned: our build is the one library of 'model build --shapes', tuned "
                   "at the shapes RECORDS holds for this model, and runs the others by its rule for untuned shapes. "
                   "One result per method and shape; the report has a row per shape. Not with MetaSchedule (symbolic "
                   "loops); ONNX Runtime runs one export with the symbolic dimensions; default: the example's shape, "
                   "as a static model")
    e.set_defaults(func=run_bench)


def _common(p) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--target", default=None,
                   help="'host' (default), 'llvm', a JSON LLVM target, or 'cuda[:sm_XX]' for an NVIDIA GPU "
                   "(measured on this machine's GPU or through --rpc; 'model build' works without one)")
    p.add_argument("--dtype", default="float32", choices=DTYPES + ("int8",),
                   help="the model's compute dtype: on a CUDA target float16/bfloat16 run matmuls and convolutions "
                   "on tensor cores, on a CPU target with AVX512-BF16 or AMX-BF16 bfloat16 runs them on those "
                   "instructions; accumulating in float32 (inputs and outputs keep their dtypes); int8 (with "
                   "--calibrate, on a CPU with VNNI or AMX): the float model quantized from calibration inputs, its "
                   "matmuls on int8 kernels (docs/int8.md)")
    p.add_argument("--calibrate", metavar="FILE.npz", default=None,
                   help="with --dtype int8: a .npz of calibration inputs, one array per model input (named as the "
                   "input), samples along the first axis")
    p.add_argument("--layout", default=DEFAULT_LAYOUT, type=_layout, metavar="{" + ",".join(LAYOUTS) + "}",
                   help="layout of the convolutions: NHWC (converted, the output channels innermost), NCHW "
                   f"(as imported) or {LAYOUTS[-1]} (blocks of 16 channels innermost, ONNX Runtime's layout); "
                   "tune, build and bench a model with the same layout")


def _int8(args) -> None:
    """``--dtype int8 --calibrate FILE``: the model becomes its QDQ form quantized from FILE
    (``tiletune.model.frontend.calibrate``), which every model command then reads as a quantized model."""
    if args.dtype != "int8":
        if args.calibrate:
            raise TiletuneError("--calibrate is used with --dtype int8")
        return
    if not args.calibrate:
        raise TiletuneError("--dtype int8 quantizes the float model from calibration inputs: give --calibrate "
                            "FILE.npz (a model quantized by ONNX Runtime already is built as it is, without --dtype)")
    args.model, args.dtype = calibrated(args.model, args.calibrate), "float32"
    print(f"note: quantized from {args.calibrate} into {args.model}")


def _layout(text: str) -> str:
    try:
        return check_layout(text)
    except TiletuneError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _load(args) -> tuple:
    """(source, its tasks, the DynamicTasks of a model with symbolic dimensions else None): a dynamic model's
    tasks are those of every shape of --shapes (tiletune.model.dynamic.shapes), merged."""
    target = parse_target(args.target)
    check_dtype_for(args.dtype, target)
    source = load_source(args.model)
    bindings = parse_shapes(getattr(args, "shapes", None), source)  # a bad --shapes: one line before the import
    dyn = None
    if source.dynamic:
        dyn = shape_tasks(source, target, args.layout, bindings, dtype=args.dtype)
        tasks = dyn.merged
    else:
        tasks = model_tasks(source, target, args.layout, args.dtype)
    for note in tasks.notes:
        print(f"note: {note}")
    return source, tasks, dyn


def _where(tasks: ModelTasks) -> str:
    """The layout, and on a GPU the target and the compute dtype, as the headers print them."""
    if not is_cuda(tasks.target):
        return tasks.layout
    return f"{tasks.layout}, cuda {tasks.target.get('arch', '')}, {tasks.dtype}"


def _args_text(tasks: ModelTasks) -> str:
    """The options that make another model command see the same tasks (target, dtype, layout)."""
    out = f" --layout {tasks.layout}"
    if is_cuda(tasks.target):
        out += f" --target cuda:{tasks.target.get('arch', 'sm_90')}"
        if tasks.dtype != "float32":
            out += f" --dtype {tasks.dtype}"
    return out


def _shapes_text(dyn) -> str:
    if dyn is None:
        return ""
    dims = ", ".join(f"{n} in {d.bounds}" for n, d in dyn.source.dims.items())
    return f" at {len(dyn.shapes)} shape(s) ({'; '.join(st.label for st in dyn.shapes)}; {dims})"


def _shapes_args(dyn) -> str:
    if dyn is None:
        return ""
    out = {}
    for st in dyn.shapes:
        for k, v in st.binding.items():
            out.setdefault(k, []).append(str(v))
    return "".join(f" --shapes {k}={','.join(dict.fromkeys(v))}" for k, v in out.items())


def _short(name: str, n: int) -> str:
    """``name`` in at most ``n`` characters, a dynamic model's ``@shape`` suffix kept."""
    if len(name) <= n:
        return name
    base, at, shape = name.partition("@")
    keep = max(8, n - len(shape) - 2)
    return f"{base[:keep]}~{at}{shape}" if at else name[:n]


def _mflops(x: int) -> str:
    return f"{x / 1e6:,.2f}"


def task_table(tasks: ModelTasks, latency: dict[str, float] | None = None, chosen: dict | None = None) -> str:
    """The kernels as a table (the handling last: it may be long)."""
    total = max(1, tasks.total_flops)
    head = ["#", "kernel", "shapes (inputs -> output)", "MFLOPs", "calls", "FLOPs %"]
    lat_total = 0.0
    if latency is not None:
        lat_total = sum(latency[k.hash] * k.calls for k in tasks.kernels if math.isfinite(latency.get(k.hash, math.nan)))
        head += ["us/call", "GB/s", "latency %"]
    rows = [head + ["handling"]]
    into = {} if is_cuda(tasks.target) else pad_fusion.fused_calls(tasks.fused)
    for i, k in enumerate(tasks.kernels, 1):
        fused = sum(into.get(n, 0) for n in k.names)
        if k.tunable:
            how = "tuned (best of the records)" if chosen and k.hash in chosen else "tune"
        elif k.rule:
            how = f"dlight {k.rule}: {k.reason}"
        elif fused:
            how = f"taken into the kernel that makes its input ({fused} of {k.calls} calls)" + (
                "" if fused == k.calls else f"; default schedule: {k.reason}")
        else:
            how = f"default schedule: {k.reason}"
        row = [str(i), _short(k.name, 48), k.shapes[:60], _mflops(k.flops), str(k.calls),
               f"{100 * k.flops * k.calls / total:.1f}"]
        if latency is not None:
            s = latency.get(k.hash, math.nan)
            row += [f"{s * 1e6:.1f}" if math.isfinite(s) else "-",
                    f"{k.nbytes / s / 1e9:.1f}" if math.isfinite(s) and s > 0 and k.nbytes else "-",
                    f"{100 * s * k.calls / lat_total:.1f}" if math.isfinite(s) and lat_total else "-"]
        rows.append(row + [how])
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    return "\n".join("  ".join([r[c].ljust(widths[c]) if c in (1, 2) else r[c].rjust(widths[c])
                                for c in range(len(head))] + [r[-1]]) for r in rows)


def run_tasks(args) -> int:
    _int8(args)
    source, tasks, dyn = _load(args)
    n_t = len(tasks.tasks)
    print(f"model {source.spec} ({_where(tasks)}){_shapes_text(dyn)}: {len(tasks.kernels)} kernels, {n_t} tuned as tasks, "
          f"{len(tasks.kernels) - n_t} with the default schedule; {_mflops(tasks.total_flops)} MFLOPs per inference")
    latency = chosen = None
    if args.records and not args.measure:
        raise TiletuneError("--records is used with --measure")
    if args.measure:
        if is_cuda(tasks.target) and not has_gpu():
            raise TiletuneError("--measure on a CUDA target times the kernels on this machine's GPU, and none was found")
        set_threads(int(tasks.target.get("num-cores") or 0) or None)
        chosen = best_configs(tasks, args.records) if dyn is None else best_configs_shaped(dyn, args.records)
        latency = kernel_latencies(tasks, chosen, _bench_settings())
        total = sum(latency[k.hash] * k.calls for k in tasks.kernels if math.isfinite(latency[k.hash]))
        print(f"sum of the kernels' latencies: {total * 1e3:.3f} ms per inference (each kernel timed alone)")
        if not is_cuda(tasks.target):
            cpu = detect_cpu(measure_bandwidth=False)  # the cached measurement of `tiletune hardware`, if any
            print(f"GB/s: a kernel's inputs and output over its time (what it moves at the least); this machine's "
                  f"DRAM: {cpu.memory[-1].bandwidth_gbs:.1f} GB/s ({cpu.source.get('dram_bandwidth', '?')})")
    print(task_table(tasks, latency, chosen))
    return 0


def _bench_settings():
    return MeasureSettings()


def _check_shared(args) -> None:
    """--shared-search's one-line refusals, before the model is imported."""
    if not args.shapes:
        raise TiletuneError("--shared-search needs a model with symbolic dimensions and two or more shapes "
                            "(--shapes NAME=V1,V2,...)")
    for flag, bad in (("--seconds", args.seconds is not None), ("--shape-transfer", args.shape_transfer),
                      ("--confirm", bool(args.confirm)), ("--rpc", getattr(args, "rpc", None) is not None),
                      ("--cluster", getattr(args, "cluster_address", None) is not None)):
        if bad:
            raise TiletuneError(f"--shared-search does not take {flag}; its budget is --trials")


def run_tune(args) -> int:
    _int8(args)
    settings = measure_settings(args)
    if args.trials is None and args.seconds is None:
        raise TiletuneError("give a budget: --trials N (the whole model's trials) and/or --seconds T")
    if args.trials is not None and args.trials < 1:
        raise TiletuneError(f"--trials must be >= 1, got {args.trials}")
    if args.seconds is not None and not args.seconds > 0:
        raise TiletuneError(f"--seconds must be > 0, got {args.seconds:g}")
    if args.confirm is None:
        args.confirm = 0 if getattr(args, "shared_search", False) else CONFIRM_DEFAULT
    check_top(args.confirm)
    if args.sibling_seeds < 0:
        raise TiletuneError(f"--sibling-seeds must be >= 0, got {args.sibling_seeds}")
    check_output(args.records, "records file")
    rpc = rpc_address(args)  # a bad --rpc or an unreachable tracker: one line before the model is imported
    args.cluster_address = cluster_address(args.cluster, os.environ, elsewhere=rpc is not None)
    check_sources(rpc=rpc, cluster=args.cluster_address)
    target = parse_target(args.target)
    if rpc is None and args.cluster_address is None and is_cuda(target):
        check_local_target(target)  # a CUDA target without a GPU here: one line
    shared = getattr(args, "shared_search", False)
    if shared:
        _check_shared(args)
    source, tasks, dyn = _load(args)
    if shared and (dyn is None or len(dyn.shapes) < 2):
        raise TiletuneError("--shared-search needs a model with symbolic dimensions and two or more shapes "
                            "(--shapes NAME=V1,V2,...)")
    if os.path.exists(args.records):  # a records file of another model is refused here
        best_configs(tasks, args.records) if dyn is None else best_configs_shaped(dyn, args.records)
    print(f"model {source.spec} ({_where(tasks)}){_shapes_text(dyn)}: {len(tasks.tasks)} tasks to tune "
          f"({len(tasks.kernels) - len(tasks.tasks)} other kernels get the default schedule); strategy {args.strategy}, scheduler {args.scheduler}")
    transfer = shape_transfer(dyn, args.records) if dyn is not None and args.shape_transfer else None
    if transfer:
        print(f"transfer across shapes: {len(transfer)} of {len(tasks.tasks)} tasks learn from the records of the "
              "same kernel at other shapes and measure their best configurations first")
    progress = None if args.quiet else ModelProgress(args.trials, len(tasks.tasks))
    tuned = set()

    def on_round(state, run, total):
        if state.best_gflops:
            tuned.add(state.key)
        if progress is not None:
            progress.round_done(state, run, total, len(tuned))

    def on_confirm(state, n):
        if progress is not None and n:
            progress.note(f"  confirmed {state.kernel.name}: {n} measurements, best {state.best_gflops:.1f} GFLOPS")

    pool = None
    try:
        if args.cluster_address is not None:  # the cluster's workers, shared by the tasks (tiletune.measure.cluster)
            pool = shared_pool(target, cluster=args.cluster_address)
        if shared:
            result = shared_search(dyn, trials=args.trials, records=args.records, strategy=args.strategy,
                                   scheduler=args.scheduler, round_trials=args.round_trials, batch_size=args.batch_size,
                                   settings=settings, seed=args.seed, options=options_for(args.option, args.strategy),
                                   hardware=args.hardware, on_round=on_round,
                                   callbacks=(progress,) if progress is not None else ())
        else:
            result = tune_model(tasks, strategy=args.strategy, trials=args.trials, seconds=args.seconds,
                                records=args.records, scheduler=args.scheduler, round_trials=args.round_trials,
                                batch_size=args.batch_size, settings=settings, seed=args.seed,
                                options=options_for(args.option, args.strategy), hardware=args.hardware, rpc=rpc,
                                on_round=on_round, callbacks=(progress,) if progress is not None else (),
                                confirm=args.confirm, on_confirm=on_confirm, transfer=transfer,
                                siblings=args.sibling_seeds, pool=pool, recall=Database().records(target))
    finally:
        if progress is not None:
            progress.close()
        if pool is not None:
            pool.close()
    if shared:
        print(f"shared search: {result.shared_tasks} tasks in {result.groups} kernels searched across their shapes")
    print(f"{result.trials} trials ({result.measured} measured, {result.recalled} from records) in "
          f"{result.elapsed:.1f} s; stopped: {result.stopped}")
    if result.confirmed:
        print(f"confirmed the top {args.confirm} kernels of the tasks: {result.confirmed} measurements in "
              f"{result.confirm_s:.1f} s (the build takes the fastest of these)")
    rows = [("task", "calls", "trials", "best GFLOPS", "us/call", "state")]
    for st in sorted(result.states, key=lambda s: -s.flops * s.calls):
        rows.append((_short(st.kernel.name, 55), str(st.calls), str(st.trials), f"{st.best_gflops:.1f}",
                     f"{st.best_s * 1e6:.1f}" if math.isfinite(st.best_s) else "-", st.done or "-"))
    w = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(r[c].ljust(w[c]) if c in (0, 5) else r[c].rjust(w[c]) for c in range(len(r))))
    for st in result.states:
        if st.failure:
            print(f"{'no kernel' if not math.isfinite(st.best_s) else 'failures'}: {st.kernel.name}: {st.failure}")
    tuned_sum = sum(st.best_s * st.calls for st in result.states if math.isfinite(st.best_s))
    print(f"tuned kernels: {tuned_sum * 1e3:.3f} ms per inference (the tasks' best kernels, timed alone)")
    print(f"records   {args.records}")
    print(f"next      tiletune model build {args.model}{_args_text(tasks)}{_shapes_args(dyn)} -r {args.records} "
          "-o model.so")
    return 0 if any(math.isfinite(st.best_s) for st in result.states) or not result.states else 1


def run_build(args) -> int:
    _int8(args)
    built = build_model(args.model, args.output, records=args.records, target=args.target, layout=args.layout,
                        dtype=args.dtype, shapes=args.shapes, construct=args.construct, seed=args.seed,
                        check=not args.no_check, cuda_graph=args.cuda_graph, database=args.database)
    for note in built.notes:
        print(f"note: {note}")
    made = f"{built.constructed} constructed by {built.construct}" if built.construct else ""
    if built.dims:
        print(f"wrote {built.path}: runs {built.dims}; tuned shapes {'; '.join(built.shapes)} ({built.tuned} of "
              f"{built.tasks} tasks with tuned kernels" + (f", {made}" if made else "")
              + f"); every other shape: {built.other_shapes}")
    else:
        print(f"wrote {built.path}: {built.tuned} of {built.tasks} tasks with tuned kernels, "
              + (f"{made}, " if made else "") + f"{built.default_kernels} kernels with the default schedule")
    if built.checked:  # tiletune.model.build.export_checked
        where = (f" at {', '.join(built.checked)} (on each shape's input sets)" if any(built.checked)
                 else f" on {built.check_sets} input sets")
        print(f"the written library, loaded as load_model() loads it, matches the original{where}, each called "
              f"twice (max error {max(built.checked.values()):.2g})")
    elif args.no_check:
        print("output not checked (--no-check)")
    if built.check_waits:
        print(CHECK_WAITS)
    for name, why in built.untuned.items():
        print(f"default schedule: {name}: {why}")
    if built.foreign:
        print(f"note: {args.records} also holds {built.foreign} workload(s) that are not kernels of this model "
              f"(another model, or this one tuned with the other --layout; this build is {built.layout})")
    if built.database is not None:
        print(f"wrote the MetaSchedule database {args.database} ({built.database} tuned kernels)")
    return 0


def run_bench(args) -> int:
    _int8(args)
    if args.repeat < 1 or args.min_repeat_ms < 0 or args.timeout <= 0:
        raise TiletuneError("--repeat must be >= 1, --min-repeat-ms >= 0 and --timeout > 0")
    target = parse_target(args.target)
    check_dtype_for(args.dtype, target)
    if args.cuda_graph and not is_cuda(target):
        raise TiletuneError("--cuda-graph is for a CUDA target (--target cuda[:sm_XX])")
    if is_cuda(target) and not has_gpu():
        raise TiletuneError("model bench --target cuda times the model on this machine's GPU, and none was found")
    methods = parse_methods(args.methods, args.metaschedule_trials, target)
    check_output(os.path.join(args.out, "results.jsonl"), "results file")
    settings = MeasureSettings(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    if args.shapes:
        source = load_source(args.model)
        bindings = parse_shapes(args.shapes, source)  # a bad --shapes, a model without symbolic dimensions: one line
        rows = bench_model_shapes(source, bindings, out=args.out, target=target, methods=methods,
                                  records=args.records, settings=settings, timeout=args.timeout, layout=args.layout,
                                  construct=args.construct, dtype=args.dtype, cuda_graph=args.cuda_graph)
        print(open(os.path.join(args.out, f"{short_name(args.model)}.md")).read())
        ours = [r for r in rows if r["method"] == "tiletune"]
        return 0 if "tiletune" not in methods or (ours and not any(r.get("error") for r in ours)) else 1
    rows = bench_model(args.model, out=args.out, target=target, methods=methods, records=args.records,
                       settings=settings, ms_trials=args.metaschedule_trials, timeout=args.timeout,
                       layout=args.layout, dtype=args.dtype, construct=args.construct, cuda_graph=args.cuda_graph)
    print(open(os.path.join(args.out, f"{short_name(args.model)}.md")).read())
    return 0 if any(r["method"] == "tiletune" and not r.get("error") for r in rows) or "tiletune" not in methods else 1
