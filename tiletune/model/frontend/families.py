"""Small models, one per layer family: the zoo of the model conformance suite (``tiletune.model.evaluate.conformance``).

Each factory returns ``(torch.nn.Module, example_inputs)`` with random weights and small shapes (a few
channels, 8x8 images, sequences of 6-10), so that importing, tuning a few trials per task and building take
seconds. Shapes are deliberately odd where it is cheap (7, 10, 13 wide) so that no kernel meets only powers
of two. Families that exercise a two-dimensional convolution are listed in ``CONV_FAMILIES``: only they differ
between the NHWC and the NCHW layout. Any of them runs as a model spec: ``tiletune model tasks family:silu``.
"""
from __future__ import annotations

from typing import Callable


def _nn():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    return torch, nn, F


def conv_silu():
    """Conv2d + SiLU: x * sigmoid(x) reads the convolution's result twice (a DAG epilogue)."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 16, 3, padding=1)

        def forward(self, x):
            return F.silu(self.conv(x))

    return M(), (torch.randn(1, 8, 10, 10),)


ACTIVATIONS = ("relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "gelu_tanh", "silu", "mish",
               "hardswish", "hardsigmoid", "sigmoid", "tanh", "softplus", "softsign", "hardtanh", "prelu")


def activations():
    """One Conv2d per torch activation with a fused form, each followed by it; then a residual added after
    an activation (relu(conv(x)) + x): every epilogue a kernel of its own."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv2d(4, 4, 3, padding=1) for _ in ACTIVATIONS)
            self.res = nn.Conv2d(4, 4, 3, padding=1)
            self.prelu = nn.PReLU(4)

        def act(self, name, y):
            return {"relu": F.relu, "relu6": F.relu6, "leaky_relu": lambda t: F.leaky_relu(t, 0.1), "elu": F.elu,
                    "selu": F.selu, "celu": F.celu, "gelu": F.gelu,
                    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "mish": F.mish,
                    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "sigmoid": torch.sigmoid,
                    "tanh": torch.tanh, "softplus": F.softplus, "softsign": F.softsign,
                    "hardtanh": lambda t: F.hardtanh(t, -0.5, 0.5), "prelu": self.prelu}[name](y)

        def forward(self, x):
            out = F.relu(self.res(x)) + x
            for name, conv in zip(ACTIVATIONS, self.convs):
                out = out + self.act(name, conv(x))
            return out

    return M(), (torch.randn(1, 4, 7, 7),)


def gelu_mlp():
    """A transformer's MLP: Linear -> GELU (erf) -> Linear -> GELU (tanh) -> Linear, on a 10-token sequence."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(24, 48), nn.Linear(48, 40), nn.Linear(40, 24)

        def forward(self, x):
            return self.c(F.gelu(self.b(F.gelu(self.a(x))), approximate="tanh"))

    return M(), (torch.randn(1, 10, 24),)


def norms():
    """BatchNorm (after a conv, folded; and on its own after a pool), GroupNorm, InstanceNorm and LayerNorm."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.gn, self.inorm = nn.GroupNorm(4, 16), nn.InstanceNorm2d(16, affine=True)
            self.bn2, self.ln = nn.BatchNorm2d(16), nn.LayerNorm(9)
            for bn in (self.bn, self.bn2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)

        def forward(self, x):
            y = F.relu(self.bn(self.conv(x)))
            y = F.silu(self.gn(y)) + self.inorm(y)
            y = self.bn2(F.max_pool2d(y, 2))
            return self.ln(y.flatten(2)[..., :9])

    return M(), (torch.randn(1, 8, 9, 9),)


