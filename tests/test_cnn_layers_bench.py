"""benchmarks/goals/cnn_layers.py without measuring: resume (finished layers skipped), table and geometric mean."""
import importlib.util
import json
import math
from pathlib import Path

spec = importlib.util.spec_from_file_location("cnn_layers", Path(__file__).resolve().parents[1] / "benchmarks" / "goals" / "cnn_layers.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def fake_row(suite, index, spec, args, ours, torch, layout="NHWC"):
    return {"suite": suite, "index": index, "spec": spec, "flops": 1, "trials": args.trials, "strategy": args.strategy,
            "seed": args.seed, "layouts": {l: {"gflops": 1.0 / ours, "median_s": ours} for l in args.layouts},
            "layout": layout, "ours_s": ours, "ours_gflops": 1.0 / ours,
            "torch": {"median_s": torch, "gflops": 1.0 / torch, "format": "channels_last"}, "ratio": torch / ours}


def test_resumes_skipping_finished_layers_and_reports(tmp_path, monkeypatch):
    calls = []

    def run_layer(suite, index, spec, out, args, settings):
        calls.append(index)
        return fake_row(suite, index, spec, args, ours=1.0, torch=[0.5, 2.0, 4.0][index - 1])

    monkeypatch.setattr(bench, "run_layer", run_layer)
    monkeypatch.setattr(bench, "write_report", lambda out, rows, layouts, args: "\n".join(
        bench.summary(rows) + bench.table(rows, layouts)))
    argv = ["--smoke", "--trials", "3", "--out", str(tmp_path), "--layers", "1,2"]
    assert bench.main(argv) == 0 and calls == [1, 2]
    assert bench.main(argv + ["--layers", "1,2,3"]) == 0 and calls == [1, 2, 3]  # 1 and 2 were done
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == [1, 2, 3]
    # another budget is another run
    assert bench.main(["--smoke", "--trials", "5", "--out", str(tmp_path), "--layers", "1"]) == 0 and calls[-1] == 1
    lines = bench.summary(rows)
    assert "geometric mean of ratios 1.587x over 3 layers; >= 1.0x on 2/3 layers; layout chosen: NHWC 3" in lines[0]
    t = bench.table(rows, ["NHWC", "NCHW"])
    assert t[0].startswith("| suite | # | layer | ours NHWC GFLOPS | ours NCHW GFLOPS |")
    assert "| smoke | 1 | 8->16 3x3 9 s2 |" in t[2] and t[2].endswith("| 0.50x |")
    assert math.isclose(bench.geomean([0.5, 2.0, 4.0]), 4 ** (1 / 3))


def test_bad_layouts_and_suites_are_refused(tmp_path, capsys):
    assert bench.main(["--layouts", "NCHWc", "--out", str(tmp_path)]) == 2
    assert "--layouts" in capsys.readouterr().err
    assert bench.main(["--suites", "nope", "--out", str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err


def test_short_names():
    assert bench.short("conv2d:N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1") == "64->64 3x3 56 s1"
    assert bench.short("depthwise_conv2d:N=1,C=96,H=112,W=112,R=3,S=3,stride=2,pad=1") == "dw 96 3x3 112 s2"
    assert bench.with_layout("conv2d:N=1,C=3", "NHWC") == "conv2d:N=1,C=3,layout=NHWC"
