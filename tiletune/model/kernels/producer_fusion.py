"""A layout copy taken into the matmul or convolution that reads it: the kernel reads the copy's source.

TVM's FuseOps fuses an operator's elementwise consumers into a matmul's or convolution's kernel, never an
injective producer (a transpose, a strided slice, a pad): such a producer stays a kernel of its own that copies
its input into a new layout, and the matmul then reads the copy. In GPT-2's attention the query and the value
heads are such copies (a strided slice of the q/k/v projection, reshaped into heads and transposed), so are
the key's heads and the attention's output (its heads transposed back into rows); in a CNN the input image's
transpose to NHWC and its padding. ``producers_into_readers`` runs between FuseOps and FuseTIR and merges each
such producer's group into the group of the one kernel that reads it, so that FuseTIR makes one PrimFunc of
both: the producer's blocks come first, and the CPU template inlines them into the reduction
(``PrimFuncWorkload``'s producers), which then reads the copy's source through the producer's index arithmetic.

A producer is merged when

- its group has injective operators only (``op_pattern`` at most injective; TVM's AnnotateTIROpPattern) that
  move data and compute nothing (each block stores one load: transposes, slices, broadcasts, reshapes), not
  only reshapes (those become views when the model is compiled: nothing to save), and no padding (a bounds check
  in the reduction's innermost loop loses to the pad's copy, docs/decisions/model-layout.md; the model build
  takes pads into their producers instead, ``tiletune.model.kernels.pad_fusion``);
- its output is read by exactly one binding, a kernel whose anchor is a matmul-like reduction
  (``op_pattern`` "out-elementwise fusable", and after the merge a multiply-accumulate that ``PrimFuncWorkload``
  takes: matmuls, convolutions), and is not an output of the function;
- every binding of both groups is a ``call_tir`` of constants and variables (what FuseOps makes);
- after the merge the kernel's reduction, the producers inlined, reads the copy's source through affine
  indices, and either independently of the output's innermost axis or with unit stride along it
  (``_reads_contiguously``). That axis is the one the CPU template vectorizes, so a producer that would make the
  vectorized loads strided (GPT-2's key heads, transposed for QK^T, read along the sequence) keeps its copy; so
  does one whose index arithmetic divides an axis (the attention output's heads transposed back into the rows
  of the output projection: the head and the lane of the reduction axis, ``k // 64`` and ``k % 64``), measured
  slower merged than copied.

Only LLVM targets (``tiletune.model.kernels.tasks.fuse``): the CUDA templates and dlight schedule one reduction
without producers. The merged kernel is a new task (its structure differs from the matmul's alone), tuned like
any other. The decision and its measurement: docs/decisions/producer-fusion.md.
"""
from __future__ import annotations

from typing import NamedTuple

from ...workloads.primfunc import PrimFuncWorkload, is_load, walk_expr, is_mac
from .pad_fusion import collect_blocks

INJECTIVE = 2  # TVM's OpPatternKind: kElemWise 0, kBroadcast 1, kInjective 2, kCommReduce 3, kOutEWiseFusable 4
OUT_EWISE_FUSABLE = 4


def _pattern(func) -> int | None:
    attrs = func.attrs or {}
    return int(attrs["op_pattern"]) if "op_pattern" in attrs else None


class _Group:
    """A kernel as FuseOps left it: the call's arguments and the ``call_tir`` bindings it runs (a bare
    ``call_tir`` is a group of one binding whose parameters are its arguments)."""

    def __init__(self, params, bindings, output, args):
        self.params = list(params)  # relax.Var
        self.bindings = list(bindings)  # [(relax.Var, call_tir Call)]
        self.output = output  # relax.Var among the bindings' vars (or a param)
        self.args = list(args)  # the call's arguments, one per param

    def prim_funcs(self, mod) -> list:
        return [mod[b.args[0]] for _, b in self.bindings]


