"""Kernels for the shapes a dynamic model was not tuned at: the symbolic module, each of its tunable kernels
scheduled with the configuration tuned for the nearest tuned shape, its symbolic loops padded to the tiles.

- ``signature(func, binding)``: what identifies a kernel across shapes: its block names, its anchor's iterator
  kinds, the anchor's loop extents and the parameters' shapes with the symbolic values of ``binding``. A static
  kernel tuned at shape T and the symbolic kernel evaluated at T have the same signature.
- ``nearest(dims, tuned, binding)``: the tuned binding nearest to ``binding``, dimension by dimension (the
  tuned shapes are a product of per-dimension values, ``tiletune.model.frontend.dims.parse_shapes``); ``ranges(dims,
  tuned)``: per tuned binding, the interval of every dimension it serves (split at the midpoints between two
  tuned values, out to the bounds).
- ``like_modules(fused, shapes, target, check_at, default)``: per tuned shape, the fused symbolic module with every
  kernel whose signature at that shape is that of a tuned kernel of the shape scheduled by the CPU template with that
  kernel's configuration (``tiletune.schedules.cpu.schedule(..., func=)``), in the first of these ways that
  builds and computes what TVM's unscheduled build computes at ``check_at`` (``candidates``, ``first_correct``):
  its symbolic loops padded to the configuration's inner tiles (``padded``), or predicated at the edge, each as
  tuned or without packing; every other kernel, and one no way fits, gets ``default`` (the default schedule,
  ``tiletune.model.dynamic.shapes.checked_symbolic``).

Why this rule, measured against the alternatives: [shape-rule](../../docs/decisions/shape-rule.md).
"""
from __future__ import annotations

import math

import numpy as np

from ...quiet import quiet_tvm
from ...schedules.cpu import schedule
from ...workloads.primfunc import walk_expr
from ..frontend.dims import label
from ..kernels.default_schedule import random_input
from ..kernels.library_kernels import writes_by_index


def value_at(expr, binding: dict[str, int]) -> int | None:
    """``expr`` (a TIR extent) with ``binding``'s values for its variables (by name); None when a variable has
    none."""
    from tvm import sym, tirx

    if isinstance(expr, tirx.IntImm):
        return int(expr)
    found: dict = {}
    walk_expr(expr, lambda e: found.setdefault(e.name, e) if isinstance(e, tirx.Var) else None)
    if any(n not in binding for n in found):
        return None
    ana = sym.Analyzer()
    for n, v in found.items():
        ana.bind(v, tirx.IntImm("int64", binding[n]))
    out = ana.simplify(expr)
    return int(out) if isinstance(out, tirx.IntImm) else None


def signature(func, binding: dict[str, int], partial: bool = False) -> tuple | None:
    """(block names, anchor iterator kinds, anchor loop extents, parameter shapes) at ``binding``; None for a
    kernel without exactly one reduction block, or whose extents ``binding`` does not fix. ``partial``: a value
    ``binding`` does not fix is None instead (the template of a symbolic kernel, ``matches``)."""
    import tvm
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001  (no root block, nested blocks)
        return None
    names = tuple(sch.get(b).name_hint for b in blocks)
    anchors = [b for b in blocks if any(int(iv.iter_type) != 0 for iv in sch.get(b).iter_vars)]
    if len(anchors) != 1:
        return None
    kinds = tuple(int(iv.iter_type) for iv in sch.get(anchors[0]).iter_vars)
    extents = tuple(value_at(sch.get(lp).extent, binding) for lp in sch.get_loops(anchors[0]))
    shapes = []
    for p in func.params:
        if hasattr(p, "shape"):
            shapes.append(tuple(value_at(e, binding) for e in p.shape))
    if not partial and (None in extents or any(None in s for s in shapes)):
        return None
    return names, kinds, extents, tuple(shapes)


