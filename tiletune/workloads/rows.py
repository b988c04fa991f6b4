"""A row reduction as a workload: a fused PrimFunc that reduces every row of a tensor along its last axes and
may use each row's results elementwise over the same row (softmax, layer norm, RMS norm, sums, maxima and means
over the last axes), as Relax's FuseTIR emits it. The CPU template ``tiletune.schedules.rows`` tunes it.

- Rows: the spatial iterators of the reduction blocks, in loop order (the same extents in every one), e.g.
  (1, 8, 128) for the softmax of a 1x8x128x128 tensor; the reduced axes: their reduction iterators (the last
  loops), e.g. (128,). Every block that stays a loop nest of its own (``inline_intermediates``) starts with
  one loop per row axis, each binding that spatial iterator directly; a reduction block's other loops are its
  reduction iterators, an elementwise block's the row's width (for the output of a softmax or a layer norm;
  none for a mean).
- Along the rows: every input a reduction block reads with the reduced iterators it reads contiguously, the
  innermost reduced iterator in its last index and no row iterator there (``x[i, j, k]`` summed over ``k``).
  A reduction across a strided axis (NHWC means, pooling windows, a matmul's ``B[k, n]``) is not a row
  reduction; those keep their handling elsewhere.
- Intermediates: elementwise blocks before the output are inlined into their readers where TVM allows it
  (``compute_inline``), except, with ``keep``, those of a full row width read by several blocks (a softmax's
  exponential, computed once into a buffer instead of once per reader). Both forms are tried once when the
  workload is made, so a kernel the template cannot take is refused with the reason.
- Parameters: the last is the output (floating point); inputs may be floating point, integer or boolean
  (masks). Shapes must be static.
- Reference output: the same PrimFunc compiled by TVM without a schedule, run on the inputs.
- FLOPs: for every block, the arithmetic operations of its update times its iteration space (what
  ``tiletune model tasks`` counts for kernels that are not tiling tasks); ``bytes_moved``: the parameters'
  bytes, each read or written once (what a kernel at memory bandwidth moves).
- Key: ``rows:NAME[SHAPES]@HASH`` (the input shapes and the PrimFunc's 64-bit structural hash); its TVMScript
  is kept in the PrimFunc cache (``tiletune.workloads.primfunc.cache_dir``) so that a measuring worker or
  ``tiletune best`` finds the workload again from its key.
"""
from __future__ import annotations

import math
import re
from functools import cached_property

import numpy as np

from ..errors import TiletuneError
from ..quiet import quiet_tvm
from .base import DTYPES, Axis, Workload, np_dtype, register_spec_parser
from .primfunc import (const_int, expr_children, from_cache, is_load, one_prim_func, parse_script, remember_text,
                       sanitize_name, walk_expr)

PREFIX = "rows:"
KEY_RE = re.compile(r"^rows:(?P<name>[A-Za-z_][A-Za-z0-9_]*)\[(?P<shapes>[0-9x,]*)\]@(?P<hash>[0-9a-f]{16})$")
_BY_HASH: dict[str, "RowWorkload"] = {}


def _root_blocks(sch) -> list:
    try:
        root = sch.get_sblock("root")
    except Exception:  # noqa: BLE001
        raise TiletuneError("the function has no root block") from None
    return sch.get_child_blocks(root)


def fresh(func):
    """A deep copy of ``func`` to schedule: TVM's schedule primitives mutate in place the statements that only
    one parent references (splitting a reduction's loop changed the workload's own function)."""
    import tvm

    return tvm.ir.load_json(tvm.ir.save_json(func))


def is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) != 0 for iv in sch.get(block).iter_vars)


