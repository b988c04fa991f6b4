"""The kernels of a model: convert its convolutions' layout (``tiletune.model.passes.layout``), fuse its Relax
module, list every distinct kernel with its call count, and turn the tunable ones into tasks
(``PrimFuncWorkload``).

- Before it: the weights' layout changes folded with numpy (``const_fold``); on an LLVM target, 3x3 convolutions
  by Winograd's transforms (``winograd``) and, in a static model, the weights of widths the vectors do not divide
  padded, their matmuls' results sliced (``pad_widths``).
- Fusion (under the target): TVM's CPU library dispatch (sort, scan and cumsum, sampling, as its
  default pipeline does first), ``fast_math`` (exp, tanh, erf and the activations built on them, GELU,
  sigmoid, SiLU, as vectorizable polynomials), then
  ``LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR, DeadCodeElimination``: each operator
  becomes a TIR kernel and elementwise consumers join their producer's kernel (conv2d + bias + residual add +
  ReLU is one kernel); on an LLVM target, between FuseOps and FuseTIR, a layout copy that one matmul alone
  reads joins that matmul's kernel (``producer_fusion``).
- Extraction (our own walk, like MetaSchedule's ``extract_tasks``): every ``call_tir`` of a PrimFunc in the
  module's Relax functions counts one call; kernels with the same structure (structural hash, names of
  variables aside) are one kernel, their calls summed.
- Weights (LLVM targets): a kernel's parameters that are constants at every one of its calls are listed in its
  ``layout_free_buffers`` attribute (``with_weights``), so that the CPU template packs them once, when the
  model is built (docs/decisions/weight-prepack.md).
- Tunable: a kernel that ``PrimFuncWorkload`` accepts (one reduction block, producers that inline,
  an elementwise epilogue) and whose reduction multiplies two operands and accumulates (convolutions,
  dense layers, matmuls): the tiling tasks; and on an LLVM target, a row reduction that ``RowWorkload``
  accepts (softmax, layer norm, RMS norm, sums and means over the last axes: ``tiletune.workloads.rows``,
  tuned by ``tiletune.schedules.rows``). Everything else (elementwise, transposes, pooling, reductions across
  strided axes) gets the default schedule (``tiletune.model.kernels.default_schedule``), and the reason is kept for
  ``tiletune model tasks``.
- FLOPs of a kernel, per call: a task's are its workload's (the anchor's multiply-adds, 2 each); other
  kernels count, for every block, the arithmetic operations of its update times its iteration space.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..passes.pipeline import prepare
from ...errors import TiletuneError
from ...quiet import quiet_tvm
from ...schedules import refusal, x86_int8
from ...target import is_cuda
from ...workloads.base import np_dtype
from ...workloads.primfunc import PrimFuncWorkload, is_load, walk_expr, is_mac
from ...workloads.rows import RowWorkload, block_flops
from . import gpu_default
from ..passes.const_fold import fold_weights
from ..frontend.dims import bind, parse_shapes
from .fast_math import fast_math
from .library_kernels import failing_operator, needs_root, reason
from ..passes import nchwc, winograd
from ..passes.layout import DEFAULT_LAYOUT, check_layout_for
from ..passes.pad_widths import pad_widths
from ..passes.precision import check_dtype
from .producer_fusion import producers_into_readers
from ..frontend.source import ModelSource
from ..frontend.source import load as load_source


@dataclass
class Kernel:
    name: str  # the first global name of this kernel in the fused module
    names: list[str]  # every global name with this structure
    func: object  # the PrimFunc
    hash: str  # structural hash (hex), as in the workload key
    calls: int
    flops: int  # per call
    inputs: list[tuple[int, ...]]
    output: tuple[int, ...]
    workload: PrimFuncWorkload | RowWorkload | None = None  # None: not tuned
    reason: str = ""  # why it is not tuned
    rule: str = ""  # on a CUDA target, the dlight rule that schedules it when it is not tuned

    @property
    def tunable(self) -> bool:
        return self.workload is not None

    @property
    def nbytes(self) -> int:
        """Its inputs and output in bytes: what one call reads and writes at the least (0: symbolic shapes);
        computed when asked (``model tasks --measure``), not at extraction."""
        return _param_bytes(self.func)

    @property
    def shapes(self) -> str:
        ins = ",".join("x".join(map(str, s)) or "1" for s in self.inputs)
        return f"{ins} -> {'x'.join(map(str, self.output)) or '1'}"


@dataclass
class ModelTasks:
    fused: object  # the fused IRModule
    target: dict
    kernels: list[Kernel] = field(default_factory=list)
    layout: str = "NCHW"  # of the convolutions (tiletune.model.passes.layout)
    notes: list[str] = field(default_factory=list)  # what the layout conversion left alone, and why
    dtype: str = "float32"  # of the model's compute (tiletune.model.passes.precision)

    @property
    def tasks(self) -> list[Kernel]:
        return [k for k in self.kernels if k.tunable]

    @property
    def total_flops(self) -> int:
        return sum(k.flops * k.calls for k in self.kernels)

    def keys(self) -> set[str]:
        return {k.workload.key for k in self.tasks}


def fuse(mod, target: dict, static: bool = True, name_operator: bool = True):
    """``mod`` lowered to TIR kernels and fused (see the module docstring). ``static`` (LLVM targets): merge layout
    copies into the matmuls that read them (``producer_fusion``) and pad weights of widths the vectors do not divide
    (``pad_widths``). A dynamic model's paths pass False: its symbolic module (the library's kernels) and each shape's
    static one have to fuse alike, and the merge's check needs static extents. A failure is one TiletuneError line;
    with ``name_operator`` it names the operator that fails when fused alone
    (``tiletune.model.kernels.library_kernels.failing_operator``), and never holds TVM's check text."""
    import tvm
    from tvm import relax

    if is_cuda(target):
        from tvm.relax.backend.cuda.pipeline import library_dispatch_passes
    else:
        from tvm.relax.backend.cpu_generic.pipeline import library_dispatch_passes
    try:
        mod = fold_weights(mod)  # the weights' layout changes with numpy, not an LLVM build each in FoldConstant
        if not is_cuda(target):
            mod = winograd.rewrite(mod)  # 3x3 convolutions by Winograd's transforms: docs/decisions/winograd.md
            mod = pad_widths(mod) if static else mod  # widths the vectors do not divide: decisions/pad-widths.md
        merge = [] if is_cuda(target) or not static else [  # docs/decisions/producer-fusion.md
            tvm.transform.module_pass(lambda m, _: producers_into_readers(m), opt_level=0, name="ProducersIntoReaders")]
        with tvm.target.Target(target) as tgt, quiet_tvm():  # legalization's warnings (take, pow)
            return tvm.transform.Sequential(library_dispatch_passes(tgt) + [
                fast_math(),  # docs/decisions/fast-math.md
                relax.transform.LegalizeOps(nchwc.LEGALIZE), relax.transform.AnnotateTIROpPattern(),
                relax.transform.FoldConstant(), relax.transform.FuseOps()] + merge + [
                relax.transform.FuseTIR(), relax.transform.DeadCodeElimination()])(mod)
    except Exception as e:  # noqa: BLE001
        if not name_operator:
            raise
        why = reason(str(e), 300)
        culprit = failing_operator(mod, lambda one: fuse(one, target, static, name_operator=False))
        if culprit:
            op, why = culprit
            raise TiletuneError(f"fusing the model's operators failed at operator {op} ({why})") from None
        raise TiletuneError(f"fusing the model's operators failed ({why}; each operator fuses alone)") from None


