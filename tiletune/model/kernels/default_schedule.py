"""The default schedule of a kernel that is not tuned (elementwise, softmax, layer norm, transposes,
pooling, and tunable kernels without records): parallel and vectorized instead of TVM's serial loops.

Blocks without a reduction that are not the last (the intermediates of an elementwise chain: reshape ->
add, the exponential of a softmax) are inlined into their consumers where TVM allows it (``compute_inline``;
this may recompute an elementwise value, never a reduction), unless the inlined chain ends in a block that
gathers (``_gathering``: a reshape-transpose chain read one element per source row; its passes one by one ran
in half the time) and cannot be blocked (below). Then for each remaining block, in order:

- the leading loops that bind only spatial iterators (all of them for an elementwise block; those
  outside the reduction for a reduction block) are the block's spatial nest;
- if its innermost spatial loop has an extent divisible by 4, 8 or 16 (the widest that divides, at most
  ``VECTOR`` lanes) and, in a block without a reduction, no load would gather along it (``_gathers``: a
  transpose's source, read one element per row, which a vector loads element by element), that loop is split
  and its inner part vectorized; in a reduction block (pooling, a
  mean over the spatial axes of an NHWC tensor) the lanes move inside the reduction loops, so that one
  vector of accumulators runs over the window (for NHWC pooling: the channels, contiguous in memory), and
  the reduction's init becomes a vectorized loop of its own (``decompose_reduction``);
- the leading spatial loops, as many as it takes to reach ``PARALLEL_CHUNKS`` iterations, are fused into one
  and run in parallel over the cores; the loops inside them stay a plain nest (fusing them all made every
  element pay a division and a modulo per loop: a transpose into 3 channels ran 10x slower); nothing runs in
  parallel when the block iterates fewer than ``PARALLEL_MIN`` times in all (then waking the thread pool costs
  more than it saves).

A transpose (a block without a reduction whose innermost loop would gather) whose source's contiguous loop and
innermost loop are multiples of ``TRANSPOSE_TILE`` is blocked instead (``_tile_transpose``): both loops split into
tiles of ``TRANSPOSE_TILE``, the tiles innermost, the output's row of a tile vectorized (its gather reads lines that
L1 holds), the loops outside the tile run in parallel as above; a reshape-transpose chain that ends in such a
transpose is inlined into one blocked pass.

A step TVM refuses for a block (a loop nest that is not a plain nest, a vectorization it cannot do) is
skipped for that block; ``checked`` builds the result and compares it with TVM's unscheduled build of the
same function on random inputs, falling back to parallel only, then to the unscheduled function, when a
schedule builds wrongly or not at all. A kernel with symbolic shapes is left as it is. Measurements:
docs/decisions/default-schedule.md.
"""
from __future__ import annotations

import math

import numpy as np

from ...workloads.primfunc import walk_expr
from .library_kernels import writes_by_index
from ..passes import winograd

VECTOR = 16  # fp32 lanes of AVX-512
PARALLEL_MIN = 4096  # iterations below which a block runs on one core (waking the thread pool costs more)
PARALLEL_CHUNKS = 64  # parallel iterations enough to share among the cores: docs/decisions/default-schedule.md
TRANSPOSE_TILE = 16  # a transpose's tile: 16 fp32 = one cache line of each side; docs/decisions/default-schedule.md
_CHECKED: dict[tuple, object] = {}


def _uses(expr, var) -> bool:
    hit = []
    walk_expr(expr, lambda n: hit.append(True) if n.same_as(var) else None)
    return bool(hit)


def _bindings(sch, block) -> list:
    loops = sch.get_loops(block)
    realize = sch.get(loops[-1]).body if loops else None
    return list(getattr(realize, "iter_values", ()))


def _moved(sch, block, loop) -> list:
    """The block iterators that ``loop`` moves."""
    var = sch.get(loop).loop_var
    return [iv.var for iv, v in zip(sch.get(block).iter_vars, _bindings(sch, block)) if _uses(v, var)]


def _gathering_indices(sch, block, loop) -> list[list]:
    """The indices (simplified over the iterators' domains: a fused reshape's v // 128 is 0) of every load of the
    block that a vector over ``loop`` would gather: its last index does not move with the loop while another
    index does (a transpose's read: one element per row of the source)."""
    from tvm import sym

    b = sch.get(block)
    moving = _moved(sch, block, loop)
    loads = []
    walk_expr(getattr(b.body, "value", b.body), lambda n: loads.append(n) if hasattr(n, "indices") else None)
    ana = sym.Analyzer()
    for iv in b.iter_vars:
        ana.bind(iv.var, iv.dom)
    out = []
    for ld in loads:
        idx = [ana.simplify(i) for i in ld.indices]
        if idx and not any(_uses(idx[-1], v) for v in moving) and any(_uses(i, v) for i in idx[:-1] for v in moving):
            out.append(idx)
    return out


def _gathers(sch, block, loop) -> bool:
    """Whether a vector over ``loop`` would gather (``_gathering_indices``)."""
    return bool(_gathering_indices(sch, block, loop))


def _source_loop(sch, block, loops: list):
    """The loop of ``loops`` (not the innermost) that moves the last index of a load that gathers along the
    innermost loop (``_gathering_indices``): a transpose's source row; None if there is none."""
    for idx in _gathering_indices(sch, block, loops[-1]):
        for lp in reversed(loops[:-1]):  # the innermost of them: the source's contiguous axis
            if any(_uses(idx[-1], v) for v in _moved(sch, block, lp)):
                return lp
    return None


