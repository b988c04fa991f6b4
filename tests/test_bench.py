"""The benchmark harness: suites load and validate, a tiny suite runs end to end, errors are clear."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import time

import pytest
from rich.console import Console

from tests.conftest import bowl_space
from tiletune.bench import machine, metaschedule, vendor
from tiletune.bench import report as report_mod
from tiletune.bench.machine import Peak
from tiletune.bench.run import run_bench, summarize
from tiletune.bench.suites import list_suites, load, shipped, validate
from tiletune.cli import main
from tiletune.commands.bench import parse_strategy_options
from tiletune.errors import TiletuneError
from tiletune.measure.base import MeasureSettings
from tiletune.measure.synthetic import FunctionMeasurer
from tiletune.strategies import create, get, registry
from tiletune.target import host_target


def _suite_dict(**over):
    d = {"name": "t", "description": "d", "workloads": ["gemm:M=16,N=16,K=16"], "strategies": ["random"],
         "seeds": 1, "budget": 2, "notes": ""}
    d.update(over)
    return d


def synthetic_factory(wl, space, target):
    """A deterministic cost over the tile factors: fast tests, no TVM build."""

    def cost(c):
        d = space.to_dict(c)
        s = 1.0
        for name, v in d.items():
            if name.startswith("tile_"):
                s += abs(math.log2(v[-1]) - 1.0)
        return s * 1e-4

    return FunctionMeasurer(cost)


# ---- suites -------------------------------------------------------------------------------------

def test_shipped_suites_load_and_validate():
    names = shipped()
    assert {"tiny", "tvm-af-ds"} <= set(names)
    for s in list_suites():
        assert not isinstance(s, tuple), f"shipped suite {s[0]} does not load: {s[1]}"
    tiny = load("tiny")
    assert len(tiny.workloads) == 2 and tiny.seeds >= 1 and tiny.budget >= 1
    af = load("tvm-af-ds")
    assert 25 <= len(af.workloads) <= 35
    ops = {w.split(":")[0] for w in af.workloads}
    assert {"gemm", "conv2d"} <= ops
    assert "gemm:M=512,N=64,K=1024" in af.workloads
    assert af.notes  # says how the suite was sized


def test_suite_from_path(tmp_path):
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(_suite_dict(budget_seconds=5, levels="3,2")))
    s = load(str(p))
    assert s.name == "t" and s.budget_seconds == 5.0 and s.levels == "3,2"
    assert s.workloads == ("gemm:M=16,N=16,K=16",)


@pytest.mark.parametrize("data, words", [
    ({k: v for k, v in _suite_dict().items() if k != "budget"}, ["missing", "budget"]),
    (_suite_dict(seeds="3"), ["seeds", "integer"]),
    (_suite_dict(seeds=True), ["seeds", "integer"]),
    (_suite_dict(budget=0), ["budget", ">= 1"]),
    (_suite_dict(workloads=[]), ["workloads", "empty"]),
    (_suite_dict(workloads="gemm:M=1,N=1,K=1"), ["workloads", "list"]),
    (_suite_dict(workloads=["gemm:M=16,N=16"]), ["bad workload", "missing parameter K"]),
    (_suite_dict(workloads=["conv9d:X=1"]), ["bad workload", "unknown operator"]),
    (_suite_dict(levels="four"), ["levels"]),
    (_suite_dict(budget_seconds=-1), ["budget_seconds"]),
    (_suite_dict(budget_second=5), ["unknown key", "budget_second", "accepted"]),
    (_suite_dict(options={"random": 3}), ["options"]),
    ([1, 2], ["JSON object"]),
])
def test_malformed_suite_gives_clear_error(data, words):
    with pytest.raises(TiletuneError) as e:
        validate(data, "x.json")
    msg = str(e.value)
    assert "x.json" in msg
    for w in words:
        assert w in msg, msg


def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"name\": \"x\",")
    with pytest.raises(TiletuneError, match="not valid JSON"):
        load(str(bad))
    with pytest.raises(TiletuneError, match="no suite"):
        load("no-such-suite")


def test_unknown_strategy_is_rejected_before_running(tmp_path):
    s = validate(_suite_dict(strategies=["random", "no-such-strategy"]), "s.json")
    with pytest.raises(TiletuneError, match="no-such-strategy.*registered"):
        run_bench(s, tmp_path / "out", measurer_factory=synthetic_factory, baselines=(), progress=False)
    with pytest.raises(TiletuneError, match="unknown baseline"):
        run_bench(load("tiny"), tmp_path / "out", strategies=["random"], baselines=("blas",), progress=False,
                  measurer_factory=synthetic_factory)


def test_strategy_options_are_checked_up_front(tmp_path):
    name, cls = next((n, c) for n, c in registry().items() if c.options)
    opt = cls.options[0]
    s = validate(_suite_dict(strategies=[name], options={name: {"no_such_option": 1}}), "s.json")
    with pytest.raises(TiletuneError, match="unknown option 'no_such_option'"):
        run_bench(s, tmp_path / "o", measurer_factory=synthetic_factory, baselines=(), progress=False)
    with pytest.raises(TiletuneError, match="not run"):
        run_bench(load("tiny"), tmp_path / "o", strategies=["random"], options={name: {opt.name: opt.default}},
                  measurer_factory=synthetic_factory, baselines=(), progress=False)
    # a suite's own options for strategies left out of this run are dropped (the paper suites pin starts)
    s = validate(_suite_dict(strategies=["random", "gbfs"], options={"gbfs": {"start": "untiled"}}), "s.json")
    res = run_bench(s, tmp_path / "p", strategies=["random"], seeds=1, budget=2, measurer_factory=synthetic_factory,
                    baselines=(), progress=False, plots=False)
    assert {r.strategy for r in res.runs} == {"random"}
    assert parse_strategy_options(["gbfs.rho=0.5", "gbfs.x=1"]) == {"gbfs": {"rho": "0.5", "x": "1"}}
    with pytest.raises(TiletuneError, match="STRATEGY.NAME=VALUE"):
        parse_strategy_options(["rho=0.5"])


# ---- end to end ----------------------------------------------------------------------------------

def test_tiny_suite_end_to_end(tmp_path):
    out = tmp_path / "bench"
    res = run_bench(load("tiny"), out, strategies=["random", "grid"], seeds=2, budget=2,
                    baselines=("vendor", "peak"), measurer_factory=synthetic_factory, progress=False)
    # every (workload, strategy, seed) ran with its budget
    assert len(res.runs) == 2 * 2 * 2
    assert all(r.trials == 2 and r.best_gflops > 0 for r in res.runs)
    for name in ("records.jsonl", "traces.jsonl", "baselines.jsonl", "summary.json", "summary.csv", "report.md",
                 "boxes.png", "overview.png"):
        assert (out / name).exists() and (out / name).stat().st_size > 0, name
    pngs = sorted(p.name for p in out.glob("curves_*.png"))
    assert len(pngs) == 2
    assert (out / pngs[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # records: every trial, tagged with strategy and seed
    lines = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()]
    assert len(lines) == 16
    assert {(d["strategy"], d["seed"]) for d in lines} == {("random", 0), ("random", 1), ("grid", 0), ("grid", 1)}
    # summary: stats over seeds, vendor ratio and % of peak
    summ = json.loads((out / "summary.json").read_text())
    assert summ["complete"] and summ["machine"]["python"] and summ["machine"]["numpy"]
    key = "gemm:M=64,N=64,K=64"
    st = summ["workloads"][key]["strategies"]["random"]
    assert st["seeds"] == 2 and st["best_gflops"]["mean"] > 0
    vend = summ["workloads"][key]["baselines"]["vendor"]
    assert vend["error"] is None and vend["gflops"] > 0 and "numpy" in vend["label"]
    assert st["vs_vendor"] == pytest.approx(st["best_gflops"]["mean"] / vend["gflops"])
    if summ["peak"]:
        assert st["pct_peak"] == pytest.approx(100 * st["best_gflops"]["mean"] / summ["peak"]["gflops"])
    rows = list(csv.DictReader(open(out / "summary.csv")))
    methods = {(r["workload"], r["method"]) for r in rows}
    assert (key, "random") in methods and (key, "grid") in methods and (key, "vendor") in methods
    report = (out / "report.md").read_text()
    assert "## Results" in report and pngs[0] in report and "numpy" in report and "python" in report


def test_report_explains_results_above_the_peak(tmp_path):
    res = run_bench(load("tiny"), tmp_path / "b", strategies=["random"], seeds=1, budget=2, baselines=(),
                    measurer_factory=synthetic_factory, progress=False, plots=False)
    low = dataclasses.replace(res, peak=Peak(1e-3, "test", "1 core x 1 GHz; clock from /proc/cpuinfo cpu MHz"))
    text = report_mod.render(low, summarize(low))
    assert "Above 100% of the peak" in text and "/proc/cpuinfo cpu MHz" in text
    high = dataclasses.replace(res, peak=Peak(1e9, "test", "1 core x 1 GHz"))
    assert "Above 100% of the peak" not in report_mod.render(high, summarize(high))


def test_budget_seconds_stops_runs(tmp_path):
    def slow_factory(wl, space, target):
        def cost(c):
            time.sleep(0.02)
            return 1e-4
        return FunctionMeasurer(cost)

    s = validate(_suite_dict(budget=10_000, budget_seconds=0.3), "s.json")
    res = run_bench(s, tmp_path / "o", measurer_factory=slow_factory, baselines=(), progress=False, plots=False)
    (r,) = res.runs
    assert r.stopped == "seconds" and 1 <= r.trials < 10_000
    assert r.trace[-1][1] >= 0.3 - 1e-6  # times in the trace are seconds since the run started
    # budget_seconds=0 lifts the suite's wall-time limit
    res = run_bench(s, tmp_path / "o2", budget=20, budget_seconds=0, measurer_factory=slow_factory, baselines=(),
                    progress=False, plots=False)
    assert res.runs[0].stopped == "trials" and res.runs[0].trials == 20


def test_failed_trials_are_reported(tmp_path):
    def failing_factory(wl, space, target):
        calls = []

        def cost(c):
            calls.append(c)
            return "run-error" if len(calls) % 2 else 1e-4
        return FunctionMeasurer(cost)

    s = validate(_suite_dict(budget=4), "s.json")
    res = run_bench(s, tmp_path / "o", measurer_factory=failing_factory, baselines=(), progress=False, plots=False)
    (r,) = res.runs
    assert r.errors == 2 and r.error_kinds == {"run-error": 2} and r.best_gflops > 0
    report = (tmp_path / "o" / "report.md").read_text()
    assert "## Failed trials" in report and "run-error" in report and "synthetic failure" in report


def test_replay_table(tmp_path):
    s = validate(_suite_dict(strategies=["grid"], budget=6), "s.json")
    first = run_bench(s, tmp_path / "a", measurer_factory=synthetic_factory, baselines=(), progress=False,
                      plots=False)
    # the records of a bench are a replay table: the same deterministic strategy replays the same results
    again = run_bench(s, tmp_path / "b", replay=str(tmp_path / "a" / "records.jsonl"), baselines=(),
                      progress=False, plots=False)
    (r1,), (r2,) = first.runs, again.runs
    assert r2.trials == 6 and r2.errors == 0
    assert r2.best_gflops == pytest.approx(r1.best_gflops)
    recs = [json.loads(l) for l in (tmp_path / "b" / "records.jsonl").read_text().splitlines()]
    assert {d["measurer"] for d in recs} == {"replay"}
    with pytest.raises(TiletuneError, match="does not exist"):
        run_bench(s, tmp_path / "c", replay=str(tmp_path / "missing.jsonl"), baselines=(), progress=False)


def test_cli(tmp_path, capsys):
    suite = tmp_path / "one.json"
    suite.write_text(json.dumps(_suite_dict(workloads=["gemm:M=16,N=16,K=16"], budget=3)))
    assert main(["bench", "--list"]) == 0
    assert "tvm-af-ds" in capsys.readouterr().out
    # unknown strategy through the CLI: exit status 2 and a clear message
    assert main(["bench", str(suite), "--strategies", "nope", "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
    assert main(["bench", str(suite), "--baselines", "vendor,bogus", "-q"]) == 2
    assert "unknown baseline" in capsys.readouterr().err


def test_vendor_baselines_match_reference(monkeypatch):
    settings = MeasureSettings(repeat=1, min_repeat_ms=0)
    for spec in ("gemm:M=8,N=8,K=8", "gemv:M=16,K=8", "batch_matmul:B=2,M=4,N=4,K=4",
                 "conv2d:N=1,C=3,H=8,W=8,K=4,R=3,S=3,stride=2,pad=1",
                 "depthwise_conv2d:N=1,C=4,H=8,W=8,R=3,S=3,pad=1",
                 "avgpool2d:N=1,C=2,H=8,W=8,kernel=3,stride=2,pad=1"):
        r = vendor.vendor(spec, settings)
        assert r.ok, (spec, r.error, r.message)
    # without torch: numpy fallbacks, labelled as such, still correct
    monkeypatch.setattr(vendor, "optional_torch", lambda: None)
    for spec in ("conv2d:N=2,C=3,H=8,W=8,K=4,R=3,S=3,stride=2,pad=1,dilation=1",
                 "depthwise_conv2d:N=1,C=4,H=9,W=9,R=3,S=3,pad=2,dilation=2",
                 "avgpool2d:N=1,C=2,H=8,W=8,kernel=3,stride=2,pad=1"):
        r = vendor.vendor(spec, settings)
        assert r.ok and "torch not installed" in r.label, (spec, r.error, r.message)


def test_peak_and_machine_info():
    p = machine.peak({"kind": "llvm", "num-cores": 1})
    if p is not None:  # TVM builds the FMA loop here: a measured peak, at least the loop's own lanes' worth
        assert p.source == "measured" and p.gflops > 0.1, p
        inferred = machine.peak({"kind": "llvm", "num-cores": 1}, measure=False)
        assert inferred.source == "tiletune.hardware.detect_cpu" and inferred.gflops > 0
    info = machine.machine_info()
    for k in ("python", "tvm", "numpy", "torch", "cpu", "cores"):
        assert k in info


@pytest.mark.tvm
@pytest.mark.skipif(not os.environ.get("TILETUNE_TEST_METASCHEDULE"),
                    reason="MetaSchedule smoke test: 17-40 s on a shared 2-core machine (TVM's tensor-intrinsic "
                           "import and evolutionary-search start-up), more than the rest of this file together; "
                           "run it with TILETUNE_TEST_METASCHEDULE=1")
def test_metaschedule_smoke(tmp_path):
    """TVM's MetaSchedule on a tiny GEMM with 2 trials, in-process builder and runner."""
    r = metaschedule.metaschedule("gemm:M=32,N=32,K=32", host_target(), 2, timeout=300, log_path=tmp_path / "ms.log",
                        settings=MeasureSettings(repeat=2, min_repeat_ms=5))
    assert r.ok, (r.error, r.message)
    assert 1 <= r.trials <= 2 and r.curve and r.wall_s > 0
    assert r.extra["failed"] == 0


