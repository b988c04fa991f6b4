"""A model made ready for a target: the one pipeline every caller takes, from the source to the Relax module that
fusion starts from.

``prepare(source, dtype, layout)`` runs, in this order:

1. the import (``tiletune.model.frontend.importer.to_relax``: torch.export or ONNX to Relax, weights as constants; it
   only imports);
2. integer matmuls of quantized models (ONNX Runtime's ``MatMulInteger``) as uint8 x int8 products, for the int8
   kernels (``tiletune.model.passes.quantized``); a float model is unchanged;
3. indices as the framework defines them (``tiletune.model.passes.indices``: a negative index counts from the end, no
   gather reads outside its tensor);
4. the parts of a split as strided slices (``tiletune.model.passes.split_slices``), so that each fuses into the kernel
   that reads it;
5. elementwise operators moved before the reshapes around them (``tiletune.model.passes.reshape_hoist``; ``hoist=False``
   leaves them, for ``benchmarks/defaults/fusion_gain.py``), so that an activation after ``nn.Linear`` fuses into
   the matmul's kernel;
6. the compute dtype (``tiletune.model.passes.precision.cast``);
7. the convolutions' layout (``tiletune.model.passes.layout.convert``; ``layout`` None: as imported).

The rewrites that depend on the target and the shapes (binding symbolic dimensions, Winograd, padded widths,
fusion) follow in ``tiletune.model.kernels.tasks``.
"""
from __future__ import annotations

from ..frontend.importer import to_relax
from .indices import normalize_indices
from .layout import Converted, convert
from .precision import cast
from .quantized import rewrite_quantized
from .reshape_hoist import hoist_over_reshapes
from ..frontend.source import ModelSource
from .split_slices import split_as_slices


def prepare(source: ModelSource, dtype: str = "float32", layout: str | None = None, *,
            hoist: bool = True) -> Converted:
    """``source`` imported and rewritten for fusion (the module docstring): the module and the layout's notes."""
    mod = split_as_slices(normalize_indices(rewrite_quantized(to_relax(source)).mod, source.spec))
    if hoist:
        mod = hoist_over_reshapes(mod)
    mod = cast(mod, dtype)
    return convert(mod, layout) if layout is not None else Converted(mod)
