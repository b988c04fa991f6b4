"""torch.compile(model, backend="tiletune"): the entry point, graphs through the model path, fallbacks, the cache,
symbolic shapes, the tuning database. Small models (a few kernels each); every result is compared with eager."""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from tiletune.db.store import Database  # noqa: E402
from tiletune.errors import TiletuneError  # noqa: E402
from tiletune.torch_backend import backend, compile as tt_compile, compiled_graphs  # noqa: E402
from tiletune.torch_backend.options import Options  # noqa: E402

pytestmark = pytest.mark.tvm


class Mlp(torch.nn.Module):
    def __init__(self, d=32, h=64, o=16, brk=False, op=None):
        super().__init__()
        self.fc1, self.fc2, self.brk, self.op = torch.nn.Linear(d, h), torch.nn.Linear(h, o), brk, op

    def forward(self, x):
        y = torch.relu(self.fc1(x))
        if self.brk:
            torch._dynamo.graph_break()
        y = self.fc2(y)
        return self.op(y) if self.op is not None else torch.softmax(y, -1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def close(a, b, tol=1e-4):
    return float((a.float() - b.float()).abs().max()) <= tol * max(1.0, float(b.float().abs().max()))


def test_entry_point_resolves_without_importing_tiletune():
    code = ("import sys, torch._dynamo\n"
            "names = torch._dynamo.list_backends(exclude_tags=())\n"
            "assert 'tiletune' in names, names\n"
            "assert not any(m == 'tiletune' or m.startswith('tiletune.') for m in sys.modules)\n"
            "from torch._dynamo.backends.registry import lookup_backend\n"
            "import tiletune.torch_backend as tb\n"
            "assert lookup_backend('tiletune') is tb.backend\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_tiletune_compile_is_the_backends_and_import_tiletune_stays_light():
    code = ("import sys, tiletune\n"
            "assert 'torch' not in sys.modules and 'tvm' not in sys.modules\n"
            "import tiletune.torch_backend as tb\n"
            "assert tiletune.compile is tb.compile\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_graph_break_gives_two_graphs_that_both_run(capsys):
    torch.manual_seed(0)
    m = Mlp(brk=True).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        f = torch.compile(m, backend="tiletune")
        got, want = f(x), m(x)
    assert close(got, want)
    assert got.dtype == want.dtype and got.shape == want.shape
    graphs = compiled_graphs()[-2:]
    assert len(graphs) == 2 and all(s == "compiled" for g in graphs for _, s in g.shapes())
    err = capsys.readouterr().err
    assert err.count("compiled in") == 2, err


def test_unsupported_operator_falls_back_with_its_name_and_the_right_result(capsys):
    torch.manual_seed(0)
    m = Mlp(op=torch.special.bessel_j0).eval()
    x = torch.randn(3, 32)
    with torch.no_grad():
        got = torch.compile(m, backend="tiletune")(x)
        want = m(x)
    assert torch.equal(got, want)  # PyTorch ran it
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "runs in PyTorch" in ln]
    assert len(lines) == 1 and "special_bessel_j0" in lines[0], lines


def test_autograd_falls_back_with_one_line(capsys):
    m = Mlp().eval()
    x = torch.randn(2, 32)
    y = torch.compile(m, backend="tiletune")(x)
    y.sum().backward()  # PyTorch ran it: gradients flow
    assert m.fc1.weight.grad is not None
    err = capsys.readouterr().err
    assert "needs autograd" in err and err.count("runs in PyTorch") == 1


def test_dynamic_serves_two_lengths_from_one_compile(capsys):
    torch.manual_seed(0)
    m = Mlp().eval()
    calls = []

    def counting(gm, example_inputs, **kw):
        calls.append(1)
        return backend(gm, example_inputs, **kw)

    with torch.no_grad():
        f = torch.compile(m, backend=counting, dynamic=True)
        for n in (3, 7, 3):
            x = torch.randn(2, n, 32)
            assert close(f(x), m(x))
    assert len(calls) == 1  # dynamo compiled once
    g = compiled_graphs()[-1]
    assert g.dynamic and [s for _, s in g.shapes()] == ["library", "library"]  # one library, both lengths
    assert capsys.readouterr().err.count("compiled in") == 1


def test_dynamic_per_shape_when_asked(capsys):
    m = Mlp().eval()
    with torch.no_grad():
        f = tt_compile(m, dynamic=True, symbolic=False)
        for n in (3, 7):
            x = torch.randn(2, n, 32)
            assert close(f(x), m(x))
    assert [s for _, s in compiled_graphs()[-1].shapes()] == ["compiled", "compiled"]


def test_max_shapes_bounds_recompilation(capsys):
    m = Mlp().eval()
    with torch.no_grad():
        f = tt_compile(m, dynamic=True, max_shapes=1, symbolic=False)
        for n in (3, 5, 6):
            x = torch.randn(1, n, 32)
            assert close(f(x), m(x))
    err = capsys.readouterr().err
    assert err.count("compiled in") == 1 and err.count("max_shapes=1") == 1, err


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_within_their_tolerance(dtype):
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    m = Mlp().eval().to(dt)
    x = torch.randn(4, 32, dtype=dt)
    with torch.no_grad():
        got, want = torch.compile(m, backend="tiletune")(x), m(x)
    assert got.dtype == dt and close(got, want, 1e-2 if dtype == "float16" else 5e-2)
    assert [s for _, s in compiled_graphs()[-1].shapes()] == ["compiled"]


def test_weights_changed_in_place_run_in_pytorch(capsys):
    m = Mlp().eval()
    x = torch.randn(2, 32)
    with torch.no_grad():
        f = torch.compile(m, backend="tiletune")
        f(x)
        m.fc1.weight.mul_(2)
        assert close(f(x), m(x))
    assert "weights changed" in capsys.readouterr().err


def test_bad_options_are_one_line():
    with pytest.raises(TiletuneError, match="unknown tiletune option"):
        Options.parse({"trails": 3})
    with pytest.raises(TiletuneError, match="needs a budget"):
        Options.parse({"mode": "tune"})
    with pytest.raises(TiletuneError, match="mode="):
        tt_compile(Mlp(), mode="fast")


def test_tune_mode_fills_the_database_and_construct_mode_reads_it(tmp_path, monkeypatch, capsys):
    torch.manual_seed(0)
    m = Mlp().eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        got = torch.compile(m, backend="tiletune", options={"mode": "tune", "trials": 4, "strategy": "random"})(x)
        assert close(got, m(x))
    db = Database()
    assert db.summary() and db.summary()[0].tuned >= 1
    torch._dynamo.reset()
    monkeypatch.setenv("TILETUNE_CACHE_DIR", str(tmp_path / "other"))  # a new cache of graphs, the same records
    Database().absorb(db.files()[0])
    capsys.readouterr()
    with torch.no_grad():
        assert close(torch.compile(m, backend="tiletune")(x), m(x))
    err = capsys.readouterr().err
    assert "compiled in" in err and "0 from the tuning database" not in err, err


SCRIPT = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 8)).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        y = torch.compile(m, backend="tiletune")(x)
        assert float((y - m(x)).abs().max()) < 1e-4
    print("ok")
