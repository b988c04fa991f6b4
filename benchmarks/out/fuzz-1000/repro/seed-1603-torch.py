# tiletune fuzz reproducer: crash on the torch path: died:SIGSEGV: the worker process died SIGSEGV (Segfault encountered)
# model: conv2d 4->6 k1 s2 p0 g1; roll(-2, 0)
# spec: {'seed': 1603, 'steps': [[4, 'conv2d'], [5, 'index_const']]}
# run: tiletune model build seed-1603-torch.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1603: conv2d 4->6 k1 s2 p0 g1; roll(-2, 0)"""

    def __init__(self):
        super().__init__()
        self.m1 = nn.Conv2d(4, 6, 1, stride=2, padding=0, groups=1)

    def forward(self, x0):
        v1 = self.m1(x0)
        v2 = torch.roll(v1, shifts=-2, dims=0)
        return v2


def model():
    torch.manual_seed(1603)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1603)
    example = (torch.randn(3, 4, 6, 3, generator=g),)
    dim = torch.export.Dim('batch', min=2, max=6)
    return module, example, ({0: dim},)
