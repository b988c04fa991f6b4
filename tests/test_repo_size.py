"""benchmarks/out stays small (issue 41): its size, its index, and the compressed records the scripts read back."""
import gzip
import importlib.util
import json
import warnings
from pathlib import Path

import pytest

from tiletune.records import load

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
MB = 1024 * 1024

spec = importlib.util.spec_from_file_location("construct_refine", ROOT / "benchmarks" / "defaults" / "construct_refine.py")
construct_refine = importlib.util.module_from_spec(spec)
spec.loader.exec_module(construct_refine)


def test_benchmark_results_stay_under_30_mb_with_no_file_over_5_mb():
    files = [p for p in OUT.rglob("*") if p.is_file()]
    sizes = {p.relative_to(OUT).as_posix(): p.stat().st_size for p in files}
    big = {name: round(size / MB, 1) for name, size in sizes.items() if size > 5 * MB}
    assert not big, f"files over 5 MB in benchmarks/out (gzip records: benchmarks/out/README.md): {big}"
    total = sum(sizes.values())
    assert total <= 30 * MB, f"benchmarks/out holds {total / MB:.1f} MB, more than 30 MB"


def test_every_results_folder_is_described_in_the_index_and_every_described_one_exists():
    index = (OUT / "README.md").read_text(encoding="utf-8")
    listed = {line.split("`")[1].rstrip("/") for line in index.splitlines() if line.startswith("| `")}
    present = {p.name for p in OUT.iterdir() if p.is_dir()}
    assert present - listed == set(), "folders missing from benchmarks/out/README.md"
    assert listed - present == set(), "benchmarks/out/README.md lists folders that do not exist"


def test_no_plain_records_file_above_1_mb():
    plain = [p.relative_to(OUT).as_posix() for p in OUT.rglob("*.jsonl") if p.stat().st_size > MB
             and (p.name == "records.jsonl" or p.parent.name == "records")]
    assert plain == [], "compress these (gzip -9n): the scripts read FILE.jsonl.gz"


def test_committed_compressed_records_load_and_a_truncated_one_warns(tmp_path):
    path = OUT / "construct-refine-128" / "reference-row" / "records.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    records = load(path)
    assert len(records) == len(lines) > 0
    assert records[-1].to_json() == json.dumps(json.loads(lines[-1]), sort_keys=True)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        partial = load(cut)
    assert 0 < len(partial) < len(records) and any("unreadable after line" in str(w.message) for w in caught)


@pytest.mark.parametrize("study", ["construct-refine-nhwc", "construct-refine-model"])
def test_the_analysis_of_a_compressed_study_gives_its_committed_report(study):
    out = OUT / study
    assert not list(out.glob("*/traces.jsonl")) and list(out.glob("*/traces.jsonl.gz"))
    runs = construct_refine.load_runs(out)
    top = max(r.trials for name, rs in runs.items() if not construct_refine.is_reference(name) for r in rs)
    result = construct_refine.analyze(out, tuple(b for b in construct_refine.BUDGETS if b < top) + (top,))
    assert json.loads(json.dumps(result)) == json.loads((out / "construct_refine.json").read_text(encoding="utf-8"))


def test_a_compressed_setting_reads_as_the_plain_one_and_unpacks_for_resuming(tmp_path):
    trace = {"workload": "w", "strategy": "gbfs", "seed": 0, "trials": 2, "measured": 2, "errors": 0,
             "best_gflops": 3.0, "best_median_s": 1.0, "best_trial": 2, "best_config": {}, "elapsed_s": 0.1,
             "stopped": "trials", "space_size": 4}
    text = json.dumps(trace) + "\n"
    for name, data in (("plain", None), ("packed", text)):
        (tmp_path / name / "s").mkdir(parents=True)
        if data is None:
            (tmp_path / name / "s" / "traces.jsonl").write_text(text)
            (tmp_path / name / "s" / "records.jsonl").write_text(json.dumps({"finished": 7.0}) + "\n")
        else:
            (tmp_path / name / "s" / "traces.jsonl.gz").write_bytes(gzip.compress(data.encode()))
            (tmp_path / name / "s" / "records.jsonl.gz").write_bytes(gzip.compress(b'{"finished": 7.0}\n'))
    assert construct_refine.load_runs(tmp_path / "packed") == construct_refine.load_runs(tmp_path / "plain")
    assert construct_refine.last_finished(tmp_path / "packed" / "s" / "records.jsonl") == 7.0
    setting = construct_refine.resumable(tmp_path / "packed" / "s")
    assert (setting / "traces.jsonl").read_text() == text
    assert (setting / "records.jsonl").read_text() == '{"finished": 7.0}\n'
