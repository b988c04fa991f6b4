"""A model's weights in the CPU template's panels, packed once when the model is built: the tasks know their
weights, a measured kernel takes them packed (and checks against the unpacked reference), the model build
folds the packing into the constants and matches torch; and the activations that legalize to exp/erf/tanh
(GELU, SiLU, sigmoid) use TVM's fast forms, and x ** 3 multiplies."""
import numpy as np
import pytest

from tiletune.measure.base import MeasureSettings
from tiletune.target import host_target

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")

FACTORY = '''
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.gate, self.down = nn.Linear(24, 40), nn.Linear(24, 40), nn.Linear(40, 8)

    def forward(self, x, y):
        h = nn.functional.gelu(self.up(x)) * nn.functional.silu(self.gate(x))
        a = torch.sigmoid(x @ y.transpose(1, 2))  # two activations: no weight
        return self.down(h), nn.functional.gelu(a, approximate="tanh") + a ** 3


def make():
    torch.manual_seed(0)
    return Mlp().eval(), (torch.randn(1, 5, 24), torch.randn(1, 7, 24))
'''


@pytest.fixture(scope="module")
def model(home):
    from tiletune.model.kernels.tasks import load_model_tasks

    path = home / "mlp_model.py"
    path.write_text(FACTORY)
    return load_model_tasks(f"{path}:make", host_target())


def _config(wl, space, target, pack=True):
    """A configuration the template schedules, with ``pack`` on (when ``pack``)."""
    from tiletune.schedules import check
    from tiletune.schedules.cpu import InvalidConfig

    for c in space.sample_unique(np.random.default_rng(0), 300):
        try:
            check(wl, space, c, target)
        except InvalidConfig:
            continue
        if not pack or space.to_dict(c).get("pack"):
            return c
    pytest.fail("no schedulable configuration with pack=1 in 300 samples")


def test_activations_use_the_fast_forms(model):
    import tvm

    _, tasks = model
    text = "\n".join(f.script() for f in tasks.fused.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    for exact in ("T.erf(", "T.exp(", "T.tanh(", "T.sigmoid(", "T.pow("):
        assert exact not in text
    assert "T.max(T.min(" in text  # the clamped polynomials of fast_erf / fast_exp / fast_tanh


def test_weights_are_known_and_a_measured_kernel_takes_them_packed(model):
    from tiletune.measure.local import Prepacked, build_kernel, run_kernel
    from tiletune.schedules import cpu, make_space, prepacked_inputs

    _, tasks = model
    linear = [k.workload for k in tasks.tasks if k.workload.weights]
    assert len(linear) >= 2  # up+gate (one kernel each, or the same kernel twice) and down
    assert any(not k.workload.weights for k in tasks.tasks if hasattr(k.workload, "weights"))  # x @ y^T
    wl = linear[0]
    space = make_space(wl, None, tasks.target)
    cfg = _config(wl, space, tasks.target)
    panels = prepacked_inputs(wl, space, cfg, tasks.target)
    assert panels and all(wl.input_names()[i] in wl.weights for i in panels)
    assert all(p.streams == cpu.WEIGHT_STREAMS for p in panels.values())  # K = 24: a matmul's weight, in streams
    lib = build_kernel(wl, space, cfg, tasks.target)
    assert isinstance(lib, Prepacked)
    costs = run_kernel(wl, lib, MeasureSettings(repeat=1, min_repeat_ms=0))  # raises WrongAnswer if unpacked
    assert costs and all(c > 0 for c in costs)
    # the same configuration built for a user packs inside the kernel and takes the workload's own inputs
    plain = __import__("tiletune.schedules", fromlist=["build"]).build(wl, space, cfg, tasks.target).mod
    ins = wl.make_inputs()
    import tvm

    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), "float32"))
    plain["main"](*[tvm.runtime.tensor(x) for x in ins], out)
    np.testing.assert_allclose(out.numpy(), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_the_model_build_packs_the_weights_once_and_matches_torch(model):
    import tvm
    from tvm import relax

    from tiletune.model.build import Chosen, ModelRunner, compare, compile_module, scheduled_module
    from tiletune.schedules import cpu, make_space

    source, tasks = model
    chosen = {}
    for k in tasks.tasks:
        space = make_space(k.workload, None, tasks.target)
        cfg = _config(k.workload, space, tasks.target, pack="pack" in space.names)
        chosen[k.hash] = Chosen(k, cfg, space, 1e-3, 1.0)
    mod, how = scheduled_module(tasks, chosen)
    assert any(cpu.PREPACK in f.script() for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
    folded = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(),
                                       relax.transform.FoldConstant()])(mod)
    called = set()

    @relax.expr_functor.visitor
    class Calls(relax.PyExprVisitor):
        def visit_call_(self, call):
            if call.args and isinstance(call.args[0], tvm.ir.GlobalVar):
                called.add(call.args[0].name_hint)
            for a in call.args:
                self.visit_expr(a)

    Calls().visit_expr(folded["main"])
    assert not [n for n in called if cpu.PREPACK in folded[n].script()]  # every packing ran at build time
    ex = compile_module(mod, tasks.target)
    for seed in (1, 2):
        x = source.random_inputs(seed)
        assert compare(ModelRunner(ex)(*x), source.reference(x)) < 1e-4


