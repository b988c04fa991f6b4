"""The data layout of a model's convolutions: as imported (NCHW), converted to NHWC, or to NCHW16c.

Relax's PyTorch and ONNX frontends import 2-D convolutions as NCHW data with OIHW weights. In that layout
the fused convolution's innermost spatial axis (the one the CPU template vectorizes) is the output width,
7 to 112 wide in a ResNet, and its reduction reads the input channel planes one row at a time.
``convert(mod, "NHWC")`` runs ``relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]})``
before legalization, which

- rewrites every ``conv2d`` (grouped and depthwise ones included) to NHWC data, HWIO weights and an NHWC
  output: after legalization the convolution's block iterates (n, h, w, o | kh, kw, i), so its innermost
  spatial axis is the output channel (a multiple of 16 in most CNN layers: full AVX-512 vectors) and its
  innermost reduction axis the input channel, contiguous in both the input and the weight (HWIO, as the
  named ``conv2d:...,layout=NHWC`` workload uses; its weight is a constant that FoldConstant transposes
  once when the model is fused);
- carries the layout through the operators whose layout TVM can infer (elementwise, bias and residual
  adds, ReLU, pooling, means), so that the transposes between two convolutions cancel: a CNN is
  transposed to NHWC once at its input and back once where it leaves the 4-D layout (ResNet-18: the input
  image, 1x3x224x224, and the pooled 1x512x1x1 features), and stays NHWC in between.

TVM 0.27 infers no layout for ``clip`` (PyTorch's ReLU6, ONNX Clip): ConvertLayout puts a transpose back to
NCHW before every clip and one to NHWC after it (MobileNetV2: a transpose-clip-transpose kernel after most
of its convolutions, none of them fused into the convolution). So ``clip(x, lo, hi)`` is
first written as ``minimum(maximum(x, lo), hi)`` with scalar constants (``clip_as_min_max``; the same values,
NaN aside), binary elementwise operators whose layout TVM carries, which also fuse into the convolution's
epilogue.

Then the padding of every padded NHWC convolution becomes an operator of its own (``_pad_outside``:
``conv2d(x, padding=p)`` -> ``conv2d(nn.pad(x, p), padding=0)``), which FuseOps keeps out of the
convolution's kernel: the pad is a kernel of its own (``pad``, default schedule: parallel, vectorized over
the channels; for ResNet-18's 56x56x64 input, 0.2 M floats), and the convolution's kernel reads a padded
buffer with no bounds check (inlined, the padding's bounds check guards every input element in the
innermost loop). This is the named NHWC conv2d's ``pad_buffer`` knob, which PrimFunc workloads do not have,
made once for every task of a model; the measurement: docs/decisions/model-layout.md. (On a CPU the model build
then takes each pad whose input one kernel makes for it alone into that kernel: ``tiletune.model.kernels.pad_fusion``.)
Grouped and depthwise convolutions (``groups > 1``) keep their padding inside (``PAD_GROUPED``): without a
reduction over input channels their bounds checks guard no broadcast, and a pad kernel in front of each cost
more than the checks (MobileNetV2: 17 pad calls).

``NCHW16c`` (``tiletune.model.passes.nchwc``: 16 channels innermost, weights OIHW16i16o, ONNX Runtime's CPU layout)
converts in two steps: first to NHWC as above, then ConvertLayout to NCHW16c, which blocks every convolution
whose input and output channels are multiples of 16 and leaves the others (a stem's 3 input channels, grouped
and depthwise convolutions, which the blocked legalization does not take) in NHWC, with their epilogues
fused; a layout transform joins the two where they meet (often inside a neighbour's epilogue).

The model's inputs and outputs keep their shapes: only the kernels inside change. ``NCHW`` leaves the module
as imported. The default, ``DEFAULT_LAYOUT`` = NHWC: docs/decisions/model-layout.md.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from ...errors import TiletuneError, one_line
from . import nchwc

LAYOUTS = ("NCHW", "NHWC", nchwc.DATA)
DEFAULT_LAYOUT = "NHWC"  # docs/decisions/model-layout.md
PAD_GROUPED = False  # grouped and depthwise convolutions keep their padding inside: docs/decisions/model-layout.md
#: the layouts of ConvertLayout: data, then weight (HWIO: the input channel innermost but one, the output
#: channel innermost, the weight layout of the named NHWC conv2d workload)
DESIRED = {"NHWC": {"relax.nn.conv2d": ["NHWC", "HWIO"]},
           nchwc.DATA: {"relax.nn.conv2d": [nchwc.DATA, nchwc.KERNEL]}}  # the blocked layout: model/passes/nchwc.py
#: operators that have no NHWC kernel in TVM 0.27's legalization (a transposed conv2d in NHWC stays an
#: unlegalized operator and the build fails): pinned to the layouts the frontends import them in, so that
#: ConvertLayout puts the transposes around them instead of pushing NHWC into them
KEEP = {"relax.nn.conv1d": ["NCW", "OIW"], "relax.nn.conv1d_transpose": ["NCW", "IOW"],
        "relax.nn.conv2d_transpose": ["NCHW", "IOHW"], "relax.nn.conv3d": ["NCDHW", "OIDHW"],
        "relax.nn.conv3d_transpose": ["NCDHW", "IODHW"]}


@dataclass
class Converted:
    """The result of ``convert``: the module, and one line per part of the model the conversion left alone
    (empty when every 2-D convolution was converted)."""
    mod: object
    notes: list[str] = field(default_factory=list)


def check_layout(layout: str) -> str:
    """``layout`` upper-cased, or a one-line TiletuneError naming the accepted ones."""
    norm = {name.upper(): name for name in LAYOUTS}.get(str(layout).strip().upper())
    if norm is None:
        raise TiletuneError(f"unknown layout {layout!r}; accepted: {', '.join(LAYOUTS)}")
    return norm


def check_layout_for(layout: str, target: dict) -> str:
    """``check_layout``, and NCHW16c refused on a GPU in one line (its legalization and block are made for a
    CPU's vector registers)."""
    layout = check_layout(layout)
    if layout == nchwc.DATA and target.get("kind") == "cuda":
        raise TiletuneError(f"layout {layout} is for CPU targets (blocks of one AVX-512 register); on a GPU use "
                            "NHWC or NCHW")
    return layout


def convert(mod, layout: str) -> Converted:
    """``mod`` with its 2-D convolutions in ``layout`` (see the module docstring). The conversion never breaks
    a model:

    - a model without a 2-D convolution is left as imported (nothing would gain);
    - operators without an NHWC kernel (``KEEP``: 1-D, 3-D and transposed convolutions) keep their layout, with
      the transposes around them;
    - if ConvertLayout fails, crashes (tried first in a forked child: ``survives``), or leaves an operator that
      TVM cannot legalize any more (and could before), the model stays as imported, and the returned note says
      why in one line.
    """
    import tvm
    from tvm import relax

    layout = check_layout(layout)
    if layout == "NCHW":
        return Converted(mod)
    if "relax.nn.conv2d" not in relax_ops(mod):
        return Converted(mod, ["no 2-D convolution: the model is left as imported"])
    steps = ["NHWC", layout] if layout == nchwc.DATA else [layout]
    try:
        passes = tvm.transform.Sequential([p for step in steps for p in (
            relax.transform.ConvertLayout({**KEEP, **DESIRED[step]}), relax.transform.CanonicalizeBindings())])
        if not survives(lambda: passes(clip_as_min_max(mod))):
            return Converted(mod, [f"converting the convolutions to {layout} brings TVM's ConvertLayout down on this "
                                   "model (a crash, tried in a child process); the model keeps its imported layout"])
        out = _pad_outside(passes(clip_as_min_max(mod)))
    except Exception as e:  # noqa: BLE001  (TVM's pass errors, std::bad_alloc on some attention graphs)
        return Converted(mod, [f"converting the convolutions to {layout} failed in TVM's ConvertLayout "
                               f"({one_line(str(e) or type(e).__name__)}); the model keeps its imported layout"])
    lost = _unlegalized(out)
    lost = lost - _unlegalized(mod) if lost else lost
    if lost:
        return Converted(mod, [f"in {layout}, TVM cannot legalize {', '.join(sorted(lost))}; the model keeps its "
                               "imported layout"])
    return Converted(out)


def survives(fn) -> bool:
    """Whether ``fn()`` returns or raises in a forked child process rather than bringing it down (a segfault or an
    abort inside TVM: its ConvertLayout crashes on some models, e.g. a roll along a symbolic axis after a
    convolution); the child's result is dropped and its stderr silenced. Where ``os.fork`` is missing, True."""
    if not hasattr(os, "fork"):
        return True
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: run it, say nothing, leave without Python's clean-up
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            fn()
        except BaseException:  # noqa: BLE001  (an exception is the parent's to meet again)
            pass
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status)


