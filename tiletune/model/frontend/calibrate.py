"""A float model quantized from calibration inputs (``--dtype int8 --calibrate FILE.npz``), for the int8 kernels.

``calibrated(spec, npz)`` gives the path of an ONNX file in QDQ form that the quantized-model path builds
(``tiletune.model.passes.quantized``: int8 matmuls with the dequantization fused), made by ONNX Runtime's static
quantizer (``onnxruntime.quantization.quantize_static``, the ``model`` extra):

- the float model: an ONNX file as given, a torch model exported first (``export_onnx``);
- weights per output channel (symmetric int8), activations per tensor (uint8) from the ranges the calibration
  inputs reach (MinMax);
- only ``MatMul`` and ``Gemm`` are quantized: softmax, layer norm, GELU and the other elementwise operators stay in
  float (their quantize/dequantize pairs would cost more than they save on a CPU), and so do convolutions, for
  which there is no int8 template yet.

The calibration file is a numpy ``.npz`` with one array per model input, named as the input (or ``arr_0``, ...
in input order), each holding several samples stacked along a new first axis: shape ``(S,) + input shape``.
Anything else (a missing or unreadable file, a wrong name, shape or dtype) is a one-line TiletuneError. The QDQ
file is kept in ``~/.cache/tiletune/calibrated/``, named by a hash of the model and the calibration file, so that
``model tune`` and ``model build`` of the same pair read the same quantized model.
"""
from __future__ import annotations

import hashlib
import logging
import zipfile
from pathlib import Path

import numpy as np

from ...errors import TiletuneError
from .source import ModelSource, export_onnx, load

#: the operators the calibrated model quantizes (see the module docstring)
QUANTIZED_OP_TYPES = ("MatMul", "Gemm")


def cache_dir() -> Path:
    return Path.home() / ".cache" / "tiletune" / "calibrated"


def read_calibration(path: str, source: ModelSource) -> list[dict[str, np.ndarray]]:
    """The calibration samples of ``path`` for ``source``'s inputs, one feed per sample; one-line TiletuneError
    when the file does not fit (module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise TiletuneError(f"--calibrate {path}: no such file (a .npz of calibration inputs, one array per model "
                            "input, samples along the first axis)")
    if not zipfile.is_zipfile(p):
        raise TiletuneError(f"--calibrate {path}: not a .npz file (numpy.savez writes one)")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise TiletuneError(f"--calibrate {path}: not a readable .npz file ({type(e).__name__}: "
                            f"{(str(e).splitlines() or [''])[0][:120]})") from None
    names = [i.name for i in source.inputs]
    if set(names) <= set(arrays):
        ordered = [arrays[n] for n in names]
    elif all(f"arr_{i}" in arrays for i in range(len(names))):
        ordered = [arrays[f"arr_{i}"] for i in range(len(names))]
    else:
        raise TiletuneError(f"--calibrate {path}: holds {', '.join(sorted(arrays)) or 'no arrays'}; the model's "
                            f"inputs are {', '.join(names)} (or give them as arr_0, arr_1, ... in that order)")
    samples = None
    for spec, a in zip(source.inputs, ordered):
        want = tuple(spec.resolve(source.example_binding()))
        if a.ndim != len(want) + 1 or tuple(a.shape[1:]) != want or a.shape[0] < 1:
            raise TiletuneError(f"--calibrate {path}: input {spec.name} has shape {a.shape}; expected (samples, "
                                f"{', '.join(map(str, want))})")
        if np.dtype(a.dtype).kind != np.dtype(spec.dtype).kind:
            raise TiletuneError(f"--calibrate {path}: input {spec.name} is {a.dtype}; the model takes {spec.dtype}")
        samples = a.shape[0] if samples is None else samples
        if a.shape[0] != samples:
            raise TiletuneError(f"--calibrate {path}: the inputs hold different numbers of samples")
    return [{spec.name: np.ascontiguousarray(a[i]).astype(spec.dtype) for spec, a in zip(source.inputs, ordered)}
            for i in range(samples)]


def calibrated(spec: str, calibration: str) -> str:
    """The path of the QDQ model of ``spec`` quantized from the inputs in ``calibration`` (module docstring)."""
    source = load(spec)
    feeds = read_calibration(calibration, source)
    try:
        from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                              quantize_static)
    except ImportError:
        raise TiletuneError("--calibrate needs onnxruntime (pip install 'tiletune[model]')") from None
    h = hashlib.sha256()
    h.update(Path(spec).read_bytes() if source.kind == "onnx" else spec.encode())
    h.update(Path(calibration).read_bytes())
    out = cache_dir() / f"{Path(source.spec).stem.replace(':', '_')}-int8-{h.hexdigest()[:16]}.onnx"
    if out.is_file():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if source.kind == "onnx":
        fp32 = source.spec
    else:
        fp32 = str(out.with_suffix(".fp32.onnx"))
        export_onnx(source, fp32)

    import onnx

    graph = onnx.load(fp32, load_external_data=False).graph
    init = {t.name for t in graph.initializer}
    onnx_names = [i.name for i in graph.input if i.name not in init]  # an export names its inputs its own way
    feeds = [dict(zip(onnx_names, f.values())) for f in feeds]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    tmp = out.with_suffix(".tmp.onnx")
    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # its advice to pre-process
    quantize_static(fp32, str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=list(QUANTIZED_OP_TYPES), calibrate_method=CalibrationMethod.MinMax)
    tmp.replace(out)
    return str(out)
