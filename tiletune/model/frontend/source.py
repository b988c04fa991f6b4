"""What a model spec names: a built-in model (``tiletune.model.frontend.zoo``), a layer family of the conformance suite
(``family:NAME``, ``tiletune.model.frontend.families``), a Python factory
``path/to/file.py:function`` returning ``(torch.nn.Module, example_inputs)`` or ``(torch.nn.Module,
example_inputs, dynamic_shapes)``, or an ``.onnx`` file.

Dynamic shapes: ``dynamic_shapes`` is torch.export's, each symbolic axis a named ``torch.export.Dim(name,
min=, max=)`` (``{"x": {1: Dim("seq", min=8, max=256)}}``, keyed by ``forward``'s argument names, or a tuple
in argument order); an ONNX input dimension with a ``dim_param`` is a symbolic dimension of that name, bounded
below by 1 and not above. Such a source's ``InputSpec.shape`` holds the name at that axis and ``dims`` the
bounds (``Dim``); ``random_inputs(seed, binding)`` takes a value per name (default: the example's).

``load(spec)`` gives a ``ModelSource``: the torch module and its example inputs, or the ONNX file and its
input shapes; ``random_inputs(seed)`` draws new inputs of the same shapes and dtypes (floats from a normal
distribution; integer inputs, such as token ids, uniformly below the largest example value + 1, and from the
smallest when it is negative: an index input may hold negative indices) and
``reference(inputs)`` runs the original framework (PyTorch, or ONNX Runtime for an ``.onnx`` file) on them.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import TiletuneError
from .families import FAMILIES
from .zoo import MODELS


@dataclass
class InputSpec:
    name: str
    shape: tuple[int | str, ...]  # a str: a symbolic dimension (its name in ``ModelSource.dims``)
    dtype: str
    high: int = 0  # integer inputs: values drawn below this
    low: int = 0  # and from this up (the example's smallest value: an index input may hold negative indices)

    def resolve(self, binding: dict[str, int]) -> tuple[int, ...]:
        """The shape with each symbolic dimension replaced by its value in ``binding``."""
        return tuple(binding[d] if isinstance(d, str) else d for d in self.shape)


@dataclass
class Dim:
    """A symbolic dimension: its bounds (``hi`` None: unbounded) and the example inputs' value (None: none)."""
    name: str
    lo: int
    hi: int | None
    example: int | None = None

    def contains(self, v: int) -> bool:
        return v >= self.lo and (self.hi is None or v <= self.hi)

    @property
    def bounds(self) -> str:
        return f"{self.lo}..{self.hi if self.hi is not None else 'inf'}"


