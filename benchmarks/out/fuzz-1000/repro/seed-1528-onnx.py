# tiletune fuzz reproducer: mismatch on the onnx path: shape: output 1: shape (1, 4) != the original's (4, 1)
# model: amin(0,); repeat_interleave(2, dim=0); max(1,) keepdim
# spec: {'seed': 1528, 'steps': [[0, 'reduce'], [1, 'expand'], [2, 'reduce']]}
# run: tiletune model build seed-1528-onnx.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1528: amin(0,); repeat_interleave(2, dim=0); max(1,) keepdim"""

    def __init__(self):
        super().__init__()

    def forward(self, x0):
        v0 = torch.amin(x0, dim=0, keepdim=False)
        v1 = v0.repeat_interleave(2, dim=-1)
        v2 = x0.max(dim=-1, keepdim=True).values
        return (v1, v2,)


def model():
    torch.manual_seed(1528)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1528)
    example = (torch.randn(4, 4, generator=g),)
    dim = torch.export.Dim('batch', min=2, max=6)
    return module, example, ({0: dim},)
