"""Winograd's F(2x2, 3x3) for a model's 3x3 convolutions (``tiletune.model.passes.winograd``): the three transforms
compute the convolution, their own schedules build to what the unscheduled kernels compute, only the
convolutions it can take are rewritten, and in a model the products become a tuned batched matmul while the
outputs still match torch."""
import numpy as np
import pytest

from tiletune.target import host_target

pytestmark = pytest.mark.tvm


def _direct(x, w):
    """numpy's valid 3x3 convolution of NHWC ``x`` with HWIO ``w``, in float64."""
    n, hp, wp, _ = x.shape
    out = np.zeros((n, hp - 2, wp - 2, w.shape[3]))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nhwc,ck->nhwk", x[:, r:r + hp - 2, s:s + wp - 2].astype(np.float64),
                             w[r, s].astype(np.float64))
    return out


def _run(func, *arrays):
    import tvm

    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(host_target()))
    args = [tvm.runtime.tensor(a, tvm.cpu()) for a in arrays]
    lib["main"](*args)
    return args[-1].numpy()


@pytest.mark.parametrize("m,n,h,w,c,k", [(2, 2, 6, 10, 20, 24), (2, 1, 4, 2, 16, 40), (2, 1, 8, 8, 17, 3),
                                         (2, 1, 7, 5, 24, 16), (2, 2, 3, 6, 16, 8), (4, 1, 8, 12, 16, 24),
                                         (4, 2, 7, 5, 20, 17)])
def test_the_transforms_with_their_schedules_compute_the_convolution(m, n, h, w, c, k):
    from tvm import te

    from tiletune.model.passes import winograd
    from tiletune.model.kernels.default_schedule import VECTOR

    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, h + 2, w + 2, c)).astype("float32")
    wt = rng.standard_normal((3, 3, c, k)).astype("float32")
    tiles, alpha = n * -(-h // m) * -(-w // m), m + 2
    xp = te.placeholder(x.shape, name="x")
    inp = te.create_prim_func([xp, winograd.input_transform(xp, h, w, m)])
    mp = te.placeholder((alpha * alpha, tiles, k), name="m")
    out = te.create_prim_func([mp, winograd.output_transform(mp, n, h, w, m)])
    for func in (inp, out):
        own = winograd.schedule(func, VECTOR)
        assert own is not None and "T.unroll" in own.script() and "T.parallel" in own.script()
    v = _run(winograd.schedule(inp, VECTOR), x, np.zeros((alpha * alpha, tiles, c), "float32"))
    np.testing.assert_allclose(v, _run(inp, x, np.zeros((alpha * alpha, tiles, c), "float32")), rtol=1e-6, atol=1e-5)
    u = winograd.weight_transform(wt, m)
    assert u.shape == (alpha * alpha, c, k) and u.dtype == np.float32
    y = _run(winograd.schedule(out, VECTOR), np.matmul(v, u), np.zeros((n, h, w, k), "float32"))
    ref = _direct(x, wt)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


def test_the_default_schedule_gives_a_transform_its_own_and_checks_it():
    from tvm import te

    from tiletune.model.passes import winograd
    from tiletune.model.kernels.default_schedule import VECTOR, checked

    x = te.placeholder((1, 8, 6, 24), name="x")
    func = te.create_prim_func([x, winograd.input_transform(x, 6, 4)])
    scheduled, label = checked(func, host_target())
    assert label == "parallel+vector" and "T.unroll" in scheduled.script()
    y = te.placeholder((1, 8, 6, 24), name="y")
    plain = te.create_prim_func([y, te.compute(y.shape, lambda *i: y(*i) * 2.0, name="double")])
    assert winograd.schedule(plain, VECTOR) is None


def _conv_module(convs):
    """A Relax module of chained NHWC convolutions with constant HWIO weights: ``convs`` lists (input shape,
    weight shape, stride, padding, groups)."""
    import tvm
    from tvm import relax

    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, (shape, *_) in enumerate(convs)]
    with bb.function("main", params):
        outs = []
        for p, (_, wshape, stride, pad, groups) in zip(params, convs):
            wt = relax.const(rng.standard_normal(wshape).astype("float32"))
            outs.append(bb.emit(relax.op.nn.conv2d(p, wt, strides=stride, padding=pad, groups=groups,
                                                   data_layout="NHWC", kernel_layout="HWIO")))
        bb.emit_func_output(relax.Tuple(outs))
    return bb.get()


