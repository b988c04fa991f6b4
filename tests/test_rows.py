"""Row reductions as tasks (tiletune.workloads.rows, tiletune.schedules.rows): the softmax of attention scores
with a mask added (the add fused into the scores' matmul), the softmax of attention with a causal -inf mask (the
mask's fully-masked-row flag read by the softmax kernel itself), layer norms with affine parameters, an RMS norm,
a hand-written softmax (its max and sum kernels) and means over the last axis, extracted from a small torch model
at shapes nobody wrote down (rows of 77, 37 and 1000, a sequence of 37, 7 heads of 11), become tasks; every
structure of their space builds and computes what TVM's unscheduled build computes; random, xgb, evo and dgd
tune them a few trials (the local searches starting from the template's own starts); the model builds with
their tuned kernels and matches torch. Kernels that are no row reduction, and CUDA targets, keep their
handling."""
import json
import math
import re

import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.measure.base import MeasureSettings
from tiletune.target import host_target
from tiletune.workloads.rows import RowWorkload

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")

FACTORY = '''
import torch
from torch import nn
import torch.nn.functional as F


class Rows(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(77, 77)
        self.ln, self.rms, self.ln2 = nn.LayerNorm(77), nn.RMSNorm(77), nn.LayerNorm(1000)
        self.register_buffer("causal", torch.triu(torch.full((37, 37), float("-inf")), 1))

    def forward(self, x, mask, y):
        s = self.q(x) @ x.transpose(-1, -2) * 0.1 + mask  # scores of 37 tokens, the mask added
        a = torch.softmax(s, -1) @ x
        h = x.view(2, 37, 7, 11).transpose(1, 2)  # 7 heads of 11, a causal mask
        c = F.scaled_dot_product_attention(h, h, h, attn_mask=self.causal).transpose(1, 2).reshape(2, 37, 77)
        h = x * 0.125
        e = (h - h.amax(-1, keepdim=True)).exp()  # a softmax written out: a max and a sum kernel
        b = self.ln(a) + self.rms(x) + e / e.sum(-1, keepdim=True) + c
        return b.mean(-1), self.ln2(y).mean(-1, keepdim=True)


def make():
    torch.manual_seed(0)
    m = Rows().eval()
    with torch.no_grad():
        for ln in (m.ln, m.ln2):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.5, 0.5)
        m.rms.weight.uniform_(0.5, 1.5)
    return m, (torch.randn(2, 37, 77), torch.randn(1, 37, 37), torch.randn(37, 1000))
'''

SETTINGS = MeasureSettings(repeat=1, min_repeat_ms=0)


@pytest.fixture(scope="module")
def spec(home):
    path = home / "rows_model.py"
    path.write_text(FACTORY)
    return f"{path}:make"


@pytest.fixture(scope="module")
def model(spec):
    from tiletune.model.kernels.tasks import load_model_tasks

    return load_model_tasks(spec, host_target())


def _rows(tasks) -> dict:
    return {k.name: k for k in tasks.tasks if isinstance(k.workload, RowWorkload)}


def _one(rows: dict, *parts: str):
    found = [k for n, k in rows.items() if all(p in n for p in parts)]
    assert len(found) == 1, (parts, sorted(rows))
    return found[0]


