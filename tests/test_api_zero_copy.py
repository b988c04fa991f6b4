"""tiletune.api passes arrays to TVM without copies where it can (DLPack), stages the rest once, and never
overwrites an output the caller still holds."""
import json

import numpy as np
import pytest

from tiletune.api import ALIGNMENT, _Args, empty, export_best, load_kernel, load_model
from tiletune.errors import TiletuneError
from tiletune.records import Record
from tiletune.schedules import make_space
from tiletune.target import host_target
from tiletune.workloads import parse

pytestmark = pytest.mark.tvm

M, N, K = 64, 48, 32


def ptr(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    wl = parse(f"gemm:M={M},N={N},K={K}")
    target = host_target()
    space = make_space(wl, None, target)
    config = space.to_dict(space.sample(np.random.default_rng(0)))
    d = tmp_path_factory.mktemp("kernel")
    rec = Record(workload=wl.key, target=json.dumps(target), config=config, costs=(1e-3,), median_s=1e-3, gflops=1.0)
    (d / "r.jsonl").write_text(rec.to_json() + "\n")
    export_best(str(d / "r.jsonl"), str(d / "k.so"))
    return load_kernel(str(d / "k.so"))


@pytest.fixture
def ab():
    rng = np.random.default_rng(1)
    return rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32)


def aligned(x: np.ndarray) -> np.ndarray:
    y = empty(x.shape, x.dtype)
    y[...] = x
    return y


def test_empty_is_aligned_and_plain_numpy_often_is_not():
    for shape in [(7,), (64, 48), (3, 5, 9)]:
        x = empty(shape, "float32")
        assert x.shape == shape and x.dtype == np.float32 and ptr(x) % ALIGNMENT == 0 and x.flags.c_contiguous


def test_aligned_inputs_share_memory_with_the_tvm_tensors(kernel, ab):
    a = aligned(ab[0])
    t = kernel._args.input(0, a, (M, K), np.dtype("float32"), "0")
    assert np.shares_memory(np.from_dlpack(t), a)
    a[0, 0] = 42.0  # the same memory, seen through the TVM tensor
    assert np.from_dlpack(t)[0, 0] == 42.0


def test_misaligned_strided_and_cast_inputs_are_staged_once_and_correct(kernel, ab):
    a, b = ab
    base = np.empty(M * K + 1, np.float32)
    mis = base[1:].reshape(M, K)  # 4 bytes past numpy's alignment: never 64-byte aligned
    mis[...] = a
    assert ptr(mis) % ALIGNMENT != 0
    args = _Args(kernel._dev, "input")
    t1 = args.input(0, mis, (M, K), np.dtype("float32"), "0")
    assert not np.shares_memory(np.from_dlpack(t1), mis)
    t2 = args.input(0, np.asfortranarray(a), (M, K), np.dtype("float32"), "0")
    assert ptr(np.from_dlpack(t2)) == ptr(np.from_dlpack(t1))  # one staging buffer per input, reused
    for x, y in [(mis, b), (np.asfortranarray(a), b), (a.astype(np.float64), b), (a.tolist(), b),
                 (a[:, ::-1][:, ::-1], b.T.copy().T)]:
        np.testing.assert_allclose(kernel(x, y), a @ b, rtol=1e-4, atol=1e-4)


