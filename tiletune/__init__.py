"""tiletune: auto-tuning of tensor-operator tilings on Apache TVM."""

from .errors import TiletuneError

__version__ = "0.1.0"
__all__ = ["TiletuneError", "__version__"]