def test_records_of_the_kernels_before_their_hash_changed_say_so(model, tmp_path):
    from tiletune.errors import TiletuneError
    from tiletune.model.build import best_configs, untuned_reasons
    from tiletune.records import Record
    from tiletune.target import target_key

    _, tasks = model
    tkey = target_key(tasks.target)
    old = [Record(workload=k.workload.key.rsplit("@", 1)[0] + "@0123456789abcdef", target=tkey, config={},
                  costs=(1e-3,), median_s=1e-3, gflops=1.0) for k in tasks.tasks]
    path = tmp_path / "old.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in old))
    with pytest.raises(TiletuneError, match="earlier tiletune"):
        best_configs(tasks, str(path))
    reasons = untuned_reasons(tasks, str(path), {})
    assert all("earlier tiletune" in why for why in reasons.values()) and len(reasons) == len(tasks.tasks)


def test_records_of_a_kernel_that_the_fused_module_named_otherwise_are_its_own(model, tmp_path):
    """Another operator in the model (a 3x3 convolution by Winograd's transforms, a matmul more) renumbers the
    fused kernels: a record whose key differs in the kernel's name alone still chooses that kernel."""
    import numpy as np

    from tiletune.model.build import best_configs, foreign_workloads, untuned_reasons
    from tiletune.records import Record
    from tiletune.schedules import make_space
    from tiletune.target import target_key

    _, tasks = model
    k = tasks.tasks[0]
    space = make_space(k.workload, None, tasks.target)
    config = space.untiled()
    renamed = "fused_renamed9" + k.workload.key[k.workload.key.find("["):]
    rec = Record(workload=renamed, target=target_key(tasks.target), config=space.to_dict(config),
                 costs=(1e-3,), median_s=1e-3, gflops=1.0)
    path = tmp_path / "renamed.jsonl"
    path.write_text(rec.to_json() + "\n")
    chosen = best_configs(tasks, str(path))
    assert list(chosen) == [k.hash] and chosen[k.hash].config == config
    assert foreign_workloads(tasks, str(path)) == 0 and k.name not in untuned_reasons(tasks, str(path), chosen)
    assert np.isclose(chosen[k.hash].median_s, 1e-3)


def test_a_kernel_with_weights_is_timed_with_them_cold(model, monkeypatch):
    import tvm

    from tiletune.measure import local
    from tiletune.schedules import make_space
    from tiletune.workloads import parse

    _, tasks = model
    wl = next(k.workload for k in tasks.tasks if getattr(k.workload, "weights", None))
    assert local.cold_weights(wl, gpu=False) and not local.cold_weights(wl, gpu=True)
    assert not local.cold_weights(parse("gemm:M=16,N=16,K=16"), gpu=False)  # a standalone kernel: no weights
    seen = []
    real = tvm.runtime.Module.time_evaluator

    def spy(self, name, dev, **kw):
        seen.append(kw)
        return real(self, name, dev, **kw)

    monkeypatch.setattr(tvm.runtime.Module, "time_evaluator", spy)
    space = make_space(wl, None, tasks.target)
    settings = MeasureSettings(repeat=3, min_repeat_ms=0)
    costs = local.run_kernel(wl, local.build_kernel(wl, space, _config(wl, space, tasks.target, pack=False),
                                                     tasks.target), settings)
    assert len(costs) == 3 and all(c > 0 for c in costs)
    assert seen and seen[-1]["f_preproc"] == local.COLD_PREPROC and seen[-1]["number"] == 1


def test_kernel_latencies_time_a_weight_kernel_on_its_packed_weights(model, monkeypatch):
    """``model tasks --measure`` times a tuned kernel as the model runs it: built as the tuner builds it (its weights
    packed once, outside the timing; ``Prepacked``), not in the user's form that packs them in every call."""
    from tiletune.measure import local
    from tiletune.measure.base import MeasureSettings
    from tiletune.model import build
    from tiletune.schedules import make_space, prepacked_inputs

    _, tasks = model
    chosen, packed = {}, set()
    for k in tasks.tasks:
        space = make_space(k.workload, None, tasks.target)
        cfg = _config(k.workload, space, tasks.target, pack="pack" in space.names)
        chosen[k.hash] = build.Chosen(k, cfg, space, 1e-3, 1.0)
        if prepacked_inputs(k.workload, space, cfg, tasks.target):
            packed.add(k.workload.key)
    assert packed
    built = {}

    def spy(workload, space, config, target):
        built[workload.key] = out = local.build_kernel(workload, space, config, target)
        return out

    monkeypatch.setattr(build, "build_kernel", spy)
    lat = build.kernel_latencies(tasks, chosen, MeasureSettings(repeat=1, min_repeat_ms=0))
    assert {key for key, lib in built.items() if isinstance(lib, local.Prepacked)} == packed
    assert all(np.isfinite(lat[h]) and lat[h] > 0 for h in chosen)


def test_weight_panels_in_streams_put_each_element_where_their_index_map_says():
    """The numpy packing (what a measured kernel is given) and the index map (what the model build folds into the
    constant) agree element by element."""
    from tiletune.schedules.cpu import Panels

    a = np.random.default_rng(0).standard_normal((3, 3, 12, 64)).astype("float32")  # HWIO, K vectorized
    p = Panels(nd=3, first_red=0, inner=32, streams=4)
    packed = p.pack(a)
    assert packed.shape == (2, 3, 3, 4, 3, 32)  # [k // 32, kh, kw, c % 4, c // 4, k % 32]
    for idx in np.ndindex(*a.shape):
        assert packed[p.index_map(*idx)] == a[idx]
    plain = Panels(nd=3, first_red=0, inner=32)
    assert plain.pack(a).shape == (2, 3, 3, 12, 32)
