"""A workload from any TIR PrimFunc with one main reduction block (what Relax's FuseTIR emits for a fused
operator: pad -> conv2d -> bias add -> residual add -> ReLU, matmul -> bias add, ...).

Given as TVMScript text (a ``@T.prim_func``, or an ``@I.ir_module`` holding one PrimFunc, as ``.script()``
prints them), a file holding that text, a PrimFunc or an IRModule with one PrimFunc.

- The anchor is the one block with a reduction iterator (``tvm.s_tir.analysis.find_anchor_sblock``). Its
  iterators give the axes, spatial then reduction in the order of its loops, extents as Python ints (int64
  extents, as Relax emits them, included), named after the iterator without the ``v_`` prefix; the space is
  built from them exactly as for the named families.
- Blocks before the anchor are its producers (padding, layout copies): the CPU template inlines them
  (``compute_inline``). Blocks after it are its epilogue (bias add, residual add, ReLU, clip, SiLU, GELU, ...;
  a chain or a DAG): the template fuses them into the accumulator's write-back (``cache_write`` +
  ``reverse_compute_at``, then ``tiletune.workloads.epilogue.fuse_epilogue``), so one tuned kernel computes
  the whole function. Both steps are tried
  once when the workload is made, so what cannot be fused is refused with the reason.
- The function's last parameter is its output (as Relax and ``te.create_prim_func`` order them); the others
  are the inputs. Every buffer must be float32, float64 or float16.
- Reference output: the same PrimFunc compiled by TVM without a schedule and run on the inputs (the
  measuring workers call it once per workload and keep it: ``tiletune.measure.local._RUN_CACHE``).
- FLOPs: (number of arithmetic operations +, -, *, /, max, min in the anchor's update expression) x (product
  of all anchor extents). A multiply-add reduction ``C = C + A * B`` counts 2 per iteration (as the named
  families do), a sum or a max 1. The epilogue (O(output) work) and the init are not counted.
- Key: ``NAME[SHAPES]@HASH``, e.g. ``fused_conv2d_add_relu[1x64x56x56,64x64x3x3]@9f3c0a1b2d4e5f60``: the
  function's name (the IRModule's global name, else the file's stem, else the anchor's name), the shapes
  of the parameters the anchor reads (through its producers), and the 64-bit structural hash of the
  PrimFunc (``tvm_ffi.structural_hash``; names of variables do not enter it), so records resume.
- Finding a workload again from its key (``parse(key)`` in a measuring worker, ``tiletune best``): every
  PrimFunc workload writes its TVMScript text to ``~/.cache/tiletune/primfuncs/<HASH>.py`` when it is first
  made, and ``parse`` of a key reads that file back. On a machine whose cache does not hold it, the error
  says to give the TVMScript file instead.
- Weights: a function whose ``layout_free_buffers`` attribute lists parameters (the model's constants) has
  them as ``weights``; the attribute enters the hash, so a kernel whose weights the CPU template prepacks
  (``tiletune.schedules.cpu``) is not confused with the same loops on plain inputs.
- Access model (gensor, roller, the analytical features): ``tensor_accesses()`` reads the anchor's buffer
  accesses; every index must be an affine function of the block's iterators with constant coefficients
  (else a TiletuneError says which one is not). The padded input is described by the intermediate padded
  buffer, as for the named convolutions; the epilogue's extra inputs (bias, residual) are not modelled.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TiletuneError
from ..quiet import quiet_tvm
from .access import DTYPE_BYTES, IndexExpr, TensorAccess
from .base import ACCUMULATION, DTYPES, HALF, INT_DTYPES, Axis, Workload, register_spec_parser
from .epilogue import EpilogueError, fuse_epilogue

KEY_RE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\[(?P<shapes>[0-9x,]*)\]@(?P<hash>[0-9a-f]{16})$")
SUFFIXES = (".tir.py", ".py", ".tir", ".tvmscript")
_BY_HASH: dict[str, "PrimFuncWorkload"] = {}


def cache_dir() -> Path:
    """Where the TVMScript of every PrimFunc workload is kept, by hash (see the module docstring)."""
    return Path.home() / ".cache" / "tiletune" / "primfuncs"


def remember_text(hash_: str, text) -> None:
    """Write ``text()`` (a workload's TVMScript) to the cache file of ``hash_`` unless it is there already, so that
    ``parse`` of the workload's key finds it again (in a measuring worker, in a later run)."""
    path = cache_dir() / f"{hash_}.py"
    if path.is_file():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text())
        os.replace(tmp, path)
    except OSError as e:
        raise TiletuneError(f"cannot write the PrimFunc cache file {path}: {e}") from None


