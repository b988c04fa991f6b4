import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import tiletune.commands.bench as bench_cmd
from tiletune.cli import build_parser, main
from tiletune.commands.common import measure_settings, options_by_strategy, options_for, split_option
from tiletune.errors import TiletuneError
from tiletune.measure.base import MeasureSettings
from tiletune.session import DEFAULT_STRATEGY


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


# ---- one spelling of each flag across commands; the old spellings keep working -------------------------


def _parse(*argv: str):
    return vars(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("old, new, dest, value", [
    (["tune", "gemv:M=8,K=4", "-r", "x.jsonl"], ["tune", "gemv:M=8,K=4", "-o", "x.jsonl"], "records", "x.jsonl"),
    (["tune", "gemv:M=8,K=4", "--records", "x.jsonl"], ["tune", "gemv:M=8,K=4", "--output", "x.jsonl"], "records",
     "x.jsonl"),
    (["table", "gemv:M=8,K=4", "--exhaustive", "-o", "t.jsonl"], ["table", "gemv:M=8,K=4", "--exhaustive", "-r", "t.jsonl"],
     "output", "t.jsonl"),
    (["table", "gemv:M=8,K=4", "--exhaustive", "--output", "t.jsonl"],
     ["table", "gemv:M=8,K=4", "--exhaustive", "--records", "t.jsonl"], "output", "t.jsonl"),
    (["bench", "tiny", "--out", "d"], ["bench", "tiny", "--output", "d"], "output", "d"),
    (["bench", "tiny", "-o", "d"], ["bench", "tiny", "--output", "d"], "output", "d"),
    (["build", "r.jsonl", "-o", "k.so"], ["build", "r.jsonl", "--output", "k.so"], "output", "k.so"),
    (["hardware", "-o", "h.json"], ["hardware", "--output", "h.json"], "output", "h.json"),
])
def test_output_flag_spellings_parse_alike(old, new, dest, value):
    a, b = _parse(*old), _parse(*new)
    assert a == b and a[dest] == value


def test_tune_keeps_its_records_dest_and_default():
    assert _parse("tune", "gemv:M=8,K=4", "-o", "x.jsonl")["records"] == "x.jsonl"
    assert _parse("tune", "gemv:M=8,K=4")["records"] is None


@pytest.mark.parametrize("command, batch", [(["tune", "gemv:M=8,K=4"], None), (["table", "gemv:M=8,K=4", "--sample", "2",
                                                                              "-o", "t"], 16), (["bench", "tiny"], 8)])
def test_measurement_flags_are_the_same_in_every_measuring_command(command, batch):
    default = build_parser().parse_args(command)
    assert default.batch_size == batch and measure_settings(default) == MeasureSettings()
    given = build_parser().parse_args(command + ["--repeat", "5", "--min-repeat-ms", "7", "--build-timeout", "3",
                                                 "--run-timeout", "4", "--batch-size", "2"])
    assert given.batch_size == 2
    assert measure_settings(given) == MeasureSettings(repeat=5, min_repeat_ms=7, build_timeout=3.0, run_timeout=4.0)


def test_option_spellings():
    assert split_option("gbfs.rho=0.5") == ("gbfs", "rho", "0.5")
    assert split_option(" rho = 0.5 ") == (None, "rho", "0.5")
    assert split_option("x=a=b") == (None, "x", "a=b")
    for bad in ("rho", "=1", ".rho=1", "gbfs.=1"):
        with pytest.raises(TiletuneError, match=r"\[STRATEGY.\]NAME=VALUE"):
            split_option(bad)
    # tune: NAME=VALUE and STRATEGY.NAME=VALUE naming the run's strategy mean the same
    assert options_for(["rho=0.5"], "gbfs") == options_for(["gbfs.rho=0.5"], "gbfs") == {"rho": "0.5"}
    with pytest.raises(TiletuneError, match="is for strategy 'gbfs', but this run uses 'xgb'"):
        options_for(["gbfs.rho=0.5"], "xgb")
    # bench: STRATEGY.NAME=VALUE as before; NAME=VALUE for the only strategy, or for those that declare NAME
    assert options_by_strategy(["gbfs.rho=0.5"]) == options_by_strategy(["rho=0.5"], ["gbfs"]) == \
        {"gbfs": {"rho": "0.5"}}
    assert options_by_strategy(["rho=0.5"], ["random", "gbfs"]) == {"gbfs": {"rho": "0.5"}}
    assert options_by_strategy(["bogus=1"], ["random"]) == {"random": {"bogus": "1"}}  # refused by the check
    with pytest.raises(TiletuneError, match="none of the strategies random, grid has an option 'bogus'"):
        options_by_strategy(["bogus=1"], ["random", "grid"])
    with pytest.raises(TiletuneError, match="STRATEGY.NAME=VALUE"):
        options_by_strategy(["rho=0.5"])


def test_tune_accepts_the_qualified_option(capsys, tmp_path):
    rec = str(tmp_path / "x.jsonl")
    assert main(["tune", "gemm:M=8,N=8,K=8", "-O", f"{DEFAULT_STRATEGY}.bogus=1", "-q", "-o", rec]) == 2
    assert "unknown option" in capsys.readouterr().err
    assert main(["tune", "gemm:M=8,N=8,K=8", "-O", "grid.stride=1", "-q", "-o", rec]) == 2
    assert f"is for strategy 'grid', but this run uses '{DEFAULT_STRATEGY}'" in capsys.readouterr().err


def test_tune_defaults_to_the_strategy_the_decision_names():
    assert build_parser().parse_args(["tune", "gemv:M=8,K=4"]).strategy == DEFAULT_STRATEGY
    decision = Path(__file__).resolve().parent.parent / "docs" / "decisions" / "default-strategy.md"
    assert f"`{DEFAULT_STRATEGY}`" in decision.read_text().splitlines()[0]


def test_bench_passes_unqualified_options_to_the_strategies_that_have_them(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_run_bench(suite, out, **kw):
        seen.update(kw, out=out)
        return types.SimpleNamespace(runs=[], flops={}, out_dir=tmp_path)

    monkeypatch.setattr(bench_cmd, "run_bench", fake_run_bench)
    base = ["bench", "tiny", "--strategies", "random,gbfs", "--out", str(tmp_path), "-q"]
    assert main(base + ["-O", "rho=0.5", "--repeat", "2"]) == 0
    qualified = dict(seen)
    assert main(base + ["-O", "gbfs.rho=0.5", "--repeat", "2"]) == 0
    assert seen == qualified and seen["options"] == {"gbfs": {"rho": "0.5"}}
    assert seen["settings"] == MeasureSettings(repeat=2) and seen["out"] == str(tmp_path)


@pytest.mark.parametrize("command", [["tune", "gemv:M=8,K=4"], ["bench", "tiny"]])
def test_cutoff_flag(command):
    assert measure_settings(build_parser().parse_args(command + ["--cutoff", "0"])).cutoff == 0
    assert measure_settings(build_parser().parse_args(command + ["--cutoff", "3"])).cutoff == 3
    with pytest.raises(TiletuneError, match="--cutoff must be 0 .off. or > 1"):
        measure_settings(build_parser().parse_args(command + ["--cutoff", "0.5"]))