def call_counts(mod) -> dict[str, int]:
    """Calls of each PrimFunc (by global name) from the module's Relax functions."""
    import tvm
    from tvm import relax

    counts: dict[str, int] = {}

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            for a in call.args[:1]:
                if isinstance(a, tvm.ir.GlobalVar):
                    counts[a.name_hint] = counts.get(a.name_hint, 0) + 1
            for a in call.args:
                self.visit_expr(a)

    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function):
            Calls().visit_expr(f)
    return counts


def weight_params(mod) -> dict[str, tuple[int, ...]]:
    """The parameters of each PrimFunc (by global name) that are a constant (a model weight) at every one of its
    ``call_tir`` calls, as parameter indices; what TVM's ``AttachAttrLayoutFreeBuffers`` computes, without its
    renaming of the functions."""
    import tvm
    from tvm import relax

    seen: dict[str, set[int]] = {}
    call_tir = tvm.ir.Op.get("relax.call_tir")

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.op.same_as(call_tir) and isinstance(call.args[0], tvm.ir.GlobalVar):
                args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
                const = {i for i, a in enumerate(args) if isinstance(a, tvm.ir.expr.Constant)}
                name = call.args[0].name_hint
                seen[name] = seen[name] & const if name in seen else const
            for a in call.args:
                self.visit_expr(a)

    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function):
            Calls().visit_expr(f)
    return {name: tuple(sorted(idx)) for name, idx in seen.items() if idx}


def with_weights(mod):
    """``mod`` with every PrimFunc that has weights (``weight_params``) carrying their indices as its
    ``layout_free_buffers`` attribute (Python ints: the attribute survives the TVMScript round trip of
    ``PrimFuncWorkload`` keys), as MetaSchedule's own tuning reads it too."""
    import tvm

    weights = weight_params(mod)
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, f in mod.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint in weights:
            out[gv] = f.with_attr("layout_free_buffers", list(weights[gv.name_hint]))
    return out


def _gathered(func) -> set[str]:
    """Names of the parameters ``func`` reads at an index computed from another load (a take: an embedding lookup
    reads the rows its indices name, not the whole table)."""
    import tvm
    from tvm import s_tir

    out: set[str] = set()
    try:
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        todo = list(sch.get_child_blocks(sch.get_sblock("root")))
    except Exception:  # noqa: BLE001  (no blocks to read: every parameter counts whole)
        return out
    while todo:
        b = todo.pop()
        todo += list(sch.get_child_blocks(b))
        for r in sch.get(b).reads:
            loads: list = []
            for rng in r.region:
                walk_expr(rng.min, lambda x: loads.append(x) if is_load(x) else None)
            if loads:
                out.add(str(getattr(r.source, "name", "")))
    return out


