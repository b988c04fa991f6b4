"""Two linear layers 768 -> 768 over 197 rows (ViT-B/16's tokens, a prime) and over 200 rows (random weights)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(768, 768), nn.Linear(768, 768)

    def forward(self, x, y):
        return self.a(x), self.b(y)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 197, 768), torch.randn(1, 200, 768))