def upsample():
    """F.interpolate in every 2-D mode (nearest, bilinear with and without align_corners, bicubic) between
    convolutions, and a scale that is not an integer."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(4, 8, 3, padding=1), nn.Conv2d(8, 4, 3, padding=1)

        def forward(self, x):
            y = self.a(x)
            y = (F.interpolate(y, scale_factor=2, mode="nearest")
                 + F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
                 + F.interpolate(y, size=(14, 14), mode="bilinear", align_corners=True)
                 + F.interpolate(y, scale_factor=2, mode="bicubic", align_corners=False))
            return self.b(F.interpolate(y, size=(10, 10), mode="bilinear", align_corners=False))

    return M(), (torch.randn(1, 4, 7, 7),)


def grouped_dilated():
    """A grouped, dilated Conv2d + BatchNorm + SiLU, a depthwise conv, then ConvTranspose2d and a Conv1d."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=2)
            self.bn = nn.BatchNorm2d(16)
            self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.t = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.c1 = nn.Conv1d(8, 4, 3)

        def forward(self, x):
            y = self.t(F.relu6(self.dw(F.silu(self.bn(self.c(x))))))
            return self.c1(y.flatten(2))

    return M(), (torch.randn(1, 8, 8, 8),)


def conv_transpose():
    """ConvTranspose2d alone (stride 2, padding, output_padding), as a decoder's upsampling."""
    torch, nn, F = _nn()
    return nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), (torch.randn(1, 8, 7, 7),)


def conv1d():
    """Conv1d (strided, padded), ConvTranspose1d and a 1-D pool, as in audio models."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv1d(6, 12, 5, stride=2, padding=2)
            self.t = nn.ConvTranspose1d(12, 6, 4, stride=2, padding=1)

        def forward(self, x):
            return F.avg_pool1d(self.t(F.gelu(self.a(x))), 2)

    return M(), (torch.randn(1, 6, 26),)


def conv3d():
    """Conv3d + ReLU and a 3-D max pool, as in video models."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv3d(3, 8, 3, padding=1)

        def forward(self, x):
            return F.max_pool3d(F.relu(self.a(x)), 2)

    return M(), (torch.randn(1, 3, 4, 6, 6),)


def attention():
    """Scaled-dot-product attention: causal, with a boolean mask, with an additive float mask, and none."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(32, 96), nn.Linear(32, 32)
            mask = torch.rand(10, 10) > 0.3
            mask.fill_diagonal_(True)
            self.register_buffer("mask", mask)
            self.register_buffer("bias", torch.randn(10, 10))

        def forward(self, x):
            q, k, v = self.qkv(x).view(1, 10, 3, 4, 8).permute(2, 0, 3, 1, 4)
            y = (F.scaled_dot_product_attention(q, k, v, is_causal=True)
                 + F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
                 + F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
                 + F.scaled_dot_product_attention(q, k, v))
            return self.out(y.transpose(1, 2).reshape(1, 10, 32))

    return M(), (torch.randn(1, 10, 32),)


def multihead_attention():
    """nn.MultiheadAttention (a model with no convolution), without and with a causal mask."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = nn.MultiheadAttention(32, 4, batch_first=True)
            self.register_buffer("causal", torch.triu(torch.full((10, 10), float("-inf")), 1))

        def forward(self, x):
            a = self.att(x, x, x, need_weights=False)[0]
            return self.att(a, a, a, attn_mask=self.causal, need_weights=False)[0]

    return M(), (torch.randn(1, 10, 32),)


def embedding():
    """Token ids (an int64 input) through an embedding, a gather of positions, and a tied output matmul."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(50, 16), nn.Embedding(12, 16)
            self.ln = nn.LayerNorm(16)

        def forward(self, ids):
            h = self.ln(self.emb(ids) + self.pos(torch.arange(ids.shape[1])))
            picked = torch.gather(h, 1, ids[:, :3, None].expand(-1, -1, 16) % 12)
            return h @ self.emb.weight.T, picked

    return M(), (torch.randint(0, 50, (1, 12)),)


def recurrent():
    """An LSTM (two layers) and a GRU over a 6-step sequence."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
            self.gru = nn.GRU(16, 12, batch_first=True)

        def forward(self, x):
            return self.gru(self.lstm(x)[0])[0]

    return M(), (torch.randn(1, 6, 8),)


