"""The settings of benchmarks/construct_refine.py (no measuring): what each setting directory pins."""
import importlib.util
from pathlib import Path

import pytest

from tiletune.errors import TiletuneError
from tiletune.strategies import get

spec = importlib.util.spec_from_file_location(
    "construct_refine", Path(__file__).resolve().parents[1] / "benchmarks" / "construct_refine.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_the_paper_setting_pins_each_papers_start_and_autotvms_population():
    o = bench.paper_options(["gbfs", "na2c", "dgd", "xgb", "evo", "ga", "random"])
    assert o["gbfs"] == {"start": "untiled"} and o["na2c"] == {"start": "untiled"}
    assert o["xgb"] == {"start": "random", "prior": "none"}
    assert o["ga"] == {"start": "random", "pop_size": 100}
    assert "random" not in o


def test_the_default_setting_pins_the_current_defaults_and_variants_override_them():
    declared = get("ga").check_options({})
    o = bench.default_options(["ga", "gbfs", "evo"])
    assert o["ga"] == {"start": declared["start"], "start_sweep": declared["start_sweep"],
                       "pop_size": declared["pop_size"]}
    assert declared["pop_size"] != 100  # chosen by measurement: AutoTVM's 100 is the paper setting's
    assert set(o["gbfs"]) == {"start", "start_sweep"} and set(o["evo"]) == {"start", "start_sweep", "prior"}
    name, extra = bench.parse_variant("paper-random:start=random,prior=none,pop_size=100")
    v = bench.default_options(["ga", "gbfs"], extra)
    assert name == "paper-random" and v["ga"] == {"start": "random", "pop_size": 100}  # no sweep without constructions
    assert v["gbfs"] == {"start": "random"}  # gbfs has neither prior nor pop_size


@pytest.mark.parametrize("text", ["default:start=random", "x:start", ":start=random", "a b:start=random"])
def test_a_bad_variant_is_one_line(text):
    with pytest.raises(TiletuneError, match="--variant"):
        bench.parse_variant(text)


def test_the_goals_are_judged_for_the_setting_that_pins_the_current_defaults(tmp_path):
    import json

    from tiletune.bench.results import RunResult

    def setting(name, options):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench.json").write_text(json.dumps({"options": options}))
        return [RunResult(workload="w", strategy=s, seed=0, trials=1, measured=1, errors=0, best_gflops=1.0,
                          best_median_s=1.0, best_trial=1, best_config={}, elapsed_s=0.0, stopped="trials",
                          space_size=1) for s in options]

    old = {"ga": {"start": "roller", "pop_size": 100}, "gbfs": {"start": "roller"}}
    runs = {"default": setting("default", old), "paper": setting("paper", bench.paper_options(["ga", "gbfs"])),
            "zz": setting("zz", bench.default_options(["ga", "gbfs"]))}
    assert bench.current_setting(tmp_path, runs) == "zz"  # default/ pins what the defaults were
    runs["aa"] = setting("aa", bench.default_options(["ga", "gbfs"]))  # the defaults, with transfer data
    manifest = json.loads((tmp_path / "aa" / "bench.json").read_text())
    (tmp_path / "aa" / "bench.json").write_text(json.dumps({**manifest, "transfer": {"w": ["x.jsonl"]}}))
    assert bench.current_setting(tmp_path, runs) == "zz"
    (tmp_path / "default" / "bench.json").write_text(json.dumps({"options": bench.default_options(["ga", "gbfs"])}))
    assert bench.current_setting(tmp_path, runs) == "default"


def test_transfer_gives_each_workload_the_reference_records_of_its_operators_other_shapes(tmp_path):
    from tiletune.records import Record, RecordWriter, load

    from tiletune.workloads import parse

    a, b, c = (parse(w).key for w in ("gemm:M=8,N=8,K=8", "gemm:M=16,N=8,K=8",
                                      "conv2d:N=1,C=4,H=8,W=8,K=4,R=3,S=3,stride=1,pad=1"))
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference-random").mkdir()
    with RecordWriter(tmp_path / "reference" / "records.jsonl") as w:
        for wl in (a, b, c):
            w.write(Record(workload=wl, target="t", config={"x": 1}, median_s=1.0))
    with RecordWriter(tmp_path / "reference-random" / "records.jsonl") as w:
        w.write(Record(workload=b, target="t", config={"x": 2}, median_s=2.0))
    files = bench.transfer_files(tmp_path, tmp_path / "v" / "transfer", [a, b, c])
    assert set(files) == {a, b}  # the conv has no other shape of its operator
    assert [r.workload for r in load(files[a][0])] == [b, b]
    assert [r.workload for r in load(files[b][0])] == [a]
    assert files == bench.transfer_files(tmp_path, tmp_path / "v" / "transfer", [a, b, c])  # idempotent