def test_row_reductions_are_tasks_with_their_rows(model):
    from tiletune.workloads import parse

    _, tasks = model
    rows = _rows(tasks)
    softmax = _one(rows, "softmax", "broadcast_to2")
    assert softmax.workload.rows == (2, 37) and softmax.workload.widths == (37,)
    assert softmax.workload.keepable == ("T_fast_exp",)  # the exponential, read by the sum and the division
    masked = _one(rows, "softmax", "where")
    assert masked.workload.rows == (2, 7, 37) and masked.workload.widths == (37,)
    assert [dt for _, _, dt in masked.workload._params] == ["float32", "int8", "float32"]
    norm = _one(rows, "layer_norm", "add")  # the 77-wide layer norm with its affine parameters and the residual
    assert norm.workload.rows == (2, 37) and norm.workload.widths == (77,)
    wide = [k for n, k in rows.items() if k.workload.widths == (1000,)]
    assert sorted(k.workload.rows for k in wide) == [(37,), (37,)]  # the 1000-wide layer norm and its mean
    assert _one(rows, "rsqrt").workload.rows == (2, 37)  # RMS norm: a mean kept as 2x37x1, then the row's scale
    plain = [k for n, k in rows.items() if re.fullmatch(r"(max|sum)\d*", n)]  # keepdims: rows 2 x 37 (x 1)
    assert len(plain) == 2 and all(k.workload.rows == (2, 37) for k in plain)
    for k in rows.values():
        assert k.workload.key.startswith("rows:") and parse(k.workload.key).key == k.workload.key
        assert k.flops == k.workload.flops > 0 and k.workload.bytes_moved > 0
    # the matmuls stay tiling tasks (the mask add in the scores' epilogue), elementwise kernels keep their reason
    assert any("matmul" in k.name and not isinstance(k.workload, RowWorkload) for k in tasks.tasks)
    assert all(k.reason for k in tasks.kernels if not k.tunable)


def test_what_is_no_row_reduction_is_refused(model):
    from tvm import te

    from tiletune.model.kernels.tasks import extract

    a = te.placeholder((4, 6, 8), name="a")
    k = te.reduce_axis((0, 6), name="k")
    across = te.compute((4, 8), lambda i, j: te.sum(a[i, k, j], axis=k), name="s")  # a mean over a strided axis
    b = te.placeholder((8, 5), name="b")
    r = te.reduce_axis((0, 8), name="r")
    mm = te.compute((4, 6, 5), lambda i, j, n: te.sum(a[i, j, r] * b[r, n], axis=r), name="mm")
    for outs, read in (([a, across], "a"), ([a, b, mm], "b")):
        with pytest.raises(TiletuneError, match=f"not a row reduction: block .* reads {read} across the reduced axes"):
            RowWorkload.from_prim_func(te.create_prim_func(outs), "k")
    # on CUDA, dlight schedules row reductions: no row task
    _, tasks = model
    gpu = extract(tasks.fused, {"kind": "cuda", "arch": "sm_90"})
    assert not _rows(gpu) and any("softmax" in k.name and k.rule for k in gpu.kernels)


def test_every_structure_builds_and_matches_the_unscheduled_build(model):
    import tvm
    import tvm_ffi

    from tiletune.schedules import build, make_space, starts

    _, tasks = model
    target = tasks.target
    dev = tvm.cpu()
    for k in _rows(tasks).values():
        wl = k.workload
        before = tvm_ffi.structural_hash(wl.func)
        space = make_space(wl, None, target)
        lanes = space.knobs[space.names.index("vector")].values
        grid = list(starts(wl, space, target))
        for one_pass in (0, 1):
            for lane in (0, lanes[-1]):
                d = dict(space.to_dict(grid[0]), one_pass=one_pass, vector=lane,
                         rows=min(space.knobs[space.names.index("rows")].values))
                grid.append(space.from_dict(d))
        inputs = wl.make_inputs(0)
        want = wl.reference(*inputs)  # TVM's build of the unscheduled function
        rtol, atol = wl.tolerance()
        for config in dict.fromkeys(grid):
            lib = build(wl, space, config, target).mod
            out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.out_dtype), dev)
            lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
            assert np.allclose(out.numpy(), want, rtol=rtol, atol=atol), (k.name, space.to_dict(config))
        assert tvm_ffi.structural_hash(wl.func) == before  # scheduling works on a copy