def _group_of(mod, call):
    """The ``_Group`` of ``call`` (a call of a primitive Relax function or a ``call_tir``), or None for anything
    else, a body this pass does not rewrite, or a ``call_tir`` of several outputs (topk's values and indices: no
    layout copy, and a tuple of results is no matmul's operand)."""
    import tvm
    from tvm import relax

    if not isinstance(call, relax.Call):
        return None
    if call.op.same_as(tvm.ir.Op.get("relax.call_tir")):
        args = list(call.args[1].fields) if isinstance(call.args[1], relax.Tuple) else None
        if args is None or not all(isinstance(a, (relax.Var, tvm.ir.expr.Constant)) for a in args):
            return None
        if not isinstance(call.ty_args[0], relax.TensorType):  # several outputs (topk's values and indices)
            return None
        params = [relax.Var(f"p{i}", a.ty) for i, a in enumerate(args)]
        out = relax.Var("gv", call.ty_args[0])
        value = relax.call_tir(call.args[0], params, call.ty_args[0])
        return _Group(params, [(out, value)], out, args)
    if not isinstance(call.op, relax.GlobalVar) or call.op not in mod.functions:
        return None
    f = mod[call.op]
    if not isinstance(f, relax.Function) or not (f.attrs or {}).get("Primitive", False):
        return None
    body = f.body
    if not isinstance(body, relax.SeqExpr) or len(body.blocks) != 1 or not isinstance(body.body, relax.Var):
        return None
    bindings = []
    for b in body.blocks[0].bindings:
        v = b.value
        if not (isinstance(b, relax.VarBinding) and isinstance(v, relax.Call)
                and v.op.same_as(tvm.ir.Op.get("relax.call_tir")) and isinstance(v.args[1], relax.Tuple)
                and all(isinstance(a, (relax.Var, tvm.ir.expr.Constant)) for a in v.args[1].fields)):
            return None
        bindings.append((b.var, v))
    return _Group(f.params, bindings, body.body, call.args)


def _is_injective_copy(mod, group: _Group) -> bool:
    from tvm import relax

    funcs = group.prim_funcs(mod)
    patterns = [_pattern(f) for f in funcs]
    if not funcs or any(p is None or p > INJECTIVE for p in patterns) or not all(_only_moves(f) for f in funcs):
        return False
    return not all(relax.analysis.has_reshape_pattern(f) for f in funcs)


def _only_moves(func) -> bool:
    """Whether every block of PrimFunc ``func`` stores one load, unchanged (a transpose, a slice, a broadcast; not
    a pad, whose value is a bounds check): inlined, an operator that computes (an activation between two
    transposes) would run once per read."""
    found: list = []
    collect_blocks(func.body, found)
    stores = [b.body for b in found if b.name_hint != "root"]
    return bool(stores) and all(hasattr(st, "value") and is_load(st.value) for st in stores)


def _anchored(mod, group: _Group) -> bool:
    return any(_pattern(f) == OUT_EWISE_FUSABLE for f in group.prim_funcs(mod))


def _merged_function(prod: _Group, cons: _Group, index: int):
    """(the primitive function running ``prod``'s bindings then ``cons``'s, ``cons``'s argument ``index`` being
    ``prod``'s output; its call's arguments)."""
    from tvm import relax

    subst: dict = {}
    params, args = [], []
    for p, a in zip(prod.params, prod.args):
        q = relax.Var(p.name, p.ty)
        subst[p] = q
        params.append(q)
        args.append(a)
    for i, (p, a) in enumerate(zip(cons.params, cons.args)):
        if i == index:
            continue
        q = relax.Var(p.name, p.ty)
        subst[p] = q
        params.append(q)
        args.append(a)

    bindings = []

    def emit(group: _Group, inner: dict) -> relax.Var:
        for var, call in group.bindings:
            fields = [inner.get(a, subst.get(a, a)) for a in call.args[1].fields]
            new = relax.Var(var.name, var.ty)
            bindings.append(relax.VarBinding(new, relax.call_tir(call.args[0], fields, call.ty_args[0])))
            inner[var] = new
        return inner.get(group.output, subst.get(group.output, group.output))

    produced = emit(prod, {})
    out = emit(cons, {cons.params[index]: produced})
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], out)
    func = relax.Function(params, body, out.ty, is_pure=True)
    return func.with_attr("Primitive", True), args


