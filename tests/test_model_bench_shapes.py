"""model bench --shapes (issue: dynamic shapes): the small model with a symbolic sequence length of
test_model_shapes tuned at two lengths, then every method timed at three lengths, one of them not tuned, each
method in its own process that builds once: ours is the one dispatching library of 'model build --shapes' (its
tuned shapes found from the records), outputs checked, one result per (method, shape), a report with one row per
shape, a second run skips what is done and runs only a new shape; bad input is one line each."""
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.tvm
torch = pytest.importorskip("torch")

QUICK = ["--repeat", "2", "--min-repeat-ms", "0"]


@pytest.fixture(scope="module")
def spec(home):
    path = home / "seq_bench_model.py"  # the test model of test_model_shapes.py
    path.write_text(re.search(r"FACTORY = '''(.*?)'''", (Path(__file__).parent / "test_model_shapes.py").read_text(),
                              re.S).group(1))
    return f"{path}:make"


@pytest.fixture(scope="module")
def records(spec, tmp_path_factory):
    from tiletune.cli import main

    rec = tmp_path_factory.mktemp("bench-shapes") / "seq.jsonl"
    assert main(["model", "tune", spec, "--shapes", "seq=16,32", "-r", str(rec), "--trials", "12", "-s", "random",
                 "--repeat", "1", "--min-repeat-ms", "0", "-q"]) == 0
    return rec


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_name_their_shapes(spec, records):
    from tiletune.model.dynamic.shapes import recorded_shapes
    from tiletune.model.frontend.source import load
    from tiletune.target import host_target

    from tiletune.records import load as load_records

    rows = load_records(str(records))
    assert recorded_shapes(load(spec), host_target(), "NHWC", rows) == [{"seq": 16}, {"seq": 32}]


def test_bench_every_method_at_every_shape_and_resume(spec, records, tmp_path, capsys):
    from tiletune.cli import main

    out = tmp_path / "bench"
    argv = ["model", "bench", spec, "-r", str(records), "--out", str(out), "--shapes", "seq=16,32,24",
            "--methods", "tiletune,torch,metaschedule", "--metaschedule-trials", "1", *QUICK]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "our build is tuned at seq=16; seq=32 (the shapes the records hold)" in text
    assert text.count("metaschedule: failed: not for --shapes: MetaSchedule refuses symbolic loops") == 1
    rows = _rows(out / "results.jsonl")
    ok = {(r["method"], r["shape"]): r for r in rows if not r.get("error")}
    assert set(ok) == {(m, s) for m in ("tiletune", "torch") for s in ("seq=16", "seq=32", "seq=24")}
    assert all(r["check_error"] < 1e-4 and len(r["samples"]) == 2 for r in ok.values())
    assert {s: ok[("tiletune", s)]["tuned"] for s in ("seq=16", "seq=32", "seq=24")} == \
        {"seq=16": True, "seq=32": True, "seq=24": False}
    assert ok[("tiletune", "seq=24")]["binding"] == {"seq": 24}
    assert ok[("tiletune", "seq=16")]["tuned_shapes"] == ["seq=16", "seq=32"]
    assert len({r["prepare_s"] for r in rows if r["method"] == "tiletune"}) == 1  # built once for every shape
    assert [r["shape"] for r in rows if r["method"] == "metaschedule"] == ["seq=16", "seq=32", "seq=24"]

    report = (out / "seq_bench_model-make.md").read_text()
    assert "| shape | tuned | tiletune (tuned) ms | PyTorch eager ms | vs PyTorch eager |" in report
    table = [line for line in report.splitlines() if line.startswith("| seq=")]
    assert [line.split(" | ")[:2] for line in table] == [["| seq=16", "yes"], ["| seq=32", "yes"], ["| seq=24", "no"]]
    assert all(re.search(r"\| \d+\.\d+x \|", line) for line in table), table
    assert "MetaSchedule tune_relax: error: not for --shapes" in report

    # again: everything kept (the refused method says so again, without a child)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "tiletune: done before at seq=16, seq=32, seq=24, kept" in text and "torch: done before" in text
    again = _rows(out / "results.jsonl")
    assert {r["method"] for r in again[len(rows):]} == {"metaschedule"}

    # a new shape: only that one is run
    assert main(["model", "bench", spec, "-r", str(records), "--out", str(out), "--shapes", "seq=16,40", "--methods",
                 "torch", *QUICK]) == 0
    text = capsys.readouterr().out
    new = _rows(out / "results.jsonl")[len(again):]
    assert [(r["method"], r["shape"]) for r in new] == [("torch", "seq=40")] and new[0]["check_error"] < 1e-4
    table = [line for line in (out / "seq_bench_model-make.md").read_text().splitlines() if line.startswith("| seq=")]
    assert [line.split(" | ")[0] for line in table] == ["| seq=16", "| seq=40"]


