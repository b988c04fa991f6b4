"""The vendor baseline runs in its own process, without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, and names the
kernel that ran (tiletune.bench.vendor; docs/decisions/vendor-baseline.md)."""
import os
import platform
import subprocess
import sys

import pytest

from tiletune.bench import vendor
from tiletune.measure.base import MeasureSettings

FAST = MeasureSettings(repeat=1, min_repeat_ms=0)
GEMM = "gemm:M=64,N=48,K=32"


def test_child_env_drops_the_openblas_overrides_and_sets_threads():
    env = vendor.child_env(3, {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "OPENBLAS_NUM_THREADS": "3"}
    assert vendor.child_env(None, {"OPENBLAS_CORETYPE": "Haswell"}) == {}


def _blas_kernel_in_child(env: dict) -> str:
    code = "import numpy; from tiletune.bench.vendor import blas_kernel; print(blas_kernel())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="OpenBLAS core types are x86 names")
def test_vendor_times_numpy_without_the_coretype_override_of_this_process(monkeypatch):
    pytest.importorskip("threadpoolctl")
    # Sandybridge (AVX, 2011): a child that kept the variable would report it on any current CPU
    forced = _blas_kernel_in_child({**os.environ, "OPENBLAS_CORETYPE": "Sandybridge", "OPENBLAS_NUM_THREADS": "1"})
    if "Sandybridge" not in forced:
        pytest.skip(f"this OpenBLAS ignores OPENBLAS_CORETYPE ({forced})")
    natural = _blas_kernel_in_child(vendor.child_env(1))
    assert "Sandybridge" not in natural
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Sandybridge")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "262144")
    r = vendor.vendor(GEMM, FAST, threads=1)
    assert r.ok, (r.error, r.message)
    assert r.label == f"numpy matmul ({natural})" and "1 thread)" in r.label
    assert os.environ["OPENBLAS_CORETYPE"] == "Sandybridge" and os.environ["OPENBLAS_L2_SIZE"] == "262144"


def test_vendor_result_comes_back_from_the_child():
    r = vendor.vendor(GEMM, FAST, threads=2)
    assert r.ok and r.name == "vendor" and r.workload == GEMM and isinstance(r.costs, tuple)
    assert r.median_s > 0 and r.wall_s > 0 and "2 threads" in r.label


def test_vendor_process_failure_is_a_result(monkeypatch):
    monkeypatch.setattr(sys, "executable", sys.executable.replace("python", "no-such-python") + "-x")
    with pytest.raises(OSError):  # no interpreter at all: the caller's environment is broken
        vendor.vendor(GEMM, FAST)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    r = vendor.vendor(GEMM, FAST)
    assert not r.ok and r.error == "run-error" and "exited with code 1 without a result" in r.message


def test_torch_label_names_isa_and_threads():
    torch = pytest.importorskip("torch")
    r = vendor.vendor("conv2d:N=1,C=8,H=10,W=10,K=8,R=3,S=3,pad=1", FAST, threads=1)
    assert r.ok, (r.error, r.message)
    assert f"{torch.backends.cpu.get_cpu_capability()}, 1 thread)" in r.label and r.extra["format"] in r.label


def test_numpy_stand_in_still_checked_when_torch_is_missing_here(monkeypatch):
    monkeypatch.setattr(vendor, "optional_torch", lambda: None)  # the child is told: no torch
    r = vendor.vendor("avgpool2d:N=1,C=4,H=8,W=8,kernel=3,stride=1,pad=1", FAST)
    assert r.ok and r.label == "numpy window sum (torch not installed)"
