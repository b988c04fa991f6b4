"""Built-in models, written with ``torch.nn`` (torchvision does not import here) or built from a
``transformers`` config with random weights: nothing is downloaded. Batch 1, fp32.

Each entry is a function returning ``(module, example_inputs)`` with the module in eval mode:

- ``resnet18``, ``resnet50``: He et al.'s ResNets as torchvision defines them (BasicBlock [2,2,2,2];
  Bottleneck [3,4,6,3] with the stride on the 3x3 conv), 1x3x224x224.
- ``mobilenetv2``: Sandler et al.'s MobileNetV2 (width 1.0, torchvision's inverted-residual settings,
  ReLU6), 1x3x224x224.
- ``bert-small``: ``transformers.BertModel`` with 4 layers, hidden 512, 8 heads, intermediate 2048; token
  ids 1x128; returns the last hidden state.
- ``gpt2``: ``transformers.GPT2Model`` with GPT-2 small's config (12 layers, hidden 768, 12 heads); token
  ids 1x128; returns the last hidden state.
- ``tiny``: a small model with every kind of kernel the larger ones have (conv-bn-relu, a residual block,
  a tiny attention layer, layer norm, pooling, linear) on 1x3x16x16, for tests and quick checks.

Weights are drawn from ``torch.manual_seed(0)``; BatchNorm statistics are randomised too, so that folding
them is tested by the output check.
"""
from __future__ import annotations

from typing import Callable

from ...errors import TiletuneError

SEQ = 128  # sequence length of the transformer models


def _torch():
    try:
        import torch
    except ImportError:
        raise TiletuneError("built-in models need torch: pip install 'tiletune[torch]'") from None
    return torch


def _transformers():
    try:
        import transformers
    except ImportError:
        raise TiletuneError("this model needs transformers (not installed): pip install 'tiletune[model]'") from None
    return transformers


def _randomise_bn(model) -> None:
    torch = _torch()
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def divisible(v: float, d: int = 8) -> int:
    """MobileNet's channel rule for a width multiplier: the nearest multiple of ``d``, not below 90% of ``v``
    (torchvision's ``_make_divisible``); every channel count at width 1.0 is its own."""
    new = max(d, int(v + d / 2) // d * d)
    return new + d if new < 0.9 * v else new


def _nn():
    torch = _torch()
    nn = torch.nn

    def conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, act()) if act is not None else nn.Sequential(*layers)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, planes, stride=1):
            super().__init__()
            self.conv1 = conv_bn(cin, planes, 3, stride)
            self.conv2 = conv_bn(planes, planes, 3, act=None)
            self.down = (conv_bn(cin, planes, 1, stride, act=None)
                         if stride != 1 or cin != planes else None)

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            return torch.relu(self.conv2(self.conv1(x)) + idt)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, planes, stride=1):
            super().__init__()
            out = planes * 4
            self.conv1 = conv_bn(cin, planes, 1)
            self.conv2 = conv_bn(planes, planes, 3, stride)
            self.conv3 = conv_bn(planes, out, 1, act=None)
            self.down = conv_bn(cin, out, 1, stride, act=None) if stride != 1 or cin != out else None

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            return torch.relu(self.conv3(self.conv2(self.conv1(x))) + idt)

    class ResNet(nn.Module):
        def __init__(self, block, layers, classes=1000):
            super().__init__()
            self.stem = conv_bn(3, 64, 7, 2)
            self.pool = nn.MaxPool2d(3, 2, 1)
            blocks, cin = [], 64
            for i, n in enumerate(layers):
                planes = 64 * 2 ** i
                for j in range(n):
                    blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1))
                    cin = planes * block.expansion
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(self.pool(self.stem(x)))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [conv_bn(cin, hidden, 1, act=nn.ReLU6)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                       conv_bn(hidden, cout, 1, act=None)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                    (6, 320, 1, 1))  # t (expansion), c (channels), n (repeats), s (stride)

        def __init__(self, classes=1000, width: float = 1.0):
            super().__init__()
            cin, last = divisible(32 * width), divisible(1280 * max(1.0, width))
            layers = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
            for t, c, n, s in self.SETTINGS:
                cout = divisible(c * width)
                for i in range(n):
                    layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(last, classes)

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.fc(torch.flatten(x, 1))

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, 2)
            self.block = BasicBlock(16, 16)
            self.block2 = BasicBlock(16, 16)  # the same kernels again: deduplicated into one task each
            self.qkv = nn.Linear(16, 48)
            self.proj = nn.Linear(16, 16)
            self.norm = nn.LayerNorm(16)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = self.block2(self.block(self.stem(x)))
            t = x.flatten(2).transpose(1, 2)  # 1 x 64 tokens x 16
            q, k, v = self.qkv(t).chunk(3, -1)
            a = torch.softmax(q @ k.transpose(1, 2) * 0.25, -1) @ v
            t = self.norm(t + self.proj(a))
            return self.fc(t.mean(1))

    return {"ResNet": ResNet, "BasicBlock": BasicBlock, "Bottleneck": Bottleneck, "MobileNetV2": MobileNetV2,
            "Tiny": Tiny}