def _reads_contiguously(func) -> bool:
    """Whether the reduction of PrimFunc ``func`` (FuseTIR's merge), its producers inlined as the CPU template
    inlines them, reads every parameter buffer through affine indices (no division or modulo of its axes), and
    independently of the output's innermost axis or with unit stride along it (in the buffer's last dimension,
    the others not depending on it)."""
    from tvm import s_tir, sym

    try:
        wl = PrimFuncWorkload.from_prim_func(func)
    except Exception:  # noqa: BLE001  (not a workload the template takes)
        return False
    if not is_mac(wl):  # e.g. Winograd's transforms (products with constant matrices): not tiling tasks
        return False
    sch = s_tir.Schedule(func)
    for name in wl.producer_blocks():
        sch.compute_inline(sch.get_sblock(name))
    block = sch.get(sch.get_sblock(wl.anchor_name()))
    store = block.body
    if not hasattr(store, "indices"):
        return False
    ana = sym.Analyzer()
    for iv in block.iter_vars:
        ana.bind(iv.var, iv.dom)
    inner = ana.simplify(store.indices[-1])
    axis = next((iv.var for iv in block.iter_vars if _uses(inner, iv.var)), None)
    params = {p.name for p in func.params}
    ivars = [iv.var for iv in block.iter_vars]
    loads: list = []
    walk_expr(store.value, lambda e: loads.append(e) if is_load(e) and e.source.name in params else None)

    def plain(load) -> bool:
        *outer, last = indices = [ana.simplify(i) for i in load.indices]
        if not all(_affine(i, ivars) for i in indices):
            return False
        if axis is None:
            return True
        return not any(_uses(i, axis) for i in outer) and (not _uses(last, axis) or _stride(last, axis) == 1)

    return all(plain(ld) for ld in loads)


def _uses(expr, var) -> bool:
    found = []
    walk_expr(expr, lambda n: found.append(n) if n.same_as(var) else None)
    return bool(found)


def _affine(expr, ivars) -> bool:
    """Whether ``expr`` is a sum of constant multiples of ``ivars`` and a constant (no division, no modulo)."""
    from tvm.sym.pattern import detect_linear_equation

    coef = detect_linear_equation(expr, ivars)
    return len(coef) == len(ivars) + 1 and all(hasattr(c, "value") for c in coef)


def _stride(expr, var) -> int | None:
    from tvm.sym.pattern import detect_linear_equation

    coef = detect_linear_equation(expr, [var])
    if len(coef) != 2 or not hasattr(coef[0], "value"):
        return None
    return int(coef[0].value)


class Candidate(NamedTuple):
    """A producer this pass may merge into its reader (``candidates``)."""

    func: object  # the global var of the Relax function that binds both
    producer: object  # the producer binding's var
    reader: object  # the reader binding's var
    index: int  # the producer's output among the reader's arguments
    prod: _Group
    cons: _Group
    key: tuple  # (producer callee, reader callee, index): one merged function per key
    name: str  # the merged kernel's: ``fused_``, then the producer's operators and the reader's, as FuseOps names


