"""A weight whose width the vector registers do not divide is padded once and its matmul's result sliced
(tiletune.model.passes.pad_widths): the task's loops divide, the weight still packs, and the model matches torch."""
import pytest

from tiletune.model.passes.pad_widths import padded_width
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.target import parse_target


def test_padded_width_is_the_widest_multiple_within_the_waste():
    assert padded_width(50257) == 50304  # GPT-2's vocabulary: 29 x 1,733 -> a multiple of 64
    assert padded_width(30522) == 30528  # BERT's
    assert padded_width(770) == 784  # only a multiple of 16 stays within 2%
    assert padded_width(768) is None and padded_width(1024) is None  # the vectors divide them already
    assert padded_width(24) is None and padded_width(100) is None  # 8 or 12 more columns: more than 2%


ODD = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.odd, self.narrow, self.even = nn.Linear(40, 770), nn.Linear(40, 24), nn.Linear(40, 48)
        self.head = nn.Linear(40, 770, bias=False)

    def forward(self, x, one):
        return nn.functional.gelu(self.odd(x)), self.narrow(x), self.even(x), self.head(one)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 20, 40), torch.randn(1, 1, 40))
'''


@pytest.mark.tvm
def test_an_odd_width_is_padded_sliced_packed_and_matches_torch(tmp_path):
    """20 rows x 40 -> 770 with a bias and GELU: its kernel reads a 40 x 784 weight, slices the result in its
    epilogue, and packs the weight; 24 columns (too narrow to pad within 2%), 48 (a multiple of 16) and one row
    (a batch-1 classifier) are left as they are. Built from each task's first construction, the model matches
    torch."""
    from tiletune.construct import constructions
    from tiletune.model.build import Chosen, ModelRunner, compare, compile_module, scheduled_module
    from tiletune.schedules import make_space

    path = tmp_path / "odd.py"
    path.write_text(ODD)
    source = load(f"{path}:make")
    host = parse_target(None)
    tasks = model_tasks(source, host, "NHWC")
    shapes = {k.name: [tuple(s) for s in k.inputs] for k in tasks.kernels}
    padded = [n for n, s in shapes.items() if (40, 784) in s]
    assert len(padded) == 1 and "strided_slice" in padded[0], shapes
    assert any((40, 770) in s for s in shapes.values())  # the one-row head, as it was
    assert any((40, 24) in s for s in shapes.values()) and any((40, 48) in s for s in shapes.values())
    chosen = {}
    for k in tasks.tasks:
        space = make_space(k.workload, None, tasks.target)
        if k.name == padded[0]:
            assert "pack" in space.names  # the padded weight is still a model constant the build packs
        cfg = constructions("construct", space, workload=k.workload, target=tasks.target, k=1)[0]
        chosen[k.hash] = Chosen(k, cfg, space, 1e-3, 1.0)
    runner = ModelRunner(compile_module(scheduled_module(tasks, chosen)[0], host))
    x = source.random_inputs(0)
    assert compare(runner(*x), source.reference(x)) < 1e-4
