"""Config -> TensorIR schedule, per target family (``cpu`` for LLVM targets, ``cuda`` for CUDA targets:
``cuda_wgmma`` (wgmma + TMA) for float16/bfloat16 gemm and batch_matmul on ``sm_90a``, ``cuda_mma`` on tensor
cores for the other float16/bfloat16 inputs, ``cuda`` SIMT otherwise, and for fused PrimFunc
kernels whose anchor is no GEMM), and the space of a
workload that each family's template tunes. Row reductions (``tiletune.workloads.rows``) have a template of
their own on LLVM targets (``rows``), with its own start points (``starts``)."""
from __future__ import annotations

from typing import Any

from ..alignment import with_param_alignment
from ..errors import TiletuneError
from ..quiet import quiet_tvm
from ..space import Config, Space
from ..target import is_cuda
from ..workloads.base import HALF, Workload
from ..workloads.primfunc import PrimFuncWorkload
from ..workloads.rows import RowWorkload
from . import cpu, cuda, cuda_mma, cuda_wgmma, rows, x86_int8
from . import x86_bf16


def _rows(workload: Workload, target: dict[str, Any] | None) -> bool:
    """Whether ``workload`` goes to the row-reduction template; TiletuneError for a row reduction on CUDA."""
    if not isinstance(workload, RowWorkload):
        return False
    if is_cuda(target):
        raise TiletuneError(f"{workload.key}: row reductions are tuned on LLVM CPU targets; on CUDA dlight "
                            "schedules them")
    return True


def _wgmma(workload: Workload, target: dict[str, Any] | None) -> bool:
    """Whether ``workload`` goes to the Hopper template (``cuda:sm_90a`` and a GEMM it builds)."""
    return cuda_wgmma.is_sm90a(target) and cuda_wgmma.supports(workload)


def _mma(workload: Workload, target: dict[str, Any] | None) -> bool:
    """Whether ``workload`` goes to the tensor-core template (half inputs on CUDA); TiletuneError for half
    inputs on CUDA that it does not schedule."""
    if not is_cuda(target) or workload.dtype not in HALF:
        return False
    if not cuda_mma.supports(workload):
        if isinstance(workload, PrimFuncWorkload):  # a fused kernel that is no GEMM (e.g. depthwise): SIMT
            return False
        raise TiletuneError(cuda_mma.refusal(workload))
    return True


def _bf16(workload: Workload, target: dict[str, Any] | None) -> bool:
    """Whether ``workload`` goes to the bf16 template of x86's matrix instructions (``x86_bf16.path``)."""
    return (workload.dtype == "bfloat16" and not is_cuda(target) and not isinstance(workload, RowWorkload)
            and x86_bf16.path(workload, target) is not None)


def make_space(workload: Workload, levels=None, target: dict[str, Any] | None = None) -> Space:
    """The default space of a workload for a target: (4, 2) levels and the template's choice knobs
    (unroll; pack for the CPU template where it applies); for NHWC conv2d on a CPU, the register-tile rule
    of ``cpu.register_rule`` as the space's constraint; on a GPU, its per-block limits (``cuda.LimitRule``); for a
    row reduction, the choice knobs of ``rows.make_space``."""
    if _rows(workload, target):
        return rows.make_space(workload)
    if _wgmma(workload, target):
        return cuda_wgmma.make_space(workload, levels, target)
    if _mma(workload, target):
        return cuda_mma.make_space(workload, levels, target)
    if is_cuda(target):
        return cuda.make_space(workload, levels, target)
    if x86_int8.applies(workload, target):  # uint8 x int8 -> int32 products: vpdpbusd
        return x86_int8.make_space(workload, levels, target)
    if _bf16(workload, target):  # bf16 products: vdpbf16ps / tdpbf16ps
        return x86_bf16.make_space(workload, levels, target)
    choices = cpu.choice_knobs(workload)
    space = Space.from_axes(workload.axes(), levels=levels, choices=choices)
    space.constraint = cpu.register_rule(workload, space, target)
    return space


def refusal(workload: Workload, target: dict[str, Any] | None) -> str:
    """Why no template tunes ``workload`` on ``target`` (one line, without the workload's key), or "": its space
    cannot be made (``make_space``: a CUDA template's limits, an int8 product the VNNI kernel cannot tile, a
    target without the instruction)."""
    try:
        make_space(workload, None, target)
    except TiletuneError as e:
        msg = str(e)
        return msg[len(workload.key) + 2:] if msg.startswith(workload.key + ": ") else msg
    return ""


def check(workload: Workload, space: Space, config: Config, target: dict[str, Any] | None = None) -> None:
    """Raise ``cpu.InvalidConfig`` (or its GPU subclass) when the target's template rejects ``config``."""
    if _rows(workload, target):
        rows.check(workload, space, config)
    elif _wgmma(workload, target):
        cuda_wgmma.check(workload, space, config, target)
    elif _mma(workload, target):
        cuda_mma.check(workload, space, config, target)
    elif is_cuda(target):
        cuda.check(workload, space, config, target)
    elif x86_int8.applies(workload, target):
        x86_int8.check(workload, space, config)
    elif _bf16(workload, target):
        x86_bf16.check(workload, space, config)
    else:
        cpu.check(workload, space, config)


