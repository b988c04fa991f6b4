"""Workload = a TVM TE compute + a numpy reference + an exact FLOP count.

A workload is described by its operator name and integer parameters, written as a spec string such
as ``gemm:M=1024,N=1024,K=1024``. ``Workload.key`` is the stable identity used in records.
TVM is imported lazily, only when the TE compute is built, so that spaces, strategies and records can
be used (and tested) without it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from ..errors import TiletuneError

try:  # registers numpy's "bfloat16" dtype (installed with TVM)
    import ml_dtypes  # noqa: F401
except ImportError:  # pragma: no cover
    ml_dtypes = None

DTYPES = ("float32", "float64", "float16", "bfloat16")
# quantized families (``tiletune.workloads.quantized``): uint8 activations times int8 weights, accumulated exactly in
# int32; their output (``out_dtype``) is the int32 accumulator, a dequantized float32 or a requantized uint8
QUANTIZED_DTYPES = ("uint8",)
INT_DTYPES = ("uint8", "int8", "int32")
# half-precision inputs are multiplied and accumulated in float32 (as tensor cores and cuBLAS do); the output
# dtype (``out_dtype=`` in the spec) is the input dtype by default, or float32
# (docs/gpu.md, "Tensor cores")
HALF = ("float16", "bfloat16")
ACCUMULATION = {"float16": "float32", "bfloat16": "float32", "uint8": "int32"}
# the check of a kernel's output against the reference, in one place: (rtol, atol per sqrt(reduction length))
# of the accumulation dtype's rounding over the reduction, and the relative rounding of the output dtype
# (two units in the last place: kernel and reference may round a sum to neighbouring values)
ACCUMULATION_TOLERANCE = {"float64": (1e-4, 1e-11), "float32": (1e-4, 1e-4), "float16": (1e-1, 1e-1),
                          "bfloat16": (2.5e-1, 5e-1), "int32": (0.0, 0.0)}
OUTPUT_RTOL = {"float64": 0.0, "float32": 0.0, "float16": 2.0**-9, "bfloat16": 2.0**-6, "int32": 0.0, "uint8": 0.0,
               "int8": 0.0}
# an exact int32 accumulator's float epilogue (dequantize, bias) rounds like the reference's up to the contraction of
# a multiply and an add into one fused multiply-add: a few units in the last place
QUANTIZED_FLOAT_TOLERANCE = (1e-5, 1e-6)


def np_dtype(dtype: str) -> np.dtype:
    """numpy's dtype for a workload dtype (bfloat16: ml_dtypes')."""
    return np.dtype(dtype)
# TE gives these workloads' shapes and loop variables 32-bit integers (a Python int that fits is an int32
# IntImm) and addresses each buffer with one flattened index: a buffer of more elements cannot be built
# (TVM fails every trial: "Literal value ... exceeds range of int32", or an empty domain just past it)
INDEX_MAX = 2**31 - 1


@dataclass(frozen=True)
class Axis:
    """One loop axis of the compute: 'S' (spatial) or 'R' (reduction)."""

    name: str
    extent: int
    kind: str


@dataclass(frozen=True)
class Param:
    name: str
    help: str
    default: int | None = None  # None = required
    minimum: int = 1


class Workload:
    """Base class of the operator families. Subclasses declare ``op``, ``params`` and implement
    ``_compute`` (TE), ``reference`` (numpy), ``flops`` and ``_validate``."""

    op: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    doc: ClassVar[str] = ""
    #: memory layouts the family accepts (``layout=`` in the spec), the default first; () = no layout param
    layouts: ClassVar[tuple[str, ...]] = ()
    #: input dtypes the family accepts
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float64", "float16")
    #: whether the family computes through ``mac`` and ``finish``: half-precision inputs accumulated in float32
    #: (``ACCUMULATION``); otherwise a family computes in its input dtype
    mixed_precision: ClassVar[bool] = False
    #: output dtypes besides the input dtype a family accepts (``out_dtype=`` in the spec); () = the half rule
    out_dtypes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dtype: str = "float32", layout: str | None = None, out_dtype: str | None = None,
                 **values: int):
        self.dtype = dtype
        self.out_dtype = out_dtype or dtype
        self.layout = layout or (self.layouts[0] if self.layouts else None)
        self.values: dict[str, int] = dict(values)
        self._te: list | None = None

    # ---- identity ---------------------------------------------------------------------------
    @property
    def key(self) -> str:
        body = ",".join(f"{p.name}={self.values[p.name]}" for p in self.params)
        if self.dtype != "float32":
            body += f",dtype={self.dtype}"
        if self.out_dtype != self.dtype:
            body += f",out_dtype={self.out_dtype}"
        if self.layouts and self.layout != self.layouts[0]:  # the default layout keeps the key it always had
            body += f",layout={self.layout}"
        return f"{self.op}:{body}"

    def __repr__(self) -> str:
        return f"Workload({self.key})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workload) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    # ---- to implement -------------------------------------------------------------------------
    def _validate(self) -> None:  # raise TiletuneError on impossible shapes
        pass

    def _compute(self) -> list:  # TE tensors: inputs..., output
        raise NotImplementedError

    def input_shapes(self) -> list[tuple[int, ...]]:
        raise NotImplementedError

    def output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @property
    def flops(self) -> int:
        raise NotImplementedError

    # ---- shared -------------------------------------------------------------------------------
    def te(self) -> list:
        """The TE tensors [inputs..., output] (built once)."""
        if self._te is None:
            self._te = self._compute()
        return self._te

    def prim_func(self):
        from tvm import te

        return te.create_prim_func(self.te()).with_attr("global_symbol", "main")

    # ---- dtypes ------------------------------------------------------------------------------------
    @property
    def acc_dtype(self) -> str:
        """The dtype products are accumulated in (float32 for half-precision inputs)."""
        return ACCUMULATION.get(self.dtype, self.dtype) if self.mixed_precision else self.dtype

    @property
    def has_cast(self) -> bool:
        """Whether the output is a cast of the accumulator (half inputs with a half output): a TE stage
        ``<anchor>_cast`` after the reduction, which the templates fuse into the write-back."""
        return self.out_dtype != self.acc_dtype

    def mac(self, a, b):
        """The product of two TE input elements in the accumulation dtype."""
        if self.acc_dtype != self.dtype:
            return a.astype(self.acc_dtype) * b.astype(self.acc_dtype)
        return a * b

    def finish(self, acc):
        """The TE output from the accumulating stage ``acc``: itself, or its cast to ``out_dtype``."""
        if not self.has_cast:
            return acc
        from tvm import te

        return te.compute(acc.shape, lambda *i: acc(*i).astype(self.out_dtype), name=f"{acc.op.name}_cast")

    def to_acc(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """numpy inputs in the accumulation dtype (the reference computes in float32 on the rounded inputs)."""
        return [np.asarray(a).astype(np_dtype(self.acc_dtype), copy=False) for a in arrays]

    def to_out(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x).astype(np_dtype(self.out_dtype), copy=False)

    def anchor_tensor(self):
        """The TE stage the schedule templates tile (the reduction; the output unless it is cast)."""
        out = self.te()[-1]
        return out.op.input_tensors[0] if self.has_cast else out

    def anchor_name(self) -> str:
        """Name of the block the schedule templates tile (the TE output stage, or the stage it casts)."""
        return self.anchor_tensor().op.name

    def epilogue_blocks(self) -> tuple[str, ...]:
        """Blocks after the anchor that the templates fuse into its write-back (the output cast, if any)."""
        return (self.te()[-1].op.name,) if self.has_cast else ()

    def axes(self) -> list[Axis]:
        """Axes of the anchor stage, spatial first then reduction, read from the TE compute."""
        out = self.anchor_tensor()
        axes = [Axis(iv.var.name, int(iv.dom.extent), "S") for iv in out.op.axis]
        axes += [Axis(iv.var.name, int(iv.dom.extent), "R") for iv in out.op.reduce_axis]
        return axes

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, size=s).astype(np_dtype(self.dtype)) for s in self.input_shapes()]

    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) for checking outputs (``ACCUMULATION_TOLERANCE``, ``OUTPUT_RTOL``); atol grows with the
        reduction length."""
        red = 1
        for a in self.axes_no_tvm():
            if a.kind == "R":
                red *= a.extent
        if self.acc_dtype == "int32" and self.out_dtype not in INT_DTYPES:
            return QUANTIZED_FLOAT_TOLERANCE
        rtol, atol = ACCUMULATION_TOLERANCE[self.acc_dtype]
        return (max(rtol, OUTPUT_RTOL[self.out_dtype]), atol * max(1.0, np.sqrt(red)))

    def axes_no_tvm(self) -> list[Axis]:
        """Axes without building TE (subclasses that know them statically override)."""
        return self.axes()

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every buffer a built kernel addresses: inputs and output (subclasses add their
        intermediate stages, e.g. a padded input)."""
        out = {f"input {i + 1}": tuple(s) for i, s in enumerate(self.input_shapes())}
        out["output"] = tuple(self.output_shape())
        return out

    def reference_scratch_elements(self) -> int:
        """Elements of the temporary arrays ``reference`` builds besides its output (e.g. im2col windows)."""
        return 0

    def check_index_range(self) -> None:
        """TiletuneError when a buffer has more elements than TVM's 32-bit indices address."""
        for name, shape in self.buffer_shapes().items():
            n = math.prod(shape)
            if n > INDEX_MAX:
                raise TiletuneError(
                    f"{self.key}: the {name} ({' x '.join(map(str, shape))}) has {n:,} elements, more than the "
                    f"{INDEX_MAX:,} that TVM's 32-bit indices address; tune a smaller problem (e.g. a tile of it)")