def test_the_space_fits_odd_rows_and_starts_in_it(model):
    from tiletune.schedules import make_space, starts
    from tiletune.schedules.rows import aligned_rows

    _, tasks = model
    rows = _rows(tasks)
    target = tasks.target
    softmax = make_space(_one(rows, "softmax", "broadcast_to2").workload, None, target)
    # 37 is prime: one vector of the whole row or none; chunks at row boundaries (2 x 37 rows)
    assert softmax.to_dict(softmax.untiled()).keys() == {"one_pass", "rows", "vector", "keep", "unroll"}
    assert softmax.knobs[softmax.names.index("vector")].values == (0, 37)
    assert set(softmax.knobs[softmax.names.index("rows")].values) <= set(aligned_rows((2, 37))) == {1, 37, 74}
    assert not softmax.split_knobs
    wide = make_space(next(k for k in rows.values() if k.workload.widths == (1000,)).workload, None, target)
    assert wide.knobs[wide.names.index("vector")].values == (0, 4, 8, 20, 40)
    for k in rows.values():
        space = make_space(k.workload, None, target)
        first = [space.to_dict(c) for c in starts(k.workload, space, target)]
        assert first[0]["one_pass"] == 1 and any(d["one_pass"] == 0 for d in first)
        assert any(d["rows"] == k.workload.row_count for d in first)  # serial: no thread pool for a small kernel
        assert len({json.dumps(d, sort_keys=True) for d in first}) == len(first)


@pytest.fixture(scope="module")
def pool():
    from tiletune.measure.factory import shared_pool

    p = shared_pool(host_target())
    yield p
    p.close()


@pytest.mark.parametrize("strategy", ["random", "xgb", "evo", "dgd"])
def test_strategies_tune_row_tasks(model, home, pool, strategy):
    from tiletune.model.kernels.tasks import ModelTasks
    from tiletune.model.tuning.tuner import tune_model
    from tiletune.records import CONFIRM, load
    from tiletune.schedules import starts

    _, tasks = model
    rows = _rows(tasks)
    some = [_one(rows, "softmax", "where"), _one(rows, "layer_norm", "add"), _one(rows, "rsqrt")]
    sub = ModelTasks(tasks.fused, tasks.target, some)
    rec = home / f"rows-{strategy}.jsonl"
    res = tune_model(sub, strategy=strategy, trials=3 * len(some), records=str(rec), round_trials=3, batch_size=3,
                     settings=SETTINGS, pool=pool)
    assert all(math.isfinite(st.best_s) and st.trials == 3 and not st.failures for st in res.states), \
        [(st.kernel.name, st.done, st.failure) for st in res.states]
    records = load(str(rec))
    assert all(r.ok for r in records) and {r.workload for r in records} == {k.workload.key for k in some}
    if strategy != "random":  # the local searches measure the template's starts first
        for st in res.states:
            mine = [st.space.from_dict(r.config) for r in records if r.workload == st.key and r.strategy != CONFIRM]
            assert mine == starts(st.kernel.workload, st.space, tasks.target)[:3]


def test_gensor_and_roller_propose_a_row_reductions_template_starts(model):
    """No tiles for the analytic model to describe: the constructive strategies propose the template's starts
    in their order, the top k and then the rest (after_topk=continue), or only the top k (stop)."""
    from tiletune.schedules import starts
    from tiletune.session import build_task

    _, tasks = model
    wl = _one(_rows(tasks), "softmax", "broadcast_to2").workload
    for strategy in ("gensor", "roller"):
        task = build_task(wl, strategy, target=tasks.target, measure=False)
        want = starts(wl, task.space, tasks.target)
        assert len(want) >= 3
        got = []
        while batch := task.strategy.ask(2):
            got += batch
        assert got == want
        task = build_task(wl, strategy, target=tasks.target, measure=False, options={"k": 2, "after_topk": "stop"})
        assert task.strategy.ask(8) == want[:2] and task.strategy.ask(8) == []


def test_the_model_builds_with_tuned_row_kernels_and_matches_torch(model, home, pool):
    from tiletune.model.build import ModelRunner, best_configs, check, compile_module, scheduled_module
    from tiletune.model.tuning.tuner import tune_model

    source, tasks = model
    rec = home / "rows-model.jsonl"
    tune_model(tasks, strategy="xgb", trials=2 * len(tasks.tasks), records=str(rec), round_trials=2, batch_size=2,
               settings=SETTINGS, pool=pool)
    chosen = best_configs(tasks, str(rec))
    assert {k.hash for k in _rows(tasks).values()} <= set(chosen)
    mod, how = scheduled_module(tasks, chosen)
    assert all(how[n] == "tuned" for k in _rows(tasks).values() for n in k.names)
    assert check(source, ModelRunner(compile_module(mod, tasks.target))) < 1e-3
