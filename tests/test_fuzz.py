"""The differential fuzzer of whole models (tiletune.fuzz): generation is deterministic and valid for PyTorch,
the reducer finds the one step that fails, a dead or hung worker is a crash, a campaign resumes from its
results; and a fixed-seed batch through both import paths has no mismatch and no crash."""
import json

import pytest
import torch

from tiletune.fuzz.campaign import campaign, summary
from tiletune.fuzz.generate import Spec, build, generate
from tiletune.fuzz.reduce import reduce_spec, still_fails, write_reproducer
from tiletune.fuzz.run import reason_key, torch_check
from tiletune.fuzz.worker import Worker

#: the fixed-seed batch of ``test_fixed_seed_batch_...``
BATCH_SEED, BATCH_MODELS = 0, 30


def test_generation_is_deterministic_and_every_model_runs_in_torch():
    dynamic = 0
    ops = set()
    for seed in range(40):
        a, b = generate(seed), generate(seed)
        assert a.code == b.code and a.description == b.description and a.spec == b.spec
        assert build(a.spec).code == a.code
        assert 2 <= len(a.spec.steps) <= 6 and "\n" not in a.description
        module, example, dynamic_shapes = a.load()
        assert torch_check(module, example, dynamic_shapes) is None, (seed, a.description)
        m2, ex2, _ = b.load()  # the same weights and example inputs every time
        for x, y in zip(example, ex2):
            assert torch.equal(x, y)
        assert all(torch.equal(p, q) for p, q in zip(module.state_dict().values(), m2.state_dict().values()))
        dynamic += a.dynamic
        ops |= {op for _, op in a.spec.steps}
    assert dynamic >= 3
    assert {"index_const", "slice", "linear", "reduce", "concat"} <= ops


def test_dropping_a_step_leaves_the_others_as_they_were():
    for seed in range(20):
        g = generate(seed)
        for pos, _ in g.spec.steps:
            smaller = build(g.spec.without({pos}))
            module, example, dynamic_shapes = smaller.load()
            assert torch_check(module, example, dynamic_shapes) is None, (seed, pos, smaller.description)


def _seed_with(op: str, at_least: int = 4) -> Spec:
    for seed in range(500):
        spec = generate(seed).spec
        if len(spec.steps) >= at_least and [o for _, o in spec.steps].count(op) == 1:
            return spec
    raise AssertionError(f"no seed with one {op}")


@pytest.mark.parametrize("op", ["sort", "index_const", "cumsum"])
def test_reducer_shrinks_a_planted_failure_to_its_one_op(op, tmp_path):
    spec = _seed_with(op)
    calls = []

    def fails(s: Spec) -> bool:
        calls.append(s)
        return any(o == op for _, o in s.steps)

    small = reduce_spec(spec, fails)
    assert [o for _, o in small.steps] == [op]
    assert small.steps[0] in spec.steps
    assert len(calls) <= 4 * len(spec.steps)
    path = write_reproducer(small, str(tmp_path / "repro.py"), "planted failure")
    text = open(path).read()
    assert text.startswith("# tiletune fuzz reproducer: planted failure") and "def model():" in text

    from tiletune.model.frontend.source import load

    source = load(f"{path}:model")  # what `tiletune model build repro.py:model` loads
    assert source.kind == "torch" and source.reference(source.random_inputs(0))


class _StubWorker:
    """A worker whose models crash (a signal at random) whenever ``op`` is among their steps."""

    def __init__(self, op):
        self.op, self.restarts, self.runs = op, 0, 0

    def restart(self):
        self.restarts += 1

    def run(self, spec, paths, tune=0):
        self.runs += 1
        bad = any(o == self.op for _, o in spec.steps)
        res = {"outcome": "crash", "reason": f"died:{'SIGSEGV' if self.runs % 2 else 'SIGABRT'}"} if bad else \
            {"outcome": "match", "reason": ""}
        return {"paths": {paths[0]: res}}


def test_a_crash_reduces_in_a_fresh_process_each_time_whatever_the_signal():
    spec = _seed_with("slice")
    w = _StubWorker("slice")
    small = reduce_spec(spec, still_fails(w, "torch", "crash", "died:SIGABRT"))
    assert [o for _, o in small.steps] == ["slice"]
    assert w.restarts == w.runs


