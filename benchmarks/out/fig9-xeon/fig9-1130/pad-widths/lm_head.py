"""Two linear layers without bias over 128 rows of 768 (random weights): GPT-2's LM head, 768 -> 50,257 (29 x 1,733
columns), and the same padded by design to 50,304 (a multiple of 128), for comparison."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head, self.padded = nn.Linear(768, 50257, bias=False), nn.Linear(768, 50304, bias=False)

    def forward(self, x, y):
        return self.head(x), self.padded(y)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 128, 768), torch.randn(1, 128, 768))