def relax_ops(mod) -> set[str]:
    """Names of the Relax operators called in ``mod``'s Relax functions."""
    import tvm
    from tvm import relax

    names: set[str] = set()

    @relax.expr_functor.visitor
    class Ops(relax.PyExprVisitor):
        def visit_call_(self, call):
            super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op):
                names.add(call.op.name)

    for f in mod.functions.values():
        if isinstance(f, relax.Function):
            Ops().visit_expr(f)
    return names


def unlowered_ops(mod) -> set[str]:
    """The operators of a legalized ``mod`` that are still Relax operators, not kernels (calls of TIR
    functions, the VM's builtins): the ones TVM could not legalize, on which the build fails."""
    return {n for n in relax_ops(mod) if not n.startswith(("relax.call_", "relax.builtin", "relax.memory",
                                                             "relax.vm", "relax.null_value", "relax.shape_of"))}


def _unlegalized(mod) -> set[str]:
    """The operators of ``mod`` that ``LegalizeOps`` leaves as they are."""
    import tvm
    from tvm import relax

    with tvm.target.Target({"kind": "llvm"}):
        return unlowered_ops(relax.transform.LegalizeOps(nchwc.LEGALIZE)(mod))


def clip_as_min_max(mod):
    """``mod`` with every ``clip(x, lo, hi)`` of a float tensor written as ``minimum(maximum(x, lo), hi)``."""
    import numpy as np
    from tvm import relax

    @relax.expr_functor.mutator
    class Clip(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.clip" or len(call.args) != 3:
                return call
            dtype = str(getattr(getattr(call.args[0], "ty", None), "dtype", ""))
            bounds = [getattr(a, "value", None) for a in call.args[1:]]  # FloatImm or PrimValue(FloatImm)
            bounds = [getattr(b, "value", b) for b in bounds]
            if "float" not in dtype or not all(isinstance(b, (int, float)) for b in bounds):
                return call
            lo, hi = (relax.const(np.array(float(b), dtype=dtype)) for b in bounds)
            return relax.op.minimum(relax.op.maximum(call.args[0], lo), hi)

    return rewrite_functions(mod, Clip)


def _pad_outside(mod):
    """``mod`` with the padding of every padded NHWC (or NCHW16c) ``conv2d`` done by an ``nn.pad`` before it."""
    from tvm import relax

    @relax.expr_functor.mutator
    class PadOutside(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", "") != "relax.nn.conv2d" or str(call.attrs.data_layout) not in DESIRED:
                return call
            a = call.attrs
            top, left, bottom, right = (int(p) for p in a.padding)
            if not (top or left or bottom or right) or (int(a.groups) > 1 and not PAD_GROUPED):
                return call
            lead = [0, 0] if str(a.data_layout) == "NHWC" else [0, 0, 0, 0]  # N (and C/16) before H, W
            x = relax.op.nn.pad(call.args[0], lead + [top, bottom, left, right, 0, 0])
            return relax.op.nn.conv2d(x, call.args[1], strides=[int(v) for v in a.strides], padding=[0, 0, 0, 0],
                                      dilation=[int(v) for v in a.dilation], groups=int(a.groups),
                                      data_layout=str(a.data_layout), kernel_layout=str(a.kernel_layout),
                                      out_layout=str(a.out_layout), out_dtype=a.out_dtype)

    return rewrite_functions(mod, PadOutside)


def rewrite_functions(mod, mutator):
    """A copy of ``mod`` with every Relax function rewritten by a fresh ``mutator`` (a ``PyExprMutator`` class);
    ``mod`` itself is left as it is."""
    import tvm
    from tvm import relax

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, f in list(out.functions.items()):
        if isinstance(f, relax.Function):
            out[gv] = mutator().visit_expr(f)
    return out
