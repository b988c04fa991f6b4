import json

import pytest

from tiletune import hardware as hw
from tiletune.errors import TiletuneError


def test_presets_round_trip_and_sane():
    assert {"rtx4090", "a100", "h100", "h200", "orin-nano", "titan-xp"} <= set(hw.presets())
    for name in hw.presets():
        s = hw.preset(name)
        assert s.kind == "gpu" and s.warp_size == 32 and s.bank_count == 32
        assert s.shared_mem_per_block <= s.shared_mem_per_sm
        assert s.peak_gflops > 1000
        assert hw.HardwareSpec.from_json(s.to_json()) == s
    assert hw.preset("H100").dram_bandwidth_gbs < hw.preset("h200").dram_bandwidth_gbs
    with pytest.raises(TiletuneError, match="presets"):
        hw.preset("gtx480")


def test_detect_cpu_sane(tmp_path):
    s = hw.detect_cpu(measure_bandwidth=False, cache=False)
    assert s.kind == "cpu" and s.cores >= 1 and s.simd_lanes in (4, 8, 16) and s.freq_ghz > 0
    assert s.peak_gflops == pytest.approx(s.cores * s.simd_lanes * s.fma_units * 2 * s.freq_ghz)
    sizes = [m.size_bytes for m in s.caches]
    assert all(x > 0 for x in sizes) and sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert [m.name for m in s.memory] == ["register", "L1", "L2", "L3", "DRAM"]
    assert all(m.bandwidth_gbs > 0 and m.latency_ns >= 0 for m in s.memory)
    lat = [m.latency_ns for m in s.memory]
    assert lat == sorted(lat)
    assert "estimated" in s.source["dram_bandwidth"]


def test_measured_bandwidth_is_cached(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(hw, "measure_bandwidth_fn", lambda: calls.append(1) or 12.5)
    path = tmp_path / "hw.json"
    a = hw.detect_cpu(measure_bandwidth=True, cache=True, cache_path=path)
    b = hw.detect_cpu(measure_bandwidth=True, cache=True, cache_path=path)
    assert len(calls) == 1 and a == b and a.dram_bandwidth_gbs == 12.5
    assert hw.cpu_model_key() in json.loads(path.read_text())
    c = hw.detect_cpu(measure_bandwidth=False, cache=True, cache_path=path)  # reuses the measurement
    assert c.dram_bandwidth_gbs == 12.5


def test_real_bandwidth_measurement_small():
    bw = hw.measure_bandwidth(seconds=0.05, nbytes=8 * 1024**2, threads=1)
    assert 0.1 < bw < 10_000


def test_json_save_load_and_errors(tmp_path):
    s = hw.preset("orin-nano")
    p = tmp_path / "mine.json"
    s.save(p)
    assert hw.load(p) == s
    d = json.loads(p.read_text())
    d["cores"] = 4
    d.pop("peak_gflops")
    mine = hw.HardwareSpec.from_dict(d)
    assert mine.peak_gflops == pytest.approx(4 * 32 * mine.fma_units * 2 * mine.freq_ghz)
    p.write_text("{not json")
    with pytest.raises(TiletuneError, match="not valid JSON"):
        hw.load(p)
    with pytest.raises(TiletuneError, match="cannot read"):
        hw.load(tmp_path / "missing.json")
    for bad in ({"name": "x"}, {**d, "kind": "tpu"}, {**d, "speed": 3}, {**d, "memory": []},
                {**d, "memory": [{"name": "L1"}]}, [1, 2]):
        with pytest.raises(TiletuneError):
            hw.HardwareSpec.from_dict(bad)


def test_for_target():
    assert hw.for_target({"kind": "cuda", "arch": "sm_89"}).name.endswith("4090")
    assert hw.for_target({"kind": "cuda", "arch": "sm_80", "hardware": "h200"}).name.startswith("NVIDIA H200")
    cpu = hw.for_target({"kind": "llvm", "num-cores": 7}, measure_bandwidth=False, cache=False)
    assert cpu.cores == 7 and cpu.kind == "cpu"
    with pytest.raises(TiletuneError, match="arch"):
        hw.for_target({"kind": "cuda", "arch": "sm_20"})
    with pytest.raises(TiletuneError):
        hw.for_target({"kind": "vulkan"})


def test_command(tmp_path, capsys):
    from tiletune.cli import main

    out = tmp_path / "a100.json"
    assert main(["hardware", "--preset", "a100", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert hw.HardwareSpec.from_json(printed) == hw.load(out) == hw.preset("a100")
    assert main(["hardware", "--preset", "nope"]) == 2
