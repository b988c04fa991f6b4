"""Two linear layers whose weights no column block of the weight-block rule fits or whose shape is odd (random
weights): 128 rows x 6144 -> 1536 (a reduction of 6144 fp32 steps: one 48-column tile over it is 1.1 MiB, more
than half of a 2 MiB L2), and 97 rows x 3001 -> 770 (a prime reduction, odd rows and columns)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.long, self.odd = nn.Linear(6144, 1536), nn.Linear(3001, 770)

    def forward(self, x, y):
        return self.long(x), self.odd(y)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 128, 6144), torch.randn(1, 97, 3001))
