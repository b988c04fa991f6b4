"""The model conformance suite (tiletune.model.evaluate.conformance): every layer family, through torch.export and ONNX,
in NHWC (the default) and NCHW for the families with 2-D convolutions, tunes every task (a successful trial
each), builds and matches torch. Plus the pieces it rests on: DAG epilogues, the layout conversion that never
breaks a model, failures in one line."""
import numpy as np
import pytest

from tiletune.errors import one_line
from tiletune.model.build import untuned_reasons
from tiletune.model.evaluate.conformance import cases, run_case
from tiletune.model.frontend.families import CONV_FAMILIES, FAMILIES
from tiletune.records import Record
from tiletune.target import parse_target

pytestmark = pytest.mark.tvm
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def suite(home, tmp_path_factory):
    """One pool of warm workers, one records file and one work directory for every case of the module."""
    from tiletune.measure.factory import shared_pool

    target = parse_target(None)
    pool = shared_pool(target)
    work = tmp_path_factory.mktemp("conformance")
    yield {"pool": pool, "records": str(work / "records.jsonl"), "workdir": str(work), "target": target}
    pool.close()


@pytest.mark.parametrize("family,path,layout", cases())
def test_family_tunes_builds_and_matches_torch(suite, family, path, layout):
    o = run_case(family, path, layout, target=suite["target"], records=suite["records"],
                 workdir=suite["workdir"], trials=1, pool=suite["pool"])
    assert o.error == "", f"{o.stage}: {o.error}"
    assert o.tasks >= 1 and o.tuned == o.tasks
    assert o.built and o.max_error <= 1e-3
    assert o.ok


def test_cases_cover_both_paths_and_layouts_where_they_differ():
    all_cases = cases()
    assert {(f, "torch", "NHWC") for f in FAMILIES} <= set(all_cases)
    assert {(f, "onnx", "NHWC") for f in FAMILIES} <= set(all_cases)
    assert {(f, p, "NCHW") for f in CONV_FAMILIES for p in ("torch", "onnx")} <= set(all_cases)
    assert not any(layout == "NCHW" and f not in CONV_FAMILIES for f, _, layout in all_cases)


def _schedule_and_run(wl, seed=0):
    """Build one sampled configuration of ``wl`` in-process and compare it with the unscheduled reference."""
    import tvm

    from tiletune.schedules import make_space, schedule

    target = parse_target(None)
    space = make_space(wl, None, target)
    cfg = space.sample(np.random.default_rng(seed))
    sch = schedule(wl, space, cfg, target)
    lib = tvm.compile(sch.mod, target=tvm.target.Target(target)).mod
    inputs = wl.make_inputs(0)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(wl.output_shape(), wl.dtype), dev)
    lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
    return out.numpy(), wl.reference(*inputs)


@pytest.mark.parametrize("epilogue", ["silu", "gelu_erf", "gelu_tanh", "mish", "relu_then_residual"])
def test_dag_epilogues_fuse_into_the_write_back_and_match(home, epilogue):
    """An epilogue that reads the accumulator's result twice (a DAG, not a chain) schedules and matches."""
    import tvm
    from tvm import te, topi

    from tiletune.workloads.primfunc import PrimFuncWorkload

    a = te.placeholder((13, 24), name="a")
    b = te.placeholder((24, 20), name="b")
    bias = te.placeholder((20,), name="bias")
    k = te.reduce_axis((0, 24), name="k")
    mm = te.compute((13, 20), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="mm")
    t = topi.add(mm, bias)
    if epilogue == "silu":
        out = topi.multiply(t, topi.sigmoid(t))
    elif epilogue == "gelu_erf":
        out = topi.multiply(topi.multiply(t, 0.5), topi.add(topi.erf(topi.multiply(t, 0.7071067811865476)), 1.0))
    elif epilogue == "gelu_tanh":
        inner = topi.multiply(topi.add(t, topi.multiply(topi.power(t, 3.0), 0.044715)), 0.7978845608)
        out = topi.multiply(topi.multiply(t, 0.5), topi.add(topi.tanh(inner), 1.0))
    elif epilogue == "mish":
        out = topi.multiply(t, topi.tanh(topi.log(topi.add(topi.exp(t), 1.0))))
    else:
        out = topi.add(topi.nn.relu(t), t)
    f = te.create_prim_func([a, b, bias, out])
    wl = PrimFuncWorkload.from_prim_func(f, name=f"mm_{epilogue}")
    assert len(wl.epilogue_blocks()) >= 2
    got, want = _schedule_and_run(wl)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _relax(family):
    from tiletune.model.passes.pipeline import prepare
    from tiletune.model.frontend.source import load

    return prepare(load(f"family:{family}")).mod


def test_a_model_without_convolutions_is_not_converted(home):
    from tiletune.model.passes.layout import convert

    mod = _relax("multihead_attention")
    got = convert(mod, "NHWC")
    assert got.mod is mod
    assert got.notes == ["no 2-D convolution: the model is left as imported"]