def test_bad_input_is_one_line(spec, records, tmp_path, capsys):
    from tiletune.cli import main
    from tiletune.records import Record
    from tiletune.target import host_target, target_key

    def err(*extra, rec=records):
        argv = ["model", "bench", spec, *(["-r", str(rec)] if rec else []), "--out", str(tmp_path / "b"),
                "--methods", "tiletune,torch", *QUICK, *extra]
        assert main(argv) == 2
        e = capsys.readouterr().err.strip()
        assert e.startswith("tiletune: error:") and "\n" not in e, e
        return e

    assert "unknown dimension 'len'" in err("--shapes", "len=16")
    assert "seq=128 is outside seq's bounds 8..64" in err("--shapes", "seq=16,128")
    assert "seq=x is not an integer" in err("--shapes", "seq=16,x")
    fixed = ["model", "bench", spec.replace(":make", ":fixed"), "--out", str(tmp_path / "b"), "--shapes", "seq=16"]
    assert main(fixed) == 2
    assert "has no symbolic dimension" in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    other.write_text(Record("matmul[7x5,5x3]@0123456789abcdef", target_key(host_target()), {}, (1e-3,), 1e-3,
                            1.0).to_json() + "\n")
    assert "holds no tuned shape of" in err("--shapes", "seq=16", rec=other)
    assert "our build needs -r RECORDS" in err("--shapes", "seq=16", rec=None)


def test_onnx_export_keeps_the_symbolic_dimensions(spec, tmp_path):
    """ONNX Runtime at several shapes of a PyTorch model: one export, its sequence axis symbolic, right at each."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from tiletune.model.build import compare
    from tiletune.model.frontend.source import export_onnx, load, onnx_session

    source = load(spec)
    path = str(tmp_path / "seq.onnx")
    export_onnx(source, path)
    sess = onnx_session(path, 1)
    names = [i.name for i in sess.get_inputs()]
    assert any(isinstance(d, str) for i in sess.get_inputs() for d in i.shape)
    for seq in (16, 24, 32):
        x = source.random_inputs(0, {"seq": seq})
        assert compare(sess.run(None, dict(zip(names, x))), source.reference(x)) < 1e-4



def test_construct_without_records_constructs_every_listed_shape(spec, tmp_path, capsys):
    from tiletune.cli import main

    out = tmp_path / "c"
    assert main(["model", "bench", spec, "--shapes", "seq=16,40", "--construct", "gensor", "--methods", "tiletune",
                 "--out", str(out), *QUICK]) == 0
    assert "constructed (gensor) at seq=16; seq=40" in capsys.readouterr().out
    rows = [r for r in _rows(out / "results.jsonl") if r["method"] == "tiletune"]
    assert sorted(r["shape"] for r in rows) == ["seq=16", "seq=40"]
    assert all(r["tuned"] and not r.get("error") and r["check_error"] < 1e-4 for r in rows)
    assert all(r["constructed"] == r["tasks"] > 0 and r["tuned_tasks"] == 0 for r in rows)