def candidates(mod) -> list[Candidate]:
    """Every producer of ``mod`` (after FuseOps) that this pass merges into its reader, before the contiguity
    check."""
    from tvm import relax

    found = []
    for gv, f in mod.functions.items():
        if not isinstance(f, relax.Function) or (f.attrs or {}).get("Primitive", False):
            continue
        binds = {}
        uses: dict = {}
        outputs = set()
        for block in getattr(f.body, "blocks", []):
            for b in block.bindings:
                if isinstance(b, relax.VarBinding):
                    binds[b.var] = b
                if not isinstance(b.var, relax.DataflowVar):
                    outputs.add(b.var)
                relax.analysis.post_order_visit(
                    b.value, lambda e, v=b.var: uses.setdefault(e, []).append(v) if isinstance(e, relax.Var) else None)
        for var, b in binds.items():
            readers = uses.get(var, [])
            if var in outputs or len(readers) != 1 or readers[0] not in binds:
                continue
            prod = _group_of(mod, b.value)
            if prod is None or not _is_injective_copy(mod, prod):
                continue
            ccall = binds[readers[0]].value
            cons = _group_of(mod, ccall)
            if cons is None or not _anchored(mod, cons):
                continue
            index = [i for i, a in enumerate(cons.args) if a.same_as(var)]
            if len(index) == 1:
                found.append(Candidate(gv, var, readers[0], index[0], prod, cons,
                                       (_callee(b.value), _callee(ccall), index[0]),
                                       f"fused_{_name(b.value)}_{_name(ccall)}"))
    return found


def _merge(mod, chosen: list[Candidate]):
    """``mod`` with each chosen candidate (at most one per reader) merged; [(a merged function's global var, its
    candidate's name)]. One merged function per distinct ``Candidate.key``."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder(tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs))
    made: dict = {}
    per_func: dict = {}
    for c in chosen:
        per_func.setdefault(c.func, []).append(c)
    merged, plans = [], []
    for gv, cs in per_func.items():
        calls = {}
        for c in cs:
            func, args = _merged_function(c.prod, c.cons, c.index)
            if c.key not in made:
                made[c.key] = bb.add_func(func, c.name)
                merged.append((made[c.key], c.name))
            calls[c.reader] = relax.Call(made[c.key], args)
        plans.append((gv, calls))
    out = bb.get()
    for gv, calls in plans:

        @relax.expr_functor.mutator
        class Rewrite(relax.PyExprMutator):
            def visit_var_binding_(self, b):
                if b.var in calls:
                    new = self.builder_.normalize(self.visit_expr(calls[b.var]))
                    v = self.builder_.emit(new, name_hint=b.var.name) if isinstance(b.var, relax.DataflowVar) \
                        else self.builder_.emit_output(new, name_hint=b.var.name)
                    self.set_var_remap(b.var, v)
                    return
                super().visit_var_binding_(b)

        out[gv] = Rewrite(out).visit_expr(mod[gv])
    out = relax.transform.DeadCodeElimination()(out)
    return out, merged


def _callee(call):
    from tvm import relax

    return call.args[0] if not isinstance(call.op, relax.GlobalVar) else call.op


def _name(call) -> str:
    n = _callee(call).name_hint
    return n[len("fused_"):] if n.startswith("fused_") else n


def producers_into_readers(mod):
    """``mod`` (after FuseOps, before FuseTIR) with each injective producer merged into the matmul-like kernel
    that alone reads it, where the merged kernel reads contiguously along its output's innermost axis (module
    docstring). A kernel with several such producers (GPT-2's QK^T: the query's and the key's) takes them one
    round at a time, each round checked on FuseTIR's merge of the whole module."""
    from tvm import relax

    refused: set = set()
    while True:
        per_reader: dict = {}
        for c in candidates(mod):
            if c.name not in refused:
                per_reader.setdefault((c.func, c.reader), c)
        pick = list(per_reader.values())
        if not pick:
            return mod
        trial, merged = _merge(mod, pick)
        fused = relax.transform.FuseTIR()(trial)
        have = {g.name_hint for g in fused.functions}
        bad = {base for gv, base in merged
               if gv.name_hint in have and not _reads_contiguously(fused[gv.name_hint])}
        refused |= bad
        if bad:
            pick = [c for c in pick if c.name not in bad]
            if not pick:
                continue
            trial, _ = _merge(mod, pick)
        mod = trial
