"""The whole model with the best kernel of every task: compile, check against the original framework,
export one library, and export the kernels as a MetaSchedule database.

- ``best_configs(tasks, records)``: per task, the kernel of its workload key for this target that
  ``tiletune.records.chosen`` takes: the fastest of its last confirmation, else the best successful
  record (a records file with no record of any of the model's tasks is refused: it belongs to another
  model).
- ``scheduled_module``: the fused module with every task that has a best record replaced by the CPU
  template's schedule of that configuration, and every other kernel by the default schedule
  (``tiletune.model.kernels.default_schedule.checked``).
- ``compile_module``: TVM's CPU pipeline without its legalization and fusion (the module is already
  fused and scheduled): the weights that tuned kernels take in panels packed once (``SplitLayoutRewritePreproc``
  + ``FoldConstant``, see ``tiletune.schedules.cpu``), ``RewriteDataflowReshape .. CallTIRRewrite`` and the
  finalization passes.
- ``check``: runs the compiled model in Relax's VM on random inputs and compares every output with
  PyTorch's (ONNX Runtime's for an ``.onnx`` model): ``rtol=atol=1e-3`` relative to the outputs' scale.
- ``export``: ``export_library(path)`` and a sidecar ``path + '.json'`` (model, target, inputs, outputs,
  which kernel got which schedule) that ``tiletune.api.load_model`` reads.
- ``export_database(dir)``: a MetaSchedule ``JSONDatabase`` (``database_workload.json``,
  ``database_tuning_record.json``) holding, for every tuned task, the fused kernel (normalized as
  MetaSchedule does) and the trace of our schedule, so that ``relax.transform.MetaScheduleApplyDatabase``
  applies our kernels in anyone's Relax build of the same model.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..alignment import PARAM_ALIGNMENT, with_param_alignment
from ..api import c_compiler, load_model
from ..errors import TiletuneError
from ..measure.local import Prepacked, build_kernel
from ..measure.timing import time_callable
from ..quiet import quiet_tvm
from ..records import chosen, failures, kernel_identity, load, same_kernel
from ..construct import constructions, row_starts
from ..db.store import Database
from ..schedules import check as check_config, cpu, cuda_mma, make_space, schedule
from ..schedules import starts as template_starts
from ..target import has_gpu, is_cuda, target_key
from ..workloads.base import np_dtype
from ..workloads.rows import RowWorkload
from .kernels import gpu_default, pad_fusion
from .kernels.default_schedule import checked
from .passes.layout import unlowered_ops
from .passes.quantized import is_quantized
from .kernels.library_kernels import describe, reason, with_root_blocks
from .kernels.tasks import Kernel, ModelTasks
from .frontend.dims import label


#: the largest error of a built model's outputs against the original's in float32, relative to the outputs'
#: scale, per compute dtype (docs/decisions/model-dtype-tolerance.md)
RTOL = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2,
        # a model quantized by ONNX Runtime, against ONNX Runtime's int8: the same integer products, but a value on a
        # rounding tie of a (dynamic) quantization may land one step away, and the step moves through the layers
        # (docs/int8.md, "Accuracy")
        "int8": 2e-2}


@dataclass
class Chosen:
    kernel: Kernel
    config: object  # a Config of ``space``
    space: object
    median_s: float
    gflops: float
    how: str = "tuned"  # or "constructed (gensor)": no measurement (``constructed_configs``)


def _stem(key: str) -> str:
    """A workload key without its structural hash: ``NAME[SHAPES]``."""
    return key.rsplit("@", 1)[0]


def read_records(records: str | None, read: list | None = None) -> list:
    """The records of the file ``records``: ``read`` when the caller read it already
    (``tiletune.model.library.build_model`` reads it once), else read here; [] for None; a TiletuneError when the
    file does not exist."""
    if read is not None:
        return read
    if records is None:
        return []
    if not Path(records).exists():
        raise TiletuneError(f"records file {records!r} does not exist")
    return load(records)


def best_configs(tasks: ModelTasks, records: str | None, read: list | None = None) -> dict[str, Chosen]:
    """The chosen kernel of each task (by kernel hash) in ``records`` (``read``: its records, read already) for
    the tasks' target (the module docstring). A record whose key differs from a task's in the kernel's name alone
    is that task's."""
    if records is None and read is None:
        return {}
    tkey = target_key(tasks.target)
    recs = [r for r in read_records(records, read) if r.target == tkey]
    keys = tasks.keys()
    renamed = {kernel_identity(k): k for k in keys}
    mine = [r if r.workload in keys else replace(r, workload=renamed[kernel_identity(r.workload)])
            for r in recs if kernel_identity(r.workload) in renamed]
    if recs and not mine:
        if {_stem(r.workload) for r in recs} & {_stem(k) for k in keys}:
            raise TiletuneError(f"records file {records} holds this model's kernels as an earlier tiletune made them "
                                "(their structural hashes differ, e.g. since weights are marked for prepacking, "
                                "docs/decisions/weight-prepack.md): tune the model again, into a new records file")
        raise TiletuneError(f"records file {records} holds no kernel of this model (it holds "
                            f"{len({r.workload for r in recs})} other workload(s)): it was tuned for another model, "
                            f"or with the other layout (this is {tasks.layout}; see --layout)")
    out: dict[str, Chosen] = {}
    for k in tasks.tasks:
        pick = chosen(mine, k.workload.key)
        if pick is None:
            continue
        config, median_s, gflops = pick
        space = make_space(k.workload, None, tasks.target)
        try:
            cfg = space.from_dict(config)
        except TiletuneError:
            continue  # recorded with other levels
        out[k.hash] = Chosen(k, cfg, space, median_s, gflops)
    return out


