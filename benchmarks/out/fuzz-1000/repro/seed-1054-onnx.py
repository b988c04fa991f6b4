# tiletune fuzz reproducer: mismatch on the onnx path: shape: output 0: shape (0, 2) != the original's (1, 2)
# model: repeat_interleave(2, dim=1); x[-1:6:3, :-12:3]; unused x1 * 2
# spec: {'seed': 1054, 'steps': [[1, 'expand'], [2, 'slice']]}
# run: tiletune model build seed-1054-onnx.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1054: repeat_interleave(2, dim=1); x[-1:6:3, :-12:3]; unused x1 * 2"""

    def __init__(self):
        super().__init__()

    def forward(self, x0, x1):
        v0 = x0.repeat_interleave(2, dim=-1)
        v1 = v0[-1:6:3, :-12:3]
        v2 = x1 * 2
        return (v1, v2,)


def model():
    torch.manual_seed(1054)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1054)
    example = (torch.randn(1, 9, generator=g), torch.tensor([1]).reshape(1),)
    return module, example
