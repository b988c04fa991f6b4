"""Shared search across shapes (issue 38, ``model tune --shapes ... --shared-search``, tiletune.model.dynamic.shared_search):
a model with a symbolic sequence length tuned at two lengths by one search per kernel; every shape's tasks get
records in the one records file, each task's best is a measured successful record, a re-run recalls everything,
the build matches torch at the tuned lengths and between them; bad use is one line."""
import json
import re

import numpy as np
import pytest

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")

FACTORY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x):
        return self.out(nn.functional.gelu(self.fc(x))) + x


def make():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(1, 16, 32),), {"x": {1: torch.export.Dim("seq", min=8, max=64)}}


def fixed():
    torch.manual_seed(0)
    return nn.Linear(32, 32).eval(), (torch.randn(4, 32),)
'''

QUICK = ["--repeat", "1", "--min-repeat-ms", "0", "-q"]


@pytest.fixture(scope="module")
def spec(home):
    path = home / "shared_model.py"
    path.write_text(FACTORY)
    return f"{path}:make"


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_shares():
    from tiletune.model.dynamic.shared_search import _shares

    assert _shares(20, [2, 2, 1]) == [8, 8, 4]
    assert sum(_shares(7, [3, 2, 2])) == 7 and _shares(1, [2, 2]) in ([1, 0], [0, 1])


def test_groups_are_one_kernel_at_every_shape(spec):
    from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks
    from tiletune.model.dynamic.shared_search import groups_of
    from tiletune.model.frontend.source import load
    from tiletune.model.tuning.tuner import TaskState
    from tiletune.schedules import make_space
    from tiletune.target import host_target

    source = load(spec)
    dyn = shape_tasks(source, host_target(), "NHWC", parse_shapes(["seq=16,32,48"], source))
    states = [TaskState(k) for k in dyn.merged.tasks]
    for st in states:
        st.space = make_space(st.kernel.workload, None, dyn.target)
    groups, alone = groups_of(dyn, states)
    assert len(groups) == 2 and not alone  # fc+gelu and out+add, each at three lengths
    for g in groups:
        names = [st.kernel.name for st in g.states]
        assert [n.split("@")[1] for n in names] == ["seq=16", "seq=32", "seq=48"], names  # smallest first
        assert len({n.split("@")[0] for n in names}) == 1
        assert len(set(g.extents)) == 3 and all(16 * (i + 1) in e for i, e in enumerate(g.extents)), g.extents


def test_shared_search_tunes_every_shape_and_builds(spec, tmp_path, capsys):
    from tiletune.cli import main

    rec = tmp_path / "shared.jsonl"
    argv = ["model", "tune", spec, "--shapes", "seq=16,32", "-r", str(rec), "--trials", "16", "--shared-search", *QUICK]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "shared search: 4 tasks in 2 kernels searched across their shapes" in out, out
    assert "16 trials (16 measured, 0 from records)" in out, out
    recs = _records(rec)
    assert len(recs) == 16
    keys = {r["workload"] for r in recs}
    assert len(keys) == 4  # every task of both shapes has records
    for k in keys:  # each task's best is a measured successful record of that task, made by the shared search
        mine = [r for r in recs if r["workload"] == k]
        assert all(r["strategy"] == "shared-search" and r["measurer"] == "local" for r in mine), mine
        assert any(r["error"] is None and r["median_s"] > 0 for r in mine), mine
    # one search per kernel (fc+gelu, out+add): equal shares of the budget, 8 measurements each, split over its two
    # lengths, each of which confirms 2 candidates measured at the other at the end
    by_kernel: dict = {}
    for r in recs:
        by_kernel.setdefault(r["workload"].split("[")[0], []).append(r["workload"])
    assert sorted(len(v) for v in by_kernel.values()) == [8, 8] and all(len(set(v)) == 2 for v in by_kernel.values())
    # every shape starts from its own top construction (what a task of tune_model measures first)
    from tiletune.model.dynamic.shapes import parse_shapes, shape_tasks
    from tiletune.model.frontend.source import load
    from tiletune.model.tuning.tuner import MODEL_START_K
    from tiletune.schedules import make_space
    from tiletune.strategies.base import TuneContext
    from tiletune.strategies.starts import DEFAULT_START_SWEEP, start_states
    from tiletune.target import host_target

    source = load(spec)
    dyn = shape_tasks(source, host_target(), "NHWC", parse_shapes(["seq=16,32"], source))
    for k in dyn.merged.tasks:
        space = make_space(k.workload, None, dyn.target)
        first = start_states(space, "construct", np.random.default_rng(0), TuneContext(k.workload, dyn.target),
                             MODEL_START_K, fallback="random", sweep=DEFAULT_START_SWEEP)[0]
        want = json.loads(json.dumps(space.to_dict(first)))
        assert next(r["config"] for r in recs if r["workload"] == k.workload.key) == want, k.name
    # a re-run recalls everything
    assert main(argv) == 0
    assert "16 trials (0 measured, 16 from records)" in capsys.readouterr().out

    lib = tmp_path / "shared.so"
    assert main(["model", "build", spec, "--shapes", "seq=16,32", "-r", str(rec), "-o", str(lib)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"matches the original at seq=16, seq=32, seq=24", out), out
    meta = json.loads((tmp_path / "shared.so.json").read_text())
    assert meta["tuned"] == 4
    assert "tuned" in meta["kernels"]["seq=16"].values() and "tuned" in meta["kernels"]["seq=32"].values()

    from tiletune.api import load_model

    model = load_model(str(lib), first_use=None)
    for n in (16, 32, 24):
        x = source.random_inputs(n, {"seq": n})
        np.testing.assert_allclose(model(*x)[0], source.reference(x)[0], rtol=1e-4, atol=1e-4)


def test_bad_use_is_one_line(spec, tmp_path, capsys):
    from tiletune.cli import main

    rec = str(tmp_path / "r.jsonl")

    def err(argv):
        assert main(argv) == 2
        e = capsys.readouterr().err.strip()
        assert e.startswith("tiletune: error:") and "\n" not in e, e
        return e

    base = ["model", "tune", spec, "-r", rec, "--shared-search", *QUICK]
    assert "two or more shapes" in err([*base, "--trials", "8"])
    assert "two or more shapes" in err([*base, "--trials", "8", "--shapes", "seq=16"])
    assert "does not take --seconds" in err([*base, "--shapes", "seq=16,32", "--trials", "8", "--seconds", "5"])
    assert "does not take --shape-transfer" in err([*base, "--shapes", "seq=16,32", "--trials", "8",
                                                    "--shape-transfer"])
    assert "does not take --confirm" in err([*base, "--shapes", "seq=16,32", "--trials", "8", "--confirm", "3"])
    assert "give a budget: --trials" in err([*base, "--shapes", "seq=16,32"])
    assert "no symbolic dimension" in err(["model", "tune", spec.replace(":make", ":fixed"), "-r", rec, "--trials",
                                           "8", "--shapes", "seq=16,32", "--shared-search", *QUICK])
