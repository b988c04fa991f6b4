# tiletune fuzz reproducer: crash on the torch path: died:SIGSEGV: the worker process died SIGSEGV (Segfault encountered) (did not recur when run alone)
# model: stack(dim=0); stack(dim=-1); linear 2->8; einsum ...ij,...kj->...ik; x.unbind(-5)[-2]; conv2d 7->6 k3 s1 p1 g1
# spec: {'seed': 1227, 'steps': [[0, 'concat'], [1, 'concat'], [2, 'linear'], [3, 'einsum'], [4, 'index_const'], [5, 'conv2d']]}
# run: tiletune model build seed-1227-torch.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 1227: stack(dim=0); stack(dim=-1); linear 2->8; einsum ...ij,...kj->...ik; x.unbind(-5)[-2]; conv2d 7->6 k3 s1 p1 g1"""

    def __init__(self):
        super().__init__()
        self.m3 = nn.Linear(2, 8, bias=True)
        self.m7 = nn.Conv2d(7, 6, 3, stride=1, padding=1, groups=1)

    def forward(self, x0, x1):
        v0 = torch.stack([x1, x0], dim=0)
        v1 = torch.stack([x0, torch.tanh(x0)], dim=-1)
        v3 = self.m3(v1)
        v4 = torch.einsum('...ij,...kj->...ik', v3, v3)
        v5 = v4.unbind(-5)[-2]
        v7 = self.m7(v5)
        return (v0, v7,)


def model():
    torch.manual_seed(1227)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(1227)
    example = (torch.randn(3, 2, 7, 4, generator=g), torch.randn(3, 2, 7, 4, generator=g),)
    return module, example
