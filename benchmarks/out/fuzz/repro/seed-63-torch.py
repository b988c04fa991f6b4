# tiletune fuzz reproducer: crash on the torch path: died:SIGABRT: the worker process died SIGABRT (free(): invalid next size (fast))
# model: scatter_add(axis 0 into 2); unused x0 * 2
# spec: {'seed': 63, 'steps': [[1, 'scatter_const']]}
# run: tiletune model build seed-63-torch.py:model
import torch
from torch import nn


class Fuzz(nn.Module):
    """fuzz seed 63: scatter_add(axis 0 into 2); unused x0 * 2"""

    def __init__(self):
        super().__init__()
        self.register_buffer('c1', torch.tensor([0, 1, 1, 1, 1, 1, 0, 0, 0, 1], dtype=torch.long).reshape(1, 2, 5))

    def forward(self, x0, x1):
        v1 = x1.new_zeros(2, 2, 5).scatter_add(0, self.c1, x1)
        v2 = x0 * 2.0
        return (v1, v2,)


def model():
    torch.manual_seed(63)
    module = Fuzz().eval()
    g = torch.Generator().manual_seed(63)
    example = (torch.randn(3, 2, 5, generator=g), torch.randn(1, 2, 5, generator=g),)
    dim = torch.export.Dim('batch', min=2, max=6)
    return module, example, ({0: dim}, None,)