@dataclass
class ModelSource:
    spec: str
    name: str  # a file-name-safe label
    kind: str  # "torch" or "onnx"
    inputs: list[InputSpec]
    module: Any = None  # torch: the nn.Module (eval mode)
    example: tuple = ()  # torch: the example inputs (torch tensors)
    onnx_path: str | None = None
    dims: dict[str, Dim] = field(default_factory=dict)  # symbolic dimensions by name (empty: static)
    dynamic_shapes: Any = None  # torch: the factory's dynamic_shapes, for torch.export
    _ort: Any = field(default=None, repr=False)

    @property
    def dynamic(self) -> bool:
        return bool(self.dims)

    def example_binding(self) -> dict[str, int]:
        """The example inputs' value of every symbolic dimension that has one."""
        return {n: d.example for n, d in self.dims.items() if d.example is not None}

    def random_inputs(self, seed: int = 0, binding: dict[str, int] | None = None) -> list[np.ndarray]:
        """Random inputs (see the module docstring); symbolic dimensions take their value in ``binding``, else
        the example's."""
        values = {**self.example_binding(), **(binding or {})}
        missing = sorted({d for s in self.inputs for d in s.shape if isinstance(d, str)} - set(values))
        if missing:
            raise TiletuneError(f"{self.spec}: no value for the symbolic dimension(s) {', '.join(missing)} "
                                "(give them with --shapes NAME=VALUE)")
        rng = np.random.default_rng(seed)
        out = []
        for s in self.inputs:
            shape = s.resolve(values)
            if np.issubdtype(np.dtype(s.dtype), np.integer):
                out.append(rng.integers(s.low, max(s.low + 1, s.high), size=shape).astype(s.dtype))
            else:
                out.append(rng.standard_normal(shape).astype(s.dtype))
        return out

    def distinct_inputs(self, binding: dict[str, int] | None = None) -> list[np.ndarray]:
        """Inputs of the shapes of ``random_inputs`` whose integer inputs hold values that differ from one position
        to the next (every value of the input's range in turn, from the top, in a stride coprime to the range), so
        that a result taken from the wrong position differs from the right one; float inputs as ``random_inputs``
        with a seed of their own."""
        out = self.random_inputs(7919, binding)
        for k, (s, x) in enumerate(zip(self.inputs, out)):
            if np.issubdtype(np.dtype(s.dtype), np.integer):
                span = max(1, s.high - s.low)
                stride = next(p for p in (7919, 104729, 1299709) if span % p)
                out[k] = (s.high - 1 - (np.arange(x.size) * stride) % span).reshape(x.shape).astype(s.dtype)
        return out

    def reference(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The original framework's outputs on ``inputs`` (a flat list of numpy arrays)."""
        if self.kind == "torch":
            import torch

            with torch.no_grad():
                out = self.module(*[torch.from_numpy(np.require(x, requirements='C')) for x in inputs])
            return [t.detach().numpy() for t in flat_tensors(out)]
        if self._ort is None:
            self._ort = onnx_session(self.onnx_path)
        names = [i.name for i in self._ort.get_inputs()]
        return list(self._ort.run(None, dict(zip(names, inputs))))


def export_onnx(source: ModelSource, path: str) -> None:
    """``torch.onnx.export`` of a torch ``ModelSource`` to ``path`` (opset 17, the TorchScript exporter), with
    ``nn.MultiheadAttention``'s inference fast path off (as one exports it: its fused ATen kernel has no ONNX
    form). A model with symbolic dimensions keeps them (``dynamic_axes`` named as in ``dims``), so that one
    session runs every shape. Used by the ONNX Runtime baseline and the conformance suite's ONNX path.

    ``narrow`` is exported by ``_onnx_narrow``: the exporter's own writes ``narrow(d, -k, k)`` (the last k) as a
    ``Slice`` from -k to 0, which in ONNX selects nothing."""
    import warnings

    import torch

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    torch.onnx.register_custom_op_symbolic("aten::narrow", _onnx_narrow, 17)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            names = [i.name for i in source.inputs]
            axes = {i.name: {ax: d for ax, d in enumerate(i.shape) if isinstance(d, str)} for i in source.inputs}
            axes = {n: a for n, a in axes.items() if a}
            torch.onnx.export(source.module, source.example, path, opset_version=17, dynamo=False,
                              **({"input_names": names, "dynamic_axes": axes} if axes else {}))
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::narrow", 17)
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _onnx_narrow(g, x, dim, start, length):
    """``narrow(x, dim, start, length)`` as an ONNX ``Slice`` from ``start`` to ``start + length``, except that a
    negative ``start`` whose slice reaches the end of the axis ends at the largest int64 (``-k + k`` is 0, the
    start of the axis in ONNX). Constant arguments only, as TorchScript's export of a static-shaped narrow has."""
    import sys

    from torch.onnx import symbolic_helper as sh

    d, s, n = (sh._get_const(v, "i", name) for v, name in ((dim, "dim"), (start, "start"), (length, "length")))
    end = sys.maxsize if s < 0 and s + n == 0 else s + n
    return sh._slice_helper(g, x, axes=[d], starts=[s], ends=[end])


def onnx_session(path: str, threads: int | None = None):
    """An ONNX Runtime CPU session of ``path`` (a clear error when onnxruntime is not installed)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise TiletuneError("onnxruntime is not installed (pip install 'tiletune[model]')") from None
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def flat_tensors(out) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flat_tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flat_tensors(o)]
    return [out]


def _label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "model"


def short_name(spec: str) -> str:
    """A file-name-safe name of a model spec: the built-in name, FILE-FUNCTION, or the ONNX file's stem."""
    if spec in MODELS:
        return spec
    if spec.endswith(".onnx"):
        return _label(Path(spec).stem)
    path, colon, fn = spec.rpartition(":")
    if colon and path.endswith(".py"):
        return f"{_label(Path(path).stem)}-{_label(fn)}"
    return _label(spec)


def load(spec: str) -> ModelSource:
    """The model named by ``spec`` (see the module docstring); a TiletuneError says what is accepted."""
    if spec in MODELS:
        module, example, *dynamic = MODELS[spec]()
        return from_torch(spec, spec, module, example, *dynamic)
    if spec.startswith("family:"):
        name = spec.split(":", 1)[1]
        if name not in FAMILIES:
            raise TiletuneError(f"unknown family {name!r}; accepted: {', '.join(FAMILIES)}")
        import torch

        with torch.random.fork_rng():  # the same weights and example every time (the ONNX path exports it)
            torch.manual_seed(0)
            module, example = FAMILIES[name]()
        return from_torch(spec, _label(f"family-{name}"), module, example)
    if spec.endswith(".onnx"):
        return _from_onnx(spec)
    path, colon, fn = spec.rpartition(":")
    if colon and path.endswith(".py"):
        return _from_factory(spec, path, fn)
    raise TiletuneError(f"unknown model {spec!r}: give a built-in model ({', '.join(MODELS)}), a layer family "
                        "(family:NAME, tiletune.model.frontend.families), path/to/file.py:function returning (torch.nn.Module, example_inputs), or a .onnx file")


def _from_factory(spec: str, path: str, fn: str) -> ModelSource:
    p = Path(path)
    if not p.is_file():
        raise TiletuneError(f"model file {path!r} does not exist")
    name = f"tiletune_model_{_label(p.stem)}"
    try:
        mspec = importlib.util.spec_from_file_location(name, p)
        mod = importlib.util.module_from_spec(mspec)
        sys.modules[name] = mod
        mspec.loader.exec_module(mod)
    except Exception as e:  # the user's code: say what failed in one line
        raise TiletuneError(f"importing {path} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                            ) from None
    factory = getattr(mod, fn, None)
    if not callable(factory):
        raise TiletuneError(f"{path} has no function {fn!r}")
    try:
        got = factory()
    except Exception as e:
        raise TiletuneError(f"{spec} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if not (isinstance(got, tuple) and len(got) in (2, 3)):
        raise TiletuneError(f"{spec} must return (torch.nn.Module, example_inputs) or (torch.nn.Module, "
                            f"example_inputs, dynamic_shapes), got {type(got).__name__}")
    module, example, dynamic = (*got, None) if len(got) == 2 else got
    if not isinstance(example, (tuple, list)):
        example = (example,)
    return from_torch(spec, short_name(spec), module, tuple(example), dynamic)


def from_torch(spec: str, name: str, module, example: tuple, dynamic_shapes=None) -> ModelSource:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TiletuneError(f"{spec}: expected a torch.nn.Module, got {type(module).__name__}")
    inputs = []
    for i, x in enumerate(example):
        if not isinstance(x, torch.Tensor):
            raise TiletuneError(f"{spec}: example input {i} is a {type(x).__name__}, not a torch.Tensor")
        dtype = str(x.dtype).replace("torch.", "")
        integer = not x.is_floating_point() and x.numel() and x.dtype != torch.bool
        high = int(x.max()) + 1 if integer else 0
        low = min(0, int(x.min())) if integer else 0
        inputs.append(InputSpec(f"input{i}", tuple(x.shape), dtype, high, low))
    dims = _torch_dims(spec, module, inputs, dynamic_shapes) if dynamic_shapes is not None else {}
    return ModelSource(spec, name, "torch", inputs, module=module.eval(), example=tuple(example), dims=dims,
                       dynamic_shapes=dynamic_shapes if dims else None)


def _torch_dims(spec: str, module, inputs: list[InputSpec], dynamic_shapes) -> dict[str, Dim]:
    """The symbolic dimensions of torch.export's ``dynamic_shapes`` (a dict by ``forward``'s argument names or
    a tuple in their order, each entry ``{axis: Dim}``); every input's symbolic axis gets the Dim's name in
    ``inputs``. A TiletuneError names what is not accepted."""
    import inspect

    import torch

    if isinstance(dynamic_shapes, dict):
        try:
            params = list(inspect.signature(module.forward).parameters)
        except (TypeError, ValueError):
            params = []
        unknown = [k for k in dynamic_shapes if k not in params[:len(inputs)]]
        if unknown:
            raise TiletuneError(f"{spec}: dynamic_shapes names {unknown[0]!r}, not an input of forward() "
                                f"(inputs: {', '.join(params[:len(inputs)]) or 'none'})")
        per_input = [dynamic_shapes.get(p) for p in params[:len(inputs)]]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(inputs):
            raise TiletuneError(f"{spec}: dynamic_shapes has {len(dynamic_shapes)} entries for {len(inputs)} inputs")
        per_input = list(dynamic_shapes)
    else:
        raise TiletuneError(f"{spec}: dynamic_shapes must be a dict (by input name) or a tuple, got "
                            f"{type(dynamic_shapes).__name__}")
    dims: dict[str, Dim] = {}
    for inp, axes in zip(inputs, per_input):
        if axes is None:
            continue
        if isinstance(axes, (tuple, list)):
            axes = dict(enumerate(axes))
        if not isinstance(axes, dict):
            raise TiletuneError(f"{spec}: the dynamic shape of {inp.name} must map axes to torch.export.Dim")
        shape = list(inp.shape)
        for axis, d in axes.items():
            if d is None:
                continue
            if not isinstance(d, torch.export.Dim):
                raise TiletuneError(f"{spec}: axis {axis} of {inp.name} is {d!r}: name the dimension with "
                                    "torch.export.Dim(name, min=..., max=...)")
            if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise TiletuneError(f"{spec}: axis {axis!r} of {inp.name} is not an axis of its {len(shape)}-d example")
            axis %= len(shape)
            dname = d.__name__
            hi = int(d.max) if isinstance(d.max, int) else None  # torch's unbounded max is not an int
            new = Dim(dname, max(int(d.min), 1), hi, int(shape[axis]))
            old = dims.setdefault(dname, new)
            if (old.lo, old.hi, old.example) != (new.lo, new.hi, new.example):
                raise TiletuneError(f"{spec}: dimension {dname} has different bounds or example sizes at two inputs")
            if not new.contains(new.example):
                raise TiletuneError(f"{spec}: the example's {dname}={new.example} is outside its bounds {new.bounds}")
            shape[axis] = dname
        inp.shape = tuple(shape)
    return dims


def _from_onnx(spec: str) -> ModelSource:
    p = Path(spec)
    if not p.is_file():
        raise TiletuneError(f"ONNX file {spec!r} does not exist")
    try:
        import onnx
    except ImportError:
        raise TiletuneError("ONNX models need onnx (not installed): pip install 'tiletune[model]'") from None
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as e:
        raise TiletuneError(f"{spec} is not a readable ONNX model ({type(e).__name__})") from None
    inits = {i.name for i in model.graph.initializer}
    inputs = []
    symbolic: dict[str, Dim] = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        dims: list[int | str] = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.dim_param and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", d.dim_param):
                dims.append(d.dim_param)
                symbolic.setdefault(d.dim_param, Dim(d.dim_param, 1, None))
            else:
                raise TiletuneError(f"{spec}: input {v.name} has a dimension without a size or a name "
                                    f"({d.dim_param or '?'}); export it with static shapes or a named dimension")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).name
        inputs.append(InputSpec(v.name, tuple(dims), dtype, 2 if "int" in dtype else 0))
    return ModelSource(spec, _label(p.stem), "onnx", inputs, onnx_path=str(p), dims=symbolic)
