"""The settings of benchmarks/defaults/construct_refine.py (no measuring): what each setting directory pins."""
import importlib.util
from pathlib import Path

import pytest

from tiletune.errors import TiletuneError
from tiletune.strategies import get

spec = importlib.util.spec_from_file_location(
    "construct_refine", Path(__file__).resolve().parents[1] / "benchmarks" / "defaults" / "construct_refine.py")
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
    # the same options run again with newer code: the setting whose runs finished last is the current one
    runs["zz2"] = setting("zz2", bench.default_options(["ga", "gbfs"]))
    assert bench.current_setting(tmp_path, runs) == "default"
    for name, t in (("default", 100.0), ("zz2", 200.0), ("zz", 150.0)):
        (tmp_path / name / "records.jsonl").write_text(json.dumps({"finished": t - 1}) + "\n"
                                                       + json.dumps({"finished": t}) + "\n")
    assert bench.current_setting(tmp_path, runs) == "zz2"


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


def test_the_confirmed_goals_take_each_kernels_fastest_round_after_the_first_and_the_seed_means(tmp_path):
    assert bench.confirmed(tmp_path) == {}
    w = "gemm:M=64,N=64,K=64"
    lines = [("reference: xgb/reference/seed 0", 120.0, [130.0, 100.0, 96.0, 98.0]),  # 100: the warm round left out
             ("top: gbfs/sweep2/seed 1", 110.0, [50.0, 104.0, 104.0, 104.0]),
             ("at48: gbfs/sweep2/seed 0", 95.0, [90.0, 92.0, 94.0, 60.0]),   # 94
             ("at48: gbfs/sweep2/seed 1", 99.0, [90.0, 80.0, 80.0, 80.0]),   # 80: gbfs mean 87
             ("at48: dgd/sweep2/seed 0", 97.0, [1.0, 91.0, 50.0, 50.0]),     # 91, two spoilt rounds
             ("at48: random/paper/seed 0", 90.0, [88.0, 88.0, 88.0, 88.0]),
             ("at48: random/paper/seed 1", 80.0, [86.0, 84.0]),              # fewer than 3 rounds: all: random 87
             ("at48: dgd/transfer2/seed 0", 97.0, [1.0, 99.0, 99.0, 99.0]),  # another setting: not judged for sweep2
             ]
    (tmp_path / "confirm.jsonl").write_text("".join(
        bench.json.dumps({"workload": w, "run": r, "recorded_gflops": g, "remeasured_gflops": xs}) + "\n"
        for r, g, xs in lines))
    c = bench.confirmed(tmp_path, "sweep2")[w]
    assert c["reference"] == 100.0 and c["best_any"] == 104.0 and c["at"] == 48
    assert c["methods"]["gbfs/sweep2"]["mean"] == 87.0 and c["methods"]["gbfs/sweep2"]["recorded_mean"] == 97.0
    assert c["methods"]["random"]["mean"] == 87.0 and c["methods"]["random"]["seeds"] == 2
    assert c["best_method"] == "dgd/sweep2" and c["best"] == 91.0
    assert c["vs_reference"] == pytest.approx(0.91) and c["vs_best_any"] == pytest.approx(91 / 104)
    assert c["below_random"] == []  # gbfs's 87 equals random's 87: not below
    assert c["methods"]["dgd/transfer2"]["mean"] == 99.0  # reported, but not the current setting's
    assert bench.confirmed(tmp_path, "other")[w]["best_method"] == "dgd/transfer2"  # no runs of it: all judged
    text = "\n".join(bench.confirmed_section({w: c}, "sweep2"))
    assert "met on 1 of 1 against the reference, 0 against the best of any run" in text
