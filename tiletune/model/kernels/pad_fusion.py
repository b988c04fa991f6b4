"""A padding kernel taken into the kernel that produces its input: the producer writes the padded tensor itself.

The model's layout conversion gives every padded convolution a padding of its own (``nn.pad`` before it,
``tiletune.model.passes.layout``), a kernel that copies the whole activation into a larger buffer with a zero
border (ResNet-50: 16 such calls per inference). Where the pad's input is the output of one kernel and read by
nothing else (``fusable``), the model build removes the copy (``tiletune.model.build.scheduled_module``,
``fuse_pads``): that producer's kernel, as scheduled (tuned or default), writes its result into the interior of
the padded buffer and fills the border first, and ``rewrite_calls`` replaces the two calls by one.

- ``pad_spec`` recognizes a padding kernel by its TIR (TVM's legalized ``nn.pad``: one block whose value is
  ``if_then_else(bounds, x[i - before], value)``, the bounds exactly those of the input), not by its name.
- ``into_padded`` rewrites the producer's PrimFunc before it is scheduled: its output buffer becomes the padded
  shape and the one block that writes it stores at ``i + before``. The tuned configuration of the producer's
  task schedules this PrimFunc as it schedules the task's (``tiletune.schedules.cpu.schedule``'s ``func``: the
  same blocks and loops), so the records stay keyed by the task as tuned, and the tuning measured the same
  loops.
- ``with_border`` puts the border's fill (loop nests over the border only, no bounds checks, before the
  kernel's own loops) into the scheduled PrimFunc.
- Left as they were: a pad whose input has another reader (ResNet-18's residual inputs), a producer whose
  output block also reads its output or is not the only one to touch it, symbolic shapes, a producer that is a
  row reduction's kernel, and every CUDA target (the CUDA templates schedule no other PrimFunc than the task's).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..frontend.dims import static_shape


@dataclass(frozen=True)
class PadSpec:
    before: tuple[int, ...]  # per axis of the input
    after: tuple[int, ...]
    value: float  # the border's value

    def padded(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(n + b + a for n, b, a in zip(shape, self.before, self.after))


def collect_blocks(stmt, out: list) -> None:
    """Every SBlock under ``stmt`` (depth first)."""
    from tvm import s_tir, tirx

    if isinstance(stmt, s_tir.SBlockRealize):
        out.append(stmt.block)
        collect_blocks(stmt.block.body, out)
        if stmt.block.init is not None:
            collect_blocks(stmt.block.init, out)
    elif isinstance(stmt, s_tir.SBlock):
        out.append(stmt)
        collect_blocks(stmt.body, out)
    elif isinstance(stmt, tirx.For):
        collect_blocks(stmt.body, out)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            collect_blocks(s, out)


def _dt(e) -> str:
    """The dtype of a TIR expression, as a string (TVM 0.27 keeps it in the expression's type)."""
    return str(e.ty.dtype)


def _shape(buf) -> tuple[int, ...] | None:
    return static_shape(buf.ty.shape)


def _bound(t, ivars):
    """(axis, "lo" or "hi", the constant) of a comparison ``c <= v`` / ``v >= c`` (lo) or ``v < c`` / ``c > v``
    (hi) of an iteration variable with a constant; (None, None, None) for anything else."""
    from tvm import tirx

    for cls, var_side, kind in ((tirx.LE, "b", "lo"), (tirx.GE, "a", "lo"), (tirx.LT, "a", "hi"),
                                (tirx.GT, "b", "hi")):
        if isinstance(t, cls):
            v, c = (t.b, t.a) if var_side == "b" else (t.a, t.b)
            k = next((k for k, iv in enumerate(ivars) if v.same_as(iv)), None)
            if k is not None and isinstance(c, tirx.IntImm):
                return k, kind, int(c.value)
    return None, None, None


def pad_spec(func) -> PadSpec | None:
    """The padding that ``func`` computes, or None when it is not exactly a constant padding of its one input."""
    import tvm
    from tvm import tirx

    if len(func.params) != 2:
        return None
    src, dst = func.params
    ins, outs = _shape(src), _shape(dst)
    blocks: list = []
    collect_blocks(func.body, blocks)
    blocks = [b for b in blocks if b.name_hint != "root"]
    if ins is None or outs is None or len(ins) != len(outs) or len(blocks) != 1:
        return None
    store = blocks[0].body
    if not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(dst) or blocks[0].init is not None:
        return None
    ivars = [iv.var for iv in blocks[0].iter_vars]
    if len(ivars) != len(outs) or not all(i.same_as(v) for i, v in zip(store.indices, ivars)):
        return None
    val = store.value
    if not (isinstance(val, tvm.ir.expr.Call) and getattr(val.op, "name", "") == "prim.if_then_else"):
        return None
    cond, load, const = val.args
    if not (isinstance(load, tvm.ir.expr.TensorLoad) and load.source.same_as(src)
            and isinstance(const, (tirx.FloatImm, tirx.IntImm))):
        return None
    before = []
    for idx, v in zip(load.indices, ivars):
        if idx.same_as(v):
            before.append(0)
        elif isinstance(idx, tirx.Sub) and idx.a.same_as(v) and isinstance(idx.b, tirx.IntImm) and idx.b.value > 0:
            before.append(int(idx.b.value))
        else:
            return None
    after = [o - n - b for o, n, b in zip(outs, ins, before)]
    if min(after) < 0:
        return None
    # the bounds: ``before <= v`` where before > 0 and ``v < before + n`` where after > 0, each exactly (TVM also
    # writes the ones that always hold, ``0 <= v`` on an axis padded after only)
    want = {(k, "lo") for k, b in enumerate(before) if b} | {(k, "hi") for k, a in enumerate(after) if a}
    got = set()
    terms = [cond]
    while terms:
        t = terms.pop()
        if isinstance(t, tirx.And):
            terms += [t.a, t.b]
            continue
        k, kind, bound = _bound(t, ivars)
        ok = k is not None and bound == (before[k] if kind == "lo" else before[k] + ins[k])
        if not ok:
            return None
        got.add((k, kind))
    if not want or not want <= got:
        return None
    return PadSpec(tuple(before), tuple(after), float(const.value))


def into_padded(func, spec: PadSpec):
    """``func`` (unscheduled) writing its output into the interior of a buffer of the padded shape, or None when
    its output is not written by one block that stores it and nothing else touches (see the module docstring).
    The border is left to ``with_border``."""
    from tvm import ir, s_tir, tirx

    out = func.params[-1]
    shape = _shape(out)
    if shape is None or len(shape) != len(spec.before):
        return None
    blocks: list = []
    collect_blocks(func.body, blocks)
    touching = [b for b in blocks if any(r.source.same_as(out) for r in list(b.reads) + list(b.writes))]
    if len(touching) != 1:
        return None
    writer = touching[0]
    store = writer.body
    if (writer.init is not None or any(r.source.same_as(out) for r in writer.reads)
            or not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(out)):
        return None
    dims = out.ty.shape
    new = tirx.decl_buffer([tirx.IntImm(_dt(d), n) for d, n in zip(dims, spec.padded(shape))],
                           str(out.ty.dtype), name=out.name)

    def shift(e, k):
        return e + tirx.IntImm(_dt(e), spec.before[k]) if spec.before[k] else e

    new_store = tirx.BufferStore(new, store.value, [shift(e, k) for k, e in enumerate(store.indices)])
    writes = [tirx.BufferRegion(new, [ir.Range.from_min_extent(shift(r.min, k), r.extent)
                                      for k, r in enumerate(w.region)]) if w.source.same_as(out) else w
              for w in writer.writes]
    new_writer = s_tir.SBlock(list(writer.iter_vars), list(writer.reads), writes, writer.name_hint, new_store,
                              None, list(writer.alloc_buffers), list(writer.match_buffers), writer.annotations)

    def rebuild(stmt):
        """``stmt`` with the writer replaced; None where the writer is under a statement kind not rebuilt here."""
        if isinstance(stmt, s_tir.SBlockRealize):
            if stmt.block.same_as(writer):
                return s_tir.SBlockRealize(list(stmt.iter_values), stmt.predicate, new_writer)
            inner = rebuild(stmt.block)
            return None if inner is None else s_tir.SBlockRealize(list(stmt.iter_values), stmt.predicate, inner)
        if isinstance(stmt, s_tir.SBlock):
            body = rebuild(stmt.body)
            return None if body is None else s_tir.SBlock(
                list(stmt.iter_vars), list(stmt.reads), list(stmt.writes), stmt.name_hint, body, stmt.init,
                list(stmt.alloc_buffers), list(stmt.match_buffers), stmt.annotations)
        if isinstance(stmt, tirx.For):
            body = rebuild(stmt.body)
            return None if body is None else tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                                                      stmt.thread_binding, stmt.annotations, stmt.step)
        if isinstance(stmt, tirx.SeqStmt):
            seq = [rebuild(s) if _holds(s, writer) else s for s in stmt.seq]
            return None if any(s is None for s in seq) else tirx.SeqStmt(seq)
        return None

    body = rebuild(func.body)
    if body is None:
        return None
    return tirx.PrimFunc([*func.params[:-1], new], body, func.ret_type, func.attrs)