def from_cache(cls, key: str, m, by_hash: dict, from_text, missing: str, stale: str = ""):
    """The workload of ``key`` (``m``: its match of the kind's key pattern, with ``name`` and ``hash``): the one
    made in this process (``by_hash``), else ``from_text`` of the cache file ``remember_text`` wrote, renamed to
    the key's name; a TiletuneError when the file is missing (``missing`` says what to do) or gives another key
    (``stale`` is appended)."""
    path = cache_dir() / f"{m['hash']}.py"
    wl = by_hash.get(m["hash"])
    if wl is None:
        if not path.is_file():
            raise TiletuneError(f"workload {key}: its PrimFunc is not in the cache ({path}); {missing}")
        wl = from_text(path.read_text())
    if wl.name != m["name"]:
        wl = cls(wl.func, m["name"])
    if wl.key != key:
        raise TiletuneError(f"workload {key}: the cached PrimFunc {path} gives the key {wl.key}{stale}")
    return wl


def _first_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).strip().splitlines() if s.strip()]
    # TVM errors end with the check that failed; tracebacks come first
    for s in reversed(lines):
        if not s.startswith(("File ", "^", "~")):
            return s[:300]
    return type(e).__name__


def sanitize_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")
    if not s or not (s[0].isalpha() or s[0] == "_"):
        s = "f_" + s
    return s


def expr_children(expr) -> list:
    """The direct sub-expressions of ``expr`` (the node kinds an anchor's update holds)."""
    subs = [getattr(expr, field, None) for field in ("a", "b", "value", "condition", "true_value", "false_value")]
    return [s for s in subs if s is not None and not isinstance(s, (int, float, str))] + list(
        getattr(expr, "args", None) or ())


def walk_expr(expr, visit) -> None:
    """Call ``visit`` on ``expr`` and every sub-expression (the node kinds an anchor's update holds)."""
    visit(expr)
    for sub in expr_children(expr):
        walk_expr(sub, visit)


def is_load(expr) -> bool:
    return hasattr(expr, "indices") and hasattr(expr, "source")


def const_int(x, what: str) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        raise TiletuneError(f"{what} is {x}, not a constant: symbolic shapes are not supported") from None


def parse_script(text: str):
    import tvm.script

    try:
        with quiet_tvm():  # building pow(x, 3) warns
            return tvm.script.from_source(text)
    except Exception as e:  # TVM's parser raises its own diagnostic errors
        raise TiletuneError(f"not valid TVMScript ({type(e).__name__}: {_first_line(e)})") from None