def inline_intermediates(sch, keep: bool) -> list[str]:
    """Inline the elementwise blocks before the output into their readers (see the module docstring); with
    ``keep``, those with several readers and loops beyond ``rows`` row axes stay. Returns the names of the
    elementwise blocks that stay (kept, or refused by TVM), output excluded."""
    blocks = _root_blocks(sch)
    stays = []
    n_rows = _row_dims(sch)
    for b in blocks[:-1]:
        if is_reduction(sch, b):
            continue
        name = sch.get(b).name_hint
        if keep and len(sch.get_consumers(b)) > 1 and len(sch.get_loops(b)) > n_rows:
            stays.append(name)
            continue
        try:
            sch.compute_inline(b)
        except Exception:  # noqa: BLE001  (TVM refuses: the block stays a loop nest of its own)
            stays.append(name)
    return stays


def _row_dims(sch) -> int:
    """The number of row axes: the spatial iterators of the first reduction block."""
    for b in _root_blocks(sch):
        if is_reduction(sch, b):
            return sum(1 for iv in sch.get(b).iter_vars if int(iv.iter_type) == 0)
    return 0


def block_flops(func) -> int:
    """Arithmetic operations of every block's update times its iteration space (0 where it cannot be counted)."""
    import tvm
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        blocks = _root_blocks(sch)
    except Exception:  # noqa: BLE001
        return 0
    total = 0
    for b in blocks:
        blk = sch.get(b)
        value = getattr(blk.body, "value", None)
        if value is None:
            continue
        try:
            space = math.prod(int(iv.dom.extent) for iv in blk.iter_vars)
        except TypeError:
            continue
        total += _ops(value) * space
    return total


def _ops(expr) -> int:
    """Arithmetic operations of ``expr``; of a ``Select`` (a value chosen by a condition: a Winograd transform's
    tile positions), its condition's and its costlier branch's."""
    if type(expr).__name__ == "Select":
        return _ops(expr.condition) + max(_ops(expr.true_value), _ops(expr.false_value))
    n = int(type(expr).__name__ in ("Add", "Sub", "Mul", "Div", "Max", "Min", "FloorDiv", "Call"))
    return n + sum(_ops(sub) for sub in expr_children(expr))


def _uses(expr, variables) -> bool:
    hit = []
    walk_expr(expr, lambda e: hit.append(1) if any(e.same_as(v) for v in variables) else None)
    return bool(hit)


