"""Run a batch of built kernels on the machine that has the GPU and write their timings as JSON.

This file is shipped on its own: it imports only the TVM *runtime* (no compiler needed: the runtime-only
bundle of ``tiletune.measure.gpu_bundle`` suffices), numpy and torch, and nothing from tiletune.

    python3 gpu_runner.py BATCH_DIR [--device cuda|cpu] [--out RESULTS.json] [--no-isolate]

BATCH_DIR holds the kernels (``export_library`` .so files) and ``manifest.json`` written by
``tiletune.measure.remote.write_batch``::

    {"version": 1,
     "workload": {"key": "gemm:M=512,N=512,K=512", "op": "gemm", "params": {"M": 512, ...}, "layout": null,
                  "dtype": "float32", "input_shapes": [[512, 512], [512, 512]], "output_shape": [512, 512],
                  "tolerance": [rtol, atol]},
     "seed": 0, "device": "cuda",
     "settings": {"number": 1, "repeat": 3, "min_repeat_ms": 25, "warmup": 1, "run_timeout": 30.0, "check": true},
     "kernels": [{"id": "k0", "file": "k0.so", "config": {...}}, ...]}

Kernels for a CUDA target carry their device code as CUDA C source (TVM 0.27 keeps the source, format "cuda",
in the exported library; seen here, where there is no CUDA driver); the TVM CUDA runtime compiles it when the
module is loaded through its ``tvm_callback_cuda_compile`` hook (``tvm.support.nvcc``, registered also in runtime-only mode: NVRTC
through cuda-bindings by default, nvcc with ``TVM_CUDA_COMPILE_MODE=nvcc``; the runner switches to nvcc by
itself when NVRTC fails), for the GPU it runs on. That
load and first call are timed apart (``load_s``) and never count in the costs.

For each kernel: load it, run it once on inputs drawn exactly as ``Workload.make_inputs(seed)`` draws them
(numpy ``default_rng(seed)``, uniform in [-1, 1), one array per input in order), run it again and compare
the output with a torch reference computed in float64 on the same device (``allclose`` with the manifest's
tolerance), then time it with ``time_evaluator`` (warm-up runs, ``repeat`` samples of ``number`` runs each, each at least
``min_repeat_ms``). The results file (default ``BATCH_DIR/results.json``)::

    {"version": 1, "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "tvm": "0.27.0",
     "done": true, "results": {"k0": {"costs": [s, s, s], "error": null, "message": "", "run_s": 0.4}, ...}}

with ``error`` one of run-error, run-timeout, wrong-answer. It is rewritten (atomically) after every kernel,
and a kernel already in it is skipped, so an interrupted batch resumes.

Isolation (the default): a supervisor process runs the kernels in a child process and watches it. A kernel
that kills the child (a segfault), raises a CUDA error (after which the CUDA context is unusable, so the
child records the error and exits to be replaced) or exceeds ``run_timeout`` (the child is killed) is
recorded as ``run-error`` / ``run-timeout`` and a fresh child continues with the remaining kernels.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

VERSION = 1
EXIT_STICKY = 3  # the child recorded a run error and exits so that a fresh CUDA context continues
STARTUP_TIMEOUT = 600.0  # importing torch + tvm and computing the reference
# the runner needs only the TVM runtime: import it in runtime-only mode (faster; no compiler needed)
RUNTIME_ENV = {"TVM_USE_RUNTIME_LIB": "1"}


# ---- references (torch, float64, on the measuring device) ------------------------------------------
def reference(op: str, params: dict, inputs: list, torch_mod, layout: str | None = None):
    """The workload's output computed in torch (inputs are float64 torch tensors on the device); ``layout``
    is the convolutions' (NCHW when None)."""
    torch = torch_mod
    F = torch.nn.functional
    p = params
    if op in ("gemm", "gemv", "batch_matmul"):
        return torch.matmul(inputs[0], inputs[1])
    if op in ("conv2d", "depthwise_conv2d"):
        x, w = inputs
        nhwc = layout == "NHWC"
        if nhwc:  # NHWC data, HWIO (conv2d) or HWC (depthwise) weight -> torch's NCHW / OIHW
            x = x.permute(0, 3, 1, 2)
            w = w.permute(3, 2, 0, 1) if op == "conv2d" else w.permute(2, 0, 1).unsqueeze(1)
        y = F.conv2d(x, w, stride=p.get("stride", 1), padding=p.get("pad", 0), dilation=p.get("dilation", 1),
                     groups=x.shape[1] if op == "depthwise_conv2d" else 1)
        return y.permute(0, 2, 3, 1).contiguous() if nhwc else y
    if op == "avgpool2d":
        # padding counts in the divisor (count_include_pad=True); padding first also allows pad > kernel/2
        pad = p.get("pad", 0)
        x = F.pad(inputs[0], (pad, pad, pad, pad)) if pad else inputs[0]
        return F.avg_pool2d(x, p["kernel"], stride=p.get("stride", 1), padding=0)
    raise ValueError(f"gpu_runner has no torch reference for operator {op!r}")


