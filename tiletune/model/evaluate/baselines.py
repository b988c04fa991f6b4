"""One end-to-end method timed in its own process: ``python -m tiletune.model.evaluate.baselines JOB.json``.

The job (written by ``tiletune.model.evaluate.bench``) names the model spec, the method, the target, the timing
settings, the records file (ours), the trial budget (MetaSchedule) and where to write the result JSON.
The child builds the model its way, runs it once on random inputs (seed 0) and compares the outputs with
the original framework's (``check_error``: max abs difference relative to the output's scale), then times
it by the rule of ``tiletune.measure.timing`` (``time_callable``: warm-up, then ``repeat`` samples of at
least ``min_repeat_ms``), all with ``num-cores`` threads.

Methods:
- ``tiletune``: the model built with the best kernels of the records (``tiletune.model.build``), in Relax's VM,
  its convolutions in the job's ``layout`` (``tiletune.model.passes.layout``; NCHW when the job names none); with
  ``construct`` ("gensor" or "roller") the tasks without records take that method's top construction.
- ``torch``: PyTorch eager, under ``torch.inference_mode``.

On a CUDA target (the job's ``dtype``: the model's compute dtype) ours, ``tvm-default`` (TVM's CUDA pipeline,
dlight's rules on every kernel) and the torch methods (the module and its float inputs in ``dtype`` on the GPU)
run on the GPU, each call waiting for the device; ONNX Runtime and MetaSchedule are CPU-only here.
- ``torch-compile``: ``torch.compile`` (inductor, default mode); the first call (compilation) is ``prepare_s``.
- ``onnxruntime``: ONNX Runtime's CPU provider on the model exported by ``source.export_onnx`` (the
  TorchScript exporter, opset 17), or on the ``.onnx`` file itself.
- ``tvm-default``: ``tvm.compile`` of the imported Relax module with TVM's default CPU pipeline (every
  operator legalized to an unscheduled kernel: what TVM does without tuning).
- ``metaschedule``: MetaSchedule's ``tune_relax`` steps (extract, tune the tasks) on the fused module with
  ``trials`` trials in total (the in-process builder and runner of ``tiletune.bench.metaschedule``, its candidates
  timed with the settings ``model tune`` times ours with; ``per_iter`` trials per iteration, so that every task
  gets its round), then the database applied to the tuned (fused) module and compiled without a
  second fusion (``compile_relax`` re-fuses, and its kernels no longer match the database); its tuning time is
  ``prepare_s``.
A method whose library is missing (onnxruntime, onnx, transformers) gives ``error="missing"`` and a one-line
message naming the package.

With ``shapes`` in the job (``model bench --shapes``: a model with symbolic dimensions, a list of bindings), the
child builds the method once and then, per binding, draws random inputs at that shape (seed 0), checks the first
call's outputs against the original's and times it; the result is ``{"rows": [one per binding]}``, each row with its
``binding``, ``shape`` (label), ``first_s`` (the first call: torch.compile's compilation at that shape) and
``prepare_s`` (the method's one build). ``tiletune``: the one library of ``model build --shapes``
(``tiletune.model.dynamic.shapes.dynamic_library``) tuned at the job's ``tuned`` bindings (the other shapes go through its
rule for untuned shapes); ``torch``: eager; ``torch-compile``: ``torch.compile(dynamic=True)``, compiled once;
``tvm-default``: ``tvm.compile`` of the symbolic Relax module; ``onnxruntime``: one session of the ``.onnx`` model
or of the PyTorch model's export with its symbolic dimensions (``source.export_onnx``); ``metaschedule``: refused
(``shapes_refusal``).
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from ..passes.pipeline import prepare
from ...bench.metaschedule import in_process_builder_runner
from ...bench.vendor import torch_kernel
from ...errors import TiletuneError
from ...measure.base import MeasureSettings
from ...measure.timing import time_callable
from ...target import is_cuda
from ...tvmscript import fast_tvmscript_parsing
from ..build import ModelRunner, flat_arrays, best_configs, compare, compile_module, constructed_configs, scheduled_module
from ..frontend.dims import label
from ..dynamic.shapes import dynamic_library, shape_tasks
from ..frontend.source import ModelSource, flat_tensors, export_onnx, load, onnx_session
from ..kernels.tasks import fuse, model_tasks

METHODS = ("tiletune", "torch", "torch-compile", "onnxruntime", "openvino-f32", "openvino", "tvm-default",
           "metaschedule")
CPU_ONLY = ("onnxruntime", "openvino-f32", "openvino", "metaschedule")  # on a CUDA target these are not timed
LABELS = {"tiletune": "tiletune (tuned)", "torch": "PyTorch eager", "torch-compile": "torch.compile (inductor)",
          "onnxruntime": "ONNX Runtime (CPU)", "openvino-f32": "OpenVINO (CPU, f32 forced)",
          "openvino": "OpenVINO (CPU, its default precision)", "tvm-default": "TVM default build",
          "metaschedule": "MetaSchedule tune_relax"}


def _torch_method(source, threads: int, compiled: bool, gpu: bool = False, dtype: str = "float32",
                  dynamic: bool = False, graphs: bool = False):
    """PyTorch eager or torch.compile (``dynamic``: ``dynamic=True``, one graph for every shape; ``graphs``: its
    ``reduce-overhead`` mode, CUDA graphs); on a GPU the module and its float inputs in ``dtype`` on ``cuda``
    (cuBLAS, cuDNN; inductor's Triton kernels), each call waiting for the device, outputs back in float32."""
    import torch

    if source.kind != "torch":
        raise TiletuneError("torch methods need a PyTorch model (this one is an ONNX file)")
    torch.set_num_threads(threads)
    module = source.module
    tdtype = getattr(torch, dtype)
    if gpu:
        if not torch.cuda.is_available():
            raise TiletuneError("this torch build has no CUDA (pip install a CUDA build of torch for GPU baselines)")
        module = copy.deepcopy(module).to("cuda", dtype=tdtype)  # the source's module stays the CPU reference
    if compiled:
        mode = {"mode": "reduce-overhead"} if graphs else {}
        module = torch.compile(module, dynamic=True, **mode) if dynamic else torch.compile(module, **mode)

    def call(inputs):
        with torch.inference_mode():
            out = module(*inputs)
        if gpu:
            torch.cuda.synchronize()
        return out

    def prepare(inputs_np):
        ts = [torch.from_numpy(x) for x in inputs_np]
        if gpu:
            ts = [t.to("cuda", dtype=tdtype) if t.is_floating_point() else t.to("cuda") for t in ts]
        return ts

    def outputs(out):
        return [t.detach().float().cpu().numpy() if t.is_floating_point() else t.detach().cpu().numpy()
                for t in flat_tensors(out)]

    return prepare, call, outputs


def _onnx_method(source, threads: int, tmp: str):
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise TiletuneError("onnxruntime is not installed (pip install 'tiletune[model]')") from None
    path = source.onnx_path
    if source.kind == "torch":
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise TiletuneError("onnx is not installed (pip install 'tiletune[model]')") from None
        path = os.path.join(tmp, "model.onnx")
        export_onnx(source, path)
    sess = onnx_session(path, threads)
    names = [i.name for i in sess.get_inputs()]
    return (lambda xs: dict(zip(names, xs))), (lambda feed: sess.run(None, feed)), list


def _openvino_method(source, threads: int, tmp: str, precision: str | None):
    """OpenVINO's CPU plugin on the same ONNX model as ``onnxruntime``, single-stream (``PERFORMANCE_HINT``
    LATENCY, ``threads`` threads); ``precision`` "f32" forces fp32 (``INFERENCE_PRECISION_HINT``), None keeps the
    plugin's default (bf16 on CPUs that multiply bf16). Returns the three functions and the precision it ran."""
    try:
        import openvino as ov
    except ImportError:
        raise TiletuneError("openvino is not installed (pip install 'tiletune[openvino]')") from None
    path = source.onnx_path
    if source.kind == "torch":
        path = os.path.join(tmp, "model.onnx")
        export_onnx(source, path)
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": int(threads)}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    outs = list(compiled.outputs)
    used = compiled.get_property("INFERENCE_PRECISION_HINT")
    used = used.get_type_name() if hasattr(used, "get_type_name") else str(used)  # an ov.Type: "bf16", "f32"
    return list, request.infer, (lambda r: [np.array(r[o]) for o in outs]), used


def per_iter(trials: int, tasks: int) -> int:
    """MetaSchedule's ``num_trials_per_iter`` for a model: its default 64, but at most an equal share of the
    budget per task. Its task scheduler first gives every task one iteration in turn; with 64 per iteration a
    budget of tens of trials per task (bert-small: 250 for 18 tasks) reaches 4 tasks, and the kernels of the
    others stay unscheduled (serial) in the compiled model."""
    return max(1, min(64, trials // max(1, tasks)))


def _ms_method(source, target: dict, trials: int, tmp: str):
    fast_tvmscript_parsing()
    import tvm
    from tvm.s_tir import meta_schedule as ms

    fused = fuse(prepare(source).mod, target)
    # MetaSchedule times its candidates as ``model tune`` times ours (MeasureSettings' defaults); the bench's
    # --repeat / --min-repeat-ms time the tuned model, as for every method
    builder, runner = in_process_builder_runner(tmp, MeasureSettings())
    tgt = tvm.target.Target(target)
    # tune_relax's own steps, so that the tasks are extracted once (their count sets the trials per iteration)
    work_dir = os.path.join(tmp, "ms")
    tasks = ms.relax_integration.extract_tasks(fused, tgt)
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(tasks, work_dir)
    db = ms.tune_tasks(tasks=contexts, task_weights=weights, work_dir=work_dir, max_trials_global=trials,
                       num_trials_per_iter=per_iter(trials, len(tasks)), builder=builder, runner=runner,
                       database="memory")
    # the tuned kernels applied to the module that was tuned, then compiled without a second fusion:
    # ``compile_relax`` legalizes and fuses again, and re-fusing a fused module changes its kernels, so that
    # the database matched only the unfused ones (bert-small after 250 trials ran as slowly as TVM's
    # default build, 3.6 s)
    with tgt, db, tvm.transform.PassContext(opt_level=3):
        applied = tvm.relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    return compile_module(applied, target)


def _vm_method(ex, target: dict):
    """(prepare, call, outputs, device) of a compiled Relax executable in the VM: numpy inputs copied to the
    device; on a GPU each call waits for the kernels (a launch returns before they end)."""
    import tvm

    runner = ModelRunner(ex, target)
    dev, main = runner.dev, runner.vm["main"]

    def prepare(xs):
        return [tvm.runtime.tensor(np.ascontiguousarray(x), dev) for x in xs]

    if is_cuda(target):
        def call(args):
            out = main(*args)
            dev.sync()
            return out
    else:
        def call(args):
            return main(*args)

    return prepare, call, flat_arrays, dev


def shapes_refusal(method: str, source: ModelSource) -> str | None:
    """Why ``method`` is not timed at several shapes of ``source`` (``model bench --shapes``), or None."""
    if method == "metaschedule":
        return "not for --shapes: MetaSchedule refuses symbolic loops"
    if method in ("openvino-f32", "openvino"):
        return "not for --shapes: OpenVINO is timed at the model's example shape only"
    return None


def run_shapes(job: dict) -> dict:
    """The job's method at each of its ``shapes`` (see the module docstring): {"rows": [...]}."""
    method = job["method"]
    target = job["target"]
    threads = int(target.get("num-cores") or os.cpu_count() or 1)
    settings = MeasureSettings(**job["settings"])
    gpu = is_cuda(target)
    dtype = job.get("dtype", "float32")
    if gpu and method in CPU_ONLY:
        raise TiletuneError(f"{method} is timed on the CPU only (its GPU provider is not part of this benchmark)")
    source = load(job["model"])
    why = shapes_refusal(method, source)
    if why:
        raise TiletuneError(why)
    tuned = [dict(b) for b in job.get("tuned") or []]
    base: dict = {"method": method, "label": LABELS.get(method, method), "model": job["model"], "dtype": dtype}
    with tempfile.TemporaryDirectory(prefix="tiletune-e2e-") as tmp:
        t0 = time.perf_counter()
        if method in ("torch", "torch-compile"):
            prepare, call, outputs = _torch_method(source, threads, method == "torch-compile", gpu, dtype,
                                                   dynamic=True, graphs=bool(job.get("cuda_graph")))
            import torch

            base["torch_kernel"] = torch_kernel(torch)
            if gpu:
                base["device"] = torch.cuda.get_device_name(0)
        elif method == "onnxruntime":
            prepare, call, outputs = _onnx_method(source, threads, tmp)
        elif method in ("tiletune", "tvm-default"):
            import tvm

            if method == "tiletune":
                if not tuned:
                    raise TiletuneError("our build at several shapes needs the tuned shapes (none in the job)")
                dyn = shape_tasks(source, target, job.get("layout", "NCHW"), tuned, dtype=dtype)
                lib = dynamic_library(dyn, job.get("records"), job.get("construct"),
                                      cuda_graph=bool(job.get("cuda_graph")))
                ex = lib.ex
                base.update(layout=dyn.layout, tuned_tasks=len(lib.recorded), tasks=len(dyn.merged.tasks),
                            tuned_shapes=[st.label for st in dyn.shapes])
                if job.get("construct"):
                    base.update(constructed=len(lib.chosen) - len(lib.recorded), construct=job["construct"])
            else:  # TVM's default pipeline on the symbolic module (on a GPU: dlight on every kernel)
                ex = tvm.compile(prepare(source, dtype).mod, target=tvm.target.Target(target))
            prepare, call, outputs, dev = _vm_method(ex, target)
            if gpu:
                base["device"] = str(dev.device_name)
        else:
            raise TiletuneError(f"unknown method {method!r}; accepted: {', '.join(METHODS)}")
        base["prepare_s"] = time.perf_counter() - t0
        rows = []
        for b in job["shapes"]:
            row = dict(base, binding=b, shape=label(b))
            if method == "tiletune":
                row["tuned"] = b in tuned
            try:
                inputs = source.random_inputs(0, b)
                args = prepare(inputs)
                t1 = time.perf_counter()
                first = call(args)  # torch.compile: its compilation at this shape
                row["first_s"] = time.perf_counter() - t1
                row["check_error"] = compare(outputs(first), source.reference(inputs))
                row["load_before"] = os.getloadavg()[0]
                samples = time_callable(lambda: call(args), settings)
                row["samples"] = [float(x) for x in samples]
                row["median_s"] = float(np.median(samples))
            except Exception as e:  # noqa: BLE001  (one shape's failure is its row, the others still run)
                text = (str(e).strip().splitlines() or [""])[-1][:300]
                row.update(error="error", message=text if isinstance(e, TiletuneError) else f"{type(e).__name__}: {text}")
            rows.append(row)
    return {"rows": rows}


def run_method(job: dict) -> dict:
    if job.get("shapes"):
        return run_shapes(job)
    method = job["method"]
    target = job["target"]
    gpu = is_cuda(target)
    dtype = job.get("dtype", "float32")
    threads = int(target.get("num-cores") or os.cpu_count() or 1)
    settings = MeasureSettings(**job["settings"])
    out: dict = {"method": method, "label": LABELS.get(method, method), "model": job["model"], "dtype": dtype}
    if gpu and method in CPU_ONLY:
        raise TiletuneError(f"{method} is timed on the CPU only (its GPU provider is not part of this benchmark)")
    source = load(job["model"])
    inputs = source.random_inputs(0)
    with tempfile.TemporaryDirectory(prefix="tiletune-e2e-") as tmp:
        t0 = time.perf_counter()
        if method in ("torch", "torch-compile"):
            prepare, call, outputs = _torch_method(source, threads, method == "torch-compile", gpu, dtype,
                                                   graphs=bool(job.get("cuda_graph")))
            import torch

            out["torch_kernel"] = torch_kernel(torch)  # the ISA torch dispatches for, and its threads
            if gpu:
                out["device"] = torch.cuda.get_device_name(0)
        elif method == "onnxruntime":
            prepare, call, outputs = _onnx_method(source, threads, tmp)
        elif method in ("openvino-f32", "openvino"):
            prepare, call, outputs, out["precision"] = _openvino_method(
                source, threads, tmp, "f32" if method == "openvino-f32" else None)
        elif method in ("tiletune", "tvm-default", "metaschedule"):
            import tvm

            if method == "tiletune":
                tasks = model_tasks(source, target, job.get("layout", "NCHW"), dtype)
                out["layout"] = tasks.layout
                chosen = recorded = best_configs(tasks, job.get("records"))
                if job.get("construct"):
                    chosen = constructed_configs(tasks, job["construct"], recorded)
                    out["constructed"], out["construct"] = len(chosen) - len(recorded), job["construct"]
                out["tuned_tasks"], out["tasks"] = len(recorded), len(tasks.tasks)
                ex = compile_module(scheduled_module(tasks, chosen)[0], target, bool(job.get("cuda_graph")))
            elif method == "tvm-default":  # TVM's default pipeline (on a GPU: dlight on every kernel)
                ex = tvm.compile(prepare(source, dtype).mod, target=tvm.target.Target(target))
            else:
                ex = _ms_method(source, target, int(job["trials"]), tmp)
                out["trials"] = int(job["trials"])
            prepare, call, outputs, dev = _vm_method(ex, target)
            if gpu:
                out["device"] = str(dev.device_name)
        else:
            raise TiletuneError(f"unknown method {method!r}; accepted: {', '.join(METHODS)}")
        args = prepare(inputs)
        first = call(args)  # compiles torch.compile's graph; checked below
        out["prepare_s"] = time.perf_counter() - t0
        out["check_error"] = compare(outputs(first), source.reference(inputs))
        out["load_before"] = os.getloadavg()[0]  # a loaded machine makes every timing doubtful
        samples = time_callable(lambda: call(args), settings)
    out["samples"] = [float(s) for s in samples]
    out["median_s"] = float(np.median(samples))
    return out


def main(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    os.environ.setdefault("TVM_NUM_THREADS", str(job["target"].get("num-cores") or os.cpu_count() or 1))
    try:
        res = run_method(job)
    except TiletuneError as e:
        missing = "not installed" in str(e)
        res = {"method": job["method"], "label": LABELS.get(job["method"], job["method"]), "model": job["model"],
               "error": "missing" if missing else "error", "message": str(e)}
    except Exception as e:  # noqa: BLE001  (a baseline's failure is its result, not the benchmark's end)
        res = {"method": job["method"], "label": LABELS.get(job["method"], job["method"]), "model": job["model"],
               "error": "error", "message": f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}",
               "traceback": traceback.format_exc()[-3000:]}
    Path(job["result"]).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