def database_configs(tasks: ModelTasks, chosen: dict[str, Chosen], db: Database | None = None) -> dict[str, Chosen]:
    """``chosen`` (by kernel hash) with every task it lacks given the database's kernel for the tasks' target,
    where the database has one; the database's records of other models are not looked at."""
    db = db or Database()
    missing = {kernel_identity(k.workload.key) for k in tasks.tasks if k.hash not in chosen}
    if not missing:
        return dict(chosen)
    recs = [r for r in db.records(target_key(tasks.target)) if kernel_identity(r.workload) in missing]
    if not recs:
        return dict(chosen)
    found = best_configs(tasks, "the tuning database", recs)
    return {**{h: c for h, c in found.items() if h not in chosen}, **chosen}


def task_rng(seed: int, kernel: Kernel) -> np.random.Generator:
    """The random stream of ``kernel``'s constructions: from ``seed`` and its structural hash, so the same kernel
    is constructed alike in every task set that holds it (a dynamic build with a shape added, the library's
    construction of a new shape at its first use, a model file with one layer more)."""
    return np.random.default_rng([seed, int(kernel.hash, 16)])


def constructed_configs(tasks: ModelTasks, method: str, chosen: dict[str, Chosen], seed: int = 0) -> dict[str, Chosen]:
    """``chosen`` with every other task given its top construction by ``method`` ("gensor" or "roller",
    ``tiletune.construct.constructions``: no measurement). A tensor-core task, whose space has no tile knobs for
    the constructions to describe, takes its template's default configuration (``cuda_mma.default_config``,
    itself a construction without measurement), a row reduction its template's first start
    (``tiletune.schedules.starts``; docs/decisions/row-reductions.md); a task of a template whose knobs are in
    units of an instruction's tile (bf16, int8), which the constructions do not model, its template's first start;
    a task none can construct keeps the default schedule. Each task draws its walks from its own stream (``task_rng``), so a task's construction does not
    depend on the other tasks of the set."""
    out = dict(chosen)
    for k in tasks.tasks:
        if k.hash in out:
            continue
        rng = task_rng(seed, k)
        space = make_space(k.workload, None, tasks.target)
        how = f"constructed ({method})"
        own = [] if isinstance(k.workload, RowWorkload) else template_starts(k.workload, space, tasks.target)[:1]
        if own:
            out[k.hash] = Chosen(k, own[0], space, math.nan, math.nan, "constructed (template start)")
            continue
        try:
            tops = [c for c in constructions(method, space, workload=k.workload, target=tasks.target, k=4, rng=rng)
                    if _schedulable(k.workload, space, c, tasks.target)][:1]  # the template's limits refuse some
        except TiletuneError:
            if cuda_mma.owns(space):
                tops = [cuda_mma.default_config(k.workload, space, tasks.target)]
                how = "constructed (tensor-core default)"
            else:
                tops = [c for _, c in row_starts(space, k.workload, tasks.target) or []][:1]
                how = "constructed (row-reduction start)"
        if tops:
            out[k.hash] = Chosen(k, tops[0], space, math.nan, math.nan, how)
    return out