def test_only_the_convolutions_it_can_take_are_rewritten():
    from tiletune.model.passes import winograd
    from tiletune.model.passes.layout import relax_ops

    taken = (((1, 10, 10, 16), (3, 3, 16, 32), 1, 0, 1), ((1, 9, 7, 16), (3, 3, 16, 32), 1, 0, 1))  # 8x8, 7x5
    left = (((1, 10, 10, 16), (3, 3, 16, 32), 2, 0, 1),  # stride 2
            ((1, 10, 10, 16), (3, 3, 16, 32), 1, 1, 1),  # padding of its own
            ((1, 10, 10, 16), (3, 3, 1, 16), 1, 0, 16),  # depthwise
            ((1, 10, 10, 3), (3, 3, 3, 32), 1, 0, 1),  # a stem's three channels
            ((1, 10, 10, 16), (1, 1, 16, 32), 1, 0, 1))  # 1x1
    for convs, want in ((taken, 2), (left, 0)):
        out = winograd.rewrite(_conv_module(convs))
        script = out["main"].script()
        assert script.count("R.matmul(") == want
        assert script.count("R.nn.conv2d(") == len(convs) - want
        assert ("relax.nn.conv2d" in relax_ops(out)) == (want < len(convs))


FACTORY = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(16, 24, 3, padding=1)
        self.b = nn.Conv2d(24, 24, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return torch.relu(self.b(h) + h)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 16, HEIGHT, WIDTH),)
'''


@pytest.mark.parametrize("size,alpha,tiles", [((10, 6), 4, 15), ((8, 12), 6, 6)])  # F(2x2), F(4x4) (tile_for)
def test_in_a_model_the_products_are_a_tuned_batched_matmul_and_the_outputs_match_torch(home, monkeypatch, size, alpha,
                                                                                        tiles):
    pytest.importorskip("torch")
    from tiletune.model.passes import winograd
    from tiletune.model.build import ModelRunner, compare, compile_module, constructed_configs, scheduled_module
    from tiletune.model.kernels.tasks import load_model_tasks

    path = home / f"winograd_model_{alpha}.py"
    path.write_text(FACTORY.replace("HEIGHT", str(size[0])).replace("WIDTH", str(size[1])))
    source, tasks = load_model_tasks(f"{path}:make", host_target())
    products = [k for k in tasks.tasks if len(k.inputs[0]) == 3 and k.inputs[0][0] == alpha * alpha]
    a2 = alpha * alpha
    assert sorted(k.inputs for k in products) == [[(a2, tiles, 16), (a2, 16, 24)], [(a2, tiles, 24), (a2, 24, 24)]]
    assert not [k for k in tasks.kernels if "conv2d" in k.name]
    transforms = [k for k in tasks.kernels if "winograd" in k.name]
    assert len(transforms) == 4 and not any(k.tunable for k in transforms)
    assert sorted(k.reason.split()[1] for k in transforms) == ["input", "input", "output", "output"]
    x = source.random_inputs(1)
    chosen = constructed_configs(tasks, "roller", {})
    assert set(chosen) >= {k.hash for k in products}
    for configs in (chosen, {}):
        mod, _ = scheduled_module(tasks, configs)
        assert compare(ModelRunner(compile_module(mod, tasks.target))(*x), source.reference(x)) < 1e-4
    monkeypatch.setattr(winograd, "WINOGRAD", False)
    _, direct = load_model_tasks(f"{path}:make", host_target())
    assert len([k for k in direct.tasks if "conv2d" in k.name]) == 2


def test_the_conformance_family_takes_both_tiles():
    """``family:winograd`` (the model conformance suite builds and checks it): F(4x4) where the output divides into
    4x4 tiles, F(2x2) where it does not, every stride-1 3x3 convolution rewritten."""
    pytest.importorskip("torch")
    from tiletune.model.kernels.tasks import load_model_tasks

    _, tasks = load_model_tasks("family:winograd", host_target())
    products = sorted(k.inputs for k in tasks.tasks if len(k.inputs[0]) == 3)
    assert products == [[(16, 15, 16), (16, 16, 24)], [(16, 15, 24), (16, 24, 24)], [(36, 6, 16), (36, 16, 16)]]
    assert not [k for k in tasks.kernels if "conv2d" in k.name]