def schedule(workload: Workload, space: Space, config: Config, target: dict[str, Any]):
    if _rows(workload, target):
        return rows.schedule(workload, space, config, target)
    if _wgmma(workload, target):
        return cuda_wgmma.schedule(workload, space, config, target)
    if _mma(workload, target):
        return cuda_mma.schedule(workload, space, config, target)
    if is_cuda(target):
        return cuda.schedule(workload, space, config, target)
    if x86_int8.applies(workload, target):
        return x86_int8.schedule(workload, space, config, target)
    if _bf16(workload, target):
        return x86_bf16.schedule(workload, space, config, target)
    return cpu.schedule(workload, space, config, target)


def starts(workload: Workload, space: Space, target: dict[str, Any] | None = None) -> list[Config]:
    """The template's own start points: for a space without tile knobs (row reductions: ``rows.starts``), and for
    the int8 template (``x86_int8.starts``, measured before the constructions); [] for the others, whose starts the
    constructions build (``tiletune.construct``); [] without a workload (a bare space)."""
    if workload is None:
        return []
    if x86_int8.applies(workload, target):  # its constructions would model elements, its knobs are instruction tiles
        return x86_int8.starts(workload, space, target)
    if _bf16(workload, target):  # the same for the bf16 template
        return x86_bf16.starts(workload, space, target)
    return rows.starts(workload, space) if isinstance(workload, RowWorkload) and not is_cuda(target) else []


def prepacked_inputs(workload: Workload, space: Space, config: Config, target: dict[str, Any]) -> dict[int, "cpu.Panels"]:
    """The inputs (by position) that a measured kernel of ``config`` takes packed, with their layout
    (``cpu.prepacked``: weights of a model on the CPU template); {} for the other templates."""
    if _rows(workload, target) or is_cuda(target):
        return {}
    if x86_int8.applies(workload, target):
        return x86_int8.prepacked(workload, space, config)
    if _bf16(workload, target):
        return x86_bf16.prepacked(workload, space, config, target)
    return cpu.prepacked(workload, space, config)


def build(workload: Workload, space: Space, config: Config, target: dict[str, Any], *, arg_checks: bool = True,
          param_alignment: int | None = None, prepacked: bool = False):
    """Compile ``config`` for ``target``; the result's ``.mod`` is the runtime module.

    ``prepacked=True`` (the measurement): the kernel takes the model's weights that ``config`` packs already
    packed (the inputs ``prepacked_inputs`` names, in its layouts), as the model build runs it; without it, the
    kernel packs them itself and takes the workload's own inputs.

    ``param_alignment``: the bytes of alignment the kernel may assume for its arrays (default: TVM's; see
    ``tiletune.alignment``).

    ``arg_checks=False`` leaves out the entry function's argument assertions (types, shapes, strides,
    devices: ``tirx.disable_assert``), for callers that always pass arrays made from the workload's own
    shapes and dtypes, as the measurement workers do. They are about a third of a small kernel's LLVM IR,
    and compile time with it (docs/decisions/measure-arg-checks.md); the kernel's loops are the same.
    Libraries given to users keep them."""
    import tvm

    if _bf16(workload, target):  # refused in one line where this CPU cannot run the instruction; AMX tile state
        x86_bf16.prepare_run(workload, target)
    sch = schedule(workload, space, config, target)
    mod = sch.mod
    if _wgmma(workload, target):  # a TIRx kernel (TMA descriptors made on the host, no layout rewrite)
        config = {} if arg_checks else {"tirx.disable_assert": True}
        outer = tvm.transform.PassContext.current()
        tgt = tvm.target.Target(target)
        # in the target's scope: where a GPU compiles the CUDA C (NVRTC), the arch comes from it (sm_90a, not the
        # device's sm_90, which has no wgmma)
        with tvm.transform.PassContext(opt_level=outer.opt_level, config={**outer.config, **config}), tgt:
            with quiet_tvm():
                return tvm.compile(mod, target=tgt, tir_pipeline="tirx")
    if prepacked:  # a no-op for a kernel that packs no weight
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    mod = mod if param_alignment is None else with_param_alignment(mod, param_alignment)
    extra = cuda_mma.pass_config() if _mma(workload, target) else {}
    if arg_checks and not extra:
        with quiet_tvm():  # pow's warnings (fused GELU epilogues)
            return tvm.compile(mod, target=tvm.target.Target(target))
    if not arg_checks:
        extra["tirx.disable_assert"] = True
    outer = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=outer.opt_level, config={**outer.config, **extra}):
        with quiet_tvm():
            return tvm.compile(mod, target=tvm.target.Target(target))
