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
  the tuned kernels (the default schedule for the rest), its functions renamed ``NAME_seq32``; for any other
  shape the symbolic module, fused, each kernel with the default schedule (``tiletune.model.default_schedule``
  handles symbolic extents), checked against TVM's unscheduled kernel at the bounds and between; and a Relax
  ``main`` that compares the symbolic values with each tuned shape's (``R.If`` on a ``PrimValue``) and calls
  that shape's function, else the symbolic one. The dispatch is inside the library: ``load_model`` calls
  ``main`` with inputs of any allowed shape. Why the symbolic rule for untuned shapes:
  [dynamic-shapes](../../docs/decisions/dynamic-shapes.md).
- ``check_bindings``: the shapes a build is checked at: each tuned one, the bounds, one between two tuned
  values.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import TiletuneError
from ..quiet import quiet_tvm
from ..records import load
from ..target import target_key
from ..workloads.primfunc import _walk
from .build import best_configs, scheduled_module
from .default_schedule import default_schedule
from .dims import bind, label, parse_shapes, tag
from .importer import to_relax
from .layout import check_layout, convert
from .source import ModelSource
from .tasks import ModelTasks, extract, fuse

FALLBACK = "any"  # the label of the symbolic module's functions


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


def _shape_of(expr, values: dict[str, int]) -> int:
    """The value of a shape expression with its symbolic variables (by name) at ``values``."""
    from tvm import sym, tirx

    if isinstance(expr, tirx.IntImm):
        return int(expr)
    vmap: dict = {}
    _collect_vars(expr, vmap)
    ana = sym.Analyzer()
    for n, v in vmap.items():
        ana.bind(v, tirx.IntImm("int64", values[n]))
    return int(ana.simplify(expr))


def _collect_vars(expr, out: dict) -> None:
    from tvm import tirx

    _walk(expr, lambda e: out.setdefault(e.name, e) if isinstance(e, tirx.Var) else None)


def checked_symbolic(func, target: dict, bindings: list[dict[str, int]]) -> tuple[object, str]:
    """(``func`` with the default schedule, which one: "parallel+vector", "parallel" or "none"), the schedule
    compared with TVM's unscheduled build of ``func`` at each of ``bindings`` on random inputs (the same rule as
    ``tiletune.model.default_schedule.checked``, for symbolic extents)."""
    import tvm
    import tvm_ffi

    params = []
    for p in func.params:
        if not hasattr(p, "shape"):
            return func, "none"  # a scalar parameter: left as it is
        params.append((list(p.shape), str(p.dtype)))
    tgt = tvm.target.Target(target)
    dev = tvm.cpu()

    def build(f):
        with quiet_tvm():
            return tvm.compile(tvm.IRModule({"main": f.with_attr("global_symbol", "main")}), target=tgt).mod["main"]

    rng = np.random.default_rng(0)
    cases = []
    try:
        for b in bindings:
            arrays = []
            for shape, dtype in params:
                s = tuple(_shape_of(e, b) for e in shape)
                if np.issubdtype(np.dtype(dtype), np.floating):
                    arrays.append(rng.standard_normal(s).astype(dtype))
                else:
                    arrays.append(rng.integers(0, 2 if dtype == "bool" else 4, size=s).astype(dtype))
            cases.append(arrays)
        ref_fn = build(func)
    except Exception:  # noqa: BLE001  (shapes it cannot evaluate, a kernel TVM cannot build alone: leave it)
        return func, "none"

    def run(fn, arrays):
        args = [tvm.runtime.tensor(a.copy(), dev) for a in arrays]
        fn(*args)
        return [a.numpy() for a in args]

    refs = [run(ref_fn, c) for c in cases]
    for vec, how in ((True, "parallel+vector"), (False, "parallel")):
        try:
            f = default_schedule(func, vectorize=vec)
            fn = build(f)
            ok = all(np.allclose(g, r, rtol=1e-4, atol=1e-5, equal_nan=True)
                     for c, ref in zip(cases, refs) for g, r in zip(run(fn, c), ref))
        except Exception:  # noqa: BLE001
            continue
        if ok:
            return f, ("none" if tvm_ffi.structural_equal(f, func) else how)
    return func, "none"


def fallback_module(dyn: DynamicTasks, check_at: list[dict[str, int]]):
    """(the symbolic module fused, every kernel default-scheduled and checked at ``check_at``, {name: how})."""
    import tvm

    fused = fuse(dyn.symbolic, dyn.target)
    out = tvm.IRModule(dict(fused.functions.items()), attrs=fused.attrs)
    how = {}
    for gv, f in fused.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc):
            new, sched = checked_symbolic(f, dyn.target, check_at)
            out[gv] = new
            how[gv.name_hint] = f"default ({sched}), symbolic"
    return out, how


def dispatch_module(dyn: DynamicTasks, chosen: dict, check_at: list[dict[str, int]]):
    """(one module whose ``main`` runs every shape within the bounds, {shape label or "any": {kernel: how}});
    see the module docstring. The symbolic module's kernels are checked at ``check_at`` (shapes it serves: the
    bounds and one between)."""
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
    fb, how[FALLBACK] = fallback_module(dyn, check_at)
    fb_main = fb["main"]
    fb_gv = add(fb, FALLBACK)

    params = [relax.Var(p.name, p.ty) for p in fb_main.params]
    ret_ty = fb_main.ret_ty
    syms: dict = {}
    for p in params:
        for e in getattr(p.ty, "shape", None) or []:
            _collect_vars(e, syms)
    missing = sorted(set(dyn.source.dims) - set(syms))
    if missing:
        raise TiletuneError(f"the imported model's inputs do not carry the symbolic dimension(s) {', '.join(missing)}")

    def chain(i: int):
        if i == len(per_shape):
            out = relax.Var("out", ret_ty)
            return relax.SeqExpr([relax.BindingBlock([relax.VarBinding(out, relax.Call(fb_gv, params))])], out)
        st, static_main, gv = per_shape[i]
        cast = [relax.Var(f"{p.name}_{tag(st.binding)}", sp.ty) for p, sp in zip(params, static_main.params)]
        res = relax.Var(f"res_{tag(st.binding)}", static_main.ret_ty)
        out = relax.Var(f"out_{tag(st.binding)}", ret_ty)
        block = relax.BindingBlock([relax.MatchCast(c, p, c.ty) for c, p in zip(cast, params)]
                                   + [relax.VarBinding(res, relax.Call(gv, cast)), relax.MatchCast(out, res, ret_ty)])
        cond = None
        for name, v in st.binding.items():
            eq = tirx.EQ(syms[name], tirx.IntImm(syms[name].dtype if hasattr(syms[name], "dtype") else "int64", v))
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