class RowWorkload(Workload):
    """A row-reduction kernel (see the module docstring). Make it with ``from_prim_func``, ``from_text`` or
    ``from_key``; ``tiletune.workloads.parse`` does it for a ``rows:`` key."""

    op = "rows"
    params = ()
    doc = "a row reduction kernel (softmax, layer norm, RMS norm, means over the last axes) of a model"

    def __init__(self, func, name: str):
        import tvm_ffi

        self.func = func.without_attr("global_symbol") if "global_symbol" in (func.attrs or {}) else func
        self.hash = f"{tvm_ffi.structural_hash(self.func) & (2**64 - 1):016x}"
        self.name = sanitize_name(name) if name else "rows"
        self._ref_lib = None
        self._analyse()
        self.check_index_range()
        _BY_HASH.setdefault(self.hash, self)
        self._remember()

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_prim_func(cls, func, name: str | None = None) -> "RowWorkload":
        """From a PrimFunc, or an IRModule holding one; ``name`` overrides the function's own."""
        func, own = one_prim_func(func)
        return cls(func, name or own or "")

    @classmethod
    def from_text(cls, text: str, name: str | None = None) -> "RowWorkload":
        return cls.from_prim_func(parse_script(text), name)

    @classmethod
    def from_key(cls, key: str) -> "RowWorkload":
        m = KEY_RE.match(key)
        if m is None:
            raise TiletuneError(f"{key!r} is not a row-reduction workload key (rows:NAME[SHAPES]@HASH)")
        return from_cache(cls, key, m, _BY_HASH, lambda text: cls.from_text(text, m["name"]),
                          missing="extract the model's tasks again on this machine (tiletune model tasks) to store "
                          "it there")

    def __reduce__(self):
        return (_from_text_named, (self.text, self.name))

    def _remember(self) -> None:
        remember_text(self.hash, lambda: self.text)

    @cached_property
    def text(self) -> str:
        import tvm

        return tvm.IRModule({self.name: self.func}).script()

    # ---- analysis -----------------------------------------------------------------------------
    def _refuse(self, why: str):
        return TiletuneError(f"{self.name}: not a row reduction: {why}")

    def _analyse(self) -> None:
        import tvm
        from tvm import s_tir

        sch = s_tir.Schedule(tvm.IRModule({"main": self.func}))
        try:
            blocks = _root_blocks(sch)
        except TiletuneError as e:
            raise self._refuse(str(e)) from None
        names = [sch.get(b).name_hint for b in blocks]
        if len(set(names)) != len(names) or any(sch.get_child_blocks(b) for b in blocks):
            raise self._refuse("nested blocks or repeated block names")
        reductions = [b for b in blocks if is_reduction(sch, b)]
        if not reductions:
            raise self._refuse("no reduction block")
        rows = None
        for b in reductions:
            loops = self._plain_loops(sch, b)
            kinds = [int(iv.iter_type) for iv in sch.get(b).iter_vars]
            order = [kinds[i] for i in loops]
            n = sum(1 for k in order if k == 0)
            if any(k not in (0, 2) for k in order) or order != [0] * n + [2] * (len(order) - n):
                raise self._refuse(f"block {sch.get(b).name_hint!r} does not loop over its rows before its reduction")
            ext = tuple(const_int(sch.get(lp).extent, "a loop extent") for lp in sch.get_loops(b))
            while n > 1 and ext[n - 1] == 1:  # a reduction that keeps its reduced axis (keepdims): not a row axis
                n -= 1
            if rows is None:
                rows = ext[:n]
            elif ext[:n] != rows:
                raise self._refuse(f"its reductions run over different rows ({rows} and {ext[:n]})")
        if not rows:
            raise self._refuse("the reduction has no row axes (a reduction of the whole tensor)")
        self._rows = rows
        self._reduced: tuple[int, ...] = ()
        self._widths: tuple[int, ...] = ()
        stays = self._check_form(False)
        self._keepable = tuple(n for n in self._check_form(True) if n not in stays)
        params = list(self.func.params)
        if not params or any(not hasattr(p, "shape") for p in params):
            raise self._refuse("a scalar parameter")
        for p in params:
            dt = str(p.dtype)
            if dt not in DTYPES and not dt.startswith(("int", "uint", "bool")):
                raise self._refuse(f"buffer {p.name} has dtype {dt}")
        written = {w.source.name for b in blocks for w in sch.get(b).writes}
        outs = [p.name for p in params if p.name in written]
        if outs != [params[-1].name] or str(params[-1].dtype) not in DTYPES:
            raise self._refuse(f"the function must write one floating-point parameter, its last (it writes "
                               f"{', '.join(outs) or 'none'})")
        self._params = [(p.name, tuple(const_int(s, f"a dimension of {p.name}") for s in p.shape), str(p.dtype))
                        for p in params]
        self._int64 = all(str(getattr(s, "ty", "")) == "int64" for p in params for s in p.shape)
        self._intermediates = [(b.name, tuple(const_int(s, f"a dimension of {b.name}") for s in b.shape))
                               for b in sch.get(sch.get_sblock("root")).alloc_buffers]
        floats = {dt for _, _, dt in self._params if dt in DTYPES}
        out_dtype = self._params[-1][2]
        Workload.__init__(self, dtype=floats.pop() if len(floats) == 1 else out_dtype, out_dtype=out_dtype)
        self._anchor = sch.get(reductions[0]).name_hint

    def _plain_loops(self, sch, block) -> list[int]:
        """For each loop around ``block`` (outermost first), the index of the iterator it binds; refused unless
        each loop binds exactly one iterator, directly, from 0."""
        b = sch.get(block)
        loops = sch.get_loops(block)
        values = list(getattr(sch.get(loops[-1]).body, "iter_values", ())) if loops else []
        order = []
        for lp in loops:
            var = sch.get(lp).loop_var
            hit = [i for i, v in enumerate(values) if v.same_as(var)]
            if len(hit) != 1 or const_int(sch.get(lp).min, "a loop start") != 0:
                break
            order.append(hit[0])
        if len(loops) != len(b.iter_vars) or sorted(order) != list(range(len(b.iter_vars))):
            raise self._refuse(f"the loops around block {b.name_hint!r} are not one plain loop per iterator")
        return order

    def _check_form(self, keep: bool) -> list[str]:
        """The template's inlining with ``keep``, then the row structure of every block that stays; returns the
        elementwise blocks before the output that stay."""
        import tvm
        from tvm import s_tir

        sch = s_tir.Schedule(tvm.IRModule({"main": fresh(self.func)}))
        stays = inline_intermediates(sch, keep)
        n = len(self._rows)
        widths = set(self._widths)
        blocks = _root_blocks(sch)
        for b in blocks:
            blk = sch.get(b)
            order = self._plain_loops(sch, b)
            loops = sch.get_loops(b)
            ext = tuple(const_int(sch.get(lp).extent, "a loop extent") for lp in loops)
            kinds = [int(blk.iter_vars[i].iter_type) for i in order]
            if ext[:n] != self._rows or any(k != 0 for k in kinds[:n]):
                raise self._refuse(f"block {blk.name_hint!r} does not loop over the rows {self._rows} first")
            rest = kinds[n:]
            if not rest:
                continue
            if is_reduction(sch, b):
                if any(k != 2 and e != 1 for k, e in zip(rest, ext[n:])):
                    raise self._refuse(f"block {blk.name_hint!r} has spatial loops inside its reduction")
                reduced = tuple(e for k, e in zip(rest, ext[n:]) if k == 2)
                if self._reduced and reduced != self._reduced:
                    raise self._refuse(f"its reductions reduce different extents ({self._reduced} and {reduced})")
                self._reduced = reduced
                self._check_contiguous(blk, [blk.iter_vars[i].var for i in order if kinds[order.index(i)] == 0],
                                       [blk.iter_vars[i].var for i in order if kinds[order.index(i)] == 2])
                widths.add(math.prod(reduced))
            elif any(k != 0 for k in rest):
                raise self._refuse(f"block {blk.name_hint!r} mixes iterator kinds")
            elif math.prod(ext[n:]) > 1:
                widths.add(math.prod(ext[n:]))
        self._widths = tuple(sorted(widths))
        return stays

    def _check_contiguous(self, blk, row_vars, red_vars) -> None:
        value = getattr(blk.body, "value", None)
        if value is None:
            raise self._refuse(f"the body of block {blk.name_hint!r} is not one buffer store")
        loads: list = []
        walk_expr(value, lambda e: loads.append(e) if is_load(e) else None)
        for ld in loads:
            idx = list(ld.indices)
            if not any(_uses(i, red_vars) for i in idx):
                continue
            if not _uses(idx[-1], red_vars[-1:]) or _uses(idx[-1], row_vars):
                raise self._refuse(f"block {blk.name_hint!r} reads {ld.source.name} across the reduced axes, not "
                                   "along its last dimension (pooling, a mean over a strided axis, a matmul)")

    # ---- identity -----------------------------------------------------------------------------
    @property
    def key(self) -> str:
        shapes = ",".join("x".join(map(str, s)) for _, s, _ in self._params[:-1])
        return f"{PREFIX}{self.name}[{shapes}]@{self.hash}"

    # ---- what the template uses ---------------------------------------------------------------
    @property
    def rows(self) -> tuple[int, ...]:
        """The extents of the row axes."""
        return self._rows

    @property
    def row_count(self) -> int:
        return math.prod(self._rows)

    @property
    def widths(self) -> tuple[int, ...]:
        """The distinct extents (fused) of what blocks do per row: the reduced axes, the output row's width."""
        return self._widths

    @property
    def keepable(self) -> tuple[str, ...]:
        """Elementwise intermediates that ``keep`` computes once into a buffer instead of inlining them."""
        return self._keepable

    def prim_func(self):
        return self.func.with_attr("global_symbol", "main")

    def anchor_name(self) -> str:
        return self._anchor

    def epilogue_blocks(self) -> tuple[str, ...]:
        return ()

    def te(self) -> list:
        raise TiletuneError(f"{self.key} is a row-reduction workload: it has no TE compute")

    def axes(self) -> list[Axis]:
        return ([Axis(f"r{i}", e, "S") for i, e in enumerate(self._rows)]
                + [Axis(f"k{i}", e, "R") for i, e in enumerate(self._reduced)])

    def axes_no_tvm(self) -> list[Axis]:
        return self.axes()

    def input_names(self) -> list[str]:
        return [n for n, _, _ in self._params[:-1]]

    def input_shapes(self) -> list[tuple[int, ...]]:
        return [s for _, s, _ in self._params[:-1]]

    def output_shape(self) -> tuple[int, ...]:
        return self._params[-1][1]

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random inputs: floating point ones from [-1, 1], or from [0, 1] where the output on those is not finite
        (an RMS norm whose input is a square computed by another kernel: the root of a negative mean); masks and
        indices small integers."""
        ins = self._inputs(seed, -1.0)
        if self.dtype in DTYPES and not np.all(np.isfinite(self.reference(*ins).astype(np.float64))):
            ins = self._inputs(seed, 0.0)
        return ins

    def _inputs(self, seed: int, low: float) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for _, s, dt in self._params[:-1]:
            if dt in DTYPES:
                out.append(np.asarray(rng.uniform(low, 1.0, size=s), dtype=np_dtype(dt)))
            elif dt == "bool":
                out.append(rng.integers(0, 2, size=s).astype(bool))
            else:
                out.append(rng.integers(0, 4, size=s).astype(dt))
        return out

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The function compiled by TVM without a schedule, run on ``inputs`` (compiled once)."""
        import tvm

        if self._ref_lib is None:
            with quiet_tvm():
                self._ref_lib = tvm.compile(tvm.IRModule({"main": self.prim_func()}),
                                            target=tvm.target.Target({"kind": "llvm"})).mod
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(np.require(x, requirements="C"), dev) for x in inputs]
        out = tvm.runtime.tensor(np.zeros(self.output_shape(), self.out_dtype), dev)
        self._ref_lib["main"](*args, out)
        return out.numpy()

    @property
    def flops(self) -> int:
        return max(1, block_flops(self.func))

    @property
    def bytes_moved(self) -> int:
        """Bytes of the parameters, each read or written once."""
        return sum(math.prod(s) * np.dtype(np_dtype(dt) if dt in DTYPES else dt).itemsize for _, s, dt in self._params)

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        out = {f"input {n}": s for n, s, _ in self._params[:-1]}
        out["output"] = self._params[-1][1]
        out.update({f"intermediate {n}": s for n, s in self._intermediates})
        return out

    def reference_scratch_elements(self) -> int:
        return sum(math.prod(s) for _, s in self._intermediates)

    def check_index_range(self) -> None:
        if not self._int64:
            super().check_index_range()

    def tensor_accesses(self):
        raise TiletuneError(f"{self.key}: a row reduction has no tiling access model (gensor, roller and the "
                            "analytical features model the tiles of a multiply-accumulate)")


def _from_text_named(text: str, name: str) -> RowWorkload:
    return RowWorkload.from_text(text, name)


def _parse_spec(spec: str) -> Workload | None:
    return RowWorkload.from_key(spec) if spec.startswith(PREFIX) else None


register_spec_parser(_parse_spec, "rows:NAME[SHAPES]@HASH: a row-reduction kernel of a model (tiletune model tasks)")

__all__ = ["RowWorkload", "block_flops", "fresh", "inline_intermediates", "is_reduction"]