def matches(template: tuple, sig: tuple) -> bool:
    """Whether the static kernel of signature ``sig`` is the symbolic kernel of ``template`` (``signature(func,
    {}, partial=True)``) at some shape: the same blocks and iterator kinds, and the same value wherever the
    template has one."""
    if template is None or sig is None or template[:2] != sig[:2] or len(template[2]) != len(sig[2]) \
            or len(template[3]) != len(sig[3]):
        return False
    if any(t is not None and t != v for t, v in zip(template[2], sig[2])):
        return False
    return all(len(ts) == len(vs) and all(t is None or t == v for t, v in zip(ts, vs))
               for ts, vs in zip(template[3], sig[3]))


def nearest(dims: dict, tuned: list[dict[str, int]], binding: dict[str, int]) -> dict[str, int]:
    """The tuned binding nearest to ``binding`` in every dimension (ties: the larger tuned value)."""
    out = {}
    for name in dims:
        vals = sorted({b[name] for b in tuned})
        out[name] = min(vals, key=lambda v: (abs(v - binding[name]), -v))
    return out


def ranges(dims: dict, tuned: list[dict[str, int]]) -> dict[str, dict[str, tuple[int, int | None]]]:
    """For each tuned value of each dimension, the interval [lo, hi] of values it is nearest to (``nearest``),
    by dimension name then value; the first interval starts at the dimension's lower bound, the last ends at its
    upper bound (None: unbounded)."""
    out: dict[str, dict[int, tuple[int, int | None]]] = {}
    for name, d in dims.items():
        vals = sorted({b[name] for b in tuned})
        cuts = [(a + b) // 2 for a, b in zip(vals, vals[1:])]  # a value <= cut goes down (ties: see below)
        iv = {}
        for i, v in enumerate(vals):
            lo = d.lo if i == 0 else cuts[i - 1] + 1
            hi = d.hi if i == len(vals) - 1 else cuts[i]
            iv[v] = (lo, hi)
        # a tie (equal distance) goes to the larger value, as in ``nearest``
        for i in range(len(vals) - 1):
            a, b = vals[i], vals[i + 1]
            if (a + b) % 2 == 0:
                mid = (a + b) // 2
                iv[a] = (iv[a][0], mid - 1)
                iv[b] = (mid, iv[b][1])
        out[name] = iv
    return out


def first_correct(func, target: dict, bindings: list[dict[str, int]], candidates,
                  cache: dict | None = None) -> tuple[object, str]:
    """(the first of ``candidates`` that builds and computes what TVM's unscheduled build of ``func`` computes
    at every binding of ``bindings`` on random inputs, its name), or (``func``, "none") when none does or the
    inputs cannot be made. ``candidates``: (name, a function returning the scheduled PrimFunc) pairs, tried in
    order; one that raises counts as failing. A kernel that writes where an index tensor says (a scatter,
    ``library_kernels.writes_by_index``) is not run on random inputs: (``func``, "none"). ``cache``: a dict the caller keeps for the next call with the same
    ``func`` and ``bindings`` (the inputs and the reference outputs, made once)."""
    import tvm
    import tvm_ffi

    if writes_by_index(func):  # random indices would write outside the output (a scatter): left as it is
        return func, "none"
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

    def run(fn, arrays):
        args = [tvm.runtime.tensor(a.copy(), dev) for a in arrays]
        fn(*args)
        return [a.numpy() for a in args]

    cache = {} if cache is None else cache
    key = (tvm_ffi.structural_hash(func), tuple(tuple(sorted(b.items())) for b in bindings))
    if key not in cache:
        rng = np.random.default_rng(0)
        cases = []
        try:
            for b in bindings:
                arrays = []
                for shape, dtype in params:
                    s = tuple(value_at(e, b) for e in shape)
                    if None in s:
                        return func, "none"
                    arrays.append(random_input(rng, s, dtype))
                cases.append(arrays)
            ref_fn = build(func)
        except Exception:  # noqa: BLE001  (shapes it cannot evaluate, a kernel TVM cannot build alone: leave it)
            return func, "none"
        cache[key] = (cases, [run(ref_fn, c) for c in cases])
    cases, refs = cache[key]
    for name, make in candidates:
        try:
            f = make()
            fn = build(f)
            ok = all(np.allclose(g, r, rtol=1e-4, atol=1e-5, equal_nan=True)
                     for c, ref in zip(cases, refs) for g, r in zip(run(fn, c), ref))
        except Exception:  # noqa: BLE001
            continue
        if ok:
            return f, name
    return func, "none"


def padded(func, workload, config: dict):
    """``func`` with its anchor's symbolic loops padded (``pad_einsum``) to a multiple of the configuration's inner
    tiles of that axis: the tiles then divide the loop, and no predicate reaches the accumulator (a predicated
    tile keeps the accumulator out of registers: its size is not known)."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    block = sch.get_sblock(workload.anchor_name())
    loops = sch.get_loops(block)
    pads = [1 if isinstance(sch.get(lp).extent, tvm.tirx.IntImm) else math.prod(config[f"tile_{ax.name}"][1:])
            for lp, ax in zip(loops, workload.axes())]
    if all(p == 1 for p in pads):
        return func
    sch.pad_einsum(block, pads)
    return sch.mod["main"]


def candidates(func, chosen, target: dict) -> list:
    """The ways to schedule the symbolic kernel ``func`` with ``chosen``'s configuration (``like_modules``), best
    first: padded (``padded``), then predicated at the edge (``tiletune.schedules.cpu.schedule(func=)``), each
    as tuned and, where the configuration packs an input, without packing (an input whose packed axis is
    symbolic cannot be packed into panels)."""
    values = chosen.space.to_dict(chosen.config)
    configs = [chosen.config]
    if values.get("pack"):
        configs.append(chosen.space.from_dict(dict(values, pack=0)))
    out = []
    for how in ("padded", "predicated"):
        for config in configs:
            def make(how=how, config=config):
                f = padded(func, chosen.kernel.workload, values) if how == "padded" else func
                return schedule(chosen.kernel.workload, chosen.space, config, target, func=f).mod["main"]

            out.append((how if config is chosen.config else f"{how}, unpacked", make))
    return out


def like_modules(fused, shapes: list[tuple[dict[str, int], dict[tuple, object]]], target: dict,
                 check_at: list[dict[str, int]], default) -> list[tuple[object, dict[str, str]]]:
    """One copy of ``fused``, the symbolic module, per (shape, chosen_at) of ``shapes``, with its kernels scheduled
    as the module docstring says, and {kernel name: how it is scheduled}. ``chosen_at``: the tuned kernels of that
    shape by ``signature`` (``tiletune.model.build.Chosen``); ``default(func)``: (the default-scheduled kernel,
    how), for every other kernel and where the tuned configuration fails. Every candidate is checked at
    ``check_at``; kernel by kernel, so that a kernel's reference outputs are made once for all the copies."""
    import tvm

    outs = [tvm.IRModule(dict(fused.functions.items()), attrs=fused.attrs) for _ in shapes]
    hows: list[dict[str, str]] = [{} for _ in shapes]
    for gv, f in fused.functions.items():
        if not isinstance(f, tvm.tirx.PrimFunc):
            continue
        cache: dict = {}
        bare = f.without_attr("global_symbol") if "global_symbol" in (f.attrs or {}) else f
        for (shape, chosen_at), out, how in zip(shapes, outs, hows):
            c = chosen_at.get(signature(f, shape))
            new = None
            if c is not None:
                new, name = first_correct(f, target, check_at, candidates(bare, c, target), cache)
                if name == "none":
                    new = None
                else:
                    how[gv.name_hint] = f"{c.how} at {label(shape)}, symbolic ({name})"
            if new is None:
                new, how[gv.name_hint] = default(f)
            out[gv] = new
    return list(zip(outs, hows))
