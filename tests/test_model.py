"""tiletune model: a small torch.nn model (conv-bn-relu, a residual block used twice, a tiny attention
layer, layer norm, linear) imported, fused, its tasks extracted and deduplicated, tuned a few trials per task,
built with the tuned kernels and checked against torch, exported and loaded, its kernels applied from a
MetaSchedule database in a Relax build, and resumed without measuring anything twice."""
import json
import math
import os
import re

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


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1, stride=2), nn.BatchNorm2d(8)
        self.block = Block(8)
        self.qkv, self.fc = nn.Linear(8, 24), nn.Linear(8, 4)

    def forward(self, x):
        x = self.block(torch.relu(self.bn(self.stem(x))))
        t = x.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).chunk(3, -1)
        a = torch.softmax(q @ k.transpose(1, 2), -1) @ v
        return self.fc(a.mean(1))


def make():
    torch.manual_seed(0)
    m = Small().eval()
    for bn in (m.bn, m.block.bn1, m.block.bn2):
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(1, 3, 8, 8),)


def broken():
    class Bad(nn.Module):
        def forward(self, x):
            return x.numpy()  # not exportable
    return Bad(), (torch.randn(2),)
'''

SETTINGS = MeasureSettings(repeat=1, min_repeat_ms=0)


@pytest.fixture(scope="module")
def spec(home):
    path = home / "small_model.py"
    path.write_text(FACTORY)
    return f"{path}:make"


@pytest.fixture(scope="module")
def model(spec):
    from tiletune.model.kernels.tasks import load_model_tasks

    return load_model_tasks(spec, host_target())


@pytest.fixture(scope="module")
def tuned(model, home):
    from tiletune.model.tuning.tuner import tune_model

    _, tasks = model
    rec = home / "small.jsonl"
    result = tune_model(tasks, strategy="random", trials=3 * len(tasks.tasks), records=str(rec), round_trials=3,
                        batch_size=3, settings=SETTINGS, confirm=3)
    return rec, result


def test_tasks_are_extracted_deduplicated_and_classified(model):
    _, tasks = model
    names = [k.name for k in tasks.kernels]
    assert len(set(names)) == len(names)
    convs = [k for k in tasks.tasks if "conv2d" in k.name]
    # stem, block conv1 (+relu), block conv2 (+residual +relu): BN folded away, the epilogues fused
    assert len(convs) == 3 and all("subtract" not in k.name and "divide" not in k.name for k in convs)
    assert any("matmul" in k.name for k in tasks.tasks)
    # softmax is a row-reduction task (tiletune.workloads.rows); the mean over the tokens (not along the last
    # axis) is no task: default schedule, with the reason
    assert [k.workload.key.startswith("rows:") for k in tasks.tasks if "softmax" in k.name] == [True]
    other = {k.name: k.reason for k in tasks.kernels if not k.tunable}
    assert any("mean" in n and "multiply-accumulate" in r for n, r in other.items()), other
    assert all(k.calls >= 1 and k.flops >= 0 for k in tasks.kernels)
    assert tasks.total_flops == sum(k.flops * k.calls for k in tasks.kernels)
    # the bytes a kernel moves at the least: its float32 inputs and output
    assert all(k.nbytes == 4 * sum(math.prod(s) for s in [*k.inputs, k.output]) for k in tasks.kernels)
    # identical kernels are one, with their calls summed
    from tiletune.model.kernels.tasks import call_counts

    counts = call_counts(tasks.fused)
    assert sum(k.calls for k in tasks.kernels) == sum(counts[n] for k in tasks.kernels for n in k.names)


def test_dedup_sums_calls_of_identical_kernels():
    from tiletune.model.kernels.tasks import extract, fuse
    from tiletune.model.passes.pipeline import prepare
    from tiletune.model.frontend.source import load

    tasks = extract(fuse(prepare(load("tiny")).mod, host_target()), host_target())  # two identical residual blocks
    conv = [k for k in tasks.tasks if k.name.startswith("fused_conv2d1_add_relu")]
    assert len(conv) == 1 and conv[0].calls == 2


def test_default_schedule_is_parallel_vectorized_and_correct(model):
    from tiletune.model.kernels.default_schedule import PARALLEL_MIN, checked

    _, tasks = model
    for k in tasks.kernels:
        if k.tunable:
            continue
        func, how = checked(k.func, host_target())
        # a kernel too small for the thread pool may be left as it is (the 8x8 image's transpose+pad)
        assert how in ("parallel+vector", "parallel") or math.prod(k.output) < PARALLEL_MIN, (k.name, how)
    # a large elementwise kernel: one parallel loop, the innermost vectorized, same result
    import tvm
    from tvm import te

    a = te.placeholder((64, 256), name="A")
    b = te.compute((64, 256), lambda i, j: a[i, j] * 2.0 + 1.0, name="B")
    c = te.compute((64, 256), lambda i, j: te.max(b[i, j], 0.0), name="C")
    func, how = checked(te.create_prim_func([a, c]), host_target())
    text = func.script()
    assert how == "parallel+vector" and "T.parallel" in text and "T.vectorized" in text
    assert 'sblock("B")' not in text  # the intermediate is inlined into its consumer


def test_default_schedule_parallelizes_leading_loops_only():
    """A transpose with padding into 3 channels (a CNN's NCHW input to NHWC): the parallel loop covers the
    leading loops (>= PARALLEL_CHUNKS iterations), the inner ones stay loops of their own (no division per
    element), and the result is the unscheduled one's."""
    import tvm
    from tvm import te

    from tiletune.model.kernels.default_schedule import PARALLEL_CHUNKS, checked

    x = te.placeholder((1, 3, 37, 41), name="X")
    y = te.compute((1, 39, 43, 3), lambda n, h, w, c: tvm.tirx.if_then_else(
        tvm.tirx.all(h >= 1, h < 38, w >= 1, w < 42), x[n, c, h - 1, w - 1], 0.0), name="Y")
    func, how = checked(te.create_prim_func([x, y]), host_target())
    assert how in ("parallel+vector", "parallel")
    text = func.script()
    par = [int(n) for n in re.findall(r"in T\.parallel\((\d+)\)", text)]
    assert len(par) == 1 and PARALLEL_CHUNKS <= par[0] < 39 * 43 * 3, text
    assert re.search(r"in range\((43|3)\)", text), text  # an inner loop of its own
    got = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(host_target()))
    a = np.random.default_rng(0).standard_normal((1, 3, 37, 41)).astype("float32")
    out = tvm.runtime.tensor(np.zeros((1, 39, 43, 3), "float32"))
    got["main"](tvm.runtime.tensor(a), out)
    want = np.pad(a.transpose(0, 2, 3, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_array_equal(out.numpy(), want)
    # a transpose's source read one element per row: no vector where it cannot be blocked (60 x 100 are no
    # multiples of the tile); blocked 16 x 16 with the tile's output row vectorized where it can (64 x 128)
    t = te.compute((60, 100), lambda i, j: x[0, 0, j % 37, i % 41] + 1.0, name="T")
    assert "T.vectorized" not in checked(te.create_prim_func([x, t]), host_target())[0].script()
    t = te.compute((64, 128), lambda i, j: x[0, 0, j % 37, i % 41] + 1.0, name="T")
    tiled, how = checked(te.create_prim_func([x, t]), host_target())
    assert how == "parallel+vector" and "T.vectorized(16)" in tiled.script() and "in range(16)" in tiled.script(), \
        tiled.script()
    # rows reduced side by side keep their vector
    rows = te.placeholder((3, 32, 41), name="Rows")
    k = te.reduce_axis((0, 41), name="k")
    r = te.compute((3, 32), lambda c, h: te.sum(rows[c, h, k], axis=k), name="R")
    r_func, how = checked(te.create_prim_func([rows, r]), host_target())
    assert "T.vectorized" in r_func.script(), r_func.script()


def test_tuned_model_matches_torch_and_exports(model, tuned, tmp_path, capsys):
    from tiletune.api import load_model
    from tiletune.cli import main

    source, tasks = model
    rec, result = tuned
    assert result.trials == 3 * len(tasks.tasks)
    assert all(st.trials == 3 for st in result.states)  # round robin first: every task one round
    keys = {json.loads(line)["workload"] for line in rec.read_text().splitlines()}
    assert keys == tasks.keys()
    lib = tmp_path / "m.so"
    db = tmp_path / "db"
    spec = source.spec
    assert main(["model", "build", spec, "-r", str(rec), "-o", str(lib), "--database", str(db)]) == 0
    out = capsys.readouterr().out
    assert "matches the original" in out
    m = load_model(str(lib))
    x = source.random_inputs(11)
    np.testing.assert_allclose(m(*x)[0], source.reference(x)[0], rtol=1e-4, atol=1e-4)
    meta = json.loads((tmp_path / "m.so.json").read_text())
    assert "tuned" in meta["kernels"].values()
    with pytest.raises(TiletuneError, match="takes 1 inputs"):
        m(*x, *x)


def test_database_applies_in_a_relax_build(model, tuned, tmp_path):
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from tiletune.model.build import ModelRunner, best_configs, compare, export_database

    source, tasks = model
    rec, _ = tuned
    chosen = best_configs(tasks, str(rec))
    assert export_database(tasks, chosen, str(tmp_path)) == len(chosen) >= 1
    db = ms.database.JSONDatabase(str(tmp_path / "database_workload.json"),
                                  str(tmp_path / "database_tuning_record.json"))
    with tvm.target.Target(tasks.target), db:
        applied = relax.transform.MetaScheduleApplyDatabase()(tasks.fused)
    scheduled = [gv.name_hint for gv, f in applied.functions.items()
                 if isinstance(f, tvm.tirx.PrimFunc) and (f.attrs or {}).get("tirx.is_scheduled")]
    assert len(scheduled) >= len(chosen)
    ex = tvm.compile(applied, target=tvm.target.Target(tasks.target))
    x = source.random_inputs(2)
    assert compare(ModelRunner(ex)(*x), source.reference(x)) < 1e-4


def test_resume_measures_nothing_twice(model, tuned):
    from tiletune.model.tuning.tuner import tune_model

    _, tasks = model
    rec, first = tuned
    lines = rec.read_text().splitlines()
    again = tune_model(tasks, strategy="random", trials=first.trials, records=str(rec), round_trials=3, batch_size=3,
                       settings=SETTINGS, confirm=3)
    assert again.measured == 0 and again.recalled == first.trials
    assert rec.read_text().splitlines() == lines
    # the first run confirmed its tasks' top kernels; the resumed run found them confirmed already
    assert first.confirmed > 0 and again.confirmed == 0
    assert any('"strategy": "confirm"' in line for line in lines)


def test_constructive_strategies_tune_a_model(model, tmp_path):
    """One trial per task at the default round of 8: the rounds shrink to the per-task share, and every task
    gets its construction (before, the budget went to the first tasks and the others ran unscheduled); a row
    reduction, which the analytic model cannot describe, gets its template's first start measured (before, it
    kept the default schedule)."""
    from tiletune.model.tuning.tuner import tune_model
    from tiletune.records import load
    from tiletune.schedules import starts

    _, tasks = model
    for strategy in ("gensor", "roller"):
        rec = tmp_path / f"{strategy}.jsonl"
        res = tune_model(tasks, strategy=strategy, trials=len(tasks.tasks), records=str(rec), batch_size=1,
                         settings=SETTINGS)
        rows = [st for st in res.states if st.key.startswith("rows:")]
        assert rows and all(math.isfinite(st.best_s) for st in res.states), [st.done for st in res.states]
        records = load(str(rec))
        for st in rows:
            mine = [st.space.from_dict(r.config) for r in records if r.workload == st.key]
            assert mine == starts(st.kernel.workload, st.space, tasks.target)[:1]


def test_a_tasks_construction_does_not_depend_on_the_other_tasks(model):
    """Gensor's walks are random: each task draws them from its own stream, so a task set with fewer or reordered
    tasks (a dynamic build with a shape added, a new shape constructed at its first use) constructs each task alike.
    Before, one stream ran through the set in order, and a task's walks depended on the tasks before it."""
    from types import SimpleNamespace

    from tiletune.model.build import constructed_configs

    _, tasks = model
    tiled = [k for k in tasks.tasks if not k.workload.key.startswith("rows:")]
    assert len(tiled) >= 2
    whole = constructed_configs(tasks, "gensor", {})
    alone = constructed_configs(SimpleNamespace(tasks=tiled[::-1][:1], target=tasks.target), "gensor", {})
    last = tiled[-1].hash
    assert alone[last].config == whole[last].config
    again = constructed_configs(SimpleNamespace(tasks=tiled[::-1], target=tasks.target), "gensor", {})
    assert {h: c.config for h, c in again.items()} == {h: whole[h].config for h in again}
    # another seed draws other walks (model build --seed): some task's top construction changes
    other = constructed_configs(tasks, "gensor", {}, seed=7)
    assert any(other[k.hash].config != whole[k.hash].config for k in tiled)


def test_a_crash_in_one_task_loses_nothing_of_the_others(model, tmp_path, monkeypatch):
    from tiletune.model.tuning import tuner

    _, tasks = model
    victim = tasks.tasks[0].workload.key
    real = tuner.tune

    def crashing(**kw):
        if kw["workload"] == victim:
            raise RuntimeError("boom")
        return real(**kw)

    monkeypatch.setattr(tuner, "tune", crashing)
    rec = tmp_path / "r.jsonl"
    res = tuner.tune_model(tasks, strategy="random", trials=2 * len(tasks.tasks), records=str(rec), round_trials=2,
                           batch_size=2, settings=SETTINGS)
    by_key = {st.key: st for st in res.states}
    assert by_key[victim].done.startswith("failed: RuntimeError: boom")
    assert all(math.isfinite(st.best_s) for k, st in by_key.items() if k != victim)
    keys = {json.loads(line)["workload"] for line in rec.read_text().splitlines()}
    assert keys == tasks.keys() - {victim}


def test_bad_input_is_one_line(spec, model, tuned, tmp_path, capsys):
    from tiletune.cli import main
    from tiletune.records import Record, RecordWriter
    from tiletune.target import target_key

    def err(argv):
        assert main(argv) == 2
        e = capsys.readouterr().err.strip()
        assert e.startswith("tiletune: error:") and "\n" not in e, e
        return e

    assert "unknown model 'nope'" in err(["model", "tasks", "nope"])
    assert "torch.export failed" in err(["model", "tasks", spec.replace(":make", ":broken")])
    assert "has no function" in err(["model", "tasks", spec.replace(":make", ":absent")])
    assert "does not exist" in err(["model", "tasks", str(tmp_path / "m.onnx")])
    other = tmp_path / "other.jsonl"
    with RecordWriter(other) as w:
        w.write(Record(workload="gemm[8x8x8]", target=target_key(host_target()), config={}, median_s=1.0))
    assert "another model" in err(["model", "build", spec, "-r", str(other), "-o", str(tmp_path / "x.so")])
    assert "another model" in err(["model", "tune", spec, "-r", str(other), "--trials", "2"])
    assert "give a budget" in err(["model", "tune", spec, "-r", str(tmp_path / "n.jsonl")])
    assert "--sibling-seeds must be >= 0" in err(["model", "tune", spec, "-r", str(tmp_path / "n.jsonl"), "-n", "2",
                                                  "--sibling-seeds", "-1"])
    assert "--confirm must be 0" in err(["model", "tune", spec, "-r", str(tmp_path / "n.jsonl"), "-n", "2",
                                         "--confirm", "1"])


def test_model_tasks_command_measures_latency_shares(spec, tuned, capsys):
    from tiletune.cli import main

    rec, _ = tuned
    assert main(["model", "tasks", spec, "--measure", "-r", str(rec)]) == 0
    out = capsys.readouterr().out
    assert "latency %" in out and "default schedule: a reduction without a multiply-accumulate" in out
    assert "GB/s" in out and "this machine's DRAM" in out
    assert "tuned (best of the records)" in out


def test_gradient_scheduler_follows_the_expected_decrease():
    from tiletune.model.tuning.scheduler import FlopsScheduler, GradientScheduler

    class T:
        def __init__(self, calls, flops, history, group="conv2d"):
            self.calls, self.flops, self.history, self.group, self.done = calls, flops, history, group, ""
            self.rounds = len(history)

    rng = np.random.default_rng(0)
    s = GradientScheduler(rng, eps=0.0)
    assert s.next([T(1, 10, [1.0]), T(1, 10, [])]) == 1  # round robin first
    # same FLOPs and history, but task 1 runs 10x per inference: its improvement is worth 10x
    assert s.next([T(1, 100, [1.0, 1.0]), T(10, 100, [1.0, 1.0])]) == 1
    # task 0 is 4x slower than its sibling at the same FLOPs (beta=2): the similar-task term picks it
    assert s.next([T(1, 100, [4.0, 4.0, 4.0, 4.0]), T(1, 100, [1.0, 1.0, 1.0, 1.0])]) == 0
    # a task that keeps failing gets max_failing_rounds rounds, then is finished
    fail = T(1, 100, [math.inf, math.inf])
    assert s.next([fail, T(1, 100, [1.0, 1.0])]) == 1 and fail.done
    f = FlopsScheduler()
    tasks = [T(1, 300, []), T(1, 100, [])]
    picks = []
    for _ in range(8):
        i = f.next(tasks)
        picks.append(i)
        tasks[i].rounds += 1
    assert picks[:2] == [0, 1] and picks.count(0) == 6  # 3:1, the FLOPs x calls shares


def test_bench_times_each_method_in_its_own_process_and_resumes(spec, tuned, tmp_path, monkeypatch, capsys):
    from tiletune.cli import main

    rec, _ = tuned
    out = tmp_path / "bench"
    # onnxruntime made unimportable for the children: a missing baseline is one line, the others run
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "onnxruntime.py").write_text("raise ImportError('no onnxruntime here')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    argv = ["model", "bench", spec, "-r", str(rec), "--out", str(out), "--methods", "tiletune,torch,onnxruntime",
            "--repeat", "2", "--min-repeat-ms", "0"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| tiletune (tuned) |" in text and "| PyTorch eager |" in text
    assert "missing: onnxruntime is not installed" in text
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    ok = {r["method"]: r for r in lines if not r.get("error")}
    assert set(ok) == {"tiletune", "torch"} and all(r["check_error"] < 1e-4 for r in ok.values())
    assert len(ok["torch"]["samples"]) == 2 and (out / "small_model-make.png").stat().st_size > 0
    # again: the finished methods are kept, the missing one is tried again
    assert main(argv) == 0
    assert "torch: done before" in capsys.readouterr().out
    again = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["method"] for r in again[len(lines):]] == ["onnxruntime"]


def test_an_onnx_model_builds_and_matches_onnxruntime(home, tmp_path, capsys):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from tiletune.api import load_model
    from tiletune.cli import main
    from tiletune.model.frontend.source import load

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).eval()
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 6, 6),), str(path), opset_version=17, dynamo=False)
    lib = tmp_path / "net.so"
    assert main(["model", "build", str(path), "-o", str(lib)]) == 0
    assert "matches the original" in capsys.readouterr().out
    source = load(str(path))
    x = source.random_inputs(4)
    np.testing.assert_allclose(load_model(str(lib))(*x)[0], source.reference(x)[0], rtol=1e-4, atol=1e-4)


def test_metaschedule_gives_every_task_its_round():
    """MetaSchedule's trials per iteration: 64 at most, an equal share of the budget when that is less, so that
    every task of the model is tuned once before any is tuned twice (18 bert-small tasks, 250 trials -> 13)."""
    from tiletune.model.evaluate.baselines import per_iter

    assert per_iter(250, 18) == 13
    assert per_iter(10_000, 20) == 64
    assert per_iter(5, 18) == 1
    assert per_iter(100, 0) == 64


def test_sibling_tasks_measure_each_others_best_first(model, tmp_path):
    """The block's two convolutions (one with ReLU, one with the residual and ReLU) are siblings: each round of
    one starts with the other's best configurations that it has not measured (inside its trials), none without."""
    from tiletune.model.kernels.tasks import ModelTasks
    from tiletune.model.tuning.tuner import sibling_key, tune_model

    _, tasks = model
    convs = [k for k in tasks.tasks if "conv2d" in k.name and "x3x8x8" in k.workload.key]
    assert len(convs) == 2, [k.workload.key for k in tasks.tasks]
    pair = ModelTasks(tasks.fused, tasks.target, convs, tasks.layout)
    rounds, tops = [], {}

    def on_round(st, run, total):
        rounds.append((st.key, [st.space.from_dict(r.config) for r in run.history], dict(tops)))
        tops.update({s.key: [c for _, c in s.top] for s in [st, *st.siblings]})

    for siblings in (2, 0):
        rounds.clear(), tops.clear()
        res = tune_model(pair, strategy="xgb", trials=12, records=str(tmp_path / f"s{siblings}.jsonl"), round_trials=3,
                         batch_size=3, settings=SETTINGS, options={"start": "random"}, on_round=on_round, confirm=0,
                         siblings=siblings)
        a, b = res.states
        assert sibling_key(a) == sibling_key(b) and (a.siblings == [b]) == bool(siblings)
        seeded = 0
        for i, (key, measured, before) in enumerate(rounds):
            other = next(k for k in before if k != key) if len(before) > 1 else None
            mine = {c for k, m, _ in rounds[:i] if k == key for c in m}
            want = [c for c in before.get(other, []) if c not in mine][:3] if siblings else []
            assert measured[:len(want)] == want
            seeded += len(want)
        assert (seeded > 0) == bool(siblings)


def test_a_gather_counts_the_rows_it_reads_not_its_table():
    """``model tasks --measure``'s GB/s: an embedding lookup moves the rows its indices name (as many as its
    output), not the whole table."""
    from tvm.script import tirx as T

    from tiletune.model.kernels.tasks import _param_bytes

    @T.prim_func(s_tir=True)
    def take(A: T.Buffer((T.int64(1000), T.int64(64)), "float32"), idx: T.Buffer((T.int64(8),), "int32"),
             out: T.Buffer((T.int64(8), T.int64(64)), "float32")):
        for i, j in T.grid(T.int64(8), T.int64(64)):
            with T.sblock("take"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = A[idx[vi], vj]

    assert _param_bytes(take) == 8 * 64 * 4 + 8 * 4 + 8 * 64 * 4
