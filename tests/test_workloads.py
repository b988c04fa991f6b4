import numpy as np
import pytest

from tiletune.errors import TiletuneError
from tiletune.workloads import operators, parse


def test_all_families_registered():
    assert {"gemm", "batch_matmul", "gemv", "conv2d", "depthwise_conv2d", "avgpool2d"} <= set(operators())


@pytest.mark.parametrize(
    "spec,flops",
    [
        ("gemm:M=4,N=5,K=6", 2 * 4 * 5 * 6),
        ("batch_matmul:B=2,M=3,N=4,K=5", 2 * 2 * 3 * 4 * 5),
        ("gemv:M=7,K=3", 2 * 7 * 3),
        ("conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1", 2 * 256 * 14 * 14 * 128 * 9),
        ("depthwise_conv2d:C=8,H=10,W=10,R=3,S=3", 2 * 8 * 8 * 8 * 9),
        ("avgpool2d:C=3,H=8,W=8,kernel=2,stride=2", 2 * 3 * 4 * 4 * 4),
    ],
)
def test_flops_exact(spec, flops):
    assert parse(spec).flops == flops


def test_key_is_stable_and_canonical():
    a = parse("gemm:K=3,M=1,N=2")
    b = parse("gemm: M=1, N=2, K=3")
    assert a.key == b.key == "gemm:M=1,N=2,K=3"
    assert parse("gemm:M=1,N=2,K=3,dtype=float64").key.endswith("dtype=float64")
    assert parse(a.key) == a


@pytest.mark.parametrize(
    "spec,match",
    [
        ("matmul:M=1", "unknown operator"),
        ("gemm:M=1,N=2", "missing parameter K"),
        ("gemm:M=1,N=2,K=3,Z=4", "unknown parameter"),
        ("gemm:M=0,N=2,K=3", "must be >= 1"),
        ("gemm:M=-4,N=2,K=3", "must be >= 1"),
        ("gemm:M=x,N=2,K=3", "not an integer"),
        ("gemm:M=1,N=2,K=3,dtype=int3", "unknown dtype"),
        ("conv2d:C=3,H=2,W=2,K=4,R=5,S=5", "does not fit"),
        ("avgpool2d:C=3,H=2,W=2,kernel=3", "does not fit"),
        ("", "empty"),
        ("gemm:M", "NAME=VALUE"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(TiletuneError, match=match):
        parse(spec)


def test_error_lists_accepted():
    with pytest.raises(TiletuneError) as e:
        parse("nope:M=1")
    assert "gemm:" in str(e.value) and "conv2d:" in str(e.value)


def test_conv_reference_matches_direct_loop():
    wl = parse("conv2d:C=2,H=6,W=5,K=3,R=3,S=2,stride=2,pad=1,dilation=1")
    d, w = wl.make_inputs()
    out = wl.reference(d, w)
    dp = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros(wl.output_shape(), np.float64)
    for k in range(3):
        for p in range(wl.P):
            for q in range(wl.Q):
                ref[0, k, p, q] = np.sum(dp[0, :, p * 2 : p * 2 + 3, q * 2 : q * 2 + 2] * w[k])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_axes_from_te_match_static():
    for spec in ["gemm:M=4,N=5,K=6", "conv2d:C=2,H=6,W=5,K=3,R=3,S=2,stride=2,pad=1",
                 "avgpool2d:C=3,H=8,W=8,kernel=3,stride=2,pad=1", "gemv:M=7,K=3"]:
        wl = parse(spec)
        assert wl.axes() == wl.axes_no_tvm()
