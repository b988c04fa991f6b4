"""The default schedule of a kernel that is not tuned (elementwise, softmax, layer norm, transposes,
pooling, and tunable kernels without records): parallel and vectorized instead of TVM's serial loops.

Blocks without a reduction that are not the last (the intermediates of an elementwise chain: reshape ->
add, the exponential of a softmax) are inlined into their consumers where TVM allows it (``compute_inline``;
this may recompute an elementwise value, never a reduction). Then for each remaining block, in order:

- the leading loops that bind only spatial iterators (all of them for an elementwise block; those
  outside the reduction for a reduction block) are the block's spatial nest;
- if its innermost spatial loop has an extent divisible by 4, 8 or 16 (the widest that divides, at most
  ``VECTOR`` lanes), that loop is split and its inner part vectorized; in a reduction block (pooling, a
  mean over the spatial axes of an NHWC tensor) the lanes move inside the reduction loops, so that one
  vector of accumulators runs over the window (for NHWC pooling: the channels, contiguous in memory), and
  the reduction's init becomes a vectorized loop of its own (``decompose_reduction``);
- the remaining spatial loops are fused into one and run in parallel over the cores, unless the block
  iterates fewer than ``PARALLEL_MIN`` times in all (then waking the thread pool costs more than it saves).

A step TVM refuses for a block (a loop nest that is not a plain nest, a vectorization it cannot do) is
skipped for that block; ``checked`` builds the result and compares it with TVM's unscheduled build of the
same function on random inputs, falling back to parallel only, then to the unscheduled function, when a
schedule builds wrongly or not at all. A kernel with symbolic shapes is left as it is.
"""
from __future__ import annotations

import math

import numpy as np

from ..workloads.primfunc import _walk

VECTOR = 16  # fp32 lanes of AVX-512
PARALLEL_MIN = 4096  # iterations below which a block runs on one core (waking the thread pool costs more)
_CHECKED: dict[tuple, object] = {}


def _spatial_prefix(sch, block) -> list:
    """The leading loops of ``block`` that bind only spatial iterators."""
    b = sch.get(block)
    loops = sch.get_loops(block)
    realize = sch.get(loops[-1]).body if loops else None
    values = list(getattr(realize, "iter_values", ()))
    kinds = [int(iv.iter_type) for iv in b.iter_vars]

    def uses(expr, var) -> bool:
        hit = []
        _walk(expr, lambda n: hit.append(True) if n.same_as(var) else None)
        return bool(hit)

    prefix = []
    for lp in loops:
        var = sch.get(lp).loop_var
        bound = [k for v, k in zip(values, kinds) if uses(v, var)]
        if not bound or any(k != 0 for k in bound):
            break
        prefix.append(lp)
    return prefix


def _schedule_block(sch, block, vectorize: bool) -> None:
    loops = sch.get_loops(block)
    prefix = _spatial_prefix(sch, block)
    if not prefix:
        return
    try:
        work = math.prod(int(sch.get(lp).extent) for lp in loops)
    except TypeError:  # symbolic extents
        work = PARALLEL_MIN
    has_reduction = len(prefix) < len(loops) or any(int(iv.iter_type) != 0 for iv in sch.get(block).iter_vars)
    reduction_loops = loops[len(prefix):]
    outer = list(prefix)
    lane = None
    if vectorize and (not has_reduction or reduction_loops):
        inner = sch.get(prefix[-1]).extent
        try:
            e = int(inner)
        except TypeError:
            e = 0
        lanes = next((v for v in (VECTOR, 8, 4) if v <= VECTOR and e % v == 0), 0) if e else 0
        if lanes:
            head, lane = sch.split(prefix[-1], [None, lanes])
            if reduction_loops:  # the lanes inside the reduction: one vector of accumulators
                sch.reorder(head, *reduction_loops, lane)
            sch.vectorize(lane)
            outer[-1] = head
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if work >= PARALLEL_MIN:
        sch.parallel(fused)
    if lane is not None and reduction_loops:  # the accumulators zeroed by a vector store of their own
        init = sch.decompose_reduction(block, reduction_loops[0])
        sch.vectorize(sch.get_loops(init)[-1])


def default_schedule(func, vectorize: bool = True):
    """``func`` with the default schedule (see the module docstring)."""
    import tvm
    from tvm import s_tir

    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    try:
        root = sch.get_sblock("root")
    except Exception:  # noqa: BLE001  (no root block: leave it)
        return func
    blocks = sch.get_child_blocks(root)
    for block in blocks[:-1]:  # elementwise intermediates computed where they are read (TVM may refuse)
        if not sch.get_child_blocks(block) and all(int(iv.iter_type) == 0 for iv in sch.get(block).iter_vars):
            try:
                sch.compute_inline(block)
            except Exception:  # noqa: BLE001
                pass
    for block in sch.get_child_blocks(root):
        if sch.get_child_blocks(block):
            continue
        try:
            _schedule_block(sch, block, vectorize)
        except Exception:  # noqa: BLE001  (TVM refused a step: this block keeps its loops)
            continue
    return sch.mod["main"]


def _static_params(func) -> list[tuple[tuple[int, ...], str]] | None:
    out = []
    for p in func.params:
        if not hasattr(p, "shape"):
            return None
        try:
            out.append((tuple(int(s) for s in p.shape), str(p.dtype)))
        except TypeError:
            return None
    return out


def _run(func, target, args_np):
    import tvm

    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=target).mod
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a.copy(), dev) for a in args_np]
    lib["main"](*args)
    return [a.numpy() for a in args]


def checked(func, target) -> tuple[object, str]:
    """(the default-scheduled ``func``, which schedule it got: "parallel+vector", "parallel" or "none"),
    checked against the unscheduled build on random inputs (see the module docstring). Cached per
    function."""
    import tvm
    import tvm_ffi

    key = (tvm_ffi.structural_hash(func), str(target))
    if key in _CHECKED:
        return _CHECKED[key]
    params = _static_params(func)
    result = (func, "none")
    if params is not None:
        rng = np.random.default_rng(0)
        args = []
        for shape, dtype in params:
            if np.issubdtype(np.dtype(dtype), np.floating):
                args.append(rng.standard_normal(shape).astype(dtype))
            elif dtype == "bool":
                args.append(rng.integers(0, 2, size=shape).astype(dtype))
            else:
                args.append(rng.integers(0, 4, size=shape).astype(dtype))
        tgt = tvm.target.Target(target)
        try:
            ref = _run(func, tgt, args)
        except Exception:  # noqa: BLE001  (TVM cannot build even the unscheduled function: leave it)
            _CHECKED[key] = result
            return result
        for vec, label in ((True, "parallel+vector"), (False, "parallel")):
            try:
                f = default_schedule(func, vectorize=vec)
                got = _run(f, tgt, args)
            except Exception:  # noqa: BLE001
                continue
            if all(np.allclose(g, r, rtol=1e-4, atol=1e-5, equal_nan=True) for g, r in zip(got, ref)):
                result = (f, "none" if tvm_ffi.structural_equal(f, func) else label)
                break
    _CHECKED[key] = result
    return result
