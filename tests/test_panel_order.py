"""The panel order (tiletune.construct.panel_constructions): a kernel that reads a model weight heavier than its
activations gets its constructions with the cores splitting only the weight's own axes; the constructive start
measures them, and the confirmation adds the panel orders of a task's candidates."""
import copy
import dataclasses

import numpy as np
import pytest

import tiletune.schedules.cpu as cpu
from tiletune.construct import constructions, panel_constructions
from tiletune.measure import FunctionMeasurer
from tiletune.model.tuning.confirm import CONFIRM, confirm_task
from tiletune.records import Record, RecordWriter, load
from tiletune.schedules import check, make_space
from tiletune.space import Config
from tiletune.target import host_target

from .test_weight_block import _matmul

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")

# a linear layer over 6 rows (weight 40 x 24 elements against 6 x 40 of activation), a product of two
# activations (no weight) and a linear layer over 64 rows (weight 8 x 4 against 64 x 8 of activation)
FACTORY = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.small = nn.Linear(40, 24), nn.Linear(8, 4)

    def forward(self, x, y, z):
        return self.proj(x), x @ y.transpose(1, 2), self.small(z)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 6, 40), torch.randn(1, 10, 40), torch.randn(1, 64, 8))
'''


@pytest.fixture(scope="module")
def tasks(home):
    from tiletune.model.kernels.tasks import load_model_tasks

    path = home / "panel_model.py"
    path.write_text(FACTORY)
    return load_model_tasks(f"{path}:make", host_target())[1]


def _task(tasks, weighted: bool, out: int = 24):
    found = [k for k in tasks.tasks if bool(k.workload.weights) == weighted and (not weighted or k.output[-1] == out)]
    assert found, [k.name for k in tasks.tasks]
    return found[0].workload


def _rows_split(space, wl):
    """(the knob of the rows (the axis no weight indexes), the knob of the weight's output axis)."""
    spatial = [k for _, k in space.split_knobs if k.kind == "S"]
    rows = [k for k in spatial if k.extent == 6]
    cols = [k for k in spatial if k.extent == 24]
    assert rows and cols, [(k.name, k.extent) for k in spatial]
    return rows[0], cols[0]


def test_the_rows_leave_the_parallel_split_and_the_weight_axes_take_it(tasks):
    target = host_target()
    wl = _task(tasks, True)
    space = make_space(wl, target=target)
    rows, cols = _rows_split(space, wl)
    base = space.to_dict(space.untiled())
    base[rows.name] = [3, 2, 1, 1]  # the rows split between the cores
    base[cols.name] = [1, 3, 1, 8]  # the weight's axis not split at all
    start = space.from_dict(base)
    got = panel_constructions(space, [start], wl, cores=2)
    assert len(got) == 1
    d = space.to_dict(got[0])
    assert d[rows.name] == [1, 6, 1, 1]  # the rows' parallel factor moved into its cache tile
    assert d[cols.name] == [3, 1, 1, 8]  # the weight's axis split for at least 2 cores, from its S1
    assert {k: v for k, v in d.items() if k not in (rows.name, cols.name)} == \
        {k: v for k, v in base.items() if k not in (rows.name, cols.name)}  # the rest as constructed
    check(wl, space, got[0], target)  # the template schedules it
    # a configuration already in the order is not offered again, nor one the cores cannot split
    assert panel_constructions(space, got, wl, cores=2) == []
    assert panel_constructions(space, [start], wl, cores=64) == []


def test_no_panel_order_without_a_weight_or_with_heavier_activations(tasks):
    target = host_target()
    wl = _task(tasks, False)
    space = make_space(wl, target=target)
    rows = [k for _, k in space.split_knobs if k.kind == "S" and k.extent == 6][0]
    split = space.from_dict({**space.to_dict(space.untiled()), rows.name: [3, 2, 1, 1]})
    assert panel_constructions(space, [split], wl, cores=2) == []
    # the linear layer over 64 rows: its activation outweighs its weight
    heavy = _task(tasks, True, out=4)
    space = make_space(heavy, target=target)
    rows = [k for _, k in space.split_knobs if k.kind == "S" and k.extent == 64][0]
    split = space.from_dict({**space.to_dict(space.untiled()), rows.name: [4, 16, 1, 1]})
    assert panel_constructions(space, [split], heavy, cores=2) == []


def test_the_constructive_start_measures_the_panel_order(tasks):
    target = host_target()
    wl = _task(tasks, True)
    space = make_space(wl, target=target)
    tops = constructions("construct", space, workload=wl, target=target, k=10, rng=np.random.default_rng(0))
    firsts = constructions("gensor", space, workload=wl, target=target, k=1, rng=np.random.default_rng(0))
    rows, _ = _rows_split(space, wl)
    want = panel_constructions(space, firsts, wl, cores=2)
    if want:  # Gensor's first split the rows in parallel: its panel order is among the starts
        assert want[0] in tops
    assert any(space.to_dict(c)[rows.name][0] == 1 for c in tops)


def test_the_confirmation_adds_the_panel_orders_of_the_candidates(tasks, tmp_path):
    target = host_target()
    wl = _task(tasks, True)
    space = make_space(wl, target=target)
    rows, cols = _rows_split(space, wl)
    base = space.to_dict(space.untiled())
    a = space.from_dict({**base, rows.name: [2, 3, 1, 1], cols.name: [1, 3, 1, 8]})
    b = space.from_dict({**base, rows.name: [6, 1, 1, 1], cols.name: [1, 3, 1, 8]})  # the same panel order as a
    panel = panel_constructions(space, [a], wl, cores=2)[0]
    key = wl.key
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        for c, t in ((a, 1.0), (b, 2.0)):
            w.write(Record(workload=key, target="t", config=space.to_dict(c), costs=(t,), median_s=t, gflops=1.0,
                           error=None, strategy="xgb", trial=1))
    truth = {a: 1.0, b: 2.0, panel: 0.5}
    m = FunctionMeasurer(lambda c: truth[c])
    written = confirm_task(records=load(path), records_path=str(path), workload=key, target="t", space=space,
                           measurer=m, flops=10**6, top=5, rounds=1, task=wl, cores=2)
    assert m.calls == [a, b, panel]  # the top by their records, then their panel order, never tuned, once
    assert [r.strategy for r in written] == [CONFIRM] * 3
    # the same pass again: nothing measured
    assert confirm_task(records=load(path), records_path=str(path), workload=key, target="t", space=space,
                        measurer=m, flops=10**6, top=5, task=wl, cores=2) == []
    assert len(m.calls) == 3


def test_a_weight_the_block_rule_refuses_every_construction_of_gets_their_panel_order(monkeypatch):
    """gpt2's FFN down-projection (128 x 3072 -> 768, a 9 MiB weight; a 2 MiB L2 as on the Xeon): every construction
    of Gensor and Roller splits the rows between the cores, which the weight-block rule refuses; the start is then the
    panel order of the constructions made without the rule, its column block narrowed until the rule allows it.
    Constructions only: nothing is built."""
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: 2 * 1024 * 1024)
    wl = _matmul(128, 3072, 768)
    target = host_target()
    space = make_space(wl, None, target)
    starts = constructions("construct", space, workload=wl, target=target, k=10, rng=np.random.default_rng(0))
    assert starts, "no constructive start"
    for c in starts:
        assert space.allows(c) and space.to_dict(c)["tile_ax0"][0] == 1  # the cores split the columns only
    # the constructions themselves, made without the rule: all refused by it
    unruled = copy.copy(space)
    unruled.constraint = dataclasses.replace(space.constraint, reuse=None)
    made = constructions("construct", unruled, workload=wl, target=target, k=10, rng=np.random.default_rng(0))
    assert made
    if any(space.allows(c) for c in made):  # the analytic model ranks by this CPU's measured spec
        pytest.skip("on this CPU a construction made without the rule is allowed by it: the refused-by-all case "
                    "(the Xeon's) does not arise here; the starts above were checked")


@pytest.mark.parametrize("m, k, n", [(128, 6144, 1536), (97, 3001, 770)])
def test_a_weight_no_column_block_fits_gets_a_start_the_rule_allows(monkeypatch, m, k, n):
    """A reduction so long that one column tile over all of it is more than the rule's block (6144 fp32 steps x 48
    columns: 1.1 MiB on a 2 MiB L2) had no constructive start: the constructions split the rows between the cores and
    no narrowing of their columns fits the rule. The start is then their blocked order: no row loop above the
    reduction block, the cores splitting the columns. An odd shape (97 rows, a prime reduction) whose construction
    made without the rule is allowed by it starts from that construction. Constructions only: nothing is built."""
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: 2 * 1024 * 1024)
    wl = _matmul(m, k, n)
    target = host_target()
    space = make_space(wl, None, target)
    starts = constructions("construct", space, workload=wl, target=target, k=10, rng=np.random.default_rng(0))
    assert starts, "no constructive start"
    reuse = space.constraint.reuse
    for c in starts:
        assert space.allows(c) and reuse.row_chunks(c) == 1 and space.to_dict(c)["tile_ax1"][0] >= 2
    if k == 6144:
        for c in starts:
            d = space.to_dict(c)
            assert d["tile_ax0"][:2] == [1, 1] and 16 <= d["tile_k"][1] < k  # rows under a reduction block
            assert reuse.block(c) > reuse.block_bytes  # no column block would have fitted


@pytest.mark.parametrize("method", ["gensor", "roller"])
def test_one_method_whose_constructions_the_rule_refuses_still_gives_a_start(monkeypatch, method):
    """bert-small's FFN down-projection (128 x 2048 -> 512, a 4 MiB weight; a 1 MiB L2): where the weight-block rule
    refuses every construction of Gensor (or Roller) alone, as `model build --construct gensor` and the torch backend
    ask, the method still gives a start the rule allows (its own first made without the rule, or its panel or blocked
    order), not none (which left the task on the default schedule). Constructions only: nothing is built."""
    monkeypatch.setattr(cpu, "l2_bytes", lambda target: 1024 * 1024)
    wl = _matmul(128, 2048, 512)
    target = host_target()
    space = make_space(wl, None, target)
    starts = constructions(method, space, workload=wl, target=target, k=4, rng=np.random.default_rng(0))
    assert starts and all(space.allows(c) for c in starts)
