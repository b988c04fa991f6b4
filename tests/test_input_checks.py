"""What a user can get wrong is answered in one line (exit status 2) before anything starts: no strategy is
built, no measurer and no worker process is started. Also: `tiletune build` without an output directory or a
C compiler, and a closed stdout pipe."""
import json
import os
import subprocess
import sys
import time

import pytest

import tiletune.api as api
import tiletune.commands.bench as bench_cmd
import tiletune.commands.table as table_cmd
import tiletune.measure.local as local
import tiletune.paths as paths
import tiletune.session as session
from tiletune.cli import main
from tiletune.commands.tune import trial_budget
from tiletune.errors import TiletuneError
from tiletune.paths import check_output
from tiletune.records import Record, RecordWriter
from tiletune.schedules import make_space
from tiletune.target import target_key
from tiletune.workloads import parse

ROOT = os.geteuid() == 0  # root writes read-only files and directories: permissions are simulated then
SPEC = "gemm:M=8,N=8,K=8"


def _nothing_may_start(*_a, **_k):
    raise AssertionError("started before the input was checked")


@pytest.fixture
def guarded(monkeypatch):
    """Fail the test if a strategy, a measurer or a worker pool is created."""
    monkeypatch.setattr(session, "create", _nothing_may_start)
    monkeypatch.setattr(session, "make_measurer", _nothing_may_start)
    monkeypatch.setattr(local.WorkerPool, "__init__", _nothing_may_start)
    monkeypatch.setattr(local.LocalMeasurer, "__init__", _nothing_may_start)


def _one_line_error(capsys, argv, expect: str) -> None:
    t0 = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tiletune: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert expect in err, err
    assert time.monotonic() - t0 < 30  # (no worker start-up; tvm may be imported the first time)


@pytest.mark.parametrize("flags, expect", [
    (["--trials", "-5"], "--trials) must be >= 1, got -5"),
    (["--trials", "0"], "--trials 0 means no trial limit: give --seconds or --early-stop"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--seconds", "-1"], "--seconds) must be > 0, got -1"),
    (["--seconds", "0"], "--seconds) must be > 0, got 0"),
    (["--trials", "0", "--seconds", "nan"], "must be > 0, got nan"),
    (["--early-stop", "0"], "--early-stop) must be >= 1"),
    (["--repeat", "0"], "--repeat must be >= 1"),
    (["--min-repeat-ms", "-1"], "--min-repeat-ms must be >= 0"),
    (["--build-timeout", "0"], "--build-timeout must be > 0 seconds"),
    (["--run-timeout", "-2"], "--run-timeout must be > 0 seconds"),
    (["--target", '{"kind": "llvm", "num-cores": 4096}'], "num-cores 4096 is more than this machine's"),
])
def test_tune_refuses_bad_numbers_before_anything_starts(guarded, capsys, tmp_path, flags, expect):
    _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(tmp_path / "r.jsonl"), *flags], expect)


def test_tune_refuses_a_workload_this_machine_cannot_hold_before_anything_starts(guarded, capsys, tmp_path):
    _one_line_error(capsys, ["tune", "gemm:M=40000,N=40000,K=40000", "-q", "-o", str(tmp_path / "r.jsonl")],
                    "GiB of memory available on this machine")


def test_tune_refuses_bad_records_paths_before_anything_starts(guarded, capsys, tmp_path):
    _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(tmp_path)], "is a directory; give a file name")
    (tmp_path / "plain").write_text("")
    _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(tmp_path / "plain" / "sub" / "r.jsonl")],
                    "is a file, not a directory")


@pytest.mark.skipif(ROOT, reason="root may write read-only files (see the simulated test below)")
def test_tune_refuses_read_only_records_and_directories(guarded, capsys, tmp_path):
    ro = tmp_path / "ro.jsonl"
    ro.write_text("")
    ro.chmod(0o444)
    _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(ro)], "is not writable")
    d = tmp_path / "locked"
    d.mkdir()
    d.chmod(0o555)
    try:
        _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(d / "new" / "r.jsonl")], "is not writable")
    finally:
        d.chmod(0o755)


def test_tune_refuses_unwritable_records_simulated(guarded, capsys, tmp_path, monkeypatch):
    ro = tmp_path / "ro.jsonl"
    ro.write_text("")
    monkeypatch.setattr(paths.os, "access", lambda p, mode: False)  # as a read-only file system answers
    _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(ro)], f"records file {str(ro)!r} is not writable")
    _one_line_error(capsys, ["tune", SPEC, "-q", "-o", str(tmp_path / "missing" / "r.jsonl")],
                    f"directory {str(tmp_path)!r} is not writable")


