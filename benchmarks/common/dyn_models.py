"""Models with changing shapes for the dynamic-shape benchmarks (model specs ``benchmarks/common/dyn_models.py:NAME``).

- ``bert_small``: Bert-small's encoder (4 layers, hidden 512, 8 heads, intermediate 2048, token and position
  embeddings, post-LayerNorm, GELU) written in ``torch.nn`` with random weights; token ids [batch, seq] with
  batch in 1..4 and seq in 16..384 symbolic (torch.export ``Dim``s). transformers' BertModel does not export with
  a symbolic sequence length to a Relax module of known shapes (its position and token-type buffers are sliced),
  so the same computation is written out. Returns the last hidden state.
- ``bert_mini``: the same with 2 layers, hidden 256, 4 heads, intermediate 1024 and seq in 16..256, batch 1:
  small enough to tune at several shapes in minutes (``benchmarks/defaults/shape_rule.py``, ``benchmarks/defaults/shape_transfer.py``).
- ``mobilenetv2(width)``: the built-in MobileNetV2 (``tiletune.model.frontend.zoo``, its channels rounded as torchvision does),
  1x3x224x224; ``mobilenetv2_075`` etc. name the widths of Fig. 12.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from tiletune.model.frontend import zoo


class Layer(nn.Module):
    def __init__(self, h: int, heads: int, inter: int):
        super().__init__()
        self.heads = heads
        self.qkv, self.o = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(h, inter), nn.Linear(inter, h)

    def forward(self, x):
        b, n, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, d).transpose(1, 2) for t in (q, k, v))
        s = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
        a = (s @ v).transpose(1, 2).reshape(b, n, h)
        x = self.ln1(x + self.o(a))
        return self.ln2(x + self.fc2(nn.functional.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, vocab: int = 30522, h: int = 512, layers: int = 4, heads: int = 8, inter: int = 2048,
                 max_pos: int = 512):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, h), nn.Embedding(max_pos, h)
        self.ln = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList(Layer(h, heads, inter) for _ in range(layers))

    def forward(self, ids):
        x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device)))
        for layer in self.layers:
            x = layer(x)
        return x


def bert_small():
    torch.manual_seed(0)
    model = Bert().eval()
    ids = torch.randint(0, 30522, (2, 64))  # batch 2 in the example: torch.export specialises a size of 1
    return model, (ids,), {"ids": {0: torch.export.Dim("batch", min=1, max=4),
                                   1: torch.export.Dim("seq", min=16, max=384)}}


def bert_mini():
    torch.manual_seed(0)
    model = Bert(h=256, layers=2, heads=4, inter=1024).eval()
    return model, (torch.randint(0, 30522, (1, 64)),), {"ids": {1: torch.export.Dim("seq", min=16, max=256)}}


def mobilenetv2(width: float = 1.0):
    """The built-in MobileNetV2 (``tiletune.model.frontend.zoo``) at channel multiplier ``width``."""
    return zoo.mobilenetv2(width)


def mobilenetv2_100():
    return mobilenetv2(1.0)


def mobilenetv2_075():
    return mobilenetv2(0.75)


def mobilenetv2_050():
    return mobilenetv2(0.5)


def mobilenetv2_140():
    return mobilenetv2(1.4)