def _tile_source(sch, block, loops: list):
    """The source loop of a transpose that ``_tile_transpose`` can block (it and the innermost loop multiples of
    ``TRANSPOSE_TILE``, and longer), else None."""
    src = _source_loop(sch, block, loops) if len(loops) >= 2 else None
    if src is None:
        return None
    try:
        extents = int(sch.get(src).extent), int(sch.get(loops[-1]).extent)
    except TypeError:
        return None
    return None if any(e % TRANSPOSE_TILE or e == TRANSPOSE_TILE for e in extents) else src


def _tile_transpose(sch, block, loops: list) -> list:
    """A transpose's loops blocked ``TRANSPOSE_TILE`` x ``TRANSPOSE_TILE``: the source loop (``_source_loop``) and
    the innermost one split, their tiles innermost, so that a tile reads whole cache lines of the source rows and
    writes whole lines of the output, and the output's row of the tile vectorized. Returns the loops outside the
    tile (all of ``loops`` when a split does not divide or there is no source loop)."""
    src = _tile_source(sch, block, loops)
    if src is None:
        return loops
    _, src_in = sch.split(src, [None, TRANSPOSE_TILE])
    _, out_in = sch.split(loops[-1], [None, TRANSPOSE_TILE])
    keep = {sch.get(src_in), sch.get(out_in)}
    outside = [lp for lp in sch.get_loops(block) if sch.get(lp) not in keep]
    sch.reorder(*outside, src_in, out_in)
    sch.vectorize(out_in)  # a vector gathers from the tile's source lines, which L1 holds
    return outside


def _gathering(sch, block) -> bool:
    """A block without a reduction whose innermost loop gathers (``_gathers``)."""
    loops = sch.get_loops(block)
    b = sch.get(block)
    if not loops or sch.get_child_blocks(block) or any(int(iv.iter_type) != 0 for iv in b.iter_vars):
        return False
    return _gathers(sch, block, loops[-1])


def _spatial_prefix(sch, block) -> list:
    """The leading loops of ``block`` that bind only spatial iterators."""
    b = sch.get(block)
    loops = sch.get_loops(block)
    values = _bindings(sch, block)
    kinds = [int(iv.iter_type) for iv in b.iter_vars]

    prefix = []
    for lp in loops:
        var = sch.get(lp).loop_var
        bound = [k for v, k in zip(values, kinds) if _uses(v, var)]
        if not bound or any(k != 0 for k in bound):
            break
        prefix.append(lp)
    return prefix


def _leading(sch, loops: list) -> list:
    """The leading ``loops`` whose extents multiply to ``PARALLEL_CHUNKS`` or more (all of them if they never do):
    the loops fused into the parallel one. The loops inside stay a plain nest, so that an element's indices need
    no division by the loops' extents."""
    n, acc = 0, 1
    for lp in loops:
        if acc >= PARALLEL_CHUNKS:
            break
        try:
            acc *= int(sch.get(lp).extent)
        except TypeError:  # a symbolic extent: enough iterations to share
            acc = PARALLEL_CHUNKS
        n += 1
    return loops[:max(n, 1)]


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
    # a gather is kept where the lanes run inside a reduction (rows of a softmax or a norm reduced side by side:
    # one accumulator per row, though each lane reads another row; docs/decisions/default-schedule.md)
    if vectorize and (reduction_loops or (not has_reduction and not _gathers(sch, block, prefix[-1]))):
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
    if vectorize and not has_reduction and lane is None and len(prefix) >= 2:
        outer = _tile_transpose(sch, block, prefix)
    if work >= PARALLEL_MIN:
        lead = _leading(sch, outer)
        sch.parallel(sch.fuse(*lead) if len(lead) > 1 else lead[0])
    if lane is not None and reduction_loops:  # the accumulators zeroed by a vector store of their own
        init = sch.decompose_reduction(block, reduction_loops[0])
        sch.vectorize(sch.get_loops(init)[-1])


def default_schedule(func, vectorize: bool = True):
    """``func`` with the default schedule (see the module docstring); a Winograd transform's kernel gets its own
    (``tiletune.model.passes.winograd.schedule``)."""
    import tvm
    from tvm import s_tir

    if vectorize and (own := winograd.schedule(func, VECTOR)) is not None:
        return own
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
    gathering = [b for b in sch.get_child_blocks(root) if _gathering(sch, b)]
    # an inlined chain that ends in a transpose _schedule_block blocks stays one pass
    blocked = vectorize and all(_tile_source(sch, b, _spatial_prefix(sch, b)) is not None for b in gathering)
    if len(sch.get_child_blocks(root)) < len(blocks) and gathering and not blocked:
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))  # a chain that ends in a gather: its passes one by one
        root = sch.get_sblock("root")
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


def random_input(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """A random input of a kernel being checked: floats from a normal distribution, bools 0/1, other integers 1..3
    (no 0: an integer divisor would trap)."""
    if np.issubdtype(np.dtype(dtype), np.floating):
        return rng.standard_normal(shape).astype(dtype)
    low, high = (0, 2) if dtype == "bool" else (1, 4)
    return rng.integers(low, high, size=shape).astype(dtype)


def checked(func, target) -> tuple[object, str]:
    """(the default-scheduled ``func``, which schedule it got: "parallel+vector", "parallel" or "none"),
    checked against the unscheduled build on random inputs (see the module docstring). Cached per
    function. A kernel that writes where an index tensor says (a scatter: ``library_kernels.writes_by_index``)
    keeps its loops, unscheduled and not run: random integers as its indices would write outside its output and
    bring the process down."""
    import tvm
    import tvm_ffi

    key = (tvm_ffi.structural_hash(func), str(target))
    if key in _CHECKED:
        return _CHECKED[key]
    params = _static_params(func)
    result = (func, "none")
    if params is not None and not writes_by_index(func):  # random indices would write outside the output
        rng = np.random.default_rng(0)
        args = [random_input(rng, shape, dtype) for shape, dtype in params]
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
