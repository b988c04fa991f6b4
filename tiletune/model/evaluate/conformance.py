"""The model conformance suite: does a layer family import, tune, build and match PyTorch, on every path?

One case is a family (``tiletune.model.frontend.families``) x an import path (``torch``: torch.export, ``onnx``: the
model exported by ``tiletune.model.frontend.source.export_onnx`` (torch.onnx, opset 17) and imported by TVM's ONNX frontend) x a layout of the
convolutions (NHWC, the default, and NCHW). ``run_case`` takes it through what a user's ``tiletune model
tune`` and ``model build`` do:

1. export (ONNX only), import and extract the kernels (``model_tasks``);
2. tune every task for ``trials`` trials with random search (``tune_model``; one records file and one pool of
   warm workers can be shared by all cases: a kernel met again, in the other path, is recalled, not measured);
3. build the model with each task's best kernel (``scheduled_module`` + ``compile_module``);
4. run it on random inputs and compare every output with PyTorch's on the same inputs (the ONNX path too:
   the reference is the torch module, not ONNX Runtime).

The outcome says how many tasks have a successful trial, whether it built, the error against torch, and the
first failure in one line (its stage and message). ``benchmarks/model_conformance.py`` prints the table;
``tests/test_model_conformance.py`` runs it in CI.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ...errors import TiletuneError, one_line
from ...measure.base import MeasureSettings
from ..build import RTOL, ModelRunner, best_configs, compare, compile_module, scheduled_module
from ..frontend.families import CONV_FAMILIES, FAMILIES
from ..frontend.source import export_onnx
from ..frontend.source import load as load_source
from ..kernels.tasks import model_tasks
from ..tuning.tuner import tune_model

PATHS = ("torch", "onnx")
#: timing of the suite's trials: one sample each (it checks that kernels build and are correct; it does not
#: compare their speed)
SETTINGS = MeasureSettings(repeat=1, min_repeat_ms=0, warmup_ms=0.0)


@dataclass
class Outcome:
    family: str
    path: str
    layout: str
    kernels: int = 0
    tasks: int = 0
    tuned: int = 0  # tasks with a successful trial
    built: bool = False
    max_error: float | None = None  # against torch, relative to the outputs' scale
    stage: str = ""  # where the first failure happened: export, import, tune, build, check
    error: str = ""  # that failure in one line

    @property
    def ok(self) -> bool:
        return (not self.error and self.built and self.tuned == self.tasks and self.max_error is not None
                and self.max_error <= RTOL["float32"])

    def row(self) -> dict:
        return {"family": self.family, "path": self.path, "layout": self.layout, "kernels": self.kernels,
                "tasks": self.tasks, "tuned": self.tuned, "built": self.built, "max_error": self.max_error,
                "stage": self.stage, "error": self.error, "ok": self.ok}


#: the layouts of the suite: the families' convolutions have channel counts that NCHW16c does not block (it
#: leaves them NHWC), so its cases would run the NHWC ones again; tests/test_model_layout.py covers it
SUITE_LAYOUTS = ("NCHW", "NHWC")


def cases(families=None, paths=PATHS, layouts=SUITE_LAYOUTS) -> list[tuple[str, str, str]]:
    """Every (family, path, layout) to run: both layouts for families with a 2-D convolution, NHWC only for
    the others (their model is left as imported, so both layouts build the same kernels)."""
    out = []
    for fam in families or FAMILIES:
        for path in paths:
            for layout in layouts:
                if layout == "NHWC" or fam in CONV_FAMILIES or len(layouts) == 1:
                    out.append((fam, path, layout))
    return out


def run_case(family: str, path: str, layout: str, *, target: dict, records: str, workdir: str,
             trials: int = 2, pool=None, settings: MeasureSettings = SETTINGS, seed: int = 0) -> Outcome:
    """One case of the suite (see the module docstring); every failure is caught into the outcome."""
    out = Outcome(family, path, layout)
    torch_source = load_source(f"family:{family}")
    stage = "export"
    try:
        if path == "onnx":
            onnx_path = os.path.join(workdir, f"{family}.onnx")
            if not os.path.exists(onnx_path):
                export_onnx(torch_source, onnx_path)
            source = load_source(onnx_path)
        else:
            source = torch_source
        stage = "import"
        tasks = model_tasks(source, target, layout)
        out.kernels, out.tasks = len(tasks.kernels), len(tasks.tasks)
        stage = "tune"
        if tasks.tasks:
            result = tune_model(tasks, strategy="random", trials=trials * len(tasks.tasks), records=records,
                                round_trials=trials, batch_size=trials, settings=settings, seed=seed, pool=pool,
                                confirm=0)  # coverage, not speed: no re-measurement
            out.tuned = sum(1 for st in result.states if math.isfinite(st.best_s))
            failed = [st for st in result.states if not math.isfinite(st.best_s)]
            if failed:
                st = failed[0]
                out.stage = "tune"
                out.error = f"{st.kernel.name}: {st.done or st.failure or 'no successful trial'}"
        stage = "build"
        chosen = best_configs(tasks, records)
        mod, _ = scheduled_module(tasks, chosen)
        runner = ModelRunner(compile_module(mod, target))
        out.built = True
        stage = "check"
        inputs = torch_source.random_inputs(seed)
        out.max_error = compare(runner(*inputs), torch_source.reference(inputs))
        if not out.max_error <= RTOL["float32"] and not out.error:
            out.stage, out.error = "check", f"max error {out.max_error:.3g} against torch (allowed {RTOL['float32']:g})"
    except KeyboardInterrupt:
        raise
    except TiletuneError as e:
        out.stage, out.error = stage, one_line(str(e), 300)
    except Exception as e:  # noqa: BLE001  (the suite reports every failure as a row)
        out.stage, out.error = stage, f"{type(e).__name__}: {one_line(str(e), 300)}"
    return out


def table(outcomes: list[Outcome]) -> str:
    """The outcomes as a Markdown table: family x path x layout, tuned tasks, built, error against torch."""
    lines = ["| family | path | layout | tasks tuned | built | max error vs torch | failure |",
             "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        err = f"{o.max_error:.1e}" if o.max_error is not None else "-"
        fail = f"{o.stage}: {o.error}".replace("|", "/") if o.error else ""
        lines.append(f"| {o.family} | {o.path} | {o.layout} | {o.tuned}/{o.tasks} | {'yes' if o.built else 'no'} "
                     f"| {err} | {fail} |")
    return "\n".join(lines)
