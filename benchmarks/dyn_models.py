"""Models with changing shapes for the dynamic-shape benchmarks (model specs ``benchmarks/dyn_models.py:NAME``).

- ``bert_small``: Bert-small's encoder (4 layers, hidden 512, 8 heads, intermediate 2048, token and position
  embeddings, post-LayerNorm, GELU) written in ``torch.nn`` with random weights; token ids [batch, seq] with
  batch in 1..4 and seq in 16..384 symbolic (torch.export ``Dim``s). transformers' BertModel does not export with
  a symbolic sequence length to a Relax module of known shapes (its position and token-type buffers are sliced),
  so the same computation is written out. Returns the last hidden state.
- ``bert_mini``: the same with 2 layers, hidden 256, 4 heads, intermediate 1024 and seq in 16..256, batch 1:
  small enough to tune at several shapes in minutes (``benchmarks/shape_rule.py``, ``benchmarks/shape_transfer.py``).
- ``mobilenetv2(width)``: MobileNetV2 at a width multiplier (torchvision's channel rounding to multiples of 8),
  1x3x224x224; ``mobilenetv2_075`` etc. name the widths of Fig. 12.
"""
from __future__ import annotations

import math

import torch
from torch import nn


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


def _divisible(v: float, d: int = 8) -> int:
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


def _conv_bn(cin, cout, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [_conv_bn(cin, hidden, 1)] if expand != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, act=False)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))

    def __init__(self, width: float = 1.0, classes: int = 1000):
        super().__init__()
        cin = _divisible(32 * width)
        last = _divisible(1280 * max(1.0, width))
        layers = [_conv_bn(3, cin, 3, 2)]
        for t, c, n, s in self.SETTINGS:
            cout = _divisible(c * width)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(_conv_bn(cin, last, 1))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(last, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def mobilenetv2(width: float = 1.0):
    torch.manual_seed(0)
    model = MobileNetV2(width)
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval(), (torch.randn(1, 3, 224, 224),)


def mobilenetv2_100():
    return mobilenetv2(1.0)


def mobilenetv2_075():
    return mobilenetv2(0.75)


def mobilenetv2_050():
    return mobilenetv2(0.5)


def mobilenetv2_140():
    return mobilenetv2(1.4)
