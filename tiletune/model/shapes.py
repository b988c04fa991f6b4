"""Models with symbolic dimensions (a sequence length, a batch): tuned at the shapes they meet, built into one
library that runs at every shape within the bounds.

- ``parse_shapes(texts, source)``: ``--shapes seq=32,64,128`` (several names: ``--shapes batch=1,4 --shapes
  seq=32,64``, or ``batch=1,4;seq=32,64``) -> the list of bindings (the product of the values; a name not given
  takes the example inputs' value). Errors are one line: an unknown name, a value that is not an integer or is
  outside the dimension's bounds, a name given twice, a dimension without a value.
- ``shape_tasks(source, target, layout, bindings)``: the model imported once with its symbolic dimensions, its
  convolutions converted once (``tiletune.model.layout``), then per binding ``relax.transform.BindSymbolicVars``
  makes a static module that is fused and extracted as a static model is (``tiletune.model.tasks``). The
  ``merged`` ModelTasks holds every distinct kernel once (a kernel with the same structural hash at two
  shapes is one task, its calls summed), named ``KERNEL@seq=32`` (``@seq=32,64`` when shared); it is what
  ``tune_model`` tunes (one records file, one budget, the task scheduler choosing among all shapes' tasks).
  Records are keyed by workload key (the kernel's name, static shapes and hash), so a later run with another
  shape recalls what is in the file and measures only the new shape's kernels.
- ``best_configs_shaped``: ``tiletune.model.build.best_configs`` over all shapes' tasks; a records file that
  holds none of these shapes' kernels is still accepted when it holds kernels of the same names (the model
  tuned at other shapes).
- ``dispatch_module``: one module for every shape within the bounds. Per tuned shape, its static module with
  the tuned kernels (the default schedule for the rest), its functions renamed ``NAME_seq32``; for the other
  shapes, the symbolic module, fused (``fallback_modules``): with rule "nearest" (the default) one copy per tuned
  shape, each tunable kernel scheduled with that shape's configuration (``tiletune.model.shape_rule``), serving
  the shapes nearest to it; with rule "default" one copy, every kernel default-scheduled
  (``tiletune.model.default_schedule`` for symbolic extents). Every scheduled kernel is checked against TVM's
  unscheduled one. The Relax ``main`` compares the symbolic values with each tuned shape's (``R.If`` on a
  ``PrimValue``) and calls that shape's function, else the copy whose intervals hold them. The dispatch is inside
  the library: ``load_model`` calls ``main`` with inputs of any allowed shape (and constructs a library for a
  shape it meets that was not tuned: ``tiletune.model.first_use``). Why this rule:
  [shape-rule](../../docs/decisions/shape-rule.md).
- ``check_bindings``: the shapes a build is checked at: each tuned one, the bounds, one between two tuned
  values.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import TiletuneError
from ..records import load
from ..target import target_key
from ..workloads.primfunc import _walk
from .build import best_configs, scheduled_module
from .default_schedule import default_schedule
from .dims import bind, label, parse_shapes, tag
from .importer import to_relax
from .layout import check_layout, convert
from .shape_rule import first_correct, like_modules, ranges, signature
from .source import ModelSource
from .tasks import ModelTasks, extract, fuse

FALLBACK = "any"  # the label of the symbolic module's functions (rule "default")
RULES = ("nearest", "default")  # of the shapes not tuned (fallback_modules)
DEFAULT_RULE = "nearest"  # docs/decisions/shape-rule.md
OTHER_SHAPES = ("the symbolic model with the nearest tuned shape's kernels (padded), until load_model has constructed "
                "the shape's own library at its first use (gensor)")


# ------------------------------------------------------------------------------------------------- tasks


@dataclass
class ShapeTasks:
    binding: dict[str, int]
    tasks: ModelTasks  # the static module at this binding, fused and extracted

    @property
    def label(self) -> str:
        return label(self.binding)


@dataclass
class DynamicTasks:
    source: ModelSource
    symbolic: object  # the imported module (convolutions converted), symbolic and not fused
    target: dict
    layout: str
    shapes: list[ShapeTasks]
    merged: ModelTasks  # every distinct kernel of every shape once (see the module docstring)
    notes: list[str] = field(default_factory=list)


def _shared_label(bindings: list[dict[str, int]]) -> str:
    if len(bindings) == 1:
        return label(bindings[0])
    names = list(bindings[0])
    if len(names) == 1:
        return f"{names[0]}=" + ",".join(str(b[names[0]]) for b in bindings)
    return "+".join(label(b) for b in bindings)


def shape_tasks(source: ModelSource, target: dict, layout: str, bindings: list[dict[str, int]]) -> DynamicTasks:
    """The tasks of ``source`` at every binding (see the module docstring)."""
    layout = check_layout(layout)
    converted = convert(to_relax(source), layout)
    shapes = []
    for b in bindings:
        t = extract(fuse(bind(converted.mod, b), target), target, layout)
        shapes.append(ShapeTasks(b, t))
    by_hash: dict = {}
    where: dict[str, list[dict[str, int]]] = {}
    for st in shapes:
        for k in st.tasks.kernels:
            where.setdefault(k.hash, []).append(st.binding)
            if k.hash in by_hash:
                by_hash[k.hash].calls += k.calls
            else:
                by_hash[k.hash] = replace(k, names=list(k.names))
    kernels = []
    for h, k in by_hash.items():
        k.name = f"{k.name}@{_shared_label(where[h])}"
        kernels.append(k)
    kernels.sort(key=lambda k: (-k.flops * k.calls, k.name))
    merged = ModelTasks(None, target, kernels, layout, list(converted.notes))
    return DynamicTasks(source, converted.mod, target, layout, shapes, merged, list(converted.notes))


def best_configs_shaped(dyn: DynamicTasks, records: str | None) -> dict:
    """The chosen kernel of every task at every shape (by kernel hash; see the module docstring)."""

    try:
        return best_configs(dyn.merged, records)
    except TiletuneError as e:
        if "holds no kernel of this model" not in str(e):
            raise
        names = {k.workload.name for k in dyn.merged.tasks}
        tkey = target_key(dyn.target)
        if any(r.workload.split("[", 1)[0] in names for r in load(records) if r.target == tkey):
            return {}  # tuned at other shapes only
        raise


# ------------------------------------------------------------------------------------------------- build


def _collect_vars(expr, out: dict) -> None:
    from tvm import tirx

    _walk(expr, lambda e: out.setdefault(e.name, e) if isinstance(e, tirx.Var) else None)


def checked_symbolic(func, target: dict, bindings: list[dict[str, int]]) -> tuple[object, str]:
    """(``func`` with the default schedule, which one: "parallel+vector", "parallel" or "none"), the schedule
    compared with TVM's unscheduled build of ``func`` at each of ``bindings`` on random inputs (the same rule as
    ``tiletune.model.default_schedule.checked``, for symbolic extents; ``tiletune.model.shape_rule.first_correct``)."""
    import tvm_ffi

    f, how = first_correct(func, target, bindings, [(h, lambda v=v: default_schedule(func, vectorize=v))
                                                    for v, h in ((True, "parallel+vector"), (False, "parallel"))])
    return f, ("none" if tvm_ffi.structural_equal(f, func) else how)


def fallback_modules(dyn: DynamicTasks, chosen: dict, check_at: list[dict[str, int]], rule: str = DEFAULT_RULE):
    """The symbolic module (fused) for the shapes that were not tuned: [(the tuned binding it is scheduled like,
    or None, the module, {kernel: how})]. ``rule`` "nearest": one copy per tuned shape, its tunable kernels
    scheduled with that shape's tuned configurations (``tiletune.model.shape_rule.like_modules``); "default": one
    copy, every kernel default-scheduled. Every scheduled kernel is checked at ``check_at`` (the shapes the copies
    serve: the bounds and one between; the code is the same at every value of a symbolic dimension)."""
    import tvm
    import tvm_ffi

    if rule not in RULES:
        raise TiletuneError(f"unknown rule for untuned shapes {rule!r}; accepted: {', '.join(RULES)}")
    fused = fuse(dyn.symbolic, dyn.target)
    cache: dict = {}

    def default(f):
        h = tvm_ffi.structural_hash(f)
        if h not in cache:
            new, sched = checked_symbolic(f, dyn.target, check_at)
            cache[h] = (new, f"default ({sched}), symbolic")
        return cache[h]

    if rule == "default" or not chosen:
        out = tvm.IRModule(dict(fused.functions.items()), attrs=fused.attrs)
        how = {}
        for gv, f in fused.functions.items():
            if isinstance(f, tvm.tirx.PrimFunc):
                out[gv], how[gv.name_hint] = default(f)
        return [(None, out, how)]
    shapes = []
    for st in dyn.shapes:
        chosen_at = {}
        for k in st.tasks.tasks:
            sig = signature(k.func, {}) if k.hash in chosen else None
            if sig is not None:
                chosen_at[sig] = chosen[k.hash]
        shapes.append((st.binding, chosen_at))
    copies = like_modules(fused, shapes, dyn.target, check_at, default)
    return [(binding, mod, how) for (binding, _), (mod, how) in zip(shapes, copies)]


def dispatch_module(dyn: DynamicTasks, chosen: dict, check_at: list[dict[str, int]], rule: str = DEFAULT_RULE):
    """(one module whose ``main`` runs every shape within the bounds, {shape label, "near LABEL" (rule nearest)
    or "any" (rule default): {kernel: how}}); see the module docstring. The symbolic module's default-scheduled
    kernels are checked at ``check_at`` (shapes it serves: the bounds and one between)."""
    import tvm
    from tvm import relax, tirx

    bb = relax.BlockBuilder()

    @relax.expr_functor.mutator
    class Rename(relax.PyExprMutator):
        def __init__(self, mapping):
            super().__init__()
            self.mapping = mapping

        def visit_global_var_(self, gv):
            return self.mapping.get(gv.name_hint, gv)

    def add(mod, suffix: str):
        """Every function of ``mod`` into the builder (``NAME_suffix``; identical kernels once); ``main``'s GV."""
        mapping = {}
        for gv, f in mod.functions.items():
            if isinstance(f, tirx.PrimFunc):
                f = f.without_attr("global_symbol") if "global_symbol" in (f.attrs or {}) else f
                mapping[gv.name_hint] = bb.add_func(f, f"{gv.name_hint}_{suffix}")
        for gv, f in mod.functions.items():
            if isinstance(f, relax.Function):
                f = Rename(mapping).visit_expr(f)
                f = f.without_attr("global_symbol") if "global_symbol" in (f.attrs or {}) else f
                mapping[gv.name_hint] = bb.add_func(f, f"{gv.name_hint}_{suffix}")
        return mapping["main"]

    how: dict[str, dict[str, str]] = {}
    per_shape = []
    for st in dyn.shapes:
        mod, how[st.label] = scheduled_module(st.tasks, chosen)
        per_shape.append((st, mod["main"], add(mod, tag(st.binding))))
    fallbacks = []
    for near, fb, fb_how in fallback_modules(dyn, chosen, check_at, rule):
        name = FALLBACK if near is None else f"near_{tag(near)}"
        how[FALLBACK if near is None else f"near {label(near)}"] = fb_how
        fallbacks.append((near, add(fb, name)))
    fb_main = fb["main"]
    intervals = ranges(dyn.source.dims, [st.binding for st in dyn.shapes])

    params = [relax.Var(p.name, p.ty) for p in fb_main.params]
    ret_ty = fb_main.ret_ty
    syms: dict = {}
    for p in params:
        for e in getattr(p.ty, "shape", None) or []:
            _collect_vars(e, syms)
    missing = sorted(set(dyn.source.dims) - set(syms))
    if missing:
        raise TiletuneError(f"the imported model's inputs do not carry the symbolic dimension(s) {', '.join(missing)}")

    def int64(v: int):
        return tirx.IntImm("int64", v)

    def fallback_chain(j: int):
        """The symbolic copies: each serves the box of its tuned shape's intervals; the last one the rest."""
        near, gv = fallbacks[j]
        out = relax.Var(f"out_near{j}", ret_ty)
        call = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(out, relax.Call(gv, params))])], out)
        if j == len(fallbacks) - 1:
            return call
        cond = None
        for name, v in near.items():
            lo, hi = intervals[name][v]
            for c in ([tirx.LE(int64(lo), syms[name])] if lo > dyn.source.dims[name].lo else []) + (
                    [tirx.LE(syms[name], int64(hi))] if hi is not None else []):
                cond = c if cond is None else tirx.And(cond, c)
        if cond is None:
            return call
        return relax.SeqExpr([], relax.If(relax.prim_value(cond), call, fallback_chain(j + 1)))

    def chain(i: int):
        if i == len(per_shape):
            return fallback_chain(0)
        st, static_main, gv = per_shape[i]
        cast = [relax.Var(f"{p.name}_{tag(st.binding)}", sp.ty) for p, sp in zip(params, static_main.params)]
        res = relax.Var(f"res_{tag(st.binding)}", static_main.ret_ty)
        out = relax.Var(f"out_{tag(st.binding)}", ret_ty)
        block = relax.BindingBlock([relax.MatchCast(c, p, c.ty) for c, p in zip(cast, params)]
                                   + [relax.VarBinding(res, relax.Call(gv, cast)), relax.MatchCast(out, res, ret_ty)])
        cond = None
        for name, v in st.binding.items():
            eq = tirx.EQ(syms[name], int64(v))
            cond = eq if cond is None else tirx.And(cond, eq)
        return relax.SeqExpr([], relax.If(relax.prim_value(cond), relax.SeqExpr([block], out), chain(i + 1)))

    main = relax.Function(params, chain(0), ret_ty)
    for a in ("tir_var_lower_bound", "tir_var_upper_bound"):
        if a in (fb_main.attrs or {}):
            main = main.with_attr(a, fb_main.attrs[a])
    bb.add_func(main.with_attr("global_symbol", "main"), "main")
    mod = relax.transform.Normalize()(bb.get())
    return tvm.IRModule(dict(mod.functions.items()), attrs=dyn.shapes[0].tasks.fused.attrs), how


def check_bindings(source: ModelSource, tuned: list[dict[str, int]]) -> list[dict[str, int]]:
    """The bindings a build is checked at: the tuned ones, one between two tuned values of every dimension (or
    between the lower bound and the first), the lower bounds, the upper bounds (past the largest tuned value
    when a dimension is unbounded)."""
    out = [dict(b) for b in tuned]
    between, lo, hi = {}, {}, {}
    for name, d in source.dims.items():
        vals = sorted({b[name] for b in tuned})
        gaps = [(a, b) for a, b in zip([d.lo] + vals, vals) if b - a >= 2]
        gaps.sort(key=lambda g: (g[0] == d.lo, g))  # between two tuned values first
        between[name] = (gaps[0][0] + gaps[0][1]) // 2 if gaps else vals[0]
        lo[name] = d.lo
        hi[name] = d.hi if d.hi is not None else vals[-1] + 1
    for b in (between, lo, hi):
        if b not in out:
            out.append(b)
    return out