def pixel_shuffle():
    """A sub-pixel upsampler: Conv2d -> PixelShuffle -> Conv2d -> PixelUnshuffle."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(4, 16, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return F.pixel_unshuffle(self.b(F.pixel_shuffle(self.a(x), 2)), 2)

    return M(), (torch.randn(1, 4, 7, 7),)


def pools():
    """Max and average pools with ceil_mode and padding, an adaptive and a global pool, concatenated (SPP-style)."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            a = F.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)
            b = F.avg_pool2d(y, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
            c = F.pad(F.adaptive_avg_pool2d(y[..., :12, :12], (6, 3)).repeat(1, 1, 1, 2), (0, 1, 0, 1))
            d = y.amax((2, 3), keepdim=True).expand_as(a) + F.adaptive_max_pool2d(y[..., :12, :12], 1)
            return torch.cat([a, b, c, d, F.adaptive_max_pool2d(y[..., :12, :12], (6, 4)).repeat(1, 1, 2, 2)[
                ..., :7, :7]], dim=1)

    return M(), (torch.randn(1, 4, 13, 13),)


def tensor_ops():
    """Concat, split, pad (constant and reflect), slicing with steps, flatten and transposes between convs."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv2d(4, 8, 3), nn.Conv2d(8, 6, 1)

        def forward(self, x):
            y = self.a(F.pad(x, (1, 1, 1, 1), mode="reflect"))
            u, v = torch.split(y, [3, 5], dim=1)
            y = torch.cat([v, F.pad(u, (0, 0, 0, 0, 0, 0)), u[:, :, ::2, ::2].repeat_interleave(2, 2)
                           .repeat_interleave(2, 3)[:, :, :y.shape[2], :y.shape[3]] * 0.5], dim=1)[:, :8]
            return self.b(F.pad(y, (2, 0, 1, 0), value=0.5)).transpose(2, 3).flatten(1)

    return M(), (torch.randn(1, 4, 9, 9),)


def several_outputs():
    """A model with three outputs of different shapes and ranks (a detection head's split)."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Conv2d(4, 8, 3, padding=1)
            self.cls, self.box = nn.Conv2d(8, 5, 1), nn.Conv2d(8, 4, 1)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            y = F.relu(self.body(x))
            return self.cls(y).sigmoid(), self.box(y), self.fc(y.mean((2, 3)))

    return M(), (torch.randn(1, 4, 8, 8),)


def winograd():
    """Stride-1 3x3 convolutions of 16 and more channels, which a CPU build in NHWC computes by Winograd's
    transforms (``tiletune.model.passes.winograd``): F(4x4) on an 8x12 image with BatchNorm and SiLU after it (a DAG
    epilogue in the output transform), F(2x2) on the 6x10 output of an unpadded one, and a residual."""
    torch, nn, F = _nn()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.bn = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
            self.b = nn.Conv2d(16, 24, 3)
            self.c = nn.Conv2d(24, 24, 3, padding=1)

        def forward(self, x):
            h = F.silu(self.bn(self.a(x)))
            g = F.relu(self.b(h))
            return F.relu(self.c(g) + g)

    return M(), (torch.randn(1, 16, 8, 12),)


FAMILIES: dict[str, Callable] = {
    "conv_silu": conv_silu, "activations": activations, "gelu_mlp": gelu_mlp, "norms": norms,
    "upsample": upsample, "grouped_dilated": grouped_dilated, "conv_transpose": conv_transpose,
    "conv1d": conv1d, "conv3d": conv3d, "attention": attention, "multihead_attention": multihead_attention,
    "embedding": embedding, "recurrent": recurrent, "pixel_shuffle": pixel_shuffle, "pools": pools,
    "tensor_ops": tensor_ops, "several_outputs": several_outputs, "winograd": winograd,
}
#: the families with a 2-D convolution: the only ones whose kernels differ between NHWC and NCHW
CONV_FAMILIES = ("conv_silu", "activations", "norms", "upsample", "grouped_dilated", "pixel_shuffle", "pools",
                 "tensor_ops", "several_outputs", "winograd")