def test_operators_without_an_nhwc_form_keep_their_layout(home):
    """ConvertLayout used to push NHWC into conv2d_transpose, which has no NHWC legalization: the kernel
    vanished from the task list and the build failed. It keeps NCHW now, with transposes around it."""
    from tiletune.model.passes.layout import convert, relax_ops
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.model.frontend.source import load

    got = convert(_relax("grouped_dilated"), "NHWC")
    assert got.notes == []
    text = got.mod["main"].script()
    assert 'data_layout="NHWC"' in text  # the 2-D convolutions were converted
    assert "conv2d_transpose" in text and 'kernel_layout="IOHW"' in text
    assert {"relax.nn.conv2d_transpose", "relax.nn.conv1d"} <= relax_ops(got.mod)
    names = [k.name for k in model_tasks(load("family:grouped_dilated"), parse_target(None), "NHWC").tasks]
    assert any("conv2d_transpose" in n for n in names) and any("conv1d" in n for n in names)


def test_a_failed_conversion_keeps_the_model_and_says_why(home, monkeypatch):
    from tvm import relax

    from tiletune.model.passes import layout

    def broken(*a, **k):
        raise RuntimeError("std::bad_alloc")

    monkeypatch.setattr(relax.transform, "ConvertLayout", broken)
    mod = _relax("conv_silu")
    got = layout.convert(mod, "NHWC")
    assert got.mod is mod
    assert len(got.notes) == 1 and "std::bad_alloc" in got.notes[0] and "keeps its imported layout" in got.notes[0]


def test_one_line_picks_the_error_not_the_dump():
    dump = "Traceback (most recent call last):\n  File x\ntvm.error.InternalError: Check failed: x < 3\n# Metadata omitted."
    assert one_line(dump) == "tvm.error.InternalError: Check failed: x < 3"
    assert one_line("@R.function\ndef main():\n# Metadata omitted. Use show_meta=True") == "def main():"
    assert one_line("") == "no message"


def _record(workload, error=None, message=""):
    return Record(workload=workload, target="t", config={}, costs=(), median_s=None if error else 1e-3,
                  gflops=0.0, error=error, message=message, strategy="random", seed=0, trial=1, build_s=0.0,
                  run_s=0.0, started=0.0, finished=0.0, measurer="local")


def test_a_failing_task_says_why_and_how_often():
    from tiletune.model.tuning.tuner import TaskState

    st = TaskState(kernel=None)
    st.trials = 5
    st.note_failures([_record("w", "build-error", "Traceback\ntvm.error.InternalError: Buffer T is used before"),
                      _record("w", "build-error", "tvm.error.InternalError: Buffer T is used before"),
                      _record("w", "run-timeout", "timed out after 30 s"),
                      _record("w", "invalid", "accumulator tile too large"), _record("w")])
    assert st.failure == ("2 of 5 trials failed: build-error: tvm.error.InternalError: Buffer T is used before "
                          "(1 more failed otherwise)")


def test_build_names_the_tasks_left_to_the_default_schedule(home, tmp_path):
    from tiletune.model.frontend.source import load
    from tiletune.model.kernels.tasks import model_tasks
    from tiletune.records import RecordWriter

    tasks = model_tasks(load("family:gelu_mlp"), parse_target(None), "NHWC")
    first, second = tasks.tasks[0], tasks.tasks[1]
    path = tmp_path / "r.jsonl"
    from tiletune.target import target_key

    w = RecordWriter(path)
    for _ in range(3):
        r = _record(first.workload.key, "build-error", "tvm.error.InternalError: Buffer x is used before")
        w.write(Record(**{**r.__dict__, "target": target_key(tasks.target)}))
    w.close()
    why = untuned_reasons(tasks, str(path), {})
    assert why[first.name] == ("no successful trial (3 of 3 failed: build-error: tvm.error.InternalError: Buffer x "
                               "is used before)")
    assert why[second.name] == "not tuned (no record)"


def test_a_kernel_that_does_not_compile_is_named():
    """compile_module's error names the kernel that fails (found by compiling each alone), not TVM's dump."""
    import tvm
    from tvm import s_tir, te

    from tiletune.model.build import _failing_kernel

    a = te.placeholder((64,), name="a")
    good = te.create_prim_func([a, te.compute((64,), lambda i: a[i] + 1.0, name="b")])
    sch = s_tir.Schedule(tvm.IRModule({"main": good}))
    sch.bind(sch.get_loops(sch.get_sblock("b"))[0], "threadIdx.x")  # a GPU binding in a CPU kernel
    tgt = tvm.target.Target({"kind": "llvm"})
    assert _failing_kernel(tvm.IRModule({"good": good}), tgt) is None
    name, why = _failing_kernel(tvm.IRModule({"good": good, "bad_kernel": sch.mod["main"]}), tgt)
    assert name == "bad_kernel" and why and "\n" not in why
