"""The default schedule of a kernel that is not tuned, on a CUDA target: TVM's dlight GPU rules.

A GPU kernel cannot run as TVM lowers it (its loops must be bound to blocks and threads), so every kernel of a
model that is not a task, and every task without records, gets the first of TVM's own GPU rules that applies,
in the order of TVM's default CUDA pipeline (``relax.backend.cuda.pipeline.legalize_passes``):

    Matmul  GEMV  Reduction  GeneralReduction  Fallback

(``tvm.s_tir.dlight.gpu``: Matmul tiles matmul-like kernels, on tensor cores for float16 where its rule does;
GEMV the matrix-vector products; Reduction and GeneralReduction softmax, layer norm and the other row
reductions, one thread block per row; Fallback binds the spatial loops of elementwise kernels, transposes and
gathers to blocks and threads.) ``schedule(func, target)`` returns the scheduled function and the rule's name,
which ``tiletune model tasks`` shows. A kernel that no rule takes (Fallback takes every kernel whose blocks
are spatial) is a TiletuneError naming it.

``check(func, scheduled, target)`` runs the scheduled kernel on the GPU and TVM's unscheduled build of the same
function on the CPU, on the same random inputs, and compares them; it needs a GPU (``has_gpu``). ``model build``
schedules with ``verify=True``: on a GPU each kernel is checked so, and a rule that computes it wrongly is passed
over for the next (Fallback last); without a GPU the whole model's check waits for one.
"""
from __future__ import annotations

import numpy as np

from ...errors import TiletuneError, one_line
from ...quiet import quiet_tvm
from ...target import has_gpu
from ...tvmscript import fast_tvmscript_parsing
from ...workloads.base import np_dtype

RULES = ("Matmul", "GEMV", "Reduction", "GeneralReduction", "Fallback")


def _apply(rule_name: str, func, tgt):
    """``func`` scheduled by one dlight GPU rule, marked scheduled; None where the rule does not apply (or fails:
    its error, in one line, second)."""
    from tvm import s_tir
    from tvm.s_tir import dlight as dl

    fast_tvmscript_parsing()  # the Matmul rule imports tvm.s_tir.tensor_intrin
    try:
        with tgt, quiet_tvm():
            space = getattr(dl.gpu, rule_name)().apply(func, tgt, False)
    except Exception as e:  # noqa: BLE001  (a rule that fails on this kernel: the next one is tried)
        return None, one_line(str(e) or type(e).__name__, 200)
    if space is None:
        return None, ""
    sch = space if isinstance(space, s_tir.Schedule) else space[0]
    return sch.mod["main"].with_attr("tirx.is_scheduled", True), ""


def schedule(func, target: dict, name: str = "kernel", verify: bool = False):
    """(``func`` scheduled by the first dlight GPU rule that applies, marked scheduled; the rule's name). With
    ``verify`` on a machine with a GPU, a rule whose kernel differs from the unscheduled build (``check``) is
    passed over for the next one."""
    import tvm

    tgt = tvm.target.Target(target)
    verify = verify and has_gpu()
    last = ""
    for rule_name in RULES:
        new, why = _apply(rule_name, func, tgt)
        last = why or last
        if new is None:
            continue
        if verify:
            try:
                check(func, new, target)
            except TiletuneError as e:
                last = f"dlight {rule_name}: {e}"
                continue
        return new, rule_name
    raise TiletuneError(f"kernel {name}: no dlight GPU rule schedules it" + (f" ({last})" if last else ""))


def _random_args(func, rng) -> list[np.ndarray]:
    out = []
    for p in func.params:
        shape, dtype = tuple(int(s) for s in p.shape), str(p.dtype)
        if "float" in dtype:
            a = rng.uniform(-1.0, 1.0, size=shape)
        else:
            a = rng.integers(0, 2, size=shape)
        out.append(np.asarray(a).astype(np_dtype(dtype)))
    return out


def check(func, scheduled, target: dict, seed: int = 0, rtol: float = 1e-3) -> float:
    """The largest error of ``scheduled`` run on the GPU against ``func`` compiled unscheduled for the CPU, on
    the same random inputs (relative to the output's scale); a TiletuneError above ``rtol``."""
    import tvm

    if not has_gpu():
        raise TiletuneError("checking a GPU kernel needs a GPU; none was found")
    rng = np.random.default_rng(seed)
    args = _random_args(func, rng)
    with quiet_tvm():
        ref = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                          target=tvm.target.Target({"kind": "llvm"})).mod
        gpu = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}),
                          target=tvm.target.Target(target)).mod
    cpu_args = [tvm.runtime.tensor(a, tvm.cpu()) for a in args]
    dev = tvm.cuda(0)
    gpu_args = [tvm.runtime.tensor(a, dev) for a in args]
    ref["main"](*cpu_args)
    gpu["main"](*gpu_args)
    want, got = cpu_args[-1].numpy().astype(np.float64), gpu_args[-1].numpy().astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    if not err <= rtol:
        raise TiletuneError(f"the dlight schedule's output differs from the unscheduled build: max error {err:.3g}")
    return err