def test_check_output_accepts_what_can_be_written(tmp_path):
    check_output(tmp_path / "new.jsonl", "records file")
    check_output(tmp_path / "a" / "b" / "new.jsonl", "records file")  # the writer creates the parents
    check_output(tmp_path / "dir", "output directory", directory=True)
    with pytest.raises(TiletuneError, match="does not exist"):
        check_output(tmp_path / "a" / "k.so", "kernel library", parents=False)
    (tmp_path / "f").write_text("")
    with pytest.raises(TiletuneError, match="is a file, not a directory"):
        check_output(tmp_path / "f", "output directory", directory=True)
    assert not (tmp_path / "a").exists()  # a check creates nothing


def test_a_records_file_the_writer_cannot_open_is_one_line(tmp_path, monkeypatch):
    """What the up-front check cannot foresee (a special file system) is still a TiletuneError."""
    from tests.conftest import bowl_space
    from tiletune.measure.synthetic import FunctionMeasurer
    from tiletune.strategies import create
    from tiletune.tune import tune

    def refuse(self, path):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(RecordWriter, "__init__", refuse)
    space = bowl_space()
    with pytest.raises(TiletuneError, match="cannot write records file .*No such file or directory"):
        tune(space=space, strategy=create("random", space), measurer=FunctionMeasurer(lambda c: 1.0),
             workload="w", flops=1, trials=2, records=tmp_path / "r.jsonl")


def test_trials_zero_means_no_trial_limit_only_with_another_budget():
    assert trial_budget(0, 5.0, None) is None and trial_budget(0, None, 3) is None
    assert trial_budget(7, None, None) == 7
    with pytest.raises(TiletuneError, match="--trials 0 means no trial limit"):
        trial_budget(0, None, None)


def test_table_and_bench_check_their_output_and_numbers_first(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(table_cmd, "make_measurer", _nothing_may_start)
    monkeypatch.setattr(bench_cmd, "run_bench", _nothing_may_start)
    _one_line_error(capsys, ["table", SPEC, "--sample", "2", "-o", str(tmp_path)], "is a directory")
    _one_line_error(capsys, ["table", SPEC, "--sample", "2", "-o", str(tmp_path / "t.jsonl"), "--repeat", "0"],
                    "--repeat must be >= 1")
    (tmp_path / "file").write_text("")
    _one_line_error(capsys, ["bench", "tiny", "-q", "-o", str(tmp_path / "file")], "is a file, not a directory")
    _one_line_error(capsys, ["bench", "tiny", "-q", "-o", str(tmp_path / "b"), "--batch-size", "0"],
                    "--batch-size must be >= 1")
    _one_line_error(capsys, ["hardware", "--preset", "h100", "-o", str(tmp_path / "no" / "h.json")],
                    "does not exist")


# ---- tiletune build ----------------------------------------------------------------------------------------


@pytest.fixture
def one_record(tmp_path):
    wl = parse("gemm:M=16,N=16,K=16")
    target = {"kind": "llvm", "num-cores": 1}
    space = make_space(wl, None, target)
    rec = Record(workload=wl.key, target=target_key(target), config=space.to_dict(space.untiled()),
                 costs=(1e-5,), median_s=1e-5, gflops=0.8)
    path = tmp_path / "r.jsonl"
    path.write_text(rec.to_json() + "\n")
    return str(path)


def test_build_into_a_missing_directory_is_one_line(one_record, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(api, "build", _nothing_may_start)
    _one_line_error(capsys, ["build", one_record, "-o", str(tmp_path / "missing_dir" / "x.so")],
                    f"directory {str(tmp_path / 'missing_dir')!r} does not exist")


def test_build_without_a_c_compiler_is_one_line(one_record, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(api, "build", _nothing_may_start)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _one_line_error(capsys, ["build", one_record, "-o", str(tmp_path / "x.so")], "needs a C compiler")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    _one_line_error(capsys, ["build", one_record, "-o", str(tmp_path / "x.so")],
                    "named by the CXX or CC environment variable is not found")


# ---- a closed stdout pipe ------------------------------------------------------------------------------------


def test_a_closed_stdout_pipe_ends_quietly():
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the command writes (what `| head` does after its first lines)
    try:
        out = subprocess.run([sys.executable, "-m", "tiletune.cli", "hardware", "--preset", "h100"], stdout=w,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(w)
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr
    assert out.returncode == 141


def test_hardware_prints_its_json_to_an_open_pipe():
    out = subprocess.run([sys.executable, "-m", "tiletune.cli", "hardware", "--preset", "h100"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["name"]
