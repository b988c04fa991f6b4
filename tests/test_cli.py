import json
import subprocess
import sys

import pytest

from tiletune.cli import main


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("tune", "space", "best", "build", "strategies"):
        assert cmd in out


def test_space_prints_exact_size(capsys):
    assert main(["space", "gemm:M=1024,N=1024,K=1024", "--levels", "4,2"]) == 0
    out = capsys.readouterr().out
    assert "899756 from the tile factors alone" in out


def test_bad_workload_is_a_clear_error(capsys):
    assert main(["space", "gemm:M=0,N=1,K=1"]) == 2
    assert "must be >= 1" in capsys.readouterr().err


def test_unknown_strategy_and_option(capsys, tmp_path):
    assert main(["tune", "gemm:M=8,N=8,K=8", "--strategy", "nope", "-q", "-r", str(tmp_path / "x.jsonl")]) == 2
    assert "unknown strategy" in capsys.readouterr().err
    assert main(["tune", "gemm:M=8,N=8,K=8", "--option", "bogus=1", "-q", "-r", str(tmp_path / "x.jsonl")]) == 2
    assert "unknown option" in capsys.readouterr().err


def test_strategies_lists_random_and_grid(capsys):
    assert main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert "random:" in out and "grid:" in out and "stride" in out


@pytest.mark.tvm
def test_tune_best_build_and_load(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    args = ["tune", "gemm:M=32,N=32,K=16", "--trials", "6", "--records", str(rec), "--seed", "1", "-q",
            "--repeat", "1", "--min-repeat-ms", "0"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "best" in out and "GFLOPS" in out
    assert len(rec.read_text().splitlines()) == 6
    assert main(args) == 0  # resume: nothing new
    assert "0 measured, 6 from records" in capsys.readouterr().out
    assert main(["best", str(rec)]) == 0
    assert "GFLOPS" in capsys.readouterr().out
    lib = tmp_path / "k.so"
    assert main(["build", str(rec), "-o", str(lib)]) == 0
    import numpy as np

    from tiletune.api import load_kernel

    k = load_kernel(str(lib))
    a = np.random.rand(32, 16).astype("float32")
    b = np.random.rand(16, 32).astype("float32")
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_console_script_installed():
    out = subprocess.run([sys.executable, "-m", "tiletune.cli", "space", "gemv:M=8,K=4"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "size:" in out.stdout