""")


def test_second_process_hits_the_cache(tmp_path):
    env = {**os.environ, "TILETUNE_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert first.returncode == 0 and "compiled in" in first.stderr, first.stderr[-2000:]
    second = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "from the cache" in second.stderr and "compiled in" not in second.stderr, second.stderr[-2000:]


def test_background_mode_swaps_in_tuned_kernels(capsys):
    torch.manual_seed(0)
    m = Mlp().eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        f = torch.compile(m, backend="tiletune", options={"mode": "background", "trials": 2, "strategy": "random",
                                                          "poll": 0.2})
        assert close(f(x), m(x))  # at once, on constructed kernels
        g = compiled_graphs()[-1]
        (entry,) = g.entries.values()
        assert entry.background is not None and entry.background.finished.wait(240)
        assert entry.background.proc.returncode == 0
        assert entry.background.swaps >= 1  # the database's tuned kernels, swapped in
        assert close(f(x), m(x))
    assert Database().summary()[0].tuned >= 1
    assert "tuned builds swapped in" in capsys.readouterr().err


class ConvBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(4, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 8, 1), torch.nn.BatchNorm2d(8)
        for b in (self.b1, self.b2):
            b.running_mean.normal_()
            b.running_var.uniform_(0.5, 2.0)
            b.weight.data.normal_()
            b.bias.data.normal_()

    def forward(self, x):
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


def test_batchnorm_is_folded_as_model_build_folds_it():
    """dynamo hands BatchNorm over as F.batch_norm on lifted buffers: folded into the convolution, the graph's
    kernels are those `model build` makes of the module (the same workload keys), and the result is eager's."""
    from tiletune.model.frontend.source import from_torch
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.records import kernel_identity
    from tiletune.target import parse_target
    from tiletune.torch_backend.graph import GraphCompiler

    torch.manual_seed(0)
    m, x = ConvBn().eval(), torch.randn(1, 4, 8, 8)
    seen = {}

    def keys_of(gm, example_inputs):
        seen["graph"] = "batch_norm" in gm.code
        seen["keys"] = sorted(kernel_identity(k) for k in GraphCompiler(gm, example_inputs, Options(cache=False))
                              .import_tasks().keys())
        return gm

    with torch.no_grad():
        torch.compile(m, backend=keys_of)(x)
        torch._dynamo.reset()
        got, want = torch.compile(m, backend="tiletune")(x), m(x)
    library = sorted(kernel_identity(k) for k in model_tasks(from_torch("m", "m", m, (x,)), parse_target("host")).keys())
    assert seen["graph"] and len(library) == 2
    assert seen["keys"] == library
    assert close(got, want)


def test_dynamic_library_builds_the_shapes_the_database_tuned(capsys):
    """A symbolic graph's library holds the first call's shape and every shape the database has tuned kernels of
    (as `model build` takes the records' tuned shapes), each with the database's kernels."""
    torch.manual_seed(0)
    m = Mlp().eval()
    with torch.no_grad():  # tune the graph at length 5 into the database (per shape)
        f = tt_compile(m, dynamic=True, symbolic=False, mode="tune", trials=2, strategy="random")
        x5 = torch.randn(2, 5, 32)
        assert close(f(x5), m(x5))
    assert Database().summary()[0].tuned >= 1
    torch._dynamo.reset()
    with torch.no_grad():
        f = torch.compile(m, backend="tiletune", dynamic=True)
        for n in (3, 5):
            x = torch.randn(2, n, 32)
            assert close(f(x), m(x))
    compiler = compiled_graphs()[-1].symbolic.compiler
    built = [st.binding for st in compiler.dyn.shapes]
    assert sorted(sorted(b.values()) for b in built) == [[2, 3], [2, 5]], built  # (batch, length) each
    last = [ln for ln in capsys.readouterr().err.splitlines() if "compiled in" in ln][-1]
    assert " 0 from the tuning database" not in last, last