def _schedulable(workload, space, config, target) -> bool:
    try:
        check_config(workload, space, config, target)
    except ValueError:  # cpu.InvalidConfig and its GPU subclass: beyond the template's limits
        return False
    return True


def untuned_reasons(tasks: ModelTasks, records: str | None, chosen: dict[str, Chosen],
                    read: list | None = None) -> dict[str, str]:
    """Why each task without a chosen kernel keeps the default schedule (by kernel name): no record of it, or
    no successful trial, with its most frequent failure in one line."""
    missing = [k for k in tasks.tasks if k.hash not in chosen]
    if not missing:
        return {}
    tkey = target_key(tasks.target)
    recs = read_records(records, read) if read is not None or (records and Path(records).exists()) else []
    stems = {_stem(r.workload) for r in recs if r.target == tkey}
    out = {}
    for k in missing:
        mine = [r for r in recs if same_kernel(r.workload, k.workload.key) and r.target == tkey]
        fails = failures(mine)
        if not mine and _stem(k.workload.key) in stems:
            out[k.name] = "not tuned (its records are of the kernel as an earlier tiletune made it: tune again)"
        elif not mine:
            out[k.name] = "not tuned (no record)"
        elif fails:
            (kind, msg), n = fails.most_common(1)[0]
            out[k.name] = f"no successful trial ({n} of {len(mine)} failed: {kind}: {msg})"
        else:
            out[k.name] = f"no successful trial ({len(mine)} records)"
    return out


def foreign_workloads(tasks: ModelTasks, records: str | None, read: list | None = None) -> int:
    """How many workloads of ``records`` (``read``: its records, read already; for the tasks' target) are not
    tasks of this model (records of another model, or of this one with the other layout)."""
    if read is None and (records is None or not Path(records).exists()):
        return 0
    tkey = target_key(tasks.target)
    mine = {kernel_identity(k) for k in tasks.keys()}
    return len({kernel_identity(r.workload) for r in read_records(records, read) if r.target == tkey} - mine)


def scheduled_module(tasks: ModelTasks, chosen: dict[str, Chosen], fuse_pads: bool = True):
    """(the fused module with every kernel scheduled, {global name: how it is scheduled}). On a CPU target,
    ``fuse_pads``: every padding kernel whose input one kernel makes for it alone is taken into that kernel
    (``tiletune.model.kernels.pad_fusion``; docs/decisions/model-layout.md)."""
    how: dict[str, str] = {}
    mod = tasks.fused
    funcs = {}
    for k in tasks.kernels:
        c = chosen.get(k.hash)
        if c is not None:
            sch = schedule(k.workload, c.space, c.config, tasks.target)
            new, label = sch.mod["main"].without_attr("global_symbol"), c.how
            if is_cuda(tasks.target):
                new = new.with_attr("tirx.is_scheduled", True)
        elif is_cuda(tasks.target):
            new, rule = gpu_default.schedule(k.func, tasks.target, k.name, verify=True)
            label = f"default (dlight {rule})"
        else:
            with quiet_tvm():  # compiles and runs the kernel: pow's warnings
                new, sched = checked(k.func, tasks.target)
            label = f"default ({sched})"
        for name in k.names:
            funcs[name] = new
            how[name] = label
    import tvm

    mod = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv in list(mod.functions.keys()):
        if gv.name_hint in funcs:
            mod[gv] = funcs[gv.name_hint]
    if fuse_pads and not is_cuda(tasks.target):
        mod = _pads_into_producers(mod, tasks, chosen, how)
    return mod, how


