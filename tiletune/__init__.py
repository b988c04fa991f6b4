"""tiletune: auto-tuning of tensor-operator tilings on Apache TVM.

``tiletune.compile(model, **options)`` is ``torch.compile`` with tiletune's backend (``tiletune.torch_backend``,
docs/torch.md); it is imported at its first use, so that ``import tiletune`` does not import torch or TVM."""
import importlib

from .errors import TiletuneError
from .version import __version__

__all__ = ["TiletuneError", "__version__"]


def __getattr__(name: str):
    if name == "compile":
        return importlib.import_module(".torch_backend", __name__).compile
    raise AttributeError(f"module 'tiletune' has no attribute {name!r}")