@pytest.mark.tvm
def test_metaschedule_fills_index_tensors_with_zeros():
    """MetaSchedule's runner gets valid indices: random ones made bert-small's ``take`` read outside its table
    and crash the tuning process; float tensors keep the random fill."""
    import numpy as np
    import tvm

    filled = []
    f = metaschedule._index_safe_fill(lambda arr: filled.append(str(arr.dtype)))
    idx = tvm.runtime.tensor(np.full((4, 3), 12345, dtype="int64"), tvm.cpu())
    mask = tvm.runtime.tensor(np.ones((2,), dtype="bool"), tvm.cpu())
    x = tvm.runtime.tensor(np.zeros((5,), dtype="float32"), tvm.cpu())
    for a in (idx, mask, x):
        f(a)
    assert not idx.numpy().any() and not mask.numpy().any()
    assert filled == ["float32"]


def test_resume_keeps_finished_runs_and_redoes_cut_off_ones(tmp_path, monkeypatch):
    measured = []

    def counting_factory(wl, space, target):
        m = synthetic_factory(wl, space, target)
        inner = m.measure

        def measure(configs):
            measured.extend((wl.key, c) for c in configs)
            return inner(configs)
        m.measure = measure
        return m

    s = validate(_suite_dict(workloads=["gemm:M=16,N=16,K=16", "gemm:M=32,N=16,K=16"], seeds=2, budget=3),
                 "s.json")
    out = tmp_path / "o"
    first = run_bench(s, out, measurer_factory=counting_factory, baselines=("vendor",), progress=False,
                      plots=False)
    assert len(first.runs) == 4 and len(measured) == 12
    # a crash during the last run: its trace line is missing and one of its records was written
    traces = (out / "traces.jsonl").read_text().splitlines()
    (out / "traces.jsonl").write_text("\n".join(traces[:3]) + "\n")
    records = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(records[:10]) + "\n")
    measured.clear()
    vendor_calls = []
    real_vendor = vendor.vendor
    monkeypatch.setattr(vendor, "vendor", lambda *a, **k: vendor_calls.append(a) or real_vendor(*a, **k))
    again = run_bench(s, out, measurer_factory=counting_factory, baselines=("vendor",), progress=False,
                      plots=False, resume=True)
    # only the cut-off run was repeated, from its first trial; the baselines were kept
    assert len(measured) == 3 and {k for k, _ in measured} == {"gemm:M=32,N=16,K=16"}
    assert vendor_calls == []
    assert len(again.runs) == 4
    assert sorted((r.workload, r.seed) for r in again.runs) == sorted((r.workload, r.seed) for r in first.runs)
    assert [r.best_gflops for r in again.runs] == [r.best_gflops for r in first.runs]
    lines = [json.loads(l) for l in (out / "records.jsonl").read_text().splitlines()]
    assert len(lines) == 12  # 9 kept + 3 new, the cut-off run's stray record dropped
    assert json.loads((out / "summary.json").read_text())["complete"]
    assert again.started < first.finished  # the report's start is the first piece's, not the resume's
    # a finished directory resumes to a no-op; other settings are refused
    measured.clear()
    t0 = time.time()
    run_bench(s, out, measurer_factory=counting_factory, baselines=("vendor",), progress=False, plots=False,
              resume=True)
    assert measured == []
    assert json.loads((out / "summary.json").read_text())["finished"] < t0  # the last trial's, not the re-render's
    with pytest.raises(TiletuneError, match="budget"):
        run_bench(s, out, budget=5, measurer_factory=counting_factory, baselines=(), progress=False, resume=True)
    # without resume the directory starts afresh
    run_bench(s, out, measurer_factory=counting_factory, baselines=(), progress=False, plots=False)
    assert len(measured) == 12