# ---- registry and spec parsing ------------------------------------------------------------------
_REGISTRY: dict[str, type[Workload]] = {}
# other spec forms (a TVMScript file's path, a PrimFunc workload's key): (parser, help line); a parser
# returns None for a spec that is not its kind
_SPEC_PARSERS: list[tuple[Callable[[str], "Workload | None"], str]] = []


def register_spec_parser(fn: Callable[[str], "Workload | None"], help: str) -> None:
    """Let ``parse`` accept another kind of spec: ``fn(spec)`` gives a Workload, or None when ``spec`` is
    not its kind; ``help`` is the line listed among the accepted specs."""
    _SPEC_PARSERS.append((fn, help))


def register(cls: type[Workload]) -> type[Workload]:
    _REGISTRY[cls.op] = cls
    return cls


def operators() -> dict[str, type[Workload]]:
    return dict(_REGISTRY)


def _accepted() -> str:
    lines = []
    for op, cls in sorted(_REGISTRY.items()):
        ps = ",".join(p.name + ("" if p.default is None else f"[={p.default}]") for p in cls.params)
        lay = f"[,layout={'|'.join(cls.layouts)}]" if cls.layouts else ""
        dt = "|".join(cls.dtypes)
        out = ",out_dtype=float32" if cls.mixed_precision else ""
        out = f",out_dtype={'|'.join(cls.out_dtypes)}" if cls.out_dtypes else out
        lines.append(f"  {op}:{ps}[,dtype={dt}]{out and '[' + out + ']'}{lay}")
    lines += [f"  {h}" for _, h in _SPEC_PARSERS]
    return "\n".join(lines)


