"""The comparisons of benchmarks/papers/tvm_af_ds.py on hand-made traces (no measuring)."""
import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("tvm_af_ds", Path(__file__).resolve().parents[1] / "benchmarks" / "papers" / "tvm_af_ds.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def run(wl, strategy, seed, points):
    """points: (trial, seconds, best GFLOPS so far)."""
    return {"workload": wl, "strategy": strategy, "seed": seed, "trace": [(n, t, b, b) for n, t, b in points]}


def test_counts_reduction_and_horizon():
    runs = [
        # op A: baseline slow to improve; AF-DS fast
        run("A", "evo", 0, [(1, 1, 1.0), (100, 200, 5.0), (1000, 2000, 10.0)]),
        run("A", "evo-af", 0, [(1, 1, 2.0), (50, 60, 6.0), (1000, 2000, 9.0)]),
        run("A", "dgd", 0, [(1, 1, 1.0), (1000, 2000, 12.0)]),
        run("A", "dgd-af", 0, [(1, 1, 3.0), (40, 90, 11.0), (1000, 2000, 11.0)]),
        # op B: the baseline wins everything
        run("B", "evo", 0, [(1, 1, 10.0)]),
        run("B", "evo-af", 0, [(1, 1, 5.0)]),
        run("B", "dgd", 0, [(1, 1, 5.0)]),
        run("B", "dgd-af", 0, [(1, 1, 5.0), (500, 700, 9.6)]),
    ]
    a = bench.analyze(runs, horizon=120, budget=1000)
    c = a["comparisons"]
    assert a["operators"]["A"]["evo"]["at_horizon"] == 1.0 and a["operators"]["A"]["evo"]["at_budget"] == 10.0
    assert c["2min"]["evo-af"]["k"] == 1 and c["2min"]["evo-af"]["n"] == 2
    assert c["budget"]["evo-af"]["k"] == 0 and c["budget"]["dgd"]["wins"] == ["A"]
    assert c["budget_5pct"]["dgd"]["k"] == 1  # 12 > 1.05 x 10
    assert c["2min_vs_budget"]["dgd-af"]["wins"] == ["A"]  # 11 within 90 s beats 10 after 1000
    red = a["reduction"]["dgd-af"]["per_operator"]
    assert red["A"]["trials_to_baseline"] == 40 and red["A"]["reduction"] == pytest.approx(25.0)
    assert red["B"]["trials_to_baseline"] is None and red["B"]["trials_to_95pct"] == 500
    text = bench.report(a)
    assert "Ansor-AF-DS 1/2" in text


def test_seed_mean_curve():
    runs = [run("A", "evo", 0, [(1, 0, 1.0), (3, 0, 3.0)]), run("A", "evo", 1, [(2, 0, 2.0)])]
    assert bench.mean_curve(runs, 4) == [0.5, 1.5, 2.5, 2.5]
    assert bench.trials_to_reach([0.5, 1.5, 2.5], 2.0) == 3 and bench.trials_to_reach([1.0], 2.0) is None


def test_cli_passes_small_options_workloads_and_resume(tmp_path, monkeypatch):
    seen = {}

    def fake_run_bench(suite, out, **kw):
        seen.update(kw, workloads=suite.workloads)
        out.mkdir(parents=True, exist_ok=True)
        import json
        with open(out / "traces.jsonl", "w") as f:
            for m in bench.METHODS:
                f.write(json.dumps(run(suite.workloads[0], m, 0, [(1, 1.0, 2.0), (96, 50.0, 4.0)])) + "\n")

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    out = tmp_path / "o"
    assert bench.main(["--small", "--seeds", "1", "--budget", "96", "--horizon", "20", "--workloads", "2,12",
                       "--options", '{"dgd": {"hop_threshold": 2}}', "--resume", "--out", str(out)]) == 0
    suite = bench.suites.load("tvm-af-ds")
    assert seen["workloads"] == (suite.workloads[1], suite.workloads[11])
    assert seen["resume"] is True and seen["budget"] == 96 and seen["seeds"] == 1
    assert seen["options"]["dgd"] == {"sample_size": 16, "hop_threshold": 2}
    assert seen["options"]["evo"] == {"measure_per_round": 16, "warmup": 16}
    import json
    assert json.loads((out / "tvm_af_ds.json").read_text())["horizon_s"] == 20
    # --analyze keeps the run's horizon unless one is given
    bench.main(["--analyze", str(out)])
    assert json.loads((out / "tvm_af_ds.json").read_text())["horizon_s"] == 20
    bench.main(["--analyze", str(out), "--horizon", "0.5"])
    a = json.loads((out / "tvm_af_ds.json").read_text())
    assert a["horizon_s"] == 0.5 and a["operators"][suite.workloads[1]]["evo"]["at_horizon"] == 0.0


def test_cli_rejects_bad_options(tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--options", "{not json", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        bench.main(["--options", '{"dgd": 3}', "--out", str(tmp_path)])