def test_outputs_are_views_that_a_later_call_never_overwrites(kernel, ab):
    a, b = (aligned(x) for x in ab)
    y1 = kernel(a, b)
    part = y1[:3].T  # a view derived from the output keeps its buffer reserved too
    y2 = kernel(2 * a, b)
    assert not np.shares_memory(y1, y2)
    np.testing.assert_allclose(y1, ab[0] @ ab[1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y2, 2 * (ab[0] @ ab[1]), rtol=1e-4, atol=1e-4)
    p1 = ptr(y1)
    del y1
    y3 = kernel(3 * a, b)
    np.testing.assert_allclose(part, (ab[0] @ ab[1])[:3].T, rtol=1e-4, atol=1e-4)
    assert ptr(y3) != p1  # still held through `part`
    held = {p1, ptr(y2), ptr(y3)}
    del part, y2, y3
    seen = set()
    for _ in range(6):  # a caller that rebinds one name: the pool alternates between two idle buffers
        y = kernel(a, b)
        seen.add(ptr(y))
    assert len(seen) <= 2 and seen <= held


def test_out_argument_in_place_or_through_one_copy(kernel, ab):
    a, b = (aligned(x) for x in ab)
    want = ab[0] @ ab[1]
    c = empty((M, N), "float32")
    before = ptr(c)
    assert kernel(a, b, out=c) is c and ptr(c) == before
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert np.shares_memory(np.from_dlpack(kernel._args.out_arg(c, (M, N), np.dtype("float32"), (a, b))), c)
    c64 = np.zeros((M, N))
    assert kernel(a, b, out=c64) is c64
    np.testing.assert_allclose(c64, want, rtol=1e-4, atol=1e-4)
    buf = np.zeros((M, N), np.float32)
    with pytest.raises(TiletuneError, match="overlaps an input"):
        kernel(buf[:, :K], b, out=buf)
    with pytest.raises(TiletuneError, match="out= must be a numpy array of shape"):
        kernel(a, b, out=np.zeros((N, M), np.float32))


def test_torch_tensors_pass_without_copies(kernel, ab):
    torch = pytest.importorskip("torch")
    ta, tb = torch.from_numpy(ab[0].copy()), torch.from_numpy(ab[1].copy())
    if ta.data_ptr() % ALIGNMENT == 0:  # torch's CPU allocator aligns to 64 bytes
        t = kernel._args.input(0, ta, (M, K), np.dtype("float32"), "0")
        assert ptr(np.from_dlpack(t)) == ta.data_ptr()
    np.testing.assert_allclose(kernel(ta, tb), ab[0] @ ab[1], rtol=1e-4, atol=1e-4)
    grad = ta.clone().requires_grad_(True)
    np.testing.assert_allclose(kernel(grad, tb.double()), ab[0] @ ab[1], rtol=1e-4, atol=1e-4)


def test_bad_inputs_are_one_line_errors(kernel, ab):
    a, b = ab
    with pytest.raises(TiletuneError, match=r"input 0: shape \(3, 32\) != expected \(64, 32\)"):
        kernel(a[:3], b)
    with pytest.raises(TiletuneError, match="complex64 does not convert to float32"):
        kernel(a.astype(np.complex64), b)
    with pytest.raises(TiletuneError, match="takes 2 inputs, got 1"):
        kernel(a)


SMALL = '''
import torch

def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    return m, (torch.randn(2, 16),)
'''


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    pytest.importorskip("torch")
    from tiletune.cli import main

    d = tmp_path_factory.mktemp("model")
    (d / "small.py").write_text(SMALL)
    assert main(["model", "build", f"{d / 'small.py'}:make", "-o", str(d / "m.so"), "--no-check"]) == 0
    return load_model(str(d / "m.so"))


def test_model_inputs_zero_copy_and_outputs_kept(model):
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    x1, x2 = (np.random.default_rng(s).random((2, 16), dtype=np.float32) for s in (1, 2))
    with torch.no_grad():
        want1, want2 = (net(torch.from_numpy(x)).numpy() for x in (x1, x2))
    xa = aligned(x1)
    t = model._args.input(0, xa, (2, 16), np.dtype("float32"), "input0")
    assert np.shares_memory(np.from_dlpack(t), xa)
    y1 = model(xa)[0]
    y2 = model(torch.from_numpy(x2))[0]
    np.testing.assert_allclose(y1, want1, rtol=1e-4, atol=1e-5)  # kept while the next call ran
    np.testing.assert_allclose(y2, want2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model(x1.astype(np.float64))[0], want1, rtol=1e-4, atol=1e-5)
    with pytest.raises(TiletuneError, match=r"input input0: shape \(3, 16\) != expected \(2, 16\)"):
        model(np.zeros((3, 16), np.float32))