def _pads_into_producers(mod, tasks: ModelTasks, chosen: dict[str, Chosen], how: dict[str, str]):
    """``mod`` with the pads that ``pad_fusion.fusable`` finds taken into their producers, each producer scheduled
    as its kernel is (its tuned configuration, else the default schedule); a producer that cannot be rewritten or
    scheduled so keeps its pad kernel. ``how`` gains the new kernels' labels."""
    kernels = {n: k for k in tasks.kernels for n in k.names}
    variants: dict = {}
    made: dict = {}  # per (kernel, pad spec): one rewrite, shared by the kernel's names
    for (prod, pad), spec in pad_fusion.fusable(tasks.fused).items():
        k = kernels.get(prod)
        if k is None or isinstance(k.workload, RowWorkload):
            continue
        key = (k.hash, spec)
        if key not in made:
            made[key] = _into_padded(tasks, k, chosen.get(k.hash), spec)
        if made[key] is not None:
            variants[(prod, pad)] = made[key][0]
            how[pad_fusion.fused_name(prod, pad)] = f"{made[key][1]}, + {pad}"
    return pad_fusion.rewrite_calls(mod, variants) if variants else mod


def _into_padded(tasks: ModelTasks, k: Kernel, c: Chosen | None, spec):
    """(kernel ``k`` writing the padded buffer of ``spec``, scheduled as ``k`` is, its label), or None when it cannot
    be rewritten or the schedule does not apply to the rewritten kernel (its pad is then kept)."""
    func = pad_fusion.into_padded(k.func, spec)
    if func is None:
        return None
    try:
        if c is not None:
            new = cpu.schedule(k.workload, c.space, c.config, tasks.target, func=func).mod["main"]
            return pad_fusion.with_border(new.without_attr("global_symbol"), k.output, spec), c.how
        with quiet_tvm():
            new, sched = checked(func, tasks.target)
        return pad_fusion.with_border(new, k.output, spec), f"default ({sched})"
    except Exception:  # noqa: BLE001  (TVM's schedule errors)
        return None


def compile_module(mod, target: dict, cuda_graph: bool = False):
    """The scheduled module compiled for ``target`` (no second legalization or fusion): TVM's CPU pipeline's
    lowering and finalization passes, or its CUDA pipeline's for a CUDA target. ``cuda_graph`` (a CUDA target):
    TVM's ``RewriteCUDAGraph`` lifts each function's kernels on static storage (the whole inference of a static
    shape, the model's input first copied into it) into a CUDA graph, captured at the first call and replayed at
    the later ones: one launch instead of one per kernel (``model build --cuda-graph``). On a CPU, TVM's own sort,
    scan, topk and scatter kernels get a root block first (``tiletune.model.kernels.library_kernels.with_root_blocks``: the
    weight prepacking refused them); a failure names the kernel, its operators and the cause in one line."""
    import tvm
    from tvm import relax

    if cuda_graph and not is_cuda(target):
        raise TiletuneError("--cuda-graph is for a CUDA target (--target cuda[:sm_XX])")

    if is_cuda(target):
        from tvm.relax.backend.cuda.pipeline import dataflow_lower_passes, finalize_passes
    else:
        from tvm.relax.backend.cpu_generic.pipeline import dataflow_lower_passes, finalize_passes
    tgt = tvm.target.Target(target)
    left = unlowered_ops(mod)
    if left:
        raise TiletuneError(f"compiling the model failed: TVM has no kernel for {', '.join(sorted(left))} "
                            "(its legalization left the operator as it is)")
    prepack = [] if is_cuda(target) else [  # weights packed once, here (tiletune.schedules.cpu.PREPACK)
        relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant()]
    pipeline = tvm.transform.Sequential(prepack + dataflow_lower_passes(tgt) + finalize_passes(tgt))
    if not is_cuda(target):  # numpy inputs pass without a copy (tiletune.alignment); GPU arrays are TVM's own
        mod = with_param_alignment(mod, PARAM_ALIGNMENT)
    if prepack:  # TVM's sort, scan, topk and scatter kernels, which its prepacking refused: model/kernels/library_kernels.py
        mod = with_root_blocks(mod)
    ctx = tvm.transform.PassContext.current()
    config = {**dict(ctx.config), "relax.backend.use_cuda_graph": bool(cuda_graph)}
    try:
        with quiet_tvm(), tvm.transform.PassContext(opt_level=ctx.opt_level, config=config):
            return tvm.compile(mod, target=tgt, relax_pipeline=pipeline)
    except Exception as e:  # noqa: BLE001
        culprit = _failing_kernel(mod, tgt, prepack)
        where = (f"{describe(culprit[0])} does not compile: {culprit[1]}" if culprit
                 else f"TVM's lowering of the model failed: {reason(str(e), 300)}")
        raise TiletuneError(f"compiling the model failed ({where})") from None


