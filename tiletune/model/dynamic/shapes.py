"""Models with symbolic dimensions (a sequence length, a batch): tuned at the shapes they meet, built into one
library that runs at every shape within the bounds.

- ``parse_shapes(texts, source)``: ``--shapes seq=32,64,128`` (several names: ``--shapes batch=1,4 --shapes
  seq=32,64``, or ``batch=1,4;seq=32,64``) -> the list of bindings (the product of the values; a name not given
  takes the example inputs' value). Errors are one line: an unknown name, a value that is not an integer or is
  outside the dimension's bounds, a name given twice, a dimension without a value.
- ``shape_tasks(source, target, layout, bindings)``: the model imported once with its symbolic dimensions, its
  convolutions converted once (``tiletune.model.passes.layout``), then per binding ``relax.transform.BindSymbolicVars``
  makes a static module that is fused and extracted as a static model is (``tiletune.model.kernels.tasks``). The
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
  shape, each tunable kernel scheduled with that shape's configuration (``tiletune.model.dynamic.shape_rule``), serving
  the shapes nearest to it; with rule "default" one copy, every kernel default-scheduled
  (``tiletune.model.kernels.default_schedule`` for symbolic extents). Every scheduled kernel is checked against TVM's
  unscheduled one. On a CUDA target the other shapes run one copy whose kernels TVM's dlight GPU rules schedule
  (``tiletune.model.kernels.gpu_default``: they take symbolic extents; the CPU template's configurations are not for
  symbolic GPU kernels), checked with the whole model at ``check_bindings`` on a GPU. The Relax ``main``
  compares the symbolic values with each tuned shape's (``R.If`` on a ``PrimValue``) and calls that shape's function, else the copy whose intervals hold them. The dispatch is inside
  the library: ``load_model`` calls ``main`` with inputs of any allowed shape (and constructs a library for a
  shape it meets that was not tuned: ``tiletune.model.dynamic.first_use``). Why this rule:
  [shape-rule](../../docs/decisions/shape-rule.md).
- ``check_bindings``: the shapes a build is checked at: each tuned one, the bounds, one between two tuned
  values.
- ``dynamic_library(dyn, records, construct)``: the one assembly path of such a library (``model build --shapes``
  and ``model bench --shapes``): the records' best kernels per tuned shape of ``dyn`` (``--construct``: a
  construction for the tasks without one), ``dispatch_module``, compiled, with the bindings ``model build`` checks
  it at (``check_bindings``).
- ``recorded_shapes(source, target, layout, rows)``: the shapes a records file's rows hold tuned kernels of
  (``model bench --shapes`` takes its tuned shapes from the records, see its docstring).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ..passes.pipeline import prepare
from ...errors import TiletuneError
from ...target import is_cuda, target_key
from ...workloads.primfunc import walk_expr
from ..kernels import gpu_default
from ..build import best_configs, compile_module, constructed_configs, read_records, scheduled_module
from ..kernels.default_schedule import default_schedule
from ..frontend.dims import bind, label, parse_shapes, tag
from ..passes.layout import check_layout, check_layout_for
from ..passes.precision import check_dtype
from .shape_rule import value_at, first_correct, like_modules, ranges, signature
from ..frontend.source import ModelSource
from ..kernels.tasks import ModelTasks, extract, fuse

FALLBACK = "any"  # the label of the symbolic module's functions (rule "default")
RULES = ("nearest", "default")  # of the shapes not tuned (fallback_modules)
DEFAULT_RULE = "nearest"  # docs/decisions/shape-rule.md
OTHER_SHAPES = ("the symbolic model with the nearest tuned shape's kernels (padded), until load_model has constructed "
                "the shape's own library at its first use (gensor)")
OTHER_SHAPES_GPU = ("the symbolic model with dlight's kernels, until load_model has constructed the shape's own "
                    "library at its first use (gensor)")


def other_shapes(target: dict) -> str:
    """What a library built for ``target`` runs at a shape that was not tuned (``fallback_modules``)."""
    return OTHER_SHAPES_GPU if is_cuda(target) else OTHER_SHAPES


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


def shape_tasks(source: ModelSource, target: dict, layout: str, bindings: list[dict[str, int]],
                converted=None, dtype: str = "float32") -> DynamicTasks:
    """The tasks of ``source`` at every binding (see the module docstring), computing in ``dtype`` (on a CUDA
    target, ``tiletune.model.passes.precision``); ``converted``: the model already imported, cast and converted to
    ``layout`` (``tiletune.model.passes.layout.convert``), else it is imported here."""
    layout = check_layout_for(layout, target)
    dtype = check_dtype(dtype)
    if converted is None:
        converted = prepare(source, dtype, layout)
    shapes = []
    for b in bindings:
        t = extract(fuse(bind(converted.mod, b), target, static=False), target, layout)
        t.dtype = dtype
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
    merged = ModelTasks(None, target, kernels, layout, list(converted.notes), dtype)
    return DynamicTasks(source, converted.mod, target, layout, shapes, merged, list(converted.notes))


def best_configs_shaped(dyn: DynamicTasks, records: str | None, read: list | None = None) -> dict:
    """The chosen kernel of every task at every shape (by kernel hash; see the module docstring); ``read``: the
    records of ``records``, read already."""

    try:
        return best_configs(dyn.merged, records, read)
    except TiletuneError as e:
        if "holds no kernel of this model" not in str(e):
            raise
        names = {k.workload.name for k in dyn.merged.tasks}
        tkey = target_key(dyn.target)
        if any(r.workload.split("[", 1)[0] in names for r in read_records(records, read) if r.target == tkey):
            return {}  # tuned at other shapes only
        raise


def _key_shapes(key: str) -> list[tuple[int, ...]] | None:
    """The shapes in a workload key ``NAME[1x16x32,32x96]@HASH`` (None: not of that form)."""
    body = key.rpartition("@")[0]
    if "[" not in body or not body.endswith("]"):
        return None
    out = []
    for s in body[body.index("[") + 1:-1].split(","):
        try:
            out.append(tuple(int(x) for x in s.split("x")) if s else ())
        except ValueError:
            return None
    return out


def _solve(expr, name: str, x: int, fixed: dict[str, int] | None = None) -> int | None:
    """The value of ``name`` that makes ``expr`` (a TIR extent linear in that variable, its other variables at
    ``fixed``) equal ``x``."""
    fixed = fixed or {}
    a0, a1 = value_at(expr, {**fixed, name: 0}), value_at(expr, {**fixed, name: 1})
    if a0 is None or a1 is None or a1 <= a0 or (x - a0) % (a1 - a0):
        return None
    v = (x - a0) // (a1 - a0)
    return v if value_at(expr, {**fixed, name: v}) == x else None


def _fit(symbolic: list[tuple], static: list[tuple[int, ...]], dims) -> list[dict[str, int]]:
    """The values of the model's dimensions that make the symbolic shapes ``symbolic`` the static ``static``, []
    when none do. An extent of one dimension fixes it; an extent of several (a flattened ``batch x seq``) fixes the
    one that the others leave free, those fixed elsewhere or, where none fixes them, at their example's values
    (one binding per dimension so solved: the caller's candidates). A dimension no extent fixes is left out."""
    from tvm import tirx

    binding: dict[str, int] = {}
    later = []
    for es, xs in zip(symbolic, static):
        if len(es) != len(xs):
            return []
        for e, x in zip(es, xs):
            if isinstance(e, tirx.IntImm):
                if int(e) != x:
                    return []
                continue
            found: dict = {}
            _collect_vars(e, found)
            if len(found) == 1 and next(iter(found)) in dims:
                name = next(iter(found))
                v = _solve(e, name, x)
                if v is None or binding.setdefault(name, v) != v:
                    return []
            else:
                later.append((e, x, [n for n in found if n in dims]))
    out = [binding]
    for e, x, names in later:
        free = [n for n in names if n not in binding]
        if not free:
            continue
        fits = []
        for b in out:
            for name in free:
                fixed = {n: b.get(n, dims[n].example) for n in names if n != name}
                if any(v is None for v in fixed.values()):
                    continue
                v = _solve(e, name, x, fixed)
                if v is not None:
                    fits.append({**b, name: v})
        out = fits
    return [b for b in out if not any(value_at(e, b) not in (None, x) for e, x, _ in later)]


def recorded_shapes(source: ModelSource, target: dict, layout: str, rows: list,
                    dtype: str = "float32") -> list[dict[str, int]]:
    """The bindings of ``source``'s symbolic dimensions that the records ``rows`` (a records file's, read by the
    caller: ``tiletune.records.load``) hold tuned kernels of (in
    ``parse_shapes`` order), found from the records alone, no option naming them: the shapes in each workload key
    (``NAME[1x16x32,32x96]@HASH``) are matched against the input shapes of the symbolic model's fused kernels,
    which give the candidate values of every dimension (an extent that is one dimension, linear in it, solved; a
    dimension no kernel fixes takes the example's value); the candidates' kernels are extracted (``shape_tasks``)
    and a candidate is tuned when a successful record is of one of its tasks that no other candidate has (a kernel
    that depends on that shape), or of every one of its tasks. [] when none is."""
    import tvm

    tkey = target_key(target)
    have = {r.workload for r in rows if r.ok and r.target == tkey}
    static = [sh for sh in (_key_shapes(k) for k in have) if sh]
    if not static or not source.dims:
        return []
    converted = prepare(source, dtype, check_layout(layout))
    fused = fuse(converted.mod, target, static=False)
    values: dict[str, set[int]] = {n: set() for n in source.dims}
    for f in fused.functions.values():
        if not isinstance(f, tvm.tirx.PrimFunc):
            continue
        ins = [tuple(p.shape) for p in f.params if getattr(p, "shape", None) is not None][:-1]
        for sh in static:
            if len(sh) > len(ins):
                continue
            for pick in itertools.combinations(ins, len(sh)):  # a key holds the shapes of the inputs its anchor reads
                for b in _fit(list(pick), sh, source.dims):
                    for n, v in b.items():
                        if source.dims[n].contains(v):
                            values[n].add(v)
    for n, d in source.dims.items():
        if not values[n]:
            if d.example is None:
                return []
            values[n].add(d.example)
    order = list(source.dims)
    candidates = [dict(zip(order, c)) for c in itertools.product(*(sorted(values[n]) for n in order))]
    dyn = shape_tasks(source, target, layout, candidates, converted, dtype)
    keys = [{k.workload.key for k in st.tasks.tasks} for st in dyn.shapes]
    tuned = []
    for i, st in enumerate(dyn.shapes):
        others = set().union(*(k for j, k in enumerate(keys) if j != i))
        held = keys[i] & have
        if held and (held - others or keys[i] <= have):
            tuned.append(st.binding)
    return tuned


# ------------------------------------------------------------------------------------------------- build


def _collect_vars(expr, out: dict) -> None:
    from tvm import tirx

    walk_expr(expr, lambda e: out.setdefault(e.name, e) if isinstance(e, tirx.Var) else None)


def checked_symbolic(func, target: dict, bindings: list[dict[str, int]]) -> tuple[object, str]:
    """(``func`` with the default schedule, which one: "parallel+vector", "parallel" or "none"), the schedule
    compared with TVM's unscheduled build of ``func`` at each of ``bindings`` on random inputs (the same rule as
    ``tiletune.model.kernels.default_schedule.checked``, for symbolic extents; ``tiletune.model.dynamic.shape_rule.first_correct``)."""
    import tvm_ffi

    f, how = first_correct(func, target, bindings, [(h, lambda v=v: default_schedule(func, vectorize=v))
                                                    for v, h in ((True, "parallel+vector"), (False, "parallel"))])
    return f, ("none" if tvm_ffi.structural_equal(f, func) else how)


def fallback_modules(dyn: DynamicTasks, chosen: dict, check_at: list[dict[str, int]], rule: str = DEFAULT_RULE):
    """The symbolic module (fused) for the shapes that were not tuned: [(the tuned binding it is scheduled like,
    or None, the module, {kernel: how})]. ``rule`` "nearest": one copy per tuned shape, its tunable kernels
    scheduled with that shape's tuned configurations (``tiletune.model.dynamic.shape_rule.like_modules``); "default": one
    copy, every kernel default-scheduled. Every scheduled kernel is checked at ``check_at`` (the shapes the copies
    serve: the bounds and one between; the code is the same at every value of a symbolic dimension). On a CUDA
    target: one copy, every kernel scheduled by dlight (checked with the whole model, ``dynamic_library``)."""
    import tvm
    import tvm_ffi

    if rule not in RULES:
        raise TiletuneError(f"unknown rule for untuned shapes {rule!r}; accepted: {', '.join(RULES)}")
    fused = fuse(dyn.symbolic, dyn.target, static=False)
    cache: dict = {}

    def default(f, name: str = "kernel"):
        h = tvm_ffi.structural_hash(f)
        if h not in cache:
            if is_cuda(dyn.target):  # dlight's rules take symbolic extents; checked with the whole model
                new, rule_name = gpu_default.schedule(f, dyn.target, name)
                cache[h] = (new, f"default (dlight {rule_name}), symbolic")
            else:
                new, sched = checked_symbolic(f, dyn.target, check_at)
                cache[h] = (new, f"default ({sched}), symbolic")
        return cache[h]

    if rule == "default" or not chosen or is_cuda(dyn.target):
        out = tvm.IRModule(dict(fused.functions.items()), attrs=fused.attrs)
        how = {}
        for gv, f in fused.functions.items():
            if isinstance(f, tvm.tirx.PrimFunc):
                out[gv], how[gv.name_hint] = default(f, gv.name_hint)
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


@dataclass
class DynamicLibrary:
    ex: object  # the compiled executable (relax.VirtualMachine's)
    chosen: dict  # the kernel of every task by hash: the records' best, and the constructed ones
    recorded: dict  # those of the records
    how: dict  # {shape label, "near LABEL" or "any": {kernel: how}} (dispatch_module)
    check_at: list  # the bindings to check it at (``check_bindings``)


def dynamic_library(dyn: DynamicTasks, records: str | None, construct: str | None = None,
                    cuda_graph: bool = False, seed: int = 0, read: list | None = None) -> DynamicLibrary:
    """The library that dispatches between ``dyn``'s shapes, tuned from ``records`` (``construct``: the tasks
    without a record get that method's top construction, ``model build --construct``), and runs every other shape
    within the bounds by the rule of ``dispatch_module`` (``seed``: of the constructions' walks,
    ``constructed_configs``); compiled (``cuda_graph``: see ``compile_module``), with the bindings it is to be
    checked at (``check_bindings``). ``model build --shapes`` checks and exports it
    (``tiletune.model.build.export_checked``), ``model bench --shapes`` times it."""
    chosen = recorded = best_configs_shaped(dyn, records, read)
    if construct:
        chosen = constructed_configs(dyn.merged, construct, recorded, seed=seed)
    tuned = [st.binding for st in dyn.shapes]
    check_at = check_bindings(dyn.source, tuned)
    mod, how = dispatch_module(dyn, chosen, [b for b in check_at if b not in tuned])
    ex = compile_module(mod, dyn.target, cuda_graph)
    return DynamicLibrary(ex, chosen, recorded, how, check_at)
