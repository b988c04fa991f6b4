"""What a model spec names: a built-in model (``tiletune.model.zoo``), a layer family of the conformance suite
(``family:NAME``, ``tiletune.model.families``), a Python factory
``path/to/file.py:function`` returning ``(torch.nn.Module, example_inputs)``, or an ``.onnx`` file.

``load(spec)`` gives a ``ModelSource``: the torch module and its example inputs, or the ONNX file and its
input shapes; ``random_inputs(seed)`` draws new inputs of the same shapes and dtypes (floats from a normal
distribution; integer inputs, such as token ids, uniformly below the largest example value + 1) and
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

from ..errors import TiletuneError
from .families import FAMILIES
from .zoo import MODELS


@dataclass
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    high: int = 0  # integer inputs: values drawn below this


@dataclass
class ModelSource:
    spec: str
    name: str  # a file-name-safe label
    kind: str  # "torch" or "onnx"
    inputs: list[InputSpec]
    module: Any = None  # torch: the nn.Module (eval mode)
    example: tuple = ()  # torch: the example inputs (torch tensors)
    onnx_path: str | None = None
    _ort: Any = field(default=None, repr=False)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for s in self.inputs:
            if np.issubdtype(np.dtype(s.dtype), np.integer):
                out.append(rng.integers(0, max(1, s.high), size=s.shape).astype(s.dtype))
            else:
                out.append(rng.standard_normal(s.shape).astype(s.dtype))
        return out

    def reference(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The original framework's outputs on ``inputs`` (a flat list of numpy arrays)."""
        if self.kind == "torch":
            import torch

            with torch.no_grad():
                out = self.module(*[torch.from_numpy(np.require(x, requirements='C')) for x in inputs])
            return [t.detach().numpy() for t in _flatten(out)]
        if self._ort is None:
            self._ort = onnx_session(self.onnx_path)
        names = [i.name for i in self._ort.get_inputs()]
        return list(self._ort.run(None, dict(zip(names, inputs))))


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


def _flatten(out) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flatten(o)]
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
        module, example = MODELS[spec]()
        return _from_torch(spec, spec, module, example)
    if spec.startswith("family:"):
        name = spec.split(":", 1)[1]
        if name not in FAMILIES:
            raise TiletuneError(f"unknown family {name!r}; accepted: {', '.join(FAMILIES)}")
        import torch

        with torch.random.fork_rng():  # the same weights and example every time (the ONNX path exports it)
            torch.manual_seed(0)
            module, example = FAMILIES[name]()
        return _from_torch(spec, _label(f"family-{name}"), module, example)
    if spec.endswith(".onnx"):
        return _from_onnx(spec)
    path, colon, fn = spec.rpartition(":")
    if colon and path.endswith(".py"):
        return _from_factory(spec, path, fn)
    raise TiletuneError(f"unknown model {spec!r}: give a built-in model ({', '.join(MODELS)}), a layer family "
                        "(family:NAME, tiletune.model.families), path/to/file.py:function returning (torch.nn.Module, example_inputs), or a .onnx file")


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
    if not (isinstance(got, tuple) and len(got) == 2):
        raise TiletuneError(f"{spec} must return (torch.nn.Module, example_inputs), got {type(got).__name__}")
    module, example = got
    if not isinstance(example, (tuple, list)):
        example = (example,)
    return _from_torch(spec, short_name(spec), module, tuple(example))


def _from_torch(spec: str, name: str, module, example: tuple) -> ModelSource:
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TiletuneError(f"{spec}: expected a torch.nn.Module, got {type(module).__name__}")
    inputs = []
    for i, x in enumerate(example):
        if not isinstance(x, torch.Tensor):
            raise TiletuneError(f"{spec}: example input {i} is a {type(x).__name__}, not a torch.Tensor")
        dtype = str(x.dtype).replace("torch.", "")
        high = int(x.max()) + 1 if not x.is_floating_point() and x.numel() else 0
        inputs.append(InputSpec(f"input{i}", tuple(x.shape), dtype, high))
    return ModelSource(spec, name, "torch", inputs, module=module.eval(), example=tuple(example))


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
    for v in model.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise TiletuneError(f"{spec}: input {v.name} has a symbolic dimension ({d.dim_param or '?'}); "
                                    "export the model with static shapes")
            dims.append(int(d.dim_value))
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).name
        inputs.append(InputSpec(v.name, tuple(dims), dtype, 2 if "int" in dtype else 0))
    return ModelSource(spec, _label(p.stem), "onnx", inputs, onnx_path=str(p))