def _holds(stmt, block) -> bool:
    found: list = []
    collect_blocks(stmt, found)
    return any(b.same_as(block) for b in found)


def border_regions(shape: tuple[int, ...], spec: PadSpec) -> list[list[tuple[int, int]]]:
    """Disjoint boxes ((start, extent) per axis of the padded shape) that together cover exactly its border: for
    each padded axis k, its ``before`` and ``after`` slabs, the axes before k taken at their interior only."""
    padded = spec.padded(shape)
    boxes = []
    for k in range(len(shape)):
        for start, extent in ((0, spec.before[k]), (spec.before[k] + shape[k], spec.after[k])):
            if extent == 0:
                continue
            box = [(spec.before[j], shape[j]) if j < k else (0, padded[j]) for j in range(len(shape))]
            box[k] = (start, extent)
            boxes.append(box)
    return boxes


def with_border(func, shape: tuple[int, ...], spec: PadSpec):
    """``func`` (scheduled, from ``into_padded``) with the border of its output filled with the pad's value
    first, by one serial loop nest (one block) per box of ``border_regions`` (LLVM vectorizes the constant
    stores)."""
    from tvm import ir, s_tir, tirx

    out = func.params[-1]
    dims = out.ty.shape
    fill = tirx.const(spec.value, str(out.ty.dtype))
    nests = []
    for n, box in enumerate(border_regions(shape, spec)):
        loops = [tirx.Var(f"border{n}_{k}", _dt(dims[k])) for k in range(len(box))]
        ivars = [tirx.IterVar(ir.Range.from_min_extent(tirx.IntImm(_dt(dims[k]), s), tirx.IntImm(_dt(dims[k]), e)),
                              tirx.Var(f"v_border{n}_{k}", _dt(dims[k])), tirx.IterVar.DataPar)
                 for k, (s, e) in enumerate(box)]
        idx = [iv.var for iv in ivars]
        block = s_tir.SBlock(ivars, [], [tirx.BufferRegion(out, [ir.Range.from_min_extent(v, 1) for v in idx])],
                             f"pad_border{n}", tirx.BufferStore(out, fill, idx))
        stmt = s_tir.SBlockRealize([v + tirx.IntImm(_dt(v), s) if s else v for v, (s, _) in zip(loops, box)],
                                   tirx.const(True, "bool"), block)
        for k in reversed(range(len(box))):
            stmt = tirx.For(loops[k], tirx.IntImm(_dt(dims[k]), 0), tirx.IntImm(_dt(dims[k]), box[k][1]),
                            tirx.ForKind.SERIAL, stmt)
        nests.append(stmt)
    root = func.body
    if not isinstance(root, s_tir.SBlockRealize):
        body = tirx.SeqStmt([*nests, root])
    else:
        blk = root.block
        blk = s_tir.SBlock(list(blk.iter_vars), list(blk.reads), list(blk.writes), blk.name_hint,
                           tirx.SeqStmt([*nests, blk.body]), blk.init, list(blk.alloc_buffers),
                           list(blk.match_buffers), blk.annotations)
        body = s_tir.SBlockRealize(list(root.iter_values), root.predicate, blk)
    return func.with_body(body)


