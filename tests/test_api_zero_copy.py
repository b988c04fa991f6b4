"""tiletune.api passes arrays to TVM without copies where it can (DLPack), plain numpy arrays included, stages
the rest once (never a less-aligned array than the kernel declares), and never overwrites an output the caller
still holds."""
import json
import shutil

import numpy as np
import pytest

from tiletune.alignment import PARAM_ALIGNMENT, TVM_ALIGNMENT
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
def library(tmp_path_factory):
    wl = parse(f"gemm:M={M},N={N},K={K}")
    target = host_target()
    space = make_space(wl, None, target)
    config = space.to_dict(space.sample(np.random.default_rng(0)))
    d = tmp_path_factory.mktemp("kernel")
    rec = Record(workload=wl.key, target=json.dumps(target), config=config, costs=(1e-3,), median_s=1e-3, gflops=1.0)
    (d / "r.jsonl").write_text(rec.to_json() + "\n")
    export_best(str(d / "r.jsonl"), str(d / "k.so"))
    return str(d / "k.so")


@pytest.fixture(scope="module")
def kernel(library):
    return load_kernel(library)


@pytest.fixture
def ab():
    rng = np.random.default_rng(1)
    return rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32)


def aligned(x: np.ndarray) -> np.ndarray:
    y = empty(x.shape, x.dtype)
    y[...] = x
    return y


