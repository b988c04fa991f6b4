# tiletune fuzz reproducer: crash on the onnx path: died:SIGSEGV: the worker process died SIGSEGV (Segfault encountered) (did not recur when run alone)
# model: sum(1, 2, 3); x div param(); conv2d 4->6 k1 s2 p0 g1; roll(-2, 0); amin(3,)
# spec: {'seed': 1603, 'steps': [[1, 'reduce'], [3, 'binary'], [4, 'conv2d'], [5, 'index_const'], [6, 'reduce']]}
# run: tiletune model build seed-1603-onnx.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1603: sum(1, 2, 3); x div param(); conv2d 4->6 k1 s2 p0 g1; roll(-2, 0); amin(3,)"""

    def __init__(self):
        super().__init__()
        self.p2 = nn.Parameter(torch.randn(()) * 0.5)
        self.m4 = nn.Conv2d(4, 6, 1, stride=2, padding=0, groups=1)

    def forward(self, x0):
        v0 = torch.sum(x0, dim=(1, 2, 3), keepdim=False)
        v2 = v0 / (self.p2.abs() + 1.0)
        v4 = self.m4(x0)
        v5 = torch.roll(v4, shifts=-2, dims=0)
        v6 = torch.amin(v5, dim=3, keepdim=False)
        return (v2, v6,)


def model():
    torch.manual_seed(1603)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1603)
    example = (torch.randn(3, 4, 6, 3, generator=g),)
    dim = torch.export.Dim('batch', min=2, max=6)
    return module, example, ({0: dim},)