def make(op: str, dtype: str | None = None, layout: str | None = None, out_dtype: str | None = None,
         **values: int) -> Workload:
    if op not in _REGISTRY:
        raise TiletuneError(f"unknown operator {op!r}; accepted:\n{_accepted()}")
    cls = _REGISTRY[op]
    if dtype is None:  # float32, or a family's own first dtype (the quantized families' uint8)
        dtype = "float32" if "float32" in cls.dtypes else cls.dtypes[0]
    if dtype not in DTYPES + QUANTIZED_DTYPES:
        raise TiletuneError(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPES + QUANTIZED_DTYPES)}")
    if dtype not in cls.dtypes:
        raise TiletuneError(f"{op} does not take dtype={dtype}; accepted: {', '.join(cls.dtypes)}")
    if out_dtype is not None and out_dtype != dtype:
        allowed = (dtype, ACCUMULATION[dtype]) if cls.mixed_precision and dtype in ACCUMULATION else (dtype,)
        allowed = cls.out_dtypes or allowed
        if out_dtype not in allowed:
            why = "" if cls.out_dtypes else " (half-precision inputs may give a float32 output)"
            raise TiletuneError(f"{op}: out_dtype={out_dtype} with dtype={dtype}; accepted: {', '.join(allowed)}{why}")
    if layout is not None:
        if not cls.layouts:
            raise TiletuneError(f"{op} has no layout parameter (layout={layout!r} given)")
        if not isinstance(layout, str) or layout.upper() not in cls.layouts:
            raise TiletuneError(f"{op}: unknown layout {layout!r}; accepted: {', '.join(cls.layouts)}")
        layout = layout.upper()
    known = {p.name for p in cls.params}
    extra = sorted(set(values) - known)
    if extra:
        raise TiletuneError(
            f"{op}: unknown parameter(s) {', '.join(extra)}; accepted:\n{_accepted_one(cls)}"
        )
    full: dict[str, int] = {}
    for p in cls.params:
        if p.name in values:
            v = values[p.name]
        elif p.default is not None:
            v = p.default
        else:
            raise TiletuneError(f"{op}: missing parameter {p.name} ({p.help}); accepted:\n{_accepted_one(cls)}")
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TiletuneError(f"{op}: parameter {p.name} must be an integer, got {v!r}")
        if v < p.minimum:
            raise TiletuneError(f"{op}: parameter {p.name}={v} must be >= {p.minimum} ({p.help})")
        full[p.name] = int(v)
    wl = cls(dtype=dtype, layout=layout, out_dtype=out_dtype, **full)
    wl._validate()
    wl.check_index_range()
    return wl