def _failing_kernel(mod, tgt, prepack=()) -> tuple[str, str] | None:
    """(name, why in one line) of the first kernel of ``mod`` that TVM cannot compile alone, or None when each
    compiles (the failure is then in the model's own passes). Each kernel goes through the ``prepack`` passes
    first, as in the model's pipeline (a kernel those passes refuse made the whole model fail), then through
    TVM's build; the reason names the step, in our words, and TVM's explanation without its check text
    (``tiletune.model.kernels.library_kernels.reason``)."""
    import tvm

    for gv, f in mod.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc):
            alone = tvm.IRModule({"main": f.with_attr("global_symbol", "main")})
            step = "the weight prepacking"
            try:
                with quiet_tvm():
                    if prepack:
                        tvm.transform.Sequential(list(prepack))(alone)
                    step = "TVM's build"
                    tvm.compile(alone, target=tgt)
            except Exception as e:  # noqa: BLE001
                return gv.name_hint, f"{step} refuses it ({reason(str(e), 300)})"
    return None


def flat_arrays(out) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [x for o in out for x in flat_arrays(o)]


class ModelRunner:
    """A compiled model in Relax's VM on the CPU, or on the GPU for a CUDA target: ``runner(*numpy_inputs)`` ->
    list of numpy outputs."""

    def __init__(self, executable_or_module, target: dict | None = None):
        import tvm
        from tvm import relax

        self.dev = tvm.cuda(0) if is_cuda(target) else tvm.cpu()
        mod = getattr(executable_or_module, "mod", executable_or_module)
        self.vm = relax.VirtualMachine(mod, self.dev)

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        import tvm

        args = [tvm.runtime.tensor(np.require(x, requirements='C'), self.dev) for x in inputs]
        return flat_arrays(self.vm["main"](*args))


def compare(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """The largest error of ``got`` against ``want`` relative to ``want``'s scale; TiletuneError on a
    different number or shape of outputs."""
    if len(got) != len(want):
        raise TiletuneError(f"the compiled model returns {len(got)} outputs, the original {len(want)}")
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if tuple(g.shape) != tuple(w.shape):
            raise TiletuneError(f"output {i}: shape {tuple(g.shape)} != the original's {tuple(w.shape)}")
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) / scale if w.size else 0.0
        worst = max(worst, err)
    return worst


#: what ``model build`` says when ``check_waits``
CHECK_WAITS = ("note: no GPU here: the library holds the CUDA kernels; the output check against the original waits "
               "for a GPU (load_model() runs it there)")


def check_waits(target: dict) -> bool:
    """Does a model built for ``target`` here leave its output check against the original for later: a CUDA library
    built on a machine without a GPU (it is built and exported; the check needs the GPU to run it)."""
    return is_cuda(target) and not has_gpu()