def one_prim_func(obj) -> tuple[Any, str | None]:
    """(the PrimFunc, its name or None) of a PrimFunc or of an IRModule holding exactly one."""
    import tvm

    name = None
    if isinstance(obj, tvm.IRModule):
        prims = [(gv.name_hint, f) for gv, f in obj.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
        others = [gv.name_hint for gv, f in obj.functions.items() if not isinstance(f, tvm.tirx.PrimFunc)]
        if len(prims) != 1 or others:
            names = ", ".join(n for n, _ in prims) or "none"
            extra = f" and {len(others)} other function(s) ({', '.join(others)})" if others else ""
            raise TiletuneError(f"the IRModule holds {len(prims)} PrimFunc(s) ({names}){extra}: a workload is "
                                "one PrimFunc (an IRModule with exactly one)")
        gname, obj = prims[0]
        name = gname if gname != "main" else None
    if not isinstance(obj, tvm.tirx.PrimFunc):
        raise TiletuneError(f"expected a PrimFunc or an IRModule, got {type(obj).__name__}")
    sym = (obj.attrs or {}).get("global_symbol")
    if name is None and sym is not None and str(sym) != "main":
        name = str(sym)
    return obj, name


class PrimFuncWorkload(Workload):
    """A workload made from a PrimFunc (see the module docstring). Make it with ``from_text``,
    ``from_file``, ``from_prim_func`` or ``from_key``; ``tiletune.workloads.parse`` does it for a path or
    a key."""

    op = "primfunc"
    params = ()
    doc = "a TVMScript file holding a PrimFunc with one reduction (anchor) block, e.g. kernel.tir.py"

    def __init__(self, func, name: str):
        import tvm_ffi

        self.func = func.without_attr("global_symbol") if "global_symbol" in (func.attrs or {}) else func
        self.hash = f"{tvm_ffi.structural_hash(self.func) & (2**64 - 1):016x}"
        self.name = sanitize_name(name) if name else ""  # empty: named after the anchor block by _analyse
        self._ref_lib = None
        self._analyse()  # sets dtype (through Workload.__init__) and everything the template needs
        self.check_index_range()
        self._remember()

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_prim_func(cls, func, name: str | None = None) -> "PrimFuncWorkload":
        """From a PrimFunc, or an IRModule holding one PrimFunc; ``name`` overrides the function's own name
        (the IRModule's global name or the ``global_symbol`` attribute, "main" not counting)."""
        func, own = one_prim_func(func)
        return cls(func, name or own or "")

    @classmethod
    def from_text(cls, text: str, name: str | None = None) -> "PrimFuncWorkload":
        """From TVMScript text (a PrimFunc, or an IRModule with one PrimFunc)."""
        return cls.from_prim_func(parse_script(text), name)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "PrimFuncWorkload":
        """From a file holding TVMScript text; named after the file (without ``.tir.py``/``.py``) when the
        text does not name its function."""
        p = Path(path)
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise TiletuneError(f"cannot read the workload file {str(p)!r}: {e}") from None
        stem = p.name
        for suf in SUFFIXES:
            if stem.endswith(suf):
                stem = stem[: -len(suf)]
                break
        try:
            func, own = one_prim_func(parse_script(text))
            return cls(func, own or stem)
        except TiletuneError as e:
            raise TiletuneError(f"{p}: {e}") from None

    @classmethod
    def from_key(cls, key: str) -> "PrimFuncWorkload":
        m = KEY_RE.match(key)
        if m is None:
            raise TiletuneError(f"{key!r} is not a PrimFunc workload key (NAME[SHAPES]@HASH)")
        return from_cache(cls, key, m, _BY_HASH, cls.from_text,
                          missing="give the TVMScript file instead of the key (making the workload from the file "
                          "stores it there)",
                          stale="; remove that file and give the TVMScript file instead")

    def __reduce__(self):
        return (_from_text_named, (self.text, self.name))

    def _remember(self) -> None:
        _BY_HASH.setdefault(self.hash, self)
        remember_text(self.hash, lambda: self.text)

    @cached_property
    def text(self) -> str:
        """The PrimFunc's TVMScript, as an IRModule whose one function has this workload's name."""
        import tvm

        return tvm.IRModule({self.name: self.func}).script()

    # ---- analysis -----------------------------------------------------------------------------
    def _analyse(self) -> None:
        import tvm
        from tvm import s_tir

        func = self.func
        label = self.name or "PrimFunc"
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        try:
            root = sch.get_sblock("root")
        except Exception:
            raise TiletuneError(f"{label}: the function has no root block") from None
        blocks = sch.get_child_blocks(root)
        names = [sch.get(b).name_hint for b in blocks]
        if len(set(names)) != len(names):
            raise TiletuneError(f"{label}: block names are not unique ({', '.join(names)})")
        for b, n in zip(blocks, names):
            if sch.get_child_blocks(b):
                raise TiletuneError(f"{label}: block {n!r} holds nested blocks; only a flat list of blocks is "
                                    "supported")
        reductions = [n for b, n in zip(blocks, names)
                      if any(int(iv.iter_type) != 0 for iv in sch.get(b).iter_vars)]
        if not reductions:
            raise TiletuneError(f"{label}: no reduction block (blocks: {', '.join(names)}); only a function with "
                                "one main reduction (conv, matmul, pooling, ...) can be tuned")
        if len(reductions) > 1:
            raise TiletuneError(f"{label}: several reduction blocks ({', '.join(reductions)}); one anchor "
                                "block is needed (split the function)")
        anchor_name = reductions[0]
        found = s_tir.analysis.find_anchor_sblock(tvm.IRModule({"main": func}))
        if found is None or found.name_hint != anchor_name:
            raise TiletuneError(f"{label}: TVM finds no single anchor block (the reduction block is {anchor_name!r})")
        ai = names.index(anchor_name)
        self._anchor = anchor_name
        self._producers = tuple(names[:ai])
        self._epilogue = tuple(names[ai + 1:])
        block = sch.get(blocks[ai])
        if not self.name:
            self.name = sanitize_name("anchor_" + anchor_name)

        # axes: one loop per iterator, in loop order
        kinds = {0: "S", 2: "R"}
        for iv in block.iter_vars:
            if int(iv.iter_type) not in kinds:
                raise TiletuneError(f"{label}: anchor block {anchor_name!r} has an iterator of kind "
                                    f"{int(iv.iter_type)} ({iv.var}); only spatial and reduction iterators")
            if const_int(iv.dom.min, f"{label}: the start of iterator {iv.var}") != 0:
                raise TiletuneError(f"{label}: iterator {iv.var} of {anchor_name!r} does not start at 0")
        loops = [sch.get(lp) for lp in sch.get_loops(blocks[ai])]
        realize = loops[-1].body if loops else None
        values = list(getattr(realize, "iter_values", ()))
        order: list[int] = []
        for lp in loops:
            hit = [i for i, v in enumerate(values) if v.same_as(lp.loop_var)]
            if len(hit) != 1:
                break
            order.append(hit[0])
        if (len(loops) != len(block.iter_vars) or sorted(order) != list(range(len(loops)))
                or not all(const_int(lp.min, "a loop start") == 0 for lp in loops)):
            raise TiletuneError(f"{label}: the loops around anchor block {anchor_name!r} are not one loop per "
                                f"block iterator (bindings {', '.join(map(str, values))}); only plain loop nests")
        raw = [str(block.iter_vars[i].var) for i in order]
        short = [r[2:] if r.startswith("v_") and len(r) > 2 else r for r in raw]
        short = [sanitize_name(s) for s in short]
        if len(set(short)) != len(short):
            short = [sanitize_name(r) for r in raw]
        self._axes = [Axis(short[j], const_int(block.iter_vars[i].dom.extent, f"{label}: the extent of {raw[j]}"),
                           kinds[int(block.iter_vars[i].iter_type)]) for j, i in enumerate(order)]
        self._iter_vars = [block.iter_vars[i].var for i in order]
        if block.init is None:
            raise TiletuneError(f"{label}: reduction block {anchor_name!r} has no init (T.init()) to decompose")
        store = block.body
        if not hasattr(store, "buffer") or not hasattr(store, "value"):
            raise TiletuneError(f"{label}: the body of anchor block {anchor_name!r} is not one buffer store")
        self._store = store

        # parameters: inputs..., output (the last); all float
        params = list(func.params)
        if not params:
            raise TiletuneError(f"{label}: the function has no parameters")
        for p in params:
            if not hasattr(p, "shape"):
                raise TiletuneError(f"{label}: parameter {p} is a scalar; only buffer parameters are supported")
            if str(p.dtype) not in DTYPES + INT_DTYPES:
                raise TiletuneError(f"{label}: buffer {p.name} has dtype {p.dtype}; accepted: {', '.join(DTYPES)}")
        written = set()
        for b in blocks:
            for w in sch.get(b).writes:
                written.add(w.source.name)
        outs = [p.name for p in params if p.name in written]
        if outs != [params[-1].name]:
            raise TiletuneError(f"{label}: the function must write exactly one parameter, its last "
                                f"({params[-1].name}); it writes {', '.join(outs) or 'none'}")
        self._params = [(p.name, tuple(const_int(s, f"{label}: a dimension of {p.name}") for s in p.shape), str(p.dtype))
                        for p in params]
        self._int64 = all(str(getattr(s, "ty", "")) == "int64" for p in params for s in p.shape)
        self._intermediates = [(b.name, tuple(const_int(s, f"{label}: a dimension of {b.name}") for s in b.shape))
                               for b in sch.get(root).alloc_buffers]
        # dtypes: the anchor's operands (``dtype``), the output (``out_dtype``); half operands accumulated in
        # float32 (a model cast by Relax's ToMixedPrecision) make the workload mixed-precision
        loads: list = []
        walk_expr(store.value, lambda e: loads.append(e) if is_load(e) and not e.source.same_as(store.buffer) else None)
        operand = {str(e.source.dtype) for e in loads}
        acc = str(store.buffer.dtype)
        quantized = operand == {"uint8", "int8"} and acc == "int32"  # uint8 x int8 -> int32 (x86_int8's kernels)
        for name, _, dt in self._params:
            if dt in INT_DTYPES and not quantized:
                raise TiletuneError(f"{label}: buffer {name} has dtype {dt}; accepted: {', '.join(DTYPES)} (integer "
                                    "buffers only in a uint8 x int8 -> int32 product)")
        in_dtype = "uint8" if quantized else operand.pop() if len(operand) == 1 else acc
        Workload.__init__(self, dtype=in_dtype, out_dtype=self._params[-1][2])
        self.mixed_precision = (in_dtype in HALF or quantized) and acc == ACCUMULATION.get(in_dtype)
        # the shapes in the key: parameters the anchor reads, through its producers
        reads_of = {n: {r.source.name for r in sch.get(b).reads} for b, n in zip(blocks, names)}
        writer = {w.source.name: n for b, n in zip(blocks, names) for w in sch.get(b).writes}
        pnames = {p[0] for p in self._params}
        seen, todo, feeds = set(), list(reads_of[anchor_name]), set()
        while todo:
            buf = todo.pop()
            if buf in seen:
                continue
            seen.add(buf)
            if buf in pnames:
                feeds.add(buf)
            elif buf in writer and writer[buf] != anchor_name:
                todo.extend(reads_of[writer[buf]])
        self._feeds = [p for p in self._params[:-1] if p[0] in feeds]
        self._check_fusable()

    def _check_fusable(self) -> None:
        """Apply the template's inline / fuse steps once: refuse what the CPU template cannot schedule."""
        import tvm
        from tvm import s_tir

        sch = s_tir.Schedule(tvm.IRModule({"main": self.func}))
        for n in self._producers:
            try:
                sch.compute_inline(sch.get_sblock(n))
            except Exception as e:
                raise TiletuneError(f"{self.name}: block {n!r} before the reduction cannot be inlined into it "
                                    f"(compute_inline: {_first_line(e)}); only elementwise producers such as "
                                    "padding are supported") from None
        sch.cache_write(sch.get_sblock(self._anchor), 0, "local")
        try:
            fuse_epilogue(sch, self._epilogue)
        except EpilogueError as e:
            raise TiletuneError(f"{self.name}: block {e.block!r} after the reduction cannot be fused into its "
                                f"write-back ({e.step}: {e.reason}); only elementwise epilogues (bias/residual "
                                "add, activations) are supported") from None

    # ---- identity -----------------------------------------------------------------------------
    @property
    def key(self) -> str:
        shapes = ",".join("x".join(map(str, s)) for _, s, _ in self._feeds)
        return f"{self.name}[{shapes}]@{self.hash}"

    # ---- what the template and the measurement use --------------------------------------------
    def prim_func(self):
        return self.func.with_attr("global_symbol", "main")

    def anchor_name(self) -> str:
        return self._anchor

    def epilogue_blocks(self) -> tuple[str, ...]:
        return self._epilogue

    def producer_blocks(self) -> tuple[str, ...]:
        return self._producers

    def te(self) -> list:
        raise TiletuneError(f"{self.key} is a PrimFunc workload: it has no TE compute (the CUDA template "
                            "does not schedule PrimFunc workloads yet; the CPU template does)")

    def axes(self) -> list[Axis]:
        return list(self._axes)

    def axes_no_tvm(self) -> list[Axis]:
        return list(self._axes)

    def input_names(self) -> list[str]:
        return [n for n, _, _ in self._params[:-1]]

    @cached_property
    def weights(self) -> frozenset[str]:
        """The inputs that are the model's constants (weights): the parameters whose indices the function's
        ``layout_free_buffers`` attribute lists, as TVM's ``AttachAttrLayoutFreeBuffers`` and
        ``tiletune.model.kernels.tasks`` set it. The CPU template may give them in a packed layout, packed once when
        the model is built (``tiletune.schedules.cpu``)."""
        attrs = self.func.attrs or {}
        names = [p.name for p in self.func.params]
        return frozenset(names[int(i)] for i in attrs.get("layout_free_buffers", ()) if int(i) < len(names) - 1)

    def input_shapes(self) -> list[tuple[int, ...]]:
        return [s for _, s, _ in self._params[:-1]]

    def output_shape(self) -> tuple[int, ...]:
        return self._params[-1][1]

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [_integers(rng, s, dt) if dt in INT_DTYPES else np.asarray(rng.uniform(-1.0, 1.0, size=s), dtype=dt)
                for _, s, dt in self._params[:-1]]  # 0-d too

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The function compiled by TVM without a schedule, run on ``inputs`` (compiled once)."""
        import tvm

        if self._ref_lib is None:
            target = tvm.target.Target({"kind": "llvm"})

            with quiet_tvm():  # pow's warnings
                self._ref_lib = tvm.compile(tvm.IRModule({"main": self.prim_func()}), target=target).mod
        dev = tvm.cpu()
        args = [tvm.runtime.tensor(np.require(x, requirements='C'), dev) for x in inputs]  # keeps 0-d arrays
        out = tvm.runtime.tensor(np.zeros(self.output_shape(), self.out_dtype), dev)
        self._ref_lib["main"](*args, out)
        return out.numpy()

    @property
    def flops(self) -> int:
        ops = 0

        def count(e) -> None:
            nonlocal ops
            if type(e).__name__ in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
                ops += 1

        walk_expr(self._store.value, count)
        return max(1, ops) * math.prod(a.extent for a in self._axes)

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        out = {f"input {n}": s for n, s, _ in self._params[:-1]}
        out["output"] = self._params[-1][1]
        out.update({f"intermediate {n}": s for n, s in self._intermediates})
        return out

    def reference_scratch_elements(self) -> int:  # the unscheduled build allocates every intermediate
        return sum(math.prod(s) for _, s in self._intermediates)

    def check_index_range(self) -> None:
        """With int64 shapes (what Relax emits) TVM indexes in 64 bits: nothing to check."""
        if not self._int64:
            super().check_index_range()

    # ---- access model -------------------------------------------------------------------------
    def tensor_accesses(self) -> list[TensorAccess]:
        """The anchor block's loads (inputs, in order of first use) and its store (the output), each
        dimension an affine sum of the block's iterators (see ``tiletune.workloads.access``)."""
        from tvm.sym.pattern import detect_linear_equation

        names = [a.name for a in self._axes]
        ivars = self._iter_vars
        store = self._store
        out_name = store.buffer.name

        def dims(buf_name: str, shape, indices) -> tuple[IndexExpr, ...]:
            res = []
            for d, (ix, size) in enumerate(zip(indices, shape)):
                coef = detect_linear_equation(ix, ivars)
                if len(coef) != len(ivars) + 1 or not all(hasattr(c, "value") for c in coef[:-1]):
                    raise TiletuneError(f"{self.key}: index {ix} of {buf_name} (dimension {d}) in block "
                                        f"{self._anchor!r} is not an affine function of the block axes; the "
                                        "access model (gensor, roller, analytical features) needs affine indices")
                terms = tuple((names[i], int(c.value)) for i, c in enumerate(coef[:-1]) if int(c.value) != 0)
                res.append(IndexExpr(terms, const_int(size, f"a dimension of {buf_name}")))
            return tuple(res)

        loads: list = []

        def visit(e) -> None:
            if is_load(e) and e.source.name != out_name and all(not e.source.same_as(x.source) for x in loads):
                loads.append(e)

        walk_expr(store.value, visit)
        acc = [TensorAccess(ld.source.name, "input", dims(ld.source.name, ld.source.shape, ld.indices),
                            DTYPE_BYTES.get(str(ld.source.dtype), 4)) for ld in loads]
        acc.append(TensorAccess(out_name, "output", dims(out_name, store.buffer.shape, store.indices),
                                DTYPE_BYTES.get(str(store.buffer.dtype), 4)))
        return acc


def is_mac(wl: PrimFuncWorkload) -> bool:
    """Whether the anchor's update multiplies two operands that depend on loads (C += A * B)."""
    found = []

    def visit(e):
        if type(e).__name__ == "Mul":
            has = []
            walk_expr(e.a, lambda x: has.append(1) if is_load(x) else None)
            n_a = len(has)
            walk_expr(e.b, lambda x: has.append(1) if is_load(x) else None)
            if n_a and len(has) > n_a:
                found.append(e)

    walk_expr(wl._store.value, visit)
    return bool(found)


#: the range of an integer input of a quantized kernel: the dtype's, and for int32 (a weight's column sums) that of
#: sums of a few hundred int8 values, so that the kernel's int32 arithmetic does not overflow
INT_INPUT_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "int32": (-2**15, 2**15)}


def _integers(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    lo, hi = INT_INPUT_RANGE[dtype]
    return np.asarray(rng.integers(lo, hi + 1, size=shape), dtype=dtype)


def _from_text_named(text: str, name: str) -> PrimFuncWorkload:
    return PrimFuncWorkload.from_text(text, name)


def looks_like_key(spec: str) -> bool:
    return KEY_RE.match(spec) is not None


def _parse_spec(spec: str) -> Workload | None:
    """A PrimFunc workload for a key or a TVMScript file's path; None for anything else."""
    if looks_like_key(spec):
        return PrimFuncWorkload.from_key(spec)
    if os.path.isfile(spec):
        return PrimFuncWorkload.from_file(spec)
    if spec.endswith(SUFFIXES) or os.sep in spec:
        raise TiletuneError(f"workload file {spec!r} does not exist")
    return None


register_spec_parser(_parse_spec, "PATH: a file holding TVMScript (a PrimFunc with one reduction block, or an "
                                  "IRModule holding one), e.g. kernel.tir.py")