def _accepted_one(cls: type[Workload]) -> str:
    return "\n".join(
        f"  {p.name}: {p.help}" + (" (required)" if p.default is None else f" (default {p.default})")
        for p in cls.params
    )


def parse(spec: str | Workload) -> Workload:
    """Parse ``op:NAME=VALUE,...`` into a workload; a clear TiletuneError on any mistake."""
    if isinstance(spec, Workload):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise TiletuneError(f"empty workload spec; accepted:\n{_accepted()}")
    for fn, _ in _SPEC_PARSERS:
        wl = fn(spec.strip())
        if wl is not None:
            return wl
    op, _, body = spec.strip().partition(":")
    op = op.strip()
    values: dict[str, int] = {}
    dtype = None
    layout = out_dtype = None
    if body.strip():
        for item in body.split(","):
            name, eq, val = item.partition("=")
            name, val = name.strip(), val.strip()
            if not eq or not name or not val:
                raise TiletuneError(f"bad item {item!r} in workload spec {spec!r}: expected NAME=VALUE")
            if name == "dtype":
                dtype = val
                continue
            if name == "out_dtype":
                out_dtype = val
                continue
            if name == "layout":
                if layout is not None:
                    raise TiletuneError(f"parameter layout given twice in {spec!r}")
                layout = val
                continue
            if name in values:
                raise TiletuneError(f"parameter {name} given twice in {spec!r}")
            try:
                values[name] = int(val)
            except ValueError:
                raise TiletuneError(f"parameter {name}={val!r} in {spec!r} is not an integer") from None
    return make(op, dtype=dtype, layout=layout, out_dtype=out_dtype, **values)