def test_select_workloads_and_resume_piecewise(tmp_path):
    s = validate(_suite_dict(workloads=["gemm:M=16,N=16,K=16", "gemm:M=32,N=16,K=16", "gemv:M=16,K=16"]), "s.json")
    assert s.select(None) is s
    assert s.select("3,1").workloads == ("gemv:M=16,K=16", "gemm:M=16,N=16,K=16")
    assert s.select("gemm:M=32,N=16,K=16,dtype=float32").workloads == ("gemm:M=32,N=16,K=16",)
    assert s.select("2; gemv:M=16,K=16").workloads == ("gemm:M=32,N=16,K=16", "gemv:M=16,K=16")
    with pytest.raises(TiletuneError, match="out of range 1..3"):
        s.select("4")
    with pytest.raises(TiletuneError, match="not in suite"):
        s.select("gemm:M=8,N=8,K=8")
    out = tmp_path / "o"
    run_bench(s.select("1"), out, measurer_factory=synthetic_factory, baselines=(), progress=False, plots=False)
    res = run_bench(s, out, measurer_factory=synthetic_factory, baselines=(), progress=False, plots=False,
                    resume=True)
    assert len(res.runs) == 3 and len((out / "traces.jsonl").read_text().splitlines()) == 3


def test_progress_lines_when_not_a_terminal(tmp_path):
    buf = io.StringIO()
    s = validate(_suite_dict(seeds=2, budget=3), "s.json")
    run_bench(s, tmp_path / "o", measurer_factory=synthetic_factory, baselines=("vendor",), plots=False,
              console=Console(file=buf, force_terminal=False, width=100))
    lines = buf.getvalue().splitlines()
    assert [l.split(": ")[0] for l in lines[:2]] == ["gemm:M=16,N=16,K=16 random seed 0",
                                                  "gemm:M=16,N=16,K=16 random seed 1"]
    assert all("3 trials in" in l for l in lines[:2])
    assert any("vendor baseline" in l for l in lines[2:]) and any("GFLOPS" in l for l in lines[2:])