def input_sets(source, seed: int = 0, binding: dict[str, int] | None = None) -> list[tuple[str, list[np.ndarray]]]:
    """(label, inputs) of every input set a build is checked on, at ``binding`` (default: the example's shape): the
    example itself (a torch model, at its own shape), two random draws (``ModelSource.random_inputs``), and, when
    the model takes integer inputs, a set whose integers differ position by position
    (``ModelSource.distinct_inputs``), so that an output read from the wrong position, or from memory the model
    does not own, cannot match by chance."""
    at_example = not binding or all(source.example_binding().get(k) == v for k, v in binding.items())
    sets = []
    if source.kind == "torch" and at_example and source.example:
        sets.append(("the example inputs", [np.ascontiguousarray(t.detach().numpy()) for t in source.example]))
    sets += [(f"random inputs (seed {seed + k})", source.random_inputs(seed + k, binding)) for k in range(2)]
    if any(np.issubdtype(np.dtype(i.dtype), np.integer) for i in source.inputs):
        sets.append(("integer inputs that differ position by position", source.distinct_inputs(binding)))
    return sets


def first_difference(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[float, str]:
    """(largest error relative to the outputs' scale, where it is: "output I at INDEX: GOT against WANT" of the
    output with the largest error); TiletuneError on a different number or shape of outputs (``compare``)."""
    worst, where = compare(got, want), ""
    for i, (g, w) in enumerate(zip(got, want)):
        if not w.size:
            continue
        diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
        scale = max(1.0, float(np.max(np.abs(w))))
        if np.isnan(diff).any() or float(np.max(diff)) / scale >= worst:
            at = np.unravel_index(int(np.argmax(np.where(np.isnan(diff), np.inf, diff))), w.shape)
            where = f"output {i} at {list(map(int, at))}: {float(g[at]):.6g} against {float(w[at]):.6g}"
            break
    return worst, where


def check(source, run, seed: int = 0, binding: dict[str, int] | None = None, dtype: str = "float32") -> float:
    """Check a built model against the original on every set of ``input_sets`` (a dynamic model's at ``binding``):
    ``run(*inputs)`` (a ``ModelRunner``, or the exported library as ``tiletune.api.load_model`` loads it) is called
    twice on each set and both calls are compared with the original's outputs in float32; TiletuneError, naming the
    input set and the first output that differs, when an error exceeds ``RTOL[dtype]`` (relative to the output's
    scale) or the two calls differ by more than a tenth of that (the kernels are deterministic: two calls on the same
    inputs give the same result, unless one reads memory the model does not own). Returns the largest error."""
    if is_quantized(source):
        dtype = "int8"
    allowed = RTOL[dtype]
    at = f" at {', '.join(f'{k}={v}' for k, v in binding.items())}" if binding else ""
    worst = 0.0
    for what, inputs in input_sets(source, seed, binding):
        try:
            want = source.reference(inputs)
        except Exception as e:  # noqa: BLE001  (the user's model: its own error, in one line)
            raise TiletuneError(f"the original model fails on {what}{at}, so the build cannot be checked: "
                                f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}") from None
        first = [np.array(o, copy=True) for o in run(*inputs)]
        second = [np.array(o, copy=True) for o in run(*inputs)]
        for got in (first, second):
            err, where = first_difference(got, want)
            if not err <= allowed:
                raise TiletuneError(f"the compiled model's output differs from the original's{at} on {what}: max "
                                    f"error {err:.3g} (relative to the output's scale; allowed {allowed:g} in "
                                    f"{dtype}); {where}")
            worst = max(worst, err)
        drift, where = first_difference(second, first)
        if not drift <= allowed / 10:
            raise TiletuneError(f"the compiled model's output changes from one call to the next{at} on {what} (by "
                                f"{drift:.3g}; {where}): it reads memory it does not own")
    return worst


def export_checked(executable, path: str, meta: dict, source=None, bindings=(None,), dtype: str = "float32",
                   ) -> dict[str, float]:
    """Export ``executable`` to ``path`` (``export``) only if the library, loaded as a user loads it
    (``tiletune.api.load_model``, no construction at first use), passes ``check`` at every binding of ``bindings``
    (None: the example's shape): it is written under a temporary name beside ``path`` and moved into place when
    it passes; a failing one is deleted and its TiletuneError raised. ``source`` None: no check (``--no-check``, or
    a CUDA library built without a GPU: ``check_waits``). Returns {shape label ("" for the example's): error};
    the description's ``check_error`` holds the largest."""
    if source is None:
        export(executable, path, {**meta, "check_error": None})
        return {}
    p = Path(path)
    tmp = str(p.parent / f".{os.getpid()}.{p.name}")
    export(executable, tmp, {**meta, "check_error": None})
    try:
        model = load_model(tmp, first_use=None)
        errors = {label(b or {}): check(source, model, binding=b, dtype=dtype) for b in bindings}
        del model
        write_description(path, {**meta, "check_error": max(errors.values()),
                                  **({"check_errors": errors} if any(errors) else {})})
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp + ".json"):
            if os.path.exists(leftover):
                os.remove(leftover)
    return errors


