"""A split read part by part becomes one strided slice per part (tiletune.model.passes.split_slices): GPT-2's q/k/v split
is no kernel of its own, each part fuses into the transpose that reads it, and the values are unchanged."""
import pytest

from tiletune.model.frontend.source import load
from tiletune.model.passes.split_slices import part_bounds
from tiletune.model.kernels.tasks import model_tasks
from tiletune.target import parse_target

pytestmark = pytest.mark.tvm


def test_part_bounds_follow_relax_split():
    assert part_bounds(2304, 3) == [(0, 768), (768, 1536), (1536, 2304)]
    assert part_bounds(10, 3) == [(0, 4), (4, 8), (8, 10)]  # sections that do not divide: the last is shorter
    assert part_bounds(10, [3, 7]) == [(0, 3), (3, 7), (7, 10)]
    assert part_bounds(5, 1) == [(0, 5)]


QKV = '''
import torch


class Attention(torch.nn.Module):
    """GPT-2's attention as transformers writes it: one projection to q, k and v, split, heads transposed."""

    def __init__(self, width=21, heads=3):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (p.view(b, t, self.heads, c // self.heads).transpose(1, 2) for p in (q, k, v))
        y = (q @ k.transpose(-1, -2) * 0.25).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c)), torch.split(x, [5, 16], dim=2)[1]


def make():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(1, 7, 21),)
'''


def test_qkv_split_fuses_into_the_head_transposes_and_values_hold(home, tmp_path):
    """Odd widths (21 = 3 heads of 7), a sequence of 7, and a second split (uneven points) whose part is the
    model's output: no kernel splits, three slices read the projection, and the build matches torch."""
    from tiletune.model.build import ModelRunner, compare, compile_module, scheduled_module

    path = tmp_path / "qkv.py"
    path.write_text(QKV)
    source = load(f"{path}:make")
    host = parse_target(None)
    tasks = model_tasks(source, host, "NHWC")
    names = [k.name for k in tasks.kernels]
    assert not [n for n in names if "split" in n], names
    into_transposes = [n for n in names if "strided_slice" in n and "transpose" in n]
    assert len(into_transposes) == 3, names  # q, k, v each read straight from the projection by its transpose
    runner = ModelRunner(compile_module(scheduled_module(tasks, {})[0], host))
    x = source.random_inputs(0)
    assert compare(runner(*x), source.reference(x)) < 1e-5
