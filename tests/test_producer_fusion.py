"""A layout copy read by one matmul is taken into it (tiletune.model.kernels.producer_fusion): the query's and the value's
head transposes are no kernels of their own; the key's (which the kernel would read strided along its vectorized
axis) and the attention output's (read through a division of the reduction axis) stay copies; pads stay out of
convolutions; the merged kernels tune and build to torch's values."""
import pytest

from tiletune.measure.base import MeasureSettings
from tiletune.model.kernels import producer_fusion
from tiletune.model.build import ModelRunner, best_configs, compare, compile_module, scheduled_module
from tiletune.model.frontend.source import load
from tiletune.model.kernels.tasks import model_tasks
from tiletune.model.tuning.tuner import tune_model
from tiletune.target import parse_target

from .test_split_slices import QKV  # GPT-2's attention at odd widths: 3 heads of 7, a sequence of 7

pytestmark = pytest.mark.tvm

ATTENTION = QKV + '''

def dynamic():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(1, 7, 21),), {"x": {1: torch.export.Dim("seq", min=4, max=40)}}
'''

CONV = '''
import torch


class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def make():
    torch.manual_seed(0)
    return Conv().eval(), (torch.randn(1, 3, 13, 9),)
'''


@pytest.fixture(scope="module")
def attention(home):
    path = home / "attention_pf.py"
    path.write_text(ATTENTION)
    source = load(f"{path}:make")
    return source, model_tasks(source, parse_target(None), "NHWC")


def test_query_value_and_output_transposes_join_their_matmuls_the_key_stays(attention):
    _, tasks = attention
    names = [k.name for k in tasks.kernels]
    merged = [n for n in names if "transpose" in n and "matmul" in n]
    assert len(merged) == 2, names  # q into QK^T, v into PV
    copies = sorted((k.output for k in tasks.kernels if "transpose" in k.name and "matmul" not in k.name))
    # the key, transposed for QK^T (read along the vectorized axis), and the heads back into rows (k // 7, k % 7)
    assert copies == [(3, 7, 7), (7, 21)], names
    assert all(tasks.kernels[names.index(n)].tunable for n in merged)
    qk = next(k for k in tasks.kernels if "matmul" in k.name and "multiply" in k.name)
    assert (1, 7, 63) in qk.inputs  # QK^T reads the projection itself


def test_the_merged_kernels_tune_and_the_model_matches_torch(attention, tmp_path):
    source, tasks = attention
    rec = tmp_path / "pf.jsonl"
    res = tune_model(tasks, strategy="random", trials=2 * len(tasks.tasks), records=str(rec), round_trials=2,
                     batch_size=2, settings=MeasureSettings(repeat=1, min_repeat_ms=0))
    assert all(st.best_gflops > 0 for st in res.states if "matmul" in st.kernel.name)
    host = parse_target(None)
    chosen = best_configs(tasks, str(rec))
    assert {k.hash for k in tasks.kernels if "transpose" in k.name and "matmul" in k.name} <= set(chosen)
    runner = ModelRunner(compile_module(scheduled_module(tasks, chosen)[0], host))
    x = source.random_inputs(3)
    assert compare(runner(*x), source.reference(x)) < 1e-4


def test_pads_stay_out_of_convolutions(home):
    path = home / "conv_pf.py"
    path.write_text(CONV)
    tasks = model_tasks(load(f"{path}:make"), parse_target(None), "NHWC")
    convs = [k for k in tasks.kernels if "conv2d" in k.name]
    assert convs and not [k.name for k in convs if "pad" in k.name or "transpose" in k.name]


def test_the_contiguity_check_keeps_the_keys_copy(home, monkeypatch):
    """Without the check the key's transpose would join QK^T too (read strided along the sequence, the
    vectorized axis), and the output's its projection: the check, not the candidates' rules, keeps their copies."""
    path = home / "attention_pf2.py"
    path.write_text(ATTENTION)
    monkeypatch.setattr(producer_fusion, "_reads_contiguously", lambda func: True)
    tasks = model_tasks(load(f"{path}:make"), parse_target(None), "NHWC")
    assert not [k.name for k in tasks.kernels if "transpose" in k.name and "matmul" not in k.name]


def test_a_dynamic_model_keeps_its_copies(home):
    """A dynamic model's symbolic library and its shapes' static modules fuse alike: no merge at any shape."""
    path = home / "attention_pf3.py"
    path.write_text(ATTENTION)
    source = load(f"{path}:dynamic")
    assert source.dynamic
    tasks = model_tasks(source, parse_target(None), "NHWC")
    assert not [k.name for k in tasks.kernels if "transpose" in k.name and "matmul" in k.name]
    assert sum("transpose" in k.name for k in tasks.kernels) >= 3