def placed(x: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``x`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(x.nbytes + 2 * ALIGNMENT, np.uint8)
    start = -ptr(buf) % ALIGNMENT + offset
    y = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
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


def test_plain_numpy_arrays_pass_without_copies(library, ab):
    k = load_kernel(library)  # a fresh one: no staging buffer yet
    assert k.alignment == k.meta["alignment"] == PARAM_ALIGNMENT < ALIGNMENT
    want = ab[0] @ ab[1]
    for off in (16, 32, 48):  # every placement numpy's allocator may give (it aligns to 16 bytes)
        a, b = placed(ab[0], off), placed(ab[1], off)
        t = k._args.input(0, a, (M, K), np.dtype("float32"), "0")
        assert ptr(np.from_dlpack(t)) == ptr(a)
        np.testing.assert_allclose(k(a, b), want, rtol=1e-4, atol=1e-4)
        c = placed(np.zeros((M, N), np.float32), off)
        assert k(a, b, out=c) is c
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
        assert np.shares_memory(np.from_dlpack(k._args.out_arg(c, (M, N), np.dtype("float32"), (a, b))), c)
    y = k(*ab)  # what np.random gives, as it is
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert k._args._stage == {}  # nothing was copied into a staging buffer


def test_less_aligned_than_declared_is_staged(library, ab):
    """An array less aligned than the kernel declares never reaches it (the kernel would fault on it)."""
    a, b = ab
    k = load_kernel(library)
    mis = placed(a, 4)  # 4 bytes past numpy's alignment
    t = k._args.input(0, mis, (M, K), np.dtype("float32"), "0")
    assert ptr(np.from_dlpack(t)) % ALIGNMENT == 0 and not np.shares_memory(np.from_dlpack(t), mis)
    np.testing.assert_allclose(k(mis, placed(b, 20)), a @ b, rtol=1e-4, atol=1e-4)
    assert sorted(k._args._stage) == [0, 1]
    c = placed(np.zeros((M, N), np.float32), 8)
    assert k._args.out_arg(c, (M, N), np.dtype("float32"), (mis,)) is None  # written through one copy
    np.testing.assert_allclose(k(mis, b, out=c), a @ b, rtol=1e-4, atol=1e-4)


def test_a_library_that_names_no_alignment_gets_tvms(library, ab, tmp_path):
    """Libraries exported before the description named the alignment declare TVM's 64 bytes."""
    old = str(tmp_path / "old.so")
    shutil.copy(library, old)
    meta = json.loads(open(library + ".json").read())
    del meta["alignment"]
    (tmp_path / "old.so.json").write_text(json.dumps(meta))
    k = load_kernel(old)
    assert k.alignment == TVM_ALIGNMENT
    a16 = placed(ab[0], 16)
    assert not np.shares_memory(np.from_dlpack(k._args.input(0, a16, (M, K), np.dtype("float32"), "0")), a16)
    a64 = aligned(ab[0])
    assert np.shares_memory(np.from_dlpack(k._args.input(0, a64, (M, K), np.dtype("float32"), "0")), a64)
    np.testing.assert_allclose(k(a16, ab[1]), ab[0] @ ab[1], rtol=1e-4, atol=1e-4)


MATCHED = """
from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
    C = T.sblock_alloc_buffer((16, 16))
    for i in range(4):
        with T.sblock("b"):
            vi = T.axis.spatial(4, i)
            T.reads(A[vi * 4:vi * 4 + 4, 0:16])
            T.writes(C[vi * 4:vi * 4 + 4, 0:16])
            sub = T.match_buffer(A[vi * 4:vi * 4 + 4, 0:16], (4, 16), "float32", offset_factor=1)
            for j, k in T.grid(4, 16):
                C[vi * 4 + j, k] = sub[j, k] * T.float32(2)
    for i, j in T.grid(16, 16):
        with T.sblock("c"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = C[vi, vj]
"""


def test_with_param_alignment_redeclares_parameters_and_matched_buffers(tmp_path):
    import tvm
    import tvm_ffi

    from tiletune.alignment import with_param_alignment

    (tmp_path / "matched.py").write_text(MATCHED)
    ns: dict = {}
    exec(compile(MATCHED, str(tmp_path / "matched.py"), "exec"), ns)  # TVMScript reads the source from the file
    mod = tvm.IRModule({"main": ns["main"]})
    out = with_param_alignment(mod, 16)
    assert [p.data_alignment for p in mod["main"].params] == [64, 64]  # the input is left alone
    assert [p.data_alignment for p in out["main"].params] == [16, 16]
    script = out["main"].script()
    assert script.count("align=16") == 3 and "T.sblock_alloc_buffer((16, 16))" in script  # C keeps 64
    # the matched buffer is no more aligned than its source (TVM refuses it otherwise)
    lib = tvm.compile(out, target=tvm.target.Target({"kind": "llvm"})).mod
    x = placed(np.arange(256, dtype=np.float32).reshape(16, 16), 16)
    y = placed(np.zeros((16, 16), np.float32), 48)
    lib["main"](*(tvm_ffi.from_dlpack(v, require_alignment=16) for v in (x, y)))
    np.testing.assert_array_equal(y, 2 * x)
    assert with_param_alignment(out, 16)["main"].same_as(out["main"])  # nothing left to lower


def test_misaligned_strided_and_cast_inputs_are_staged_once_and_correct(kernel, ab):
    a, b = ab
    base = np.empty(M * K + 1, np.float32)
    mis = base[1:].reshape(M, K)  # 4 bytes past numpy's alignment
    mis[...] = a
    assert ptr(mis) % kernel.alignment != 0
    args = _Args(kernel._dev, "input", kernel.alignment)
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
    assert ta.data_ptr() % kernel.alignment == 0  # torch's CPU allocator aligns to 64 bytes
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
    assert model.alignment == model.meta["alignment"] == PARAM_ALIGNMENT
    for off in (16, 32, 48):  # numpy's placements pass without a copy, and compute right
        xa = placed(x1, off)
        t = model._args.input(0, xa, (2, 16), np.dtype("float32"), "input0")
        assert ptr(np.from_dlpack(t)) == ptr(xa)
        np.testing.assert_allclose(model(xa)[0], want1, rtol=1e-4, atol=1e-5)
    assert model._args._stage == {}
    mis = placed(x1, 4)  # less aligned than the model's kernels declare: staged
    assert not np.shares_memory(np.from_dlpack(model._args.input(0, mis, (2, 16), np.dtype("float32"), "0")), mis)
    np.testing.assert_allclose(model(mis)[0], want1, rtol=1e-4, atol=1e-5)
    y1 = model(x1)[0]
    y2 = model(torch.from_numpy(x2))[0]
    np.testing.assert_allclose(y1, want1, rtol=1e-4, atol=1e-5)  # kept while the next call ran
    np.testing.assert_allclose(y2, want2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model(x1.astype(np.float64))[0], want1, rtol=1e-4, atol=1e-5)
    with pytest.raises(TiletuneError, match=r"input input0: shape \(3, 16\) != expected \(2, 16\)"):
        model(np.zeros((3, 16), np.float32))
