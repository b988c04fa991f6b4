"""A pad kernel taken into the kernel that makes its input (``tiletune.model.kernels.pad_fusion``): the pad is recognized
by its TIR, the border boxes cover the border exactly once, a producer scheduled by a tuned configuration writes
the padded tensor equal to numpy's pad of its own output, and in a model the single-reader pads disappear while
the outputs still match torch."""
import numpy as np
import pytest

from tiletune.target import host_target

pytestmark = pytest.mark.tvm


def _legalized_pad(shape, pads, value=0.0):
    """TVM's own legalization of ``relax.op.nn.pad`` (``pads``: (before, after) per axis)."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        flat = [p for pair in pads for p in pair]
        y = bb.emit(relax.op.nn.pad(x, flat, pad_value=value))
        bb.emit_func_output(y)
    mod = relax.transform.LegalizeOps()(bb.get())
    return next(f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))


@pytest.mark.parametrize("shape,pads,value", [
    ((1, 5, 7, 24), ((0, 0), (1, 1), (1, 1), (0, 0)), 0.0),
    ((1, 6, 9, 3), ((0, 0), (0, 2), (3, 1), (0, 0)), 0.0),  # one side only on an axis, odd sizes
    ((2, 3, 4), ((1, 0), (0, 0), (2, 2)), -1.5),
])
def test_a_legalized_pad_is_recognized_with_its_widths_and_value(shape, pads, value):
    from tiletune.model.kernels.pad_fusion import PadSpec, pad_spec

    spec = pad_spec(_legalized_pad(shape, pads, value))
    assert spec == PadSpec(tuple(b for b, _ in pads), tuple(a for _, a in pads), value)
    assert spec.padded(shape) == tuple(n + b + a for n, (b, a) in zip(shape, pads))


def test_kernels_that_are_not_a_pad_are_not_recognized():
    import tvm
    from tvm import te

    from tiletune.model.kernels.pad_fusion import PadSpec, pad_spec

    x = te.placeholder((4, 6), name="x")
    shifted = te.compute((5, 6), lambda i, j: tvm.tirx.if_then_else(i >= 1, x[i - 1, j], 0.0), name="s")
    scaled = te.compute((4, 6), lambda i, j: x[i, j] * 2.0, name="y")
    # bounds that clip more than the padding does: not a pad of x
    clipped = te.compute((6, 6), lambda i, j: tvm.tirx.if_then_else(
        tvm.tirx.all(i >= 1, i < 4), x[i - 1, j], 0.0), name="c")
    for out in (scaled, clipped):
        assert pad_spec(te.create_prim_func([x, out])) is None
    assert pad_spec(te.create_prim_func([x, shifted])) == PadSpec((1, 0), (0, 0), 0.0)  # bounds written as i >= 1


@pytest.mark.parametrize("shape,before,after", [((1, 5, 7, 3), (0, 1, 2, 0), (0, 1, 0, 0)),
                                                ((2, 3, 4), (1, 0, 2), (0, 3, 1))])
def test_the_border_boxes_cover_the_border_once_and_nothing_else(shape, before, after):
    from tiletune.model.kernels.pad_fusion import PadSpec, border_regions

    spec = PadSpec(before, after, 0.0)
    hits = np.zeros(spec.padded(shape), int)
    for box in border_regions(shape, spec):
        hits[tuple(slice(s, s + e) for s, e in box)] += 1
    interior = tuple(slice(b, b + n) for b, n in zip(before, shape))
    want = np.ones_like(hits)
    want[interior] = 0
    np.testing.assert_array_equal(hits, want)


def test_a_tuned_producer_writes_the_padded_tensor():
    """A fused conv + bias + ReLU (odd sizes) scheduled by sampled configurations of its own task, rewritten to
    write into an asymmetric padding with a non-zero border, equals numpy's pad of the unrewritten kernel's output."""
    import tvm
    from tvm import te, topi

    from tiletune.model.kernels.pad_fusion import PadSpec, into_padded, with_border
    from tiletune.schedules import check, cpu, make_space
    from tiletune.workloads.primfunc import PrimFuncWorkload

    data = te.placeholder((1, 7, 9, 8), name="data")
    weight = te.placeholder((3, 3, 8, 24), name="weight")
    bias = te.placeholder((24,), name="bias")
    conv = topi.nn.conv2d_nhwc(data, weight, 1, 0, 1)
    out = topi.nn.relu(conv + bias)
    func = te.create_prim_func([data, weight, bias, out])
    wl = PrimFuncWorkload.from_prim_func(func, name="conv_relu")
    target = host_target()
    space = make_space(wl, None, target)
    spec = PadSpec((0, 2, 1, 0), (0, 1, 3, 0), 0.5)
    shape = tuple(int(s) for s in out.shape)
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal([int(s) for s in t.shape]).astype("float32") for t in (data, weight, bias)]
    dev = tvm.cpu()
    done = 0
    for cfg in space.sample_unique(np.random.default_rng(1), 60):
        try:
            check(wl, space, cfg, target)
        except cpu.InvalidConfig:
            continue
        plain = cpu.schedule(wl, space, cfg, target).mod["main"]
        padded = with_border(cpu.schedule(wl, space, cfg, target, func=into_padded(func, spec)).mod["main"],
                             shape, spec)
        got = tvm.runtime.tensor(np.full(spec.padded(shape), np.nan, "float32"), dev)
        ref = tvm.runtime.tensor(np.zeros(shape, "float32"), dev)
        tgt = tvm.target.Target(target)
        tvm.compile(tvm.IRModule({"main": padded}), target=tgt)(*[tvm.runtime.tensor(a, dev) for a in ins], got)
        tvm.compile(tvm.IRModule({"main": plain}), target=tgt)(*[tvm.runtime.tensor(a, dev) for a in ins], ref)
        want = np.pad(ref.numpy(), list(zip(spec.before, spec.after)), constant_values=spec.value)
        np.testing.assert_array_equal(got.numpy(), want)
        done += 1
        if done == 2:
            break
    assert done == 2


def test_a_producer_that_reads_its_own_output_is_left_alone():
    from tvm import te

    from tiletune.model.kernels.pad_fusion import PadSpec, into_padded

    a = te.placeholder((4, 8), name="a")
    b = te.placeholder((8, 6), name="b")
    k = te.reduce_axis((0, 8), "k")
    c = te.compute((4, 6), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")  # accumulates in place
    assert into_padded(te.create_prim_func([a, b, c]), PadSpec((1, 0), (1, 0), 0.0)) is None


FACTORY = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.reduce = nn.Conv2d(16, 16, 1)
        self.mid = nn.Conv2d(16, 16, 3, padding=1)
        self.last = nn.Conv2d(16, 16, 3, padding=(2, 1), dilation=(2, 1))

    def forward(self, x):
        h = torch.relu(self.reduce(x))  # read by the pad alone: fused
        g = torch.relu(self.mid(h))  # read by its pad and by the residual below: kept
        return torch.relu(self.last(g) + g)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 16, 9, 11),)
'''


def test_in_a_model_single_reader_pads_are_fused_and_the_outputs_match_torch(home):
    pytest.importorskip("torch")
    from tiletune.model.build import ModelRunner, compare, compile_module, constructed_configs, scheduled_module
    from tiletune.model.kernels.tasks import load_model_tasks

    path = home / "pad_model.py"
    path.write_text(FACTORY)
    source, tasks = load_model_tasks(f"{path}:make", host_target())
    chosen = constructed_configs(tasks, "roller", {})
    assert chosen
    x = source.random_inputs(1)
    pads, labels = {}, {}
    for fuse in (True, False):
        mod, how = scheduled_module(tasks, chosen, fuse_pads=fuse)
        pads[fuse] = mod["main"].script().count("R.call_tir(pad")
        labels[fuse] = [v for v in how.values() if "+ pad" in v]
        assert compare(ModelRunner(compile_module(mod, tasks.target))(*x), source.reference(x)) < 1e-4
    assert (pads[True], pads[False]) == (1, 2)
    assert len(labels[True]) == 1 and not labels[False]
    # no records: the producer keeps the default schedule, and still takes its pad
    mod, how = scheduled_module(tasks, {})
    assert mod["main"].script().count("R.call_tir(pad") == 1
    assert [v for v in how.values() if "+ pad" in v][0].startswith("default (")
    assert compare(ModelRunner(compile_module(mod, tasks.target))(*x), source.reference(x)) < 1e-4
    # what ``model tasks`` says of the two pad kernels
    from tiletune.commands.model import task_table
    from tiletune.model.kernels.pad_fusion import fused_calls

    assert sorted(fused_calls(tasks.fused).values()) == [1]
    table = task_table(tasks)
    assert table.count("taken into the kernel that makes its input (1 of 1 calls)") == 1
    assert table.count("default schedule: no reduction block") >= 1  # the pad of the residual's input
