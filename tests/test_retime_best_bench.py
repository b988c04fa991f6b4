"""benchmarks/goals/retime_best.py on two fake cnn_layers runs of a tiny NHWC layer: both kernels re-timed in rounds,
one line per layer, resumed (a layer done is skipped); a config outside today's register rule still measured."""
import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("retime_best", Path(__file__).resolve().parents[1] / "benchmarks" / "goals" / "retime_best.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

LAYER = "conv2d:N=1,C=4,H=6,W=8,K=16,R=3,S=3,stride=1,pad=1,dilation=1,layout=NHWC"


def fake_run(path: Path, q3: int, k3: int) -> Path:
    config = {"tile_n": [1, 1, 1, 1], "tile_p": [6, 1, 1, 1], "tile_q": [8 // q3, 1, 1, q3],
              "tile_k": [16 // k3, 1, 1, k3], "tile_r": [3, 1], "tile_s": [3, 1], "tile_c": [1, 4], "unroll": 0,
              "pack": 1, "pad_buffer": 0}
    row = {"suite": "smoke", "index": 1, "spec": LAYER.replace(",layout=NHWC", ""), "layout": "NHWC",
           "layouts": {"NHWC": {"spec": LAYER, "config": config, "tuned_s": 1e-5, "median_s": 2e-5}}}
    path.mkdir()
    (path / "results.jsonl").write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.tvm
def test_retimes_both_runs_in_rounds_and_resumes(tmp_path, capsys):
    pytest.importorskip("torch")
    a = fake_run(tmp_path / "a", q3=4, k3=16)
    b = fake_run(tmp_path / "b", q3=8, k3=16)  # 8 x 16: outside the AVX2 register rule, measured anyway
    out = tmp_path / "out"
    argv = ["--runs", f"{a},{b}", "--rounds", "2", "--repeat", "1", "--min-repeat-ms", "0", "--out", str(out)]
    assert bench.main(argv) == 0
    [row] = [json.loads(x) for x in (out / "retime.jsonl").read_text().splitlines()]
    assert row["runs"] == [str(a), str(b)] and row["rounds"] == 2
    assert [k["run"] for k in row["kernels"]] == [str(a), str(b)]
    assert all(len(k["rounds_s"]) == 2 and all(s and s > 0 for s in k["rounds_s"]) for k in row["kernels"])
    assert row["kernels"][0]["tuned_s"] == 1e-5 and row["torch"]["median_s"] > 0
    assert len(row["torch"]["rounds_s"]) == 2 and all(s > 0 for s in row["torch"]["rounds_s"])
    report = (out / "report.md").read_text()
    assert f"{a}, smoke: geometric mean" in report and f"{b}, smoke: geometric mean" in report
    assert "over 1 layers" in report
    capsys.readouterr()
    assert bench.main(argv) == 0  # the layer is done: skipped, nothing measured or appended
    assert "done, skipped" in capsys.readouterr().out
    assert len((out / "retime.jsonl").read_text().splitlines()) == 1


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    assert bench.main(["--runs", str(fake_run(tmp_path / "a", 4, 16)), "--layers", "smoke:x", "--out",
                       str(tmp_path / "o")]) == 2
    assert "suite:index" in capsys.readouterr().err
