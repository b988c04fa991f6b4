"""Config -> TensorIR schedule of a row reduction (``tiletune.workloads.rows``: softmax, layer norm, RMS norm,
means over the last axes) on LLVM CPU targets, and its space.

Knobs (all categorical: the space has no tile knobs, so Gensor and Roller do not apply):

- ``one_pass``: 1: every block is computed at the row loop of the output (``compute_at``), so that one row's
  reductions, its kept intermediates and its output are computed together while the row is in L1, each
  intermediate a row long; 0: each block is a pass over the whole tensor of its own, as TVM emits it.
- ``rows``: rows per parallel chunk: the row axes are fused into one loop of R rows, split into R / rows
  chunks that run in parallel over the cores (``rows`` = R: one chunk, serial; a small kernel runs faster
  without waking the thread pool). Values: chunk boundaries aligned with the row axes (``aligned_rows``), the
  chunk counts nearest to those of ``CHUNKS``.
- ``vector``: lanes of the inner axis: every elementwise block's row width is split by it and vectorized, and
  every reduction accumulates in a vector of that many partial results (``rfactor`` of the lanes), reduced to
  one at the end of the row; 0: no vectorization (LLVM does not vectorize a floating-point reduction by
  itself). Values: 0 and divisors of every per-row extent (``RowWorkload.widths``), at most ``MAX_LANES`` and
  ``LANE_CHOICES`` of them, so every split is exact (predicated tails computed wrong once compute_at moved
  them).
- ``keep`` (only where the kernel has such intermediates): 1: an elementwise intermediate of a row's width
  read by several blocks (a softmax's exponential) is computed once into a buffer; 0: each reader recomputes
  it (``compute_inline``).
- ``unroll``: ``pragma_auto_unroll_max_step`` of the chunk loop.

Starts (``starts``; the local searches' default ``start=construct`` measures them first): the one-pass schedule
at the widest lanes up to 16, serial; the separate passes, serial; the same two in at most ``START_CHUNKS``
parallel chunks (the passes so are the default schedule's kind, ``tiletune.model.kernels.default_schedule``); the
parallel one pass without kept intermediates. Why these, in this order: docs/decisions/row-reductions.md.
"""
from __future__ import annotations

import math
from typing import Any

from ..errors import TiletuneError
from ..space import ChoiceKnob, Config, Space
from ..workloads.primfunc import walk_expr
from ..workloads.rows import RowWorkload, fresh, inline_intermediates, is_reduction

CHUNKS = (1, 2, 4, 8, 16, 32, 64, 256)
MAX_LANES = 64
LANE_CHOICES = 5
UNROLL = (0, 64)
START_LANES = 16  # fp32 lanes of AVX-512
START_CHUNKS = 64


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def aligned_rows(rows: tuple[int, ...]) -> list[int]:
    """Rows per chunk whose chunks start at the same place in every row axis (d x the rows of the inner axes, d a
    divisor of an axis): their loop bindings stay affine (other splits of the fused row loop failed to
    vectorize once computed at it)."""
    out = set()
    for i, e in enumerate(rows):
        inner = math.prod(rows[i + 1:])
        out |= {d * inner for d in _divisors(e)}
    return sorted(out)


