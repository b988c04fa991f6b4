# tiletune fuzz reproducer: crash on the onnx path: died:SIGSEGV: the worker process died SIGSEGV (Segfault encountered)
# model: stack(dim=-1); x.unbind(-5)[-2]; conv2d 7->6 k3 s1 p1 g1; unused x1 * 2
# spec: {'seed': 1227, 'steps': [[1, 'concat'], [4, 'index_const'], [5, 'conv2d']]}
# run: tiletune model build seed-1227-onnx.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1227: stack(dim=-1); x.unbind(-5)[-2]; conv2d 7->6 k3 s1 p1 g1; unused x1 * 2"""

    def __init__(self):
        super().__init__()
        self.m3 = nn.Conv2d(7, 6, 3, stride=1, padding=1, groups=1)

    def forward(self, x0, x1):
        v0 = torch.stack([x0, torch.tanh(x0)], dim=-1)
        v1 = v0.unbind(-5)[-2]
        v3 = self.m3(v1)
        v4 = x1 * 2.0
        return (v3, v4,)


def model():
    torch.manual_seed(1227)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1227)
    example = (torch.randn(3, 2, 7, 4, generator=g), torch.randn(3, 2, 7, 4, generator=g),)
    return module, example
