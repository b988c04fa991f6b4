"""The tuning database (tiletune.db): a thin layer of records files per target; add without duplicates, export and
import between databases, the kernel a build takes, `tiletune db`, and the commands that add their records file."""
import json

import pytest

from tiletune import cli
from tiletune.db.store import Database, cache_root
from tiletune.model.build import constructed_configs
from tiletune.model.kernels.tasks import load_model_tasks
from tiletune.model.library import build_model
from tiletune.records import CONFIRM, Record, load
from tiletune.target import host_target, target_key
from tiletune.workloads import parse

CPU = target_key({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
GPU = target_key({"kind": "cuda", "arch": "sm_90"})


def rec(workload, target=CPU, median=1e-3, trial=0, config=None, strategy="xgb", costs=None):
    return Record(workload, target, config or {"tile": [trial + 1]}, costs=tuple(costs or (median,)),
                  median_s=median, gflops=1.0 / median, strategy=strategy, trial=trial, started=100.0 + trial)


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TILETUNE_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c" and Database().dir == tmp_path / "c" / "db"
    monkeypatch.delenv("TILETUNE_CACHE_DIR")
    assert cache_root().parts[-2:] == (".cache", "tiletune")


def test_keyed_by_target_and_workload_without_duplicates(tmp_path):
    db = Database(tmp_path / "db")
    recs = [rec("a[4x4]@00", median=3e-3, trial=0), rec("a[4x4]@00", median=1e-3, trial=1),
            rec("b[8]@01", trial=0), rec("a[4x4]@00", GPU, median=5e-4)]
    assert db.add(recs) == 4
    assert db.add(recs) == 0  # the same measurements are not added twice
    assert db.path(CPU) != db.path(GPU) and len(db.files()) == 2
    assert [r.median_s for r in load(db.path(GPU))] == [5e-4]  # an ordinary records file
    assert db.chosen("a[4x4]@00", CPU)[0] == {"tile": [2]}  # the best of this target only
    assert db.chosen("a[4x4]@00", GPU)[1] == 5e-4
    assert db.chosen("c[1]@02", CPU) is None
    # another name of the same kernel (kernel_identity) counts
    assert db.chosen("other_name[4x4]@00", CPU)[0] == {"tile": [2]}


def test_state_changes_when_a_kernel_changes(tmp_path):
    db = Database(tmp_path / "db")
    empty = db.state(["a[4x4]@00", "b[8]@01"], CPU)
    db.add([rec("a[4x4]@00", median=2e-3, trial=0)])
    one = db.state(["a[4x4]@00", "b[8]@01"], CPU)
    assert one != empty
    db.add([rec("a[4x4]@00", median=3e-3, trial=1)])  # slower: the same kernel is chosen
    assert db.state(["b[8]@01", "a[4x4]@00"], CPU) == one
    db.add([rec("a[4x4]@00", median=1e-3, trial=2)])
    assert db.state(["a[4x4]@00", "b[8]@01"], CPU) != one
    assert db.state(["a[4x4]@00"], GPU) == Database(tmp_path / "db").state(["a[4x4]@00"], GPU)


def test_a_confirmation_pass_decides_as_in_a_build(tmp_path):
    db = Database(tmp_path / "db")
    db.add([rec("a[4]@00", median=1e-3, trial=0, config={"t": 1}), rec("a[4]@00", median=2e-3, trial=1, config={"t": 2}),
            rec("a[4]@00", median=4e-3, trial=1, config={"t": 1}, strategy=CONFIRM, costs=(4e-3, 4e-3)),
            rec("a[4]@00", median=2e-3, trial=1, config={"t": 2}, strategy=CONFIRM, costs=(2e-3, 2e-3))])
    assert db.chosen("a[4]@00", CPU)[0] == {"t": 2}


def test_export_import_round_trip(tmp_path, capsys):
    a = Database(tmp_path / "a" / "db")
    a.add([rec("a[4x4]@00", trial=t, median=(t + 1) * 1e-3) for t in range(3)] + [rec("b[2]@03", GPU)])
    out = tmp_path / "export.jsonl"
    assert a.export(out) == 4
    b = Database(tmp_path / "b" / "db")
    assert b.absorb(out) == 4 and b.absorb(out) == 0
    assert sorted(r.to_json() for r in b.records()) == sorted(r.to_json() for r in a.records())
    assert b.chosen("a[4x4]@00", CPU) == a.chosen("a[4x4]@00", CPU)


def test_db_command_lists_exports_and_imports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TILETUNE_CACHE_DIR", str(tmp_path / "one"))
    assert cli.main(["db"]) == 0 and "empty" in capsys.readouterr().out
    Database().add([rec("a[4x4]@00", trial=t) for t in range(2)])
    assert cli.main(["db"]) == 0
    listing = capsys.readouterr().out
    assert "2 records, 1 kernels (1 with a successful record)" in listing and "znver4" in listing
    f = tmp_path / "moved.jsonl"
    assert cli.main(["db", "export", str(f)]) == 0 and len(load(f)) == 2
    monkeypatch.setenv("TILETUNE_CACHE_DIR", str(tmp_path / "two"))
    assert cli.main(["db", "import", str(f)]) == 0
    assert "added 2 records" in capsys.readouterr().out
    assert cli.main(["db", "import", str(f)]) == 0 and "added 0 records" in capsys.readouterr().out
    assert len(Database().records()) == 2
    assert cli.main(["db", "export"]) == 2 and "give the file" in capsys.readouterr().err
    assert cli.main(["db", "import", str(tmp_path / "missing.jsonl")]) == 2


@pytest.mark.tvm
def test_tune_adds_its_records_file(tmp_path, capsys):
    wl = parse("gemm:M=16,N=16,K=16")
    table = tmp_path / "table.jsonl"  # a replay table: the run answers from it (no measurement here)
    config = {"tile_m": [2, 2, 1, 4], "tile_n": [1, 1, 1, 16], "tile_k": [8, 2], "unroll": 0, "pack": 0}
    table.write_text(rec(wl.key, target_key(host_target()), config=config).to_json() + "\n")
    out = tmp_path / "r.jsonl"
    cli.main(["tune", "gemm:M=16,N=16,K=16", "--trials", "2", "--no-vendor", "-q", "--replay", str(table),
              "-o", str(out)])
    written = load(out)
    assert written and {r.to_json() for r in Database().records()} == {r.to_json() for r in written}
    assert json.loads(written[0].target) == host_target()


@pytest.mark.tvm
def test_tune_recalls_what_the_database_measured(tmp_path):
    """A second run into a new records file measures nothing the database holds: the same seed asks the same
    configurations, recalled from the database and copied into the new file as they were measured."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (a, b):
        assert cli.main(["tune", "gemm:M=16,N=16,K=16", "-s", "random", "--trials", "3", "--no-vendor", "-q",
                         "-o", str(out)]) == 0
    first, second = load(a), load(b)
    assert len(first) == 3 and {r.to_json() for r in second} == {r.to_json() for r in first}


MODEL = '''
import torch

def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    return m, (torch.randn(4, 32),)
'''


@pytest.mark.tvm
def test_model_build_takes_the_database_kernels(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "m.py").write_text(MODEL)
    spec = f"{tmp_path / 'm.py'}:make"
    target = host_target()
    _, tasks = load_model_tasks(spec, target)
    made = constructed_configs(tasks, "gensor", {})
    c = next(iter(made.values()))  # one task's kernel, recorded as if measured
    Database().add([rec(c.kernel.workload.key, target_key(target), config=c.space.to_dict(c.config))])
    built = build_model(spec, str(tmp_path / "m.so"), target=target)
    assert built.tuned == 1 and built.checked is not None
    assert any(h == "tuned" for h in built.how.values())


@pytest.mark.tvm
def test_model_tune_recalls_what_the_database_measured(tmp_path):
    """`model tune` into a new records file recalls the database's measurements of its tasks, as `tune` does."""
    pytest.importorskip("torch")
    (tmp_path / "m.py").write_text(MODEL)
    spec = f"{tmp_path / 'm.py'}:make"
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (a, b):
        assert cli.main(["model", "tune", spec, "-s", "random", "--trials", "4", "--confirm", "0", "-q",
                         "-r", str(out)]) == 0
    first, second = load(a), load(b)
    assert len(first) == 4 and {r.to_json() for r in second} == {r.to_json() for r in first}
