# tiletune fuzz reproducer: mismatch on the onnx path: shape: output 1: shape (2, 4) != the original's (2, 2)
# model: x.split(11, -1)[1]; x[..., -1:8]; repeat_interleave(2, dim=1)
# spec: {'seed': 1480, 'steps': [[4, 'index_const'], [6, 'slice'], [7, 'expand']]}
# run: tiletune model build seed-1480-onnx.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1480: x.split(11, -1)[1]; x[..., -1:8]; repeat_interleave(2, dim=1)"""

    def __init__(self):
        super().__init__()

    def forward(self, x0):
        v0 = x0.split(11, -1)[1]
        v1 = v0[..., -1:8]
        v2 = v1.repeat_interleave(2, dim=-1)
        return v2


def model():
    torch.manual_seed(1480)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1480)
    example = (torch.randn(2, 14, generator=g),)
    dim = torch.export.Dim('batch', min=2, max=6)
    return module, example, ({0: dim},)
