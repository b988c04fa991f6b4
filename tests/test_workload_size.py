"""Workloads too big for TVM's 32-bit indices are refused when parsed; workloads too big for this machine's
memory are refused before a local measurement starts any worker."""
import psutil
import pytest

from tiletune.errors import TiletuneError
from tiletune.schedules.cpu import packable_inputs
from tiletune.workloads import parse
from tiletune.workloads.base import INDEX_MAX
from tiletune.workloads.size import GIB, check_memory, memory_bytes

from .test_target import start_measurer_without_workers


@pytest.mark.parametrize("spec,what", [
    ("gemm:M=100000,N=100000,K=100000", "input 1 (100000 x 100000) has 10,000,000,000 elements"),
    ("gemm:M=46341,N=46341,K=16", "output (46341 x 46341) has 2,147,488,281 elements"),  # just past 2**31 - 1
    ("batch_matmul:B=3,M=30000,N=16,K=30000", "input 1 (3 x 30000 x 30000)"),
    ("gemv:M=50000,K=50000", "input 1 (50000 x 50000)"),
    # the input fits, the padded input the kernel addresses does not
    ("avgpool2d:C=1,H=46340,W=46340,kernel=3,pad=1", "padded input (1 x 1 x 46342 x 46342)"),
    ("conv2d:C=1,H=46340,W=46340,K=1,R=3,S=3,pad=1", "padded input (1 x 1 x 46342 x 46342)"),
])
def test_extents_past_the_int32_index_range_are_refused_at_parse_time(spec, what):
    with pytest.raises(TiletuneError, match="32-bit indices") as e:
        parse(spec)
    assert what in str(e.value) and f"{INDEX_MAX:,}" in str(e.value)


def test_extents_within_the_index_range_parse():
    assert parse("gemm:M=40000,N=40000,K=16").flops == 2 * 40000 * 40000 * 16  # 1.6e9 elements: builds in TVM
    assert parse("avgpool2d:C=1,H=46340,W=46340,kernel=3").P == 46338


def test_memory_estimate_counts_inputs_output_reference_and_packed_copies():
    wl = parse("gemm:M=1000,N=2000,K=3000")
    a, b, c = 1000 * 3000 * 4, 3000 * 2000 * 4, 1000 * 2000 * 4
    one = memory_bytes(wl)
    assert one["per_worker"] == a + b + c  # inputs and reference kept by a worker
    assert one["run"] == a + b + 5 * c  # device copies, output, its check copy and temporaries
    assert memory_bytes(wl, packed=["B"])["run"] == a + 2 * b + 5 * c
    assert memory_bytes(wl, workers=2)["total"] == 2 * (a + b + c) + (a + b + 5 * c)
    conv = parse("conv2d:C=8,H=32,W=32,K=4,R=3,S=3,pad=1")
    windows = 8 * 3 * 3 * 32 * 32 * 4  # the reference's im2col windows dominate this one
    assert memory_bytes(conv)["run"] >= windows


def test_a_workload_this_machine_cannot_hold_is_refused_with_the_figures():
    wl = parse("gemm:M=45000,N=45000,K=45000")
    with pytest.raises(TiletuneError) as e:
        check_memory(wl, workers=2, packed=["B"], available=24 * GIB)
    msg = str(e.value)
    assert "\n" not in msg and "needs about 105.6 GiB" in msg and "more than the 24.0 GiB of memory available" in msg
    with pytest.raises(TiletuneError, match="GiB of memory available on this machine"):
        check_memory(wl)  # this machine's own figure (the 75 GiB it needs: more than any test machine has free)
    check_memory(parse("gemm:M=1024,N=1024,K=1024"), workers=2)


def test_local_measurer_refuses_before_starting_workers(monkeypatch):
    wl = parse("gemm:M=45000,N=45000,K=45000")
    assert packable_inputs(wl) == ["B"]
    need = memory_bytes(wl, workers=1, packed=["B"])["total"]
    if need < psutil.virtual_memory().available:  # pragma: no cover - a machine with > 80 GiB free
        pytest.skip("this machine holds the workload")
    with pytest.raises(TiletuneError, match="measuring it here needs about"):
        start_measurer_without_workers(monkeypatch, wl.key, {"kind": "llvm", "num-cores": 1})
