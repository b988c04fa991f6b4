"""tiletune model with NHWC convolutions (tiletune.model.passes.layout) and tasks that start from their constructed
kernels: a small CNN (conv-bn-ReLU6, a depthwise conv, a residual block, max pooling, global average pooling,
linear) converted to NHWC keeps NHWC from the first convolution to the pooling, its conv tasks vectorize over
the output channels, its pooling and mean kernels are parallel and vectorized, the built model equals torch's
output, and the first trials of every task are its Roller constructions."""
import json
import math

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.measure.base import MeasureSettings
from tiletune.target import host_target

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")

FACTORY = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 16, 3, padding=1, stride=2, bias=False), nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 16, 1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = torch.clamp(self.bn(self.stem(x)), 0.0, 6.0)     # ReLU6, as MobileNetV2's
        x = torch.relu(x + self.pw(torch.relu(self.dw(x))))  # depthwise, pointwise, residual
        x = self.pool(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def make():
    torch.manual_seed(0)
    m = Net().eval()
    m.bn.running_mean.uniform_(-0.2, 0.2)
    m.bn.running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(1, 3, 16, 16),)
'''

SETTINGS = MeasureSettings(repeat=1, min_repeat_ms=0)


@pytest.fixture(scope="module")
def spec(home):
    path = home / "cnn.py"
    path.write_text(FACTORY)
    return f"{path}:make"


@pytest.fixture(scope="module")
def nhwc(spec):
    from tiletune.model.kernels.tasks import load_model_tasks

    return load_model_tasks(spec, host_target(), "NHWC")


def _conv_tasks(tasks):
    return [k for k in tasks.tasks if "conv2d" in k.name]


def _build_matches_torch(spec, source, records, lib, layout, capsys, seed):
    """``model build`` in ``layout`` from ``records`` checks itself against torch, records its layout, and the
    library loaded by ``load_model`` gives torch's output on other random inputs."""
    from tiletune.api import load_model
    from tiletune.cli import main

    assert main(["model", "build", spec, "--layout", layout.lower(), "-r", str(records), "-o", str(lib)]) == 0
    assert "matches the original" in capsys.readouterr().out
    assert json.loads(lib.with_name(lib.name + ".json").read_text())["layout"] == layout
    x = source.random_inputs(seed)
    np.testing.assert_allclose(load_model(str(lib))(*x)[0], source.reference(x)[0], rtol=1e-4, atol=1e-4)


def test_nhwc_convs_vectorize_over_output_channels_and_transposes_cancel(spec, nhwc):
    from tiletune.model.kernels.tasks import load_model_tasks

    _, tasks = nhwc
    assert tasks.layout == "NHWC"
    convs = _conv_tasks(tasks)
    assert len(convs) == 3  # stem, depthwise, pointwise (+ residual)
    for k in convs:
        out = k.workload.output_shape()
        spatial = [a for a in k.workload.axes() if a.kind == "S"]
        reduction = [a for a in k.workload.axes() if a.kind == "R"]
        assert out[-1] == 16 and out[1] == out[2]  # N, H, W, C
        assert spatial[-1].extent == 16  # the vectorized axis: output channels
        # the innermost reduction axis: the input channels of a group (3 for the stem, 16 pointwise, 1 depthwise)
        assert reduction[-1].extent == k.workload.input_shapes()[1][2], (k.name, reduction)  # HWIO's I
    # the padded dense convolution (the stem) reads a buffer that a pad kernel of its own wrote; the depthwise one
    # keeps its padding inside (layout.PAD_GROUPED)
    depthwise = [k for k in convs if k.workload.input_shapes()[1][2] == 1]
    assert len(depthwise) == 1 and "if_then_else" in depthwise[0].func.script()
    assert all("if_then_else" not in k.func.script() for k in convs if k not in depthwise)
    pads = [k for k in tasks.kernels if k.name.split("_")[-1].startswith("pad") or k.name.startswith("pad")]
    assert len(pads) == 1 and pads[0].output[-1] == 3, [k.name for k in tasks.kernels]
    # ReLU6 is min/max, fused into the stem's kernel; no transposes between the layers: one at the input
    # (the NCHW image), one where the pooled features leave 4-D
    names = [k.name for k in tasks.kernels]
    assert any("conv2d" in n and "maximum" in n and "minimum" in n for n in names), names
    assert not any("clip" in n for n in names), names
    assert sum("transpose" in n for n in names) <= 2, names
    # NCHW: as imported, the output width innermost
    _, nchw = load_model_tasks(spec, host_target(), "NCHW")
    assert nchw.layout == "NCHW"
    stem = max(_conv_tasks(nchw), key=lambda k: k.flops)
    assert stem.workload.output_shape() == (1, 16, 8, 8)
    assert {k.workload.key for k in _conv_tasks(nchw)}.isdisjoint(tasks.keys())  # (the linear layer is the same)


def test_nhwc_pooling_and_mean_are_parallel_and_vectorized(nhwc):
    from tiletune.model.kernels.default_schedule import PARALLEL_MIN, checked

    _, tasks = nhwc
    pools = [k for k in tasks.kernels if not k.tunable and ("pool" in k.name or "mean" in k.name)]
    assert len(pools) == 2, [k.name for k in tasks.kernels]
    for k in pools:
        func, how = checked(k.func, host_target())
        text = func.script()
        assert how == "parallel+vector", (k.name, how)
        # the lanes (channels) inside the window's reduction loops, the init a vector store of its own
        assert "T.vectorized" in text and "_init" in text, text
    for k in tasks.kernels:  # every other kernel scheduled, unless too small for the thread pool
        if not k.tunable and math.prod(k.output) >= PARALLEL_MIN:
            assert checked(k.func, host_target())[1] != "none", k.name


def test_nhwc_model_tuned_from_constructions_matches_torch(spec, nhwc, home, tmp_path, capsys):
    from tiletune.cli import main
    from tiletune.construct import constructions
    from tiletune.model.kernels.tasks import load_model_tasks
    from tiletune.model.tuning.tuner import MODEL_START_K, tune_model
    from tiletune.schedules import make_space

    source, tasks = nhwc
    rec = home / "cnn-nhwc.jsonl"
    n_tasks = len(tasks.tasks)
    result = tune_model(tasks, trials=MODEL_START_K * n_tasks, records=str(rec), round_trials=MODEL_START_K,
                        batch_size=4, settings=SETTINGS)
    assert result.trials == MODEL_START_K * n_tasks
    # every task's first trials (its first round: the scheduler goes round robin first) are its top Gensor and
    # Roller constructions (the model path's start=construct, with the run's seed), before xgb proposes anything
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    for k in tasks.tasks:
        space = make_space(k.workload, None, tasks.target)
        want = [space.to_dict(c) for c in constructions("construct", space, workload=k.workload, target=tasks.target,
                                                         k=MODEL_START_K, rng=np.random.default_rng(0))]
        got = [r["config"] for r in lines if r["workload"] == k.workload.key][:len(want)]
        same = sorted(json.dumps(c, sort_keys=True) for c in got) == sorted(json.dumps(c, sort_keys=True) for c in want)
        assert want and same, (k.name, got, want)
    # built in NHWC with the tuned kernels: the same output as torch
    _build_matches_torch(spec, source, rec, tmp_path / "cnn.so", "NHWC", capsys, seed=3)
    # the records of one layout are not those of the other (the linear layer's kernel is the same in both):
    # the build says so
    assert main(["model", "build", spec, "--layout", "NCHW", "-r", str(rec), "-o", str(tmp_path / "x.so")]) == 0
    out = capsys.readouterr().out
    nchw_tasks = len(load_model_tasks(spec, host_target(), "NCHW")[1].tasks)  # convs, the linear, row reductions
    assert f"1 of {nchw_tasks} tasks with tuned kernels" in out
    assert f"holds {len(_conv_tasks(tasks))} workload(s) that are not kernels of this model" in out
    assert "the other --layout; this build is NCHW" in out


def test_task_defaults_start_from_both_constructions_and_still_fall_back():
    import warnings

    from tiletune.model.tuning.tuner import MODEL_START, MODEL_START_K, task_defaults
    from tiletune.space import ChoiceKnob, Space
    from tiletune.strategies import create

    assert MODEL_START == "construct"
    assert task_defaults("xgb") == {"start": MODEL_START, "start_k": MODEL_START_K}
    assert task_defaults("random") == {}  # no start option: nothing added
    sp = Space([ChoiceKnob("unroll", (0, 16, 64))])  # nothing to construct
    s = create("gbfs", sp, options={"start_k": 2}, defaults=task_defaults("gbfs"))
    assert s.opts["start"] == MODEL_START and s.opts["start_k"] == 2 and "start" not in s.given_options
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        g = create("gbfs", sp, defaults=task_defaults("gbfs"))  # a default: falls back on the paper's start
    assert g.s0 == sp.untiled() and any("falls back" in str(x.message) for x in w)
    with pytest.raises(TiletuneError, match="start=construct"):  # given: an error
        create("gbfs", sp, options={"start": "construct"}, defaults=task_defaults("gbfs"))


def test_bad_layout_is_one_line(capsys):
    from tiletune.cli import main
    from tiletune.model.passes.layout import check_layout

    with pytest.raises(TiletuneError, match="unknown layout 'NCWH'; accepted: NCHW, NHWC"):
        check_layout("NCWH")
    assert check_layout("nhwc") == "NHWC"
    assert check_layout("nchw16c") == "NCHW16c"
    with pytest.raises(SystemExit):
        main(["model", "tasks", "tiny", "--layout", "NCWH"])
    err = capsys.readouterr().err
    assert "argument --layout: unknown layout 'NCWH'; accepted: NCHW, NHWC, NCHW16c" in err


def test_nchw16c_blocks_the_dense_convolutions_and_matches_torch(spec, home, tmp_path, capsys):
    """NCHW16c (tiletune.model.passes.nchwc): the pointwise convolution (16 -> 16 channels) becomes a blocked kernel whose
    innermost spatial axis is the 16 output channels of a block and whose innermost reduction the 16 input
    channels of one; the stem (3 input channels) and the depthwise convolution stay NHWC with their epilogues
    fused; tuned for a few trials and built, the model equals torch. On a GPU the layout is refused in one line."""
    from tiletune.model.kernels.tasks import load_model_tasks
    from tiletune.model.tuning.tuner import tune_model

    source, tasks = load_model_tasks(spec, host_target(), "nchw16c")
    assert tasks.layout == "NCHW16c" and not tasks.notes
    convs = _conv_tasks(tasks)
    blocked = [k for k in convs if len(k.output) == 5]
    assert len(convs) == 3 and len(blocked) == 1, [(k.name, k.output) for k in convs]
    pw = blocked[0].workload
    spatial = [a for a in pw.axes() if a.kind == "S"]
    reduction = [a for a in pw.axes() if a.kind == "R"]
    assert pw.input_shapes()[1] == (1, 1, 1, 1, 16, 16)  # OIHW16i16o
    assert spatial[-1].extent == 16 and reduction[-1].extent == 16 and len(reduction) == 4
    for k in convs:
        if k not in blocked:  # NHWC, the bias and ReLU(6) in the same kernel
            assert k.output == (1, 8, 8, 16) and "maximum" in k.name, k.name
    rec = home / "cnn-nchw16c.jsonl"
    tune_model(tasks, trials=2 * len(tasks.tasks), records=str(rec), round_trials=2, batch_size=2, settings=SETTINGS)
    _build_matches_torch(spec, source, rec, tmp_path / "cnn16c.so", "NCHW16c", capsys, seed=5)
    with pytest.raises(TiletuneError, match="layout NCHW16c is for CPU targets"):
        load_model_tasks(spec, {"kind": "cuda", "arch": "sm_90"}, "NCHW16c")


ROLL_AFTER_CONV = '''
import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 6, 1, stride=2)

    def forward(self, x):
        return torch.roll(self.conv(x), shifts=-2, dims=0)


def model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(3, 4, 6, 3),), ({0: torch.export.Dim("batch", min=2, max=6)},)
'''


@pytest.mark.tvm
def test_a_model_that_crashes_tvms_layout_conversion_keeps_its_layout_and_builds(tmp_path, capsys):
    """TVM's ConvertLayout segfaults on a roll along a symbolic axis after a convolution (the fuzz campaign's seed
    1603): the conversion is tried in a child process first, and the model builds as imported."""
    from tiletune.cli import main

    (tmp_path / "m.py").write_text(ROLL_AFTER_CONV)
    assert main(["model", "build", f"{tmp_path / 'm.py'}:model", "-o", str(tmp_path / "m.so")]) == 0
    out = capsys.readouterr().out
    assert "brings TVM's ConvertLayout down on this model" in out and "matches the original" in out
