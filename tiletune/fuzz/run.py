"""The differential run of one generated model, in this process: import, fuse, build and run it through each
import path and compare with PyTorch, the way ``tiletune.model.evaluate.conformance.run_case`` does.

Per path (``torch``: torch.export; ``onnx``: ``export_onnx`` then TVM's ONNX frontend; the reference is
always the torch module) the outcome is one of

- ``match``: built, and every output is within ``RTOL["float32"]`` of torch's on every input set;
- ``refused``: tiletune raised a ``TiletuneError`` (``reason``: a short key of it, ``reason_key``);
- ``mismatch``: built, and an output differs (value, shape or count): a silent wrong result;
- ``crash``: any other exception (``tiletune.fuzz.worker`` also counts a dead or hung process);
- ``skip``: torch rejects the generated model (eager run, ``torch.export``, non-finite outputs), or
  ``torch.onnx.export`` fails (``onnx-export``) or exports another function (``onnx-export-wrong``: tiletune's
  outputs match ONNX Runtime's on the exported file, which differ from torch's): not tiletune's problem.

Design choices: ``torch.export`` is tried here before tiletune's import (which would wrap its failure in a
TiletuneError), so that a generator bug is a skip and not a refusal. A static model is built with
``model_tasks`` + ``scheduled_module`` (default schedules, or the records' best after ``tune`` trials); a model
with a symbolic dimension is built as ``model build --shapes`` does (``shape_tasks`` at the example's size +
``dynamic_library``) and compared at ``check_bindings`` (the example's size, the bounds, one between), so
the kernels of the other sizes run too. The comparison is ``build.check`` where it has its stricter form
(several input sets, each run twice), else ``compare``; a TiletuneError after the build succeeded is a
mismatch, never a refusal.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import TiletuneError
from ..measure.base import MeasureSettings
from ..model import build as B
from ..model.build import ModelRunner, best_configs, compile_module, scheduled_module
from ..model.dynamic.shapes import check_bindings, dynamic_library, shape_tasks
from ..model.frontend.source import export_onnx, flat_tensors, from_torch
from ..model.frontend.source import load as load_source
from ..model.kernels.tasks import model_tasks
from ..model.tuning.tuner import tune_model
from ..target import parse_target
from .generate import Spec, build

PATHS = ("torch", "onnx")


@dataclass
class PathResult:
    path: str
    outcome: str  # match, refused, mismatch, crash, skip
    reason: str = ""  # a short key: what refused, rejected or failed
    detail: str = ""  # the message as raised (refusals must be one line)
    stage: str = ""  # export, import, tune, build, run
    max_error: float | None = None
    seconds: float = 0.0


#: the head of a refusal message -> its short tag (``reason_key``)
HEADS = {"TVM's PyTorch frontend cannot import it": "import", "TVM's ONNX frontend cannot import it": "import",
         "fusing the model's operators failed": "fuse", "compiling the model failed": "compile",
         "the imported model computes a tensor of unknown shape": "unknown-shape", "torch.export failed": "export"}
#: what names the operator inside a refusal message
OPERATOR = [r"TVM has no kernel for ([\w.]+)",
            r"kernel (?:fused_)?([a-z]+(?:_[a-z]+)*?)(?:_?\d+)?(?:_\w+)? does not compile",
            r"Unsupported function types? \[?'([\w.]+)", r"ONNX operator (\w+)", r'GlobalVar\("(\w+)"\)',
            r"No converter for op type ([\w.]+)", r"^\(?(relax\.[\w.]+)\)"]


def reason_key(message: str) -> str:
    """A short key of a refusal message, for counting: ``STAGE:OPERATOR`` where the message names an operator,
    else ``STAGE:`` and the first words of its cause (numbers as N); the stage from the message's head
    (``HEADS``), else its first words."""
    msg = message.strip().splitlines()[0] if message.strip() else ""
    msg = re.sub(r"^\S*fuzz-\d+(\.onnx)?: ", "", msg)
    head = next((h for h in HEADS if msg.startswith(h)), None)
    rest = msg[len(head):].strip(" (") if head else msg
    tag = HEADS[head] if head else " ".join(re.sub(r"\(.*", "", msg).split()[:4])
    for pat in OPERATOR:
        m = re.search(pat, rest)
        if m:
            return f"{tag}:{m.group(1).replace('.default', '')}"
    if not head:
        return re.sub(r"\d+", "N", tag) or "no message"
    cause = re.sub(r"^[^:(]* failed: ", "", rest)  # "X's lowering failed: CAUSE"
    cause = re.sub(r"\d+", "N", re.sub(r"\(.*", "", cause)).rstrip(" )")
    return f"{tag}:{' '.join(cause.split()[:5])}".rstrip(":")


def _inputs(source, torch_source, seeds) -> list[tuple[dict | None, list[np.ndarray]]]:
    """(binding, inputs) to compare at: the example inputs, then every seed (for a symbolic model at every
    ``check_bindings`` size)."""
    example = [np.ascontiguousarray(t.detach().numpy()) for t in torch_source.example]
    if not torch_source.dynamic:
        return [(None, example)] + [(None, torch_source.random_inputs(s)) for s in seeds]

    out = [(torch_source.example_binding(), example)]
    for b in check_bindings(torch_source, [torch_source.example_binding()]):
        out += [(b, torch_source.random_inputs(s, b)) for s in seeds[:2]]
    return out


def _compare(runner, source, torch_source, seeds, res: PathResult) -> float | None:
    """Run ``runner`` against torch with ``tiletune.model.build.check`` (several input sets, each run twice:
    ``input_sets``; a dynamic model at ``check_bindings``); a difference makes ``res`` a mismatch. Returns the
    largest error (None on a mismatch)."""
    bindings = check_bindings(torch_source, [torch_source.example_binding()]) if torch_source.dynamic else [None]
    worst = 0.0
    for b in bindings:
        try:
            worst = max(worst, B.check(torch_source, runner, seed=seeds[0], binding=b))
        except TiletuneError as e:  # the build passed: a difference, never a refusal
            msg = str(e)
            res.outcome, res.detail = "mismatch", msg[:400]
            res.reason = ("unstable" if "from one call to the next" in msg else
                          "shape" if "outputs" in msg.split(":")[0] or "shape" in msg.split(";")[0] else "value")
            return None
    return worst


def _export_at_fault(runner, onnx_source, torch_source, seeds) -> bool:
    """Is an ONNX-path mismatch torch.onnx's: on every input set tiletune's outputs match ONNX Runtime's on the
    exported file (shapes and values), and on some set ONNX Runtime's differ from torch's (in shape or value:
    torch.onnx writes ``x[-1:6:3]`` of a one-row axis as a slice from 1, which selects nothing)."""

    def differ(a, b) -> bool:  # a different number or shape of outputs differs too
        try:
            return not B.compare(a, b) <= B.RTOL["float32"]
        except TiletuneError:
            return True

    ort_off = False
    try:
        for _, inputs in _inputs(onnx_source, torch_source, seeds):
            got, ort = runner(*inputs), onnx_source.reference(inputs)
            if differ(got, ort):
                return False
            ort_off = ort_off or differ(ort, torch_source.reference(inputs))
    except Exception:  # noqa: BLE001  (ONNX Runtime cannot run it: not provably the export's)
        return False
    return ort_off


def _tune(tasks, records: str, trials: int, pool) -> None:

    if tasks.tasks:
        tune_model(tasks, strategy="random", trials=trials * len(tasks.tasks), records=records,
                   round_trials=trials, batch_size=trials, settings=MeasureSettings(repeat=1, min_repeat_ms=0,
                                                                                   warmup_ms=0.0),
                   seed=0, pool=pool, confirm=0)


def _runner(source, binding: dict, target: dict, records: str, tune: int, pool, stage: list):
    """The compiled model of ``source`` (see the module docstring; ``binding``: the example's size of a
    symbolic model, which an ONNX source does not know); ``stage[0]`` follows where it is."""

    stage[0] = "import"
    if source.dynamic:

        dyn = shape_tasks(source, target, "NHWC", [binding])
        if tune:
            stage[0] = "tune"
            _tune(dyn.merged, records, tune, pool)
        records = records if os.path.exists(records) else None  # nothing tunable: no records
        stage[0] = "build"
        import inspect

        quiet = {"check_output": False} if "check_output" in inspect.signature(dynamic_library).parameters else {}
        return ModelRunner(dynamic_library(dyn, records, **quiet).ex)
    tasks = model_tasks(source, target, "NHWC")
    chosen = {}
    if tune:
        stage[0] = "tune"
        _tune(tasks, records, tune, pool)
        chosen = best_configs(tasks, records) if os.path.exists(records) else {}
    stage[0] = "build"
    mod, _ = scheduled_module(tasks, chosen)
    return ModelRunner(compile_module(mod, target))


def check_path(torch_source, path: str, *, workdir: str, tune: int = 0, pool=None,
               seeds=(0, 1, 2)) -> PathResult:
    """One path of one model (see the module docstring); every failure is caught into the result."""

    t0 = time.perf_counter()
    res = PathResult(path, "match")
    stage = ["export"]
    try:
        source = torch_source
        if path == "onnx":
            onnx_path = os.path.join(workdir, f"{torch_source.name}.onnx")
            try:
                export_onnx(torch_source, onnx_path)
            except Exception as e:  # noqa: BLE001  (torch.onnx's failure: not tiletune's)
                res.outcome, res.reason, res.detail = "skip", "onnx-export", f"{type(e).__name__}: {e}"[:300]
                return res
            source = load_source(onnx_path)
        records = os.path.join(workdir, f"{torch_source.name}-{path}.jsonl")
        runner = _runner(source, torch_source.example_binding(), parse_target("llvm"), records,
                         tune, pool, stage)
        stage[0] = "run"
        res.max_error = _compare(runner, source, torch_source, seeds, res)
        if res.outcome == "mismatch" and path == "onnx" and _export_at_fault(runner, source, torch_source, seeds):
            res.outcome, res.reason = "skip", "onnx-export-wrong"
            res.detail = ("ONNX Runtime agrees with tiletune, not with torch: torch.onnx exported another function "
                          f"({res.detail})")[:400]
    except TiletuneError as e:
        res.outcome, res.reason, res.detail = "refused", reason_key(str(e)), str(e)[:500]
    except Exception as e:  # noqa: BLE001  (a crash: the fuzzer reports it)
        res.outcome, res.reason = "crash", f"{stage[0]}:{type(e).__name__}"
        res.detail = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
    finally:
        res.stage = stage[0] if res.outcome != "match" else ""
        res.seconds = time.perf_counter() - t0
    return res


def torch_check(module, example, dynamic_shapes) -> str | None:
    """Why PyTorch rejects the generated model (``torch:``, ``nonfinite``, ``export:``), or None."""
    import warnings

    import torch

    try:
        with torch.no_grad():
            out = module(*example)
    except Exception as e:  # noqa: BLE001
        return f"torch:{type(e).__name__}"

    if not all(torch.isfinite(t).all() for t in flat_tensors(out) if t.is_floating_point()):
        return "nonfinite"
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.export(module, example, dynamic_shapes=dynamic_shapes)
    except Exception as e:  # noqa: BLE001
        return f"export:{type(e).__name__}"
    return None


def run_model(spec: Spec, *, workdir: str, paths=PATHS, tune: int = 0, pool=None, seeds=(0, 1, 2)) -> dict:
    """One model through ``paths``: a JSON-able row (seed, steps, description, dynamic, one result per path)."""

    gen = build(spec)
    row = {**spec.to_json(), "description": gen.description, "dynamic": gen.dynamic, "tune": tune, "paths": {}}
    module, example, dynamic = gen.load()
    why = torch_check(module, example, dynamic)
    name = f"fuzz-{spec.seed}"
    source = None if why else from_torch(name, name, module, example, dynamic)
    for path in paths:
        res = PathResult(path, "skip", why) if why else check_path(source, path, workdir=workdir, tune=tune,
                                                                     pool=pool, seeds=seeds)
        row["paths"][path] = asdict(res)
    return row