def export(executable, path: str, meta: dict) -> None:
    c_compiler()
    try:
        with quiet_tvm():  # the VM logs every memory scope it saves
            executable.export_library(path)
    except (RuntimeError, OSError) as e:
        last = [line for line in str(e).strip().splitlines() if line.strip()][-1:] or [type(e).__name__]
        raise TiletuneError(f"exporting {path!r} failed: {last[0].strip()[:300]}") from None
    write_description(path, meta)


def write_description(path: str, meta: dict) -> None:
    """``path + '.json'``, the description ``tiletune.api.load_model`` reads: ``meta`` and the inputs' alignment."""
    Path(path + ".json").write_text(json.dumps({**meta, "alignment": PARAM_ALIGNMENT}, indent=1))


def export_database(tasks: ModelTasks, chosen: dict[str, Chosen], directory: str) -> int:
    """Write the tuned kernels as a MetaSchedule JSONDatabase in ``directory``; returns how many."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(str(d / "database_workload.json"), str(d / "database_tuning_record.json"),
                                  allow_missing=True)
    tgt = tvm.target.Target(tasks.target)
    n = 0
    for c in chosen.values():
        k = c.kernel
        sch = schedule(k.workload, c.space, c.config, tasks.target)
        mod = ms.tune_context._normalize_mod(k.func)
        wl = db.commit_workload(mod)
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, run_secs=[float(c.median_s)], target=tgt,
                                                         args_info=ArgInfo.from_prim_func(k.func)))
        n += 1
    return n


def kernel_latencies(tasks: ModelTasks, chosen: dict[str, Chosen], settings) -> dict[str, float]:
    """Seconds per call of every kernel as the built model would run it (its tuned schedule, else the
    default one), each compiled alone and timed by ``tiletune.measure.timing.time_callable`` on random
    inputs; by kernel hash. A tuned kernel whose weights the model packs once (docs/decisions/weight-prepack.md)
    takes them packed, as the tuner measures it (``tiletune.measure.local.build_kernel``)."""
    import tvm

    tgt = tvm.target.Target(tasks.target)
    gpu = is_cuda(tasks.target)
    dev = tvm.cuda(0) if gpu else tvm.cpu()
    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    for k in tasks.kernels:
        c = chosen.get(k.hash)
        lib = None
        if c is not None:  # as the tuner builds it: a Prepacked one takes its weights packed
            lib = build_kernel(k.workload, c.space, c.config, tasks.target)
        else:
            func = gpu_default.schedule(k.func, tasks.target, k.name)[0] if gpu else checked(k.func, tasks.target)[0]
        try:
            if lib is None:
                lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=tgt).mod
            arrays = []
            for p in k.func.params:
                shape, dtype = tuple(int(s) for s in p.shape), str(p.dtype)
                arrays.append((rng.standard_normal(shape) if "float" in dtype else rng.integers(0, 2, size=shape))
                              .astype(np_dtype(dtype)))
            if isinstance(lib, Prepacked):
                arrays, lib = lib.inputs(arrays), lib.mod
            args = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in arrays]
            main = lib["main"]
            main(*args)
            out[k.hash] = float(np.median(time_callable(lambda: main(*args), settings)))
        except Exception:  # noqa: BLE001  (symbolic shapes, odd parameters: not timed)
            out[k.hash] = math.nan
    return out
