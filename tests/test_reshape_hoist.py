"""Elementwise operators moved before reshapes (tiletune.model.passes.reshape_hoist): an activation after nn.Linear on a
3-D input fuses into the matmul's kernel, and the reshape pairs in between cancel."""
import pytest

from tiletune.model.passes.pipeline import prepare
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.target import parse_target

pytestmark = pytest.mark.tvm


def test_gelu_after_linear_joins_the_matmul_kernel(home):
    tasks = model_tasks(load("family:gelu_mlp"), parse_target(None), "NHWC")
    names = sorted(k.name for k in tasks.tasks)
    assert len(names) == 3
    assert sum("gelu" in n for n in names) == 2, names  # both activations fused into their matmuls
    assert not any("gelu" in k.name for k in tasks.kernels if not k.tunable)


def test_reshape_pairs_cancel_and_values_are_unchanged(home):
    import numpy as np
    import tvm
    from tvm import relax

    from tiletune.model.passes.reshape_hoist import hoist_over_reshapes

    source = load("family:gelu_mlp")
    mod = prepare(source).mod  # hoisted already; the import without it is rebuilt below to compare
    text = mod["main"].script()
    assert text.count("R.reshape(") == 2  # the model's own input and output reshapes only
    twice = hoist_over_reshapes(mod)  # idempotent
    assert twice["main"].script().count("R.reshape(") == 2
    ex = tvm.compile(mod, target=tvm.target.Target(parse_target(None)))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = source.random_inputs(0)
    got = vm["main"](tvm.runtime.tensor(x[0]))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    np.testing.assert_allclose(got, source.reference(x)[0], rtol=1e-5, atol=1e-5)


def test_residual_and_mask_adds_join_the_matmul_kernel(home):
    """A residual added after nn.Linear (same shape up to a leading unit dimension) and a mask broadcast over
    the scores fuse into their matmuls; a broadcast that the reshape would change is left alone."""
    import torch

    from tiletune.model.frontend.source import from_torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
            self.register_buffer("mask", torch.randn(1, 1, 6, 6))

        def forward(self, x):
            y = self.a(x) + x  # residual: [1, 6, 16] = reshape([6, 16]) + [1, 6, 16]
            s = (y.view(1, 6, 2, 8).transpose(1, 2) @ y.view(1, 6, 2, 8).permute(0, 2, 3, 1)) + self.mask
            return self.b(y) * 2.0, s.softmax(-1)

    torch.manual_seed(0)
    source = from_torch("m", "m", M().eval(), (torch.randn(1, 6, 16),))
    tasks = model_tasks(source, parse_target(None), "NHWC")
    names = sorted(k.name for k in tasks.tasks if not k.workload.key.startswith("rows:"))  # softmax: a row task
    # the first Linear with its bias and the residual; the scores with the mask; the second with the scale
    assert len(names) == 3 and all("_add" in n for n in names), names
    assert any(n.count("add") == 2 for n in names), names  # bias + residual in one kernel
    assert any("multiply" in n for n in names), names
    rest = [k.name for k in tasks.kernels if not k.tunable]
    assert not any("add" in n or "multiply" in n for n in rest), rest


GPT2_MLP = '''
import math
import torch


class Block(torch.nn.Module):
    """GPT-2's MLP as transformers writes it: Conv1D (addmm on a 2-D view), then gelu_new spelt out, on 3-D."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(24, 40)
        self.proj = torch.nn.Linear(40, 24)

    def forward(self, x):
        h = self.fc(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.proj(h)


def make():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(1, 10, 24),)
'''


def test_a_spelt_out_tanh_gelu_joins_the_matmul_after_repeated_passes(home, tmp_path):
    """GPT-2's gelu_new between reshapes needs a second pass (the first emits reshapes that only then meet):
    the whole activation and the residual add end in the matmuls' kernels, and the values are unchanged."""
    from tiletune.model.build import ModelRunner, compare, compile_module, scheduled_module

    path = tmp_path / "gpt2_mlp.py"
    path.write_text(GPT2_MLP)
    source = load(f"{path}:make")
    host = parse_target(None)
    tasks = model_tasks(source, host, "NHWC")
    assert len(tasks.tasks) == 2
    assert not [k.name for k in tasks.kernels if not k.tunable and ("tanh" in k.name or "power" in k.name)]
    assert any("tanh" in k.name for k in tasks.tasks) and any("add" in k.name for k in tasks.tasks)
    runner = ModelRunner(compile_module(scheduled_module(tasks, {})[0], host))
    x = source.random_inputs(0)
    assert compare(runner(*x), source.reference(x)) < 1e-5