def test_reason_keys_name_the_stage_and_the_operator_or_the_cause():
    assert reason_key("compiling the model failed (TVM has no kernel for relax.foo (its legalization ...))") == \
        "compile:relax.foo"
    assert reason_key("compiling the model failed (kernel fused_cumsum_add3 does not compile: x)") == "compile:cumsum"
    assert reason_key("fuzz-3: TVM's PyTorch frontend cannot import it (AssertionError: Unsupported function "
                      "types ['scatter_add.default'])") == "import:scatter_add"
    assert reason_key("/tmp/w/fuzz-12.onnx: TVM's ONNX frontend cannot import it (AttributeError: ONNX operator "
                      "Expand: 'Var' object has no attribute 'value')") == "import:Expand"
    assert reason_key("/tmp/w/fuzz-12.onnx: the imported model computes a tensor of unknown shape "
                      "(relax.dynamic_strided_slice); only static") == "unknown-shape:relax.dynamic_strided_slice"
    assert reason_key("compiling the model failed (TVM's lowering of the model failed: Literal value 5533 exceeds "
                      "range of int64)") == "compile:Literal value N exceeds range"
    assert reason_key("the model is odd 12 here (x)") == "the model is odd"


def test_a_hung_worker_is_a_crash_and_is_replaced(tmp_path):
    spec = generate(1).spec
    with Worker(str(tmp_path), timeout=0.01) as w:
        row = w.run(spec, paths=("torch",))
        assert w.proc is None
    assert row["paths"]["torch"]["outcome"] == "crash" and row["paths"]["torch"]["reason"] == "timeout"
    assert row["seed"] == 1 and row["description"] == generate(1).description


def _row(seed, outcome, reason=""):
    res = {"path": "torch", "outcome": outcome, "reason": reason, "detail": reason, "stage": "", "max_error": 0.0,
           "seconds": 1.0}
    return {**generate(seed).spec.to_json(), "description": "d", "dynamic": False, "tune": 0,
            "paths": {"torch": res, "onnx": {**res, "path": "onnx"}}}


def test_a_campaign_resumes_from_its_results_and_summarizes(tmp_path):
    rows = [_row(0, "match"), _row(1, "refused", "import:foo"), _row(2, "match")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
    got = campaign(str(tmp_path), 3, 0, reduce=False, log=lambda *a: None)  # nothing left to run
    assert [r["seed"] for r in got] == [0, 1, 2]
    text = (tmp_path / "summary.md").read_text()
    assert "| torch | 3 | 2 | 1 | 0 | 0 | 0 |" in text and "import:foo" in text and "None." in text
    bad = summary([_row(5, "mismatch", "value")], [{"seed": 5, "path": "torch", "description": "sort",
                                                    "reproducer": "repro/seed-5-torch.py"}])
    assert "repro/seed-5-torch.py" in bad and "| 5 | torch | mismatch | value |" in bad


@pytest.mark.tvm
def test_a_wrong_onnx_export_is_a_skip_not_a_mismatch(tmp_path):
    """index_add with a repeated index: torch.onnx exports a ScatterElements that keeps one of the values
    (ONNX Runtime agrees with tiletune); the torch path matches."""
    pytest.importorskip("onnxruntime")
    from tiletune.fuzz.run import run_model

    spec = Spec(68, ((6, "scatter_const"),))
    assert "index_add" in build(spec).code
    row = run_model(spec, workdir=str(tmp_path))
    assert row["paths"]["torch"]["outcome"] == "match"
    onnx = row["paths"]["onnx"]
    assert (onnx["outcome"], onnx["reason"]) == ("skip", "onnx-export-wrong"), onnx


@pytest.mark.tvm
def test_fixed_seed_batch_has_no_mismatch_and_no_crash(tmp_path):
    """Both import paths, default schedules (every 10th model tuned for 1 trial per task): refusals are allowed
    with a one-line reason; a wrong result or a crash is not."""
    pytest.importorskip("onnx")
    rows = campaign(str(tmp_path), BATCH_MODELS, BATCH_SEED, tune_every=10, tune_trials=1, reduce=False,
                    log=lambda *a: None)
    assert len(rows) == BATCH_MODELS
    assert not [r for r in rows if "error" in r]
    results = [(r["seed"], p, res) for r in rows for p, res in r["paths"].items()]
    bad = [f"seed {s} {p}: {res['outcome']} {res['reason']}: {res['detail'][:200]}" for s, p, res in results
           if res["outcome"] in ("mismatch", "crash")]
    assert not bad, "\n".join(bad)
    for s, p, res in results:
        if res["outcome"] == "refused":
            assert "\n" not in res["detail"] and "Check failed" not in res["detail"], (s, p, res["detail"])
    skips = [res for _, _, res in results if res["outcome"] == "skip"]
    assert len(skips) <= len(results) // 10
    assert sum(res["outcome"] == "match" for _, _, res in results) >= len(results) // 2
