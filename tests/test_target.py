"""Targets are checked before anything starts: num-cores, an unknown mcpu, more cores than this machine has."""
import json

import pytest

from tiletune.errors import TiletuneError
from tiletune.measure import local
from tiletune.schedules.cpu import choice_knobs
from tiletune.space import Space
from tiletune.target import check_local_target, host_cores, host_mcpu, host_target, parse_target
from tiletune.workloads import parse


def _llvm(**kw) -> str:
    return json.dumps({"kind": "llvm", **kw})


@pytest.mark.parametrize("n", [-1, 0, 1.5, "2", True, None])
def test_num_cores_must_be_a_whole_number_at_least_one(n):
    with pytest.raises(TiletuneError, match="num-cores must be a whole number >= 1"):
        parse_target(_llvm(**{"num-cores": n}))
    with pytest.raises(TiletuneError, match="num-cores must be a whole number >= 1"):
        parse_target({"kind": "cuda", "arch": "sm_90", "num-cores": n})


def test_valid_targets_pass():
    assert parse_target(None) == host_target()
    assert parse_target(_llvm(**{"num-cores": 1}))["num-cores"] == 1
    assert parse_target(_llvm(mcpu=host_mcpu(), **{"num-cores": host_cores()}))["mcpu"] == host_mcpu()
    check_local_target(parse_target(None))


def test_more_cores_than_this_machine_only_for_local_measurement():
    n = host_cores() + 62
    t = parse_target(_llvm(**{"num-cores": n}))  # may name another machine's cores (measured on RPC devices)
    with pytest.raises(TiletuneError, match=f"num-cores {n} is more than this machine's {host_cores()} logical"):
        check_local_target(t)


def start_measurer_without_workers(monkeypatch, spec: str, target: dict):
    """LocalMeasurer(spec, its default space, target), failing the test if it starts a worker."""

    def no_pool(*a, **k):
        raise AssertionError("workers started")

    monkeypatch.setattr(local, "WorkerPool", no_pool)
    wl = parse(spec)
    return local.LocalMeasurer(wl, Space.from_axes(wl.axes_no_tvm(), choices=choice_knobs(wl)), target)


def test_local_measurer_refuses_too_many_cores_before_starting_workers(monkeypatch):
    with pytest.raises(TiletuneError, match="num-cores 64 is more than"):
        start_measurer_without_workers(monkeypatch, "gemm:M=16,N=16,K=8", {"kind": "llvm", "num-cores": 64})
    with pytest.raises(TiletuneError, match="num-cores must be a whole number"):
        start_measurer_without_workers(monkeypatch, "gemm:M=16,N=16,K=8", {"kind": "llvm", "num-cores": -1})


@pytest.mark.tvm
def test_unknown_mcpu_is_an_error_naming_known_cpus():
    with pytest.raises(TiletuneError, match="LLVM knows no CPU 'notacpu'") as e:
        parse_target(_llvm(mcpu="notacpu"))
    assert "znver4" in str(e.value) or "haswell" in str(e.value)
    assert parse_target(_llvm(mcpu="icelake-server"))["mcpu"] == "icelake-server"  # known to LLVM, not a preset
    assert parse_target(_llvm(mcpu="cortex-a72", mtriple="aarch64-linux-gnu"))["mcpu"] == "cortex-a72"
    with pytest.raises(TiletuneError, match="for aarch64-linux-gnu"):
        parse_target(_llvm(mcpu="znver4", mtriple="aarch64-linux-gnu"))
    with pytest.raises(TiletuneError, match="mcpu must be an LLVM CPU name"):
        parse_target(_llvm(mcpu=7))