def _vision(make) -> tuple:
    torch = _torch()
    torch.manual_seed(0)
    model = make()
    _randomise_bn(model)
    return model.eval(), (torch.randn(1, 3, 224, 224),)


def resnet18():
    c = _nn()
    return _vision(lambda: c["ResNet"](c["BasicBlock"], (2, 2, 2, 2)))


def resnet50():
    c = _nn()
    return _vision(lambda: c["ResNet"](c["Bottleneck"], (3, 4, 6, 3)))


def mobilenetv2(width: float = 1.0):
    """MobileNetV2 (random weights); ``width`` is its channel multiplier (Gensor's Fig. 12 changes it)."""
    c = _nn()
    return _vision(lambda: c["MobileNetV2"](width=width))


def tiny():
    torch = _torch()
    c = _nn()
    torch.manual_seed(0)
    model = c["Tiny"]()
    _randomise_bn(model)
    return model.eval(), (torch.randn(1, 3, 16, 16),)


def _hidden_state_only(model, mask: bool = False):
    """The transformer's last hidden state as the one output (what the benchmark times and checks); with
    ``mask``, an all-ones attention mask is given as a constant (without one, GPT-2 looks for packed
    sequences with a cumulative sum over a bool tensor, which TVM 0.27 cannot compile)."""
    torch = _torch()

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.register_buffer("mask", torch.ones(1, SEQ, dtype=torch.long), persistent=False)

        def forward(self, input_ids):
            if mask:
                return self.model(input_ids=input_ids, attention_mask=self.mask).last_hidden_state
            return self.model(input_ids=input_ids).last_hidden_state

    return LastHidden().eval()


def bert_small():
    torch = _torch()
    tf = _transformers()
    torch.manual_seed(0)
    cfg = tf.BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, intermediate_size=2048,
                        attn_implementation="eager")
    model = _hidden_state_only(tf.BertModel(cfg, add_pooling_layer=False))
    return model, (torch.randint(0, cfg.vocab_size, (1, SEQ)),)


def gpt2():
    torch = _torch()
    tf = _transformers()
    torch.manual_seed(0)
    cfg = tf.GPT2Config(attn_implementation="eager", use_cache=False)  # GPT-2 small: 12 layers, hidden 768, 12 heads; no KV cache (its concat does not import)
    model = _hidden_state_only(tf.GPT2Model(cfg), mask=True)
    return model, (torch.randint(0, cfg.vocab_size, (1, SEQ)),)


MODELS: dict[str, Callable[[], tuple]] = {
    "resnet18": resnet18, "resnet50": resnet50, "mobilenetv2": mobilenetv2, "bert-small": bert_small,
    "gpt2": gpt2, "tiny": tiny,
}