def _param_bytes(func) -> int:
    """Bytes of ``func``'s parameters (inputs and output), 0 when a shape is symbolic; a gathered input
    (``_gathered``) counts as much as the output it fills, at most its size."""
    sizes = []
    for p in func.params:
        try:
            sizes.append(math.prod(int(s) for s in p.shape) * np.dtype(np_dtype(str(p.dtype))).itemsize)
        except (TypeError, AttributeError, ValueError):
            return 0
    gathered = _gathered(func)
    return sum(min(n, sizes[-1]) if str(p.name) in gathered else n for p, n in zip(func.params, sizes))


def _shapes(func) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    shapes = []
    for p in func.params:
        try:
            shapes.append(tuple(int(s) for s in p.shape))
        except (TypeError, AttributeError):
            shapes.append(())
    return shapes[:-1], (shapes[-1] if shapes else ())


def extract(fused, target: dict, layout: str = "NCHW") -> ModelTasks:
    """The distinct kernels of a fused module, tunable ones with their workload, most FLOPs first."""
    import tvm
    import tvm_ffi

    counts = call_counts(fused)
    if not is_cuda(target):  # the CPU template may prepack them (PrimFuncWorkload.weights)
        fused = with_weights(fused)
    by_hash: dict[str, Kernel] = {}
    for gv, f in sorted(fused.functions.items(), key=lambda kv: kv[0].name_hint):
        if not isinstance(f, tvm.tirx.PrimFunc):
            continue
        name = gv.name_hint
        calls = counts.get(name, 0)
        if calls == 0:
            continue
        bare = f.without_attr("global_symbol") if "global_symbol" in (f.attrs or {}) else f
        h = f"{tvm_ffi.structural_hash(bare) & (2**64 - 1):016x}"
        if h in by_hash:
            by_hash[h].calls += calls
            by_hash[h].names.append(name)
            continue
        ins, out = _shapes(f)
        k = Kernel(name, [name], f, h, calls, 0, ins, out)
        try:
            wl = PrimFuncWorkload.from_prim_func(f, name=name)
            why = ""
            if is_cuda(target) or x86_int8.applies(wl, target):  # a template with limits of its own
                why = refusal(wl, target)
            if not is_mac(wl):
                k.reason = "a reduction without a multiply-accumulate (sum, mean, pooling)"
            elif why:
                k.reason = why
            else:
                k.workload, k.flops = wl, wl.flops
        except TiletuneError as e:
            msg = str(e)
            msg = msg[len(name) + 2:] if msg.startswith(name + ": ") else msg
            k.reason = msg.split(" (")[0].split(";")[0]  # e.g. "no reduction block", "several reduction blocks"
        if not k.tunable and not is_cuda(target):  # on CUDA, dlight schedules row reductions
            try:
                rows = RowWorkload.from_prim_func(f, name=name)
                k.workload, k.flops, k.reason = rows, rows.flops, ""
            except TiletuneError:
                pass  # not a row reduction: the reason above stands
        if not k.tunable and (kind := winograd.transform(f)):
            k.reason = f"Winograd's {kind} transform (a schedule of its own)"
        elif not k.tunable and needs_root(f):
            k.reason = "TVM's own kernel (sort, scan, topk, scatter: loops without a compute block), kept as written"
        if not k.tunable:
            k.flops = block_flops(f)
            if is_cuda(target):
                k.rule = gpu_default.schedule(f, target, name)[1]
        by_hash[h] = k
    kernels = sorted(by_hash.values(), key=lambda k: (-k.flops * k.calls, k.name))
    return ModelTasks(fused, target, kernels, layout)


def model_tasks(source: ModelSource, target: dict, layout: str = DEFAULT_LAYOUT,
                dtype: str = "float32") -> ModelTasks:
    """The kernels of ``source``: imported, computing in ``dtype`` (``tiletune.model.passes.precision``), its
    convolutions in ``layout``, fused, extracted. A model with symbolic dimensions is taken at its example's
    shape (``tiletune.model.dynamic.shapes`` handles several)."""
    layout = check_layout_for(layout, target)
    converted = prepare(source, dtype, layout)
    if source.dynamic:
        converted.mod = bind(converted.mod, parse_shapes(None, source)[0])
    tasks = extract(fuse(converted.mod, target, static=not source.dynamic), target, layout)
    tasks.notes = converted.notes
    tasks.dtype = check_dtype(dtype)
    return tasks


def load_model_tasks(spec: str, target: dict, layout: str = DEFAULT_LAYOUT,
                     dtype: str = "float32") -> tuple[ModelSource, ModelTasks]:
    """The model of ``spec`` (``tiletune.model.frontend.source.load``), imported, computing in ``dtype``, its
    convolutions in ``layout``, fused and its kernels extracted."""
    source = load_source(spec)
    return source, model_tasks(source, target, layout, dtype)
