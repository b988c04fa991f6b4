"""PyTorch for the strategies that train networks (N-A2C, the RNN controller): an optional dependency."""
from __future__ import annotations

from typing import Any

from ..errors import TiletuneError


def require_torch() -> tuple[Any, Any]:
    """(torch, torch.nn), or a TiletuneError that says how to install it."""
    try:
        import torch
        from torch import nn
    except ImportError:
        raise TiletuneError("strategies na2c and rnn need PyTorch (CPU build is enough): "
                            "pip install 'tiletune[torch]'") from None
    return torch, nn