def _call_tir(value):
    """(callee name, the call's arguments) of a ``call_tir`` without symbolic arguments, or None."""
    from tvm import relax

    if (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir"
            and len(value.args) == 2 and isinstance(value.args[1], relax.Tuple)):
        return value.args[0].name_hint, list(value.args[1].fields)
    return None


def _uses(f) -> dict:
    """Per variable of the Relax function ``f``, how many bindings (and the result) read it."""
    from tvm import relax

    uses: dict = {}
    for blk in f.body.blocks:
        for b in blk.bindings:
            for v in relax.analysis.free_vars(b.value):
                uses[v] = uses.get(v, 0) + 1
    for v in relax.analysis.free_vars(f.body.body):
        uses[v] = uses.get(v, 0) + 1
    return uses


def fusable(mod) -> dict[tuple[str, str], PadSpec]:
    """{(producer, pad): the pad's spec} for every pad call (``pad_spec``) of ``mod``'s Relax functions whose input
    is the output of a ``call_tir`` of the producer, read by that pad call alone."""
    return {key: spec for key, (spec, _) in _fusable_calls(mod).items()}


def fused_calls(mod) -> dict[str, int]:
    """{pad kernel: how many of its calls ``fusable`` finds} (what ``model tasks`` reports)."""
    out: dict[str, int] = {}
    for (_, pad), (_, calls) in _fusable_calls(mod).items():
        out[pad] = out.get(pad, 0) + calls
    return out