def make_inputs(shapes: list, dtype: str, seed: int) -> list[np.ndarray]:
    """Exactly ``Workload.make_inputs(seed)``."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=tuple(s)).astype(dtype) for s in shapes]


# ---- results file ------------------------------------------------------------------------------------
def load_results(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict) and isinstance(data.get("results"), dict):
            return data
    except (OSError, ValueError):
        pass
    return {"version": VERSION, "done": False, "results": {}}


def save_results(path: str, data: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _record(path: str, kid: str, entry: dict, info: dict | None = None) -> None:
    data = load_results(path)
    data["results"][kid] = entry
    if info:
        data.update(info)
    save_results(path, data)


# ---- the worker: load, run, check, time ------------------------------------------------------------
class WrongAnswer(Exception):
    pass


def check_output(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> None:
    if out.shape != ref.shape:
        raise WrongAnswer(f"output shape {out.shape} != reference {ref.shape}")
    if not np.allclose(out, ref, rtol=rtol, atol=atol):
        err = np.abs(out.astype(np.float64) - ref)
        i = np.unravel_index(int(np.argmax(np.nan_to_num(err, nan=np.inf))), err.shape)
        raise WrongAnswer(f"max abs error {err[i]:.3g} at {tuple(int(x) for x in i)} "
                          f"(got {out[i]!r}, expected {ref[i]!r}; rtol={rtol}, atol={atol})")


def _load_and_call(tvm, lib_path: str, dev, args, out):
    """Load the library and call it once (this compiles a CUDA kernel shipped as source)."""
    lib = tvm.runtime.load_module(lib_path)
    main = lib["main"]
    main(*args, out)
    dev.sync()
    return lib, main


def run_one(tvm, lib_path: str, dev, inputs: list, ref: np.ndarray, out_shape, dtype: str,
            settings: dict, rtol: float, atol: float, stats: dict | None = None) -> list[float]:
    """Load and run once (``stats["load_s"]``: load + first call, which includes the JIT compile of CUDA
    source), run again and check, warm up, then time; seconds per run for every sample."""
    stats = {} if stats is None else stats
    t0 = time.perf_counter()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(tuple(out_shape), dtype), dev)
    try:
        lib, main = _load_and_call(tvm, lib_path, dev, args, out)
    except Exception as e:  # noqa: BLE001
        # NVRTC missing or failing (cuda-bindings, CUDA headers): compile with nvcc instead, once
        if "nvrtc" not in str(e).lower() or os.environ.get("TVM_CUDA_COMPILE_MODE") == "nvcc":
            raise
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        stats["compile_mode"] = "nvcc"
        lib, main = _load_and_call(tvm, lib_path, dev, args, out)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    main(*args, out)
    dev.sync()
    first = time.perf_counter() - t0
    if settings.get("check", True):
        check_output(out.numpy(), ref, rtol, atol)
    for _ in range(max(0, int(settings.get("warmup", 1)) - 1)):
        lib["main"](*args, out)
    number = int(settings.get("number", 1))
    repeat = int(settings.get("repeat", 3))
    run_timeout = float(settings.get("run_timeout", 30.0))
    while repeat > 1 and first * repeat * number > run_timeout / 3:
        repeat -= 1
    min_ms = int(settings.get("min_repeat_ms", 25))
    min_ms = min_ms if first * 1e3 < min_ms else 0
    f = lib.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=min_ms)
    stats["load_s"] = load_s
    return [float(x) for x in f(*args, out).results]


def reference_cached(batch: str, wl: dict, inputs: list, tdev: str, info: dict) -> np.ndarray:
    """The torch reference, computed once per batch and kept in ``BATCH/reference.npy`` (a replacement
    child after a crash then needs neither torch nor the reference computation)."""
    path = os.path.join(batch, "reference.npy")
    try:
        ref = np.load(path)
        if list(ref.shape) == list(wl["output_shape"]):
            return ref
    except (OSError, ValueError):
        pass
    import torch

    info["torch"] = torch.__version__
    if tdev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # float64 anyway; never a reduced-precision reference
        torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        ref_t = reference(wl["op"], wl.get("params", {}),
                          [torch.from_numpy(x).to(torch.device(tdev), torch.float64) for x in inputs], torch,
                          wl.get("layout"))
    ref = ref_t.cpu().numpy()
    try:
        np.save(path + ".tmp.npy", ref)
        os.replace(path + ".tmp.npy", path)
    except OSError:
        pass
    return ref


def worker(batch: str, device: str, out_path: str, isolated: bool) -> int:
    """Measure every kernel of the batch not yet in the results file."""
    import tvm

    with open(os.path.join(batch, "manifest.json")) as f:
        man = json.load(f)
    wl, settings = man["workload"], man.get("settings", {})
    dtype = wl["dtype"]
    rtol, atol = (float(x) for x in wl["tolerance"])
    if device == "cuda":
        dev = tvm.cuda(0)
        if not dev.exist:
            raise SystemExit("gpu_runner: no CUDA device visible to the TVM runtime")
        name = f"{dev.device_name} (compute {dev.compute_version})"
    else:
        dev, name = tvm.cpu(0), "cpu"
    info = {"device": device, "device_name": name,
            "tvm": getattr(tvm, "__version__", "?"), "tvm_path": os.path.dirname(tvm.__file__),
            "tvm_runtime_only": bool(getattr(getattr(tvm, "base", None), "_RUNTIME_ONLY", False)),
            "python": sys.version.split()[0], "version": VERSION}
    inputs = make_inputs(wl["input_shapes"], dtype, int(man.get("seed", 0)))
    ref = reference_cached(batch, wl, inputs, device, info)
    data = load_results(out_path)
    data.update(info)
    save_results(out_path, data)
    done = set(data["results"])
    current = out_path + ".current"
    for k in man["kernels"]:
        kid = k["id"]
        if kid in done:
            continue
        with open(current, "w") as f:
            json.dump({"id": kid, "since": time.time(), "pid": os.getpid()}, f)
        t0 = time.perf_counter()
        stats: dict = {}
        try:
            costs = run_one(tvm, os.path.join(batch, k["file"]), dev, inputs, ref, wl["output_shape"], dtype,
                            settings, rtol, atol, stats)
            entry = {"costs": costs, "error": None, "message": "", **stats}
        except WrongAnswer as e:
            entry = {"costs": [], "error": "wrong-answer", "message": str(e)}
        except Exception as e:  # noqa: BLE001 - errors are data
            entry = {"costs": [], "error": "run-error", "message": f"{type(e).__name__}: {e}"[-1500:]}
        entry["run_s"] = time.perf_counter() - t0
        _record(out_path, kid, entry)
        try:
            os.remove(current)
        except OSError:
            pass
        if entry["error"] == "run-error" and device == "cuda" and isolated:
            return EXIT_STICKY  # the CUDA context may be corrupted: continue in a fresh process
    return 0


# ---- the supervisor --------------------------------------------------------------------------------
def supervise(batch: str, device: str, out_path: str, run_timeout: float | None = None,
              python: str = sys.executable) -> dict:
    """Run the kernels in child processes, replacing a child that crashes or hangs (see the docstring)."""
    with open(os.path.join(batch, "manifest.json")) as f:
        man = json.load(f)
    ids = [k["id"] for k in man["kernels"]]
    timeout = float(run_timeout or man.get("settings", {}).get("run_timeout", 30.0))
    current = out_path + ".current"
    log = out_path + ".stderr"
    startup_error = ""
    for _ in range(len(ids) + 2):
        if all(i in load_results(out_path)["results"] for i in ids):
            break
        try:
            os.remove(current)
        except OSError:
            pass
        with open(log, "w") as logf:
            proc = subprocess.Popen([python, os.path.abspath(__file__), batch, "--device", device, "--out",
                                     out_path, "--worker", "--supervisor", str(os.getpid())],
                                    stdin=subprocess.DEVNULL, stderr=logf, env={**os.environ, **RUNTIME_ENV})
        started = time.time()
        while proc.poll() is None:
            time.sleep(0.05)
            cur = _read_current(current)
            now = time.time()
            if cur is not None and now - cur["since"] > timeout:
                proc.kill()
                proc.wait()
                _record(out_path, cur["id"], {"costs": [], "error": "run-timeout",
                                              "message": f"run exceeded {timeout:.0f} s", "run_s": now - cur["since"]})
                break
            if cur is None and now - started > STARTUP_TIMEOUT:
                proc.kill()
                proc.wait()
                break
        code = proc.returncode
        cur = _read_current(current)
        if cur is not None and cur["id"] not in load_results(out_path)["results"]:
            _record(out_path, cur["id"], {"costs": [], "error": "run-error",
                                          "message": f"runner process died (exit code {code}) running this kernel",
                                          "run_s": time.time() - cur["since"]})
        elif code not in (0, EXIT_STICKY) and cur is None:
            startup_error = _tail(log)
            break  # failed before any kernel (start-up): retrying will not help
    data = load_results(out_path)
    for i in ids:
        data["results"].setdefault(i, {"costs": [], "error": "run-error", "run_s": 0.0,
                                       "message": "the runner failed before this kernel: "
                                       + (startup_error or "no result (start-up failed or timed out)")})
    data["done"] = True
    save_results(out_path, data)
    for f in (current, log):
        try:
            os.remove(f)
        except OSError:
            pass
    return data


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[-n:]


def _read_current(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _die_with_supervisor(supervisor: int) -> None:
    """Linux: the kernel kills this child when the supervisor dies (a hung kernel would otherwise run on,
    re-parented, forever); tiletune.lifetime does this for tiletune's own workers, but this file imports
    nothing from tiletune."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != supervisor:  # the supervisor died before the call
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run a batch of tiletune kernels and write results JSON.")
    ap.add_argument("batch", help="directory with manifest.json and the kernels")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: the manifest's device")
    ap.add_argument("--out", default=None, help="results file (default BATCH/results.json)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per kernel (default: manifest's run_timeout)")
    ap.add_argument("--no-isolate", action="store_true", help="run in this process (no crash/hang protection)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--supervisor", type=int, default=0, help=argparse.SUPPRESS)  # the worker's parent pid
    a = ap.parse_args(argv)
    with open(os.path.join(a.batch, "manifest.json")) as f:
        man = json.load(f)
    device = a.device or man.get("device", "cuda")
    out = a.out or os.path.join(a.batch, "results.json")
    if a.worker:
        if a.supervisor:
            _die_with_supervisor(a.supervisor)
        return worker(a.batch, device, out, isolated=True)
    if a.no_isolate:
        worker(a.batch, device, out, isolated=False)
        data = load_results(out)
        data["done"] = True
        save_results(out, data)
    else:
        data = supervise(a.batch, device, out, a.timeout)
    n_ok = sum(1 for r in data["results"].values() if r.get("error") is None)
    print(f"gpu_runner: {n_ok}/{len(data['results'])} kernels ok on {data.get('device_name', device)} -> {out}")
    return 0


if __name__ == "__main__":
    os.environ.update(RUNTIME_ENV)  # only for this script's own process (and its children)
    sys.exit(main())