def test_strategy_options_parse_like_the_strategy():
    cls = get("gbfs")
    given = {"rho": "3"}
    assert cls.check_options(given) == create("gbfs", bowl_space(), options=given).opts
    assert cls.check_options(given)["rho"] == 3
    with pytest.raises(TiletuneError, match="unknown options 'a', 'b'; accepted: rho"):
        cls.check_options({"b": 1, "a": 2})
    with pytest.raises(TiletuneError, match="rho"):
        cls.check_options({"rho": "much"})


def test_resume_of_a_directory_made_before_the_cutoff_existed(tmp_path):
    """Directories made before MeasureSettings.cutoff measured every kernel fully: resuming one is the same
    settings as --cutoff 0, and other settings than that are refused."""
    s = validate(_suite_dict(seeds=1, budget=3), "s.json")
    out = tmp_path / "o"
    run_bench(s, out, measurer_factory=synthetic_factory, baselines=(), progress=False, plots=False,
              settings=MeasureSettings(cutoff=0.0))
    manifest = json.loads((out / "bench.json").read_text())
    del manifest["settings"]["cutoff"]  # as an older tiletune wrote it
    (out / "bench.json").write_text(json.dumps(manifest))
    with pytest.raises(TiletuneError, match="settings differ"):
        run_bench(s, out, measurer_factory=synthetic_factory, baselines=(), progress=False, plots=False,
                  resume=True)
    res = run_bench(s, out, measurer_factory=synthetic_factory, baselines=(), progress=False, plots=False,
                    resume=True, settings=MeasureSettings(cutoff=0.0))
    assert len(res.runs) == len(s.workloads) * len(s.strategies)


def test_results_files_read_their_compressed_copy_first_then_what_a_resumed_run_appended(tmp_path):
    import gzip

    from tiletune.bench.results import read_jsonl

    path = tmp_path / "traces.jsonl"
    assert read_jsonl(path) == []
    (tmp_path / "traces.jsonl.gz").write_bytes(gzip.compress(b'{"seed": 0}\n{"seed": 1}\n'))
    assert read_jsonl(path) == [{"seed": 0}, {"seed": 1}]
    path.write_text('{"seed": 2}\n{"seed": 3, "cut')  # the last line cut off by a crash
    assert read_jsonl(path) == [{"seed": 0}, {"seed": 1}, {"seed": 2}]