def fused_name(producer: str, pad: str) -> str:
    """The global name of the kernel that does ``producer``'s work and ``pad``'s (``rewrite_calls``)."""
    return f"{producer}_{pad}"


def _pairs(f):
    """(producer binding, pad binding, producer name, pad name) for every call of ``f`` (a Relax function) with one
    argument that is the result of another ``call_tir`` read by that call alone."""
    from tvm import relax

    uses = _uses(f)
    made = {b.var: b for blk in f.body.blocks for b in blk.bindings if _call_tir(b.value)}
    for blk in f.body.blocks:
        for b in blk.bindings:
            c = _call_tir(b.value)
            if c is None or len(c[1]) != 1 or not isinstance(c[1][0], relax.Var):
                continue
            p = made.get(c[1][0])
            if p is not None and uses.get(c[1][0]) == 1:
                yield p, b, _call_tir(p.value)[0], c[0]


def _relax_functions(mod):
    from tvm import relax

    return [(gv, f) for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and isinstance(f.body, relax.SeqExpr)]


def _fusable_calls(mod) -> dict[tuple[str, str], tuple[PadSpec, int]]:
    import tvm

    specs = {gv.name_hint: s for gv, f in mod.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc) and (s := pad_spec(f)) is not None}
    out: dict = {}
    for _, f in _relax_functions(mod):
        for _, _, prod, pad in _pairs(f):
            if pad in specs and prod not in specs:
                out[(prod, pad)] = (specs[pad], out[(prod, pad)][1] + 1 if (prod, pad) in out else 1)
    return out


def rewrite_calls(mod, variants: dict[tuple[str, str], object]):
    """``mod`` with every fusable pair of calls (``fusable``) whose (producer, pad) has a PrimFunc in ``variants``
    replaced by one call of it (added to the module as ``fused_name(producer, pad)``): the producer's arguments,
    the pad's result. The other calls stay as they are."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder(tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs))
    gvs = {key: bb.add_func(func, fused_name(*key)) for key, func in variants.items()}
    for fgv, f in _relax_functions(mod):
        replaced, dropped = {}, set()
        for p, b, prod, pad in _pairs(f):
            if (prod, pad) in gvs:
                replaced[b.var] = relax.VarBinding(b.var, relax.call_tir(
                    gvs[(prod, pad)], relax.Tuple(_call_tir(p.value)[1]), b.var.ty))
                dropped.add(p.var)
        if not replaced:
            continue
        blocks = []
        for blk in f.body.blocks:
            bindings = [replaced.get(b.var, b) for b in blk.bindings if b.var not in dropped]
            blocks.append(relax.DataflowBlock(bindings) if isinstance(blk, relax.DataflowBlock)
                          else relax.BindingBlock(bindings))
        new = relax.Function(f.params, relax.SeqExpr(blocks, f.body.body), f.ret_ty, f.is_pure, f.attrs)
        bb.update_func(fgv, bb.normalize(new))
    return tvm.IRModule(dict(bb.get().functions.items()), attrs=mod.attrs)  # not the builder's own module