def row_choices(workload: RowWorkload) -> tuple[int, ...]:
    """Rows per chunk: of the ``aligned_rows``, those whose chunk counts are nearest to each of ``CHUNKS`` (R,
    serial, first)."""
    r = workload.row_count
    counts = [r // p for p in aligned_rows(workload.rows)]
    chunks = sorted({min(counts, key=lambda n: (abs(n - c), n)) for c in CHUNKS})
    return tuple(r // c for c in chunks)


def lane_choices(workload: RowWorkload) -> tuple[int, ...]:
    """0 and up to ``LANE_CHOICES`` divisors (2 .. ``MAX_LANES``) of every per-row extent: the powers of two from
    4 (whole vector registers of 4, 8 or 16 fp32 lanes), then the widest other multiples of 4; where no multiple
    of 4 divides (a row of 77), the widest divisors."""
    g = math.gcd(*workload.widths) if workload.widths else 1
    divs = [d for d in _divisors(g) if 2 <= d <= MAX_LANES]
    by4 = [d for d in divs if d % 4 == 0]
    pow2 = [d for d in by4 if d & (d - 1) == 0]
    pick = (pow2 + [d for d in by4 if d not in pow2][::-1])[:LANE_CHOICES] if by4 else divs[-LANE_CHOICES:]
    return (0, *sorted(pick))


def make_space(workload: RowWorkload) -> Space:
    knobs = [ChoiceKnob("one_pass", (1, 0)), ChoiceKnob("rows", row_choices(workload)),
             ChoiceKnob("vector", lane_choices(workload))]
    if workload.keepable:
        knobs.append(ChoiceKnob("keep", (1, 0)))
    knobs.append(ChoiceKnob("unroll", UNROLL))
    return Space(knobs)


def check(workload: RowWorkload, space: Space, config: Config) -> None:
    """Every configuration of the space schedules (the splits are exact by construction)."""
    space.to_dict(config)


def starts(workload: RowWorkload, space: Space) -> list[Config]:
    """The start points of the module docstring, in order, each once."""
    d0 = {k.name: k.values[0] for k in space.knobs}
    lanes = [v for v in space.knobs[space.names.index("vector")].values if v]
    fit = [v for v in lanes if v <= START_LANES]
    lane = max(fit) if fit else (min(lanes) if lanes else 0)
    rows = [v for v in row_choices(workload) if workload.row_count // v <= START_CHUNKS]
    parallel = min(rows) if rows else workload.row_count
    base = dict(d0, one_pass=1, rows=parallel, vector=lane, unroll=0)
    if "keep" in d0:
        base["keep"] = 1
    passes = dict(base, one_pass=0, **({"keep": 0} if "keep" in d0 else {}))
    serial = workload.row_count
    grid = [dict(base, rows=serial), dict(passes, rows=serial), base, passes]
    if "keep" in d0:
        grid.append(dict(base, keep=0))
    out: list[Config] = []
    for d in grid:
        c = space.from_dict(d)
        if c not in out:
            out.append(c)
    return out


def schedule(workload: RowWorkload, space: Space, config: Config, target: dict[str, Any] | None = None, func=None):
    """The TensorIR schedule of ``config`` (see the module docstring). ``func``: not supported (symbolic shapes
    keep the default schedule)."""
    import tvm
    from tvm import s_tir

    if func is not None:
        raise TiletuneError(f"{workload.key}: a row reduction is scheduled at its own static shape only")
    d = space.to_dict(config)
    lanes, per_chunk, unroll = int(d["vector"]), int(d["rows"]), int(d["unroll"])
    n = len(workload.rows)
    chunks = workload.row_count // per_chunk
    sch = s_tir.Schedule(tvm.IRModule({"main": fresh(workload.prim_func())}))
    inline_intermediates(sch, bool(d.get("keep", 0)))

    def blocks():
        return sch.get_child_blocks(sch.get_sblock("root"))

    def rows_loop(block):
        """The block's row loops fused and split into [chunks, rows per chunk]."""
        loops = sch.get_loops(block)
        fused = sch.fuse(*loops[:n]) if n > 1 else loops[0]
        outer, inner = sch.split(fused, [chunks, per_chunk])
        if chunks > 1:
            sch.parallel(outer)
        return outer, inner

    # vector accumulators: each reduction's lanes become a block of partial results (``<name>_rf``)
    partial = []
    if lanes:
        for b in blocks():
            if is_reduction(sch, b):
                loops = _reduction_loops(sch, b)
                red = sch.fuse(*loops) if len(loops) > 1 else loops[0]
                _, lane = sch.split(red, [None, lanes])
                partial.append(sch.get(sch.rfactor(lane, 0)).name_hint)
    out = blocks()[-1]
    outer, inner = rows_loop(out)
    if unroll:
        sch.annotate(outer, "pragma_auto_unroll_max_step", unroll)
        sch.annotate(outer, "pragma_unroll_explicit", 1)
    others = blocks()[:-1]
    if d["one_pass"]:
        for b in reversed(others):  # consumers first: each producer then goes under the same row loop
            sch.compute_at(b, inner, preserve_unit_loops=False)
    else:
        for b in others:
            rows_loop(b)
    for b in blocks():
        name = sch.get(b).name_hint
        if name in partial:
            _vector_partial(sch, b)
        elif lanes and not is_reduction(sch, b):
            below = sch.get_loops(b)[2:]  # inside [chunk, row]
            if math.prod(int(sch.get(lp).extent) for lp in below) > 1:
                width = sch.fuse(*below) if len(below) > 1 else below[0]
                _, lane = sch.split(width, [None, lanes])
                sch.vectorize(lane)
    return sch


def _vector_partial(sch, block) -> None:
    """The partial-results block of a reduction: its lane loop innermost and vectorized, its init a vector store."""
    loops = sch.get_loops(block)
    lane_value = sch.get(loops[-1]).body.iter_values[0]  # rfactor puts the factored (lane) iterator first
    inside = loops[2:]  # inside [chunk, row]
    lane = next(lp for lp in inside if _binds(lane_value, sch.get(lp).loop_var))
    rest = [lp for lp in inside if not lp.same_as(lane)]
    sch.reorder(*rest, lane)
    sch.vectorize(lane)
    if rest:
        init = sch.decompose_reduction(block, rest[0])
        sch.vectorize(sch.get_loops(init)[-1])


def _reduction_loops(sch, block) -> list:
    """The loops of ``block`` that bind its reduction iterators (its last loops: a row reduction's loop nest)."""
    blk = sch.get(block)
    loops = sch.get_loops(block)
    values = sch.get(loops[-1]).body.iter_values
    red = [v for v, iv in zip(values, blk.iter_vars) if int(iv.iter_type) == 2]
    return [lp for lp in loops if any(_binds(v, sch.get(lp).loop_var) for v in red)]


def _binds(value, var) -> bool:
    found = []
    walk_expr(value, lambda e: found.append(1) if e.same_as(var) else None)
    return bool(found)
