"""Constructions without measurement: configurations built from an analytic model of the hardware.

- ``gensor.GensorWalk``: Gensor's annealed Markov walk over ETIR states (Liu et al., 2025).
- ``roller.RollerTree``: Roller's rTile construction tree (Zhu et al., OSDI'22).
- ``mma``: both methods on the tensor-core template's space, with an analytic model of its kernel.

Both rank their configurations with Gensor's analytic model (``tiletune.analytic.etir.Model``; on the tensor-core
template's space, ``tiletune.analytic.mma.MmaModel``). The
strategies ``gensor`` and ``roller`` measure the top constructions; ``constructions`` below gives the top-k
of either, or of both alternating ("construct", with constructions in the direct loop orders where those
apply: ``direct_constructions``), to the local searches (their ``start=gensor|roller|construct`` option), so
that no strategy imports another.
"""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from ..analytic.etir import Model, longest_reduction
from ..analytic.mma import MmaModel
from ..analytic.wgmma import WgmmaModel
from ..errors import TiletuneError
from ..space import ChoiceKnob, Config, Space
from ..workloads.access import tensor_accesses
from ..schedules import cuda_mma, cuda_wgmma, starts
from .gensor import GensorWalk
from .mma import MmaGensorWalk, MmaRollerTree
from .wgmma import WgmmaGensorWalk, WgmmaRollerTree
from .roller import RollerTree

METHODS = ("gensor", "roller", "construct")


def constructions(method: str, space: Space, *, workload=None, hardware=None, target=None, k: int = 4,
                  rng: np.random.Generator | None = None) -> list[Config]:
    """The top ``k`` configurations constructed by ``method`` ("gensor" or "roller") for ``space``, best
    first by the analytic model, with each construction's default settings (Gensor: 4 walks, T0 = 1,
    threshold 1e-30; Roller: branch 3). Gensor's walks draw from ``rng``. A space the constructions cannot
    describe (no tile knobs) is a one-line TiletuneError.

    "construct": both, alternating, ``k`` in all: Gensor's first, Roller's first, Gensor's second, ... (a
    configuration both build counts once). Neither construction is better everywhere (on MobileNetV2 Roller's
    tiles for several layers are poor and Gensor's good; on ResNet-50 the reverse), so measuring both tops
    avoids the worse one's failures for a few trials. Gensor walks first, from ``rng``, so with the same seed
    its tops are those of "gensor". On a CPU, where a direct loop order applies (``direct_constructions``:
    convolutions, whose reduction has a long channel axis and short window axes; the row order of a reduction
    made of a short window, NCHW depthwise convolution and pooling), those constructions come third (and
    fourth): Gensor's first, Roller's first, the direct orders', Gensor's second, ...; where the kernel reads a
    model weight, the panel order of Gensor's and Roller's firsts (``panel_constructions``) comes after them; where
    the weight-block rule refuses every construction, those made without it (``_firsts_without_weight_rule``) that it
    allows and their panel orders, or where it refuses all of these, their blocked order (``blocked_constructions``).
    "gensor" or "roller" alone, where the rule refuses all of its constructions, gives the same starts made from its
    own first (``_starts_without_weight_rule``): a construction for every CPU task rather than the default schedule."""
    if method not in METHODS:
        raise TiletuneError(f"unknown construction {method!r}; accepted: {', '.join(METHODS)}")
    rng = rng if rng is not None else np.random.default_rng(0)
    wg = cuda_wgmma.owns(space)  # the Hopper template's space: its own model and constructions (wgmma.py)
    mma = wg or cuda_mma.owns(space)  # the tensor-core template's space: its own model and constructions (mma.py)
    try:
        model = (WgmmaModel if wg else MmaModel if mma else Model)(space, workload, hardware, target)
    except TiletuneError as e:
        raise TiletuneError(f"start={method}: {e}") from None

    def top(name: str) -> list[Config]:
        if name == "gensor":
            ranked = (WgmmaGensorWalk if wg else MmaGensorWalk if mma else GensorWalk)(space, model, rng).pool()
        else:
            ranked = (WgmmaRollerTree if wg else MmaRollerTree if mma else RollerTree)(space, model).construct()
        return [c for _, c in ranked[:k]]

    cpu = not mma and model.hw.kind == "cpu"  # on a GPU the parallel level is the thread blocks: no panel order
    if method != "construct":
        own = top(method)
        if own or not _ruled_out(space, cpu, [own]):
            return own
        return _starts_without_weight_rule(space, workload, hardware, target, rng, model, (method,))[:k]
    tops = [top("gensor"), top("roller")]  # Gensor first: its walks draw from rng as with "gensor"
    out: list[Config] = []
    for i in range(k):
        for top in tops:
            if i < len(top) and top[i] not in out:
                out.append(top[i])
    at = min(2, len(out))
    for c in ([] if mma else _direct_tops(model)):
        if c not in out:
            out.insert(at, c)
            at += 1
    if _ruled_out(space, cpu, tops):
        ordered = _starts_without_weight_rule(space, workload, hardware, target, rng, model, METHODS[:2])
    else:
        ordered = panel_constructions(space, [t[0] for t in tops if t], workload, model.hw.cores) if cpu else []
    for c in ordered:
        if c not in out:
            out.insert(at, c)
            at += 1
    return out[:k]


def _ruled_out(space: Space, cpu: bool, tops: list[list[Config]]) -> bool:
    """Whether the CPU template's weight-block rule (``cpu.WeightReuse``) left the constructions ``tops`` empty."""
    return cpu and not any(tops) and getattr(space.constraint, "reuse", None) is not None


def _starts_without_weight_rule(space: Space, workload, hardware, target, rng, model, methods) -> list[Config]:
    """Where the weight-block rule refuses every construction of ``methods``: their firsts made without the rule
    (``_firsts_without_weight_rule``) that it allows, then their panel orders, or where neither is allowed, their
    blocked order (``blocked_constructions``)."""
    firsts = _firsts_without_weight_rule(space, workload, hardware, target, rng, methods)
    ordered = [c for c in firsts if space.allows(c)] + panel_constructions(space, firsts, workload, model.hw.cores)
    if not ordered:
        l1 = next((m.size_bytes for m in model.hw.caches if m.name.upper() == "L1"), None)
        ordered = blocked_constructions(space, firsts, l1, model.hw.cores) if l1 else []
    return list(dict.fromkeys(ordered))


def _firsts_without_weight_rule(space: Space, workload, hardware, target, rng,
                                methods=("gensor", "roller")) -> list[Config]:
    """The first constructions of ``methods`` (Gensor's, Roller's) in ``space`` without its weight-block rule
    (``cpu.WeightReuse``), which their model does not describe. Where the rule refuses every construction (they
    split the rows of a matmul whose weight is larger than the L2 between the cores: gpt2's FFN down-projection,
    3072 -> 768; bert-small's, 2048 -> 512), their panel orders, which the rule allows, are the constructive start."""
    free = copy.copy(space)
    free.constraint = dataclasses.replace(space.constraint, reuse=None)
    try:
        model = Model(free, workload, hardware, target)
    except TiletuneError:
        return []
    ranked = [GensorWalk(free, model, rng).pool() if m == "gensor" else RollerTree(free, model).construct()
              for m in methods]
    return [r[0][1] for r in ranked if r]


def blocked_constructions(space: Space, configs: list[Config], l1_bytes: int, cores: int) -> list[Config]:
    """``configs`` in the blocked order, GotoBLAS's, for a model matmul whose weight-block rule (``cpu.WeightReuse``)
    refuses them and their panel orders: one column tile over the whole reduction is already more than the rule's block
    (a reduction above about 5400 fp32 steps on a 2 MiB L2: 128 x 6144 -> 1536), so no narrowing of the columns fits it.
    The rows' parallel and cache tiles (S0, S1) move into their register-tile loop (S2), under the reduction block (R0),
    so that no row loop re-reads a block; the cores split the weight's columns (at least ``cores`` ways, as in the panel
    order); the reduction block (R1) takes the most steps whose weight (R1 x the columns under S1, in the weight's
    dtype) fits half of the L1 (``l1_bytes``), at least 16 (the accumulators go to memory after each block), else the
    most that fit the rule's block of the L2 (a reduction of prime length: all of it). A configuration the space refuses
    is left out. The register tiles then walk all the rows against one block of the weight in the L1.

    Why this order and not none: without a start such a task's tuning begins from the search's random batch; the
    blocked order gives it one; measured: docs/decisions/panel-order.md, "A weight no column block fits"."""
    reuse = getattr(space.constraint, "reuse", None)
    reductions = [(i, k) for i, k in space.split_knobs if k.kind == "R" and k.extent > 1]
    if reuse is None or len(reductions) != 1 or reductions[0][1].levels != 2 or not configs:
        return []
    ri, rk = reductions[0]
    dtype_bytes = reuse.col_bytes // rk.extent
    out: list[Config] = []
    for c in configs:
        vals = list(c.values)
        for i in reuse.rows:
            f = vals[i]
            vals[i] = (1, 1, math.prod(f[:-1]), f[-1])
        f = vals[reuse.cols]
        if f[0] < cores:  # the cores split the columns, as in the panel order
            vals[reuse.cols] = f = _more_parallel(f, -(-cores // f[0]))
            if f[0] < cores:
                continue
        step = dtype_bytes * math.prod(f[2:])  # bytes of the weight per reduction step under S1
        fits = [d for d in rk.divisors if d * step <= l1_bytes // 2]
        if not fits or fits[-1] < 16:
            fits = [d for d in rk.divisors if d * step <= reuse.block_bytes] or [1]
        vals[ri] = (rk.extent // fits[-1], fits[-1])
        cfg = Config(tuple(vals))
        if cfg not in out and space.allows(cfg):
            out.append(cfg)
    return out


def _fit_weight_block(space: Space, config: Config) -> Config:
    """``config`` with its column cache tile (S1) split further into the cores' column chunks (S0) until the weight
    block that its row loops re-read fits the weight-block rule (``cpu.WeightReuse``; unchanged without the rule)."""
    reuse = getattr(space.constraint, "reuse", None)
    if reuse is None or reuse.rereads(config) <= 1:  # the column split does not change the re-reads
        return config
    i = reuse.cols
    while reuse.block(config) > reuse.block_bytes and (f := config.values[i])[1] > 1:
        config = Config(config.values[:i] + (_more_parallel(f, 2),) + config.values[i + 1:])
    return config


def _more_parallel(factors: tuple[int, ...], need: int) -> tuple[int, ...]:
    """A split knob's ``factors`` with its cache tile (S1) giving its parallel chunks (S0) the smallest divisor of it
    that is at least ``need``; all of it where none is."""
    d = next((d for d in range(need, factors[1] + 1) if factors[1] % d == 0), factors[1])
    return (factors[0] * d, factors[1] // d, *factors[2:])


def panel_constructions(space: Space, tops: list[Config], workload, cores: int) -> list[Config]:
    """``tops`` in the panel order, for a kernel that reads a model weight (``PrimFuncWorkload.weights``: a
    matmul's [K, N], a convolution's filter) and has spatial axes that do not index it (a matmul's rows, a
    convolution's pixels): those axes' parallel (S0) factors moved into their cache tiles (S1), so that the cores
    split only the weight's own axes (the parallel factor of these raised from their S1 to at least ``cores``
    where it was lower) and each thread reads its part of the weight once, walking every row against it. The
    register and L1 tiles (S2, S3) and the reduction stay as constructed, the column cache tile narrowed where the
    re-read weight block would not fit the weight-block rule (``_fit_weight_block``); a configuration the space's
    constraint refuses, or one already in ``tops``, is left out. [] for a kernel without weights, or whose other
    inputs are larger than its weights (a convolution of a wide image: there the activation's reuse matters more).

    Why: the kernels are timed with their weights cold (docs/decisions/measure-cold-weights.md), and a parallel
    split of the rows makes every thread stream the whole weight from memory, and the constructions build such
    splits. Measurement: docs/decisions/panel-order.md."""
    weights = getattr(workload, "weights", None)
    if not weights or cores < 1:
        return []
    sizes = {n: int(np.prod(shape)) for n, shape in zip(workload.input_names(), workload.input_shapes())}
    if sum(v for n, v in sizes.items() if n in weights) < sum(v for n, v in sizes.items() if n not in weights):
        return []  # the activations outweigh the weights: their reuse across threads matters more
    try:
        accesses = tensor_accesses(workload)
    except (TiletuneError, AttributeError, TypeError, ValueError):
        return []
    weight_axes = {a for t in accesses if t.role == "input" and t.name in weights for a in t.axes}
    spatial = [(i, k) for i, k in space.split_knobs if k.kind == "S" and k.levels >= 3]
    own = [(i, k) for i, k in spatial if k.axis in weight_axes]
    other = [(i, k) for i, k in spatial if k.axis not in weight_axes and k.extent > 1]
    if not own or not other:
        return []
    out: list[Config] = []
    for c in tops:
        vals = list(c.values)
        for i, _ in other:
            f = vals[i]
            vals[i] = (1, f[0] * f[1], *f[2:])
        par = int(np.prod([vals[i][0] for i, _ in own]))
        for i, _ in own:  # the weight's axes take the parallel split from their cache tiles, the first one first
            f = vals[i]
            if par >= cores:
                break
            vals[i] = _more_parallel(f, -(-cores // par))
            par *= vals[i][0] // f[0]
        cfg = _fit_weight_block(space, Config(tuple(vals)))
        if par >= cores and cfg not in tops and cfg not in out and space.allows(cfg):
            out.append(cfg)
    return out


def row_starts(space: Space, workload=None, target=None) -> list[tuple[float, Config]] | None:
    """For a space without tile knobs whose template has start points of its own (row reductions on a CPU:
    ``tiletune.schedules.starts``), those starts ranked in their order, as (rank, config); None for any other
    space. What the constructive strategies measure on a task the analytic model cannot describe, and the first
    of them what ``model build --construct`` takes (docs/decisions/row-reductions.md)."""
    if space.split_knobs or workload is None:
        return None
    found = starts(workload, space, target)
    return [(float(i), c) for i, c in enumerate(found)] or None


def direct_constructions(space: Space, *, workload=None, hardware=None, target=None) -> list[Config]:
    """Roller's top construction in each direct loop order of the space (``tiletune.analytic.etir.Model.
    direct_orders``: the longest reduction axis whole in R1, the others whole in R0; then the same with the
    vectorised axis' window axis in R1 too; Roller's tree builds the spatial tiles), then in the row order where
    that applies (``Model.row_order``: a reduction made of a short window, as in an NCHW depthwise convolution;
    the output row whole in S1 for LLVM to vectorise, Roller's tree splits the other spatial axes between S0
    and S1), a configuration once: [] where none applies (not a CPU; GEMM; NHWC depthwise) or nothing fits.

    Why: the analytic model never builds these orders (it ranks their kernels below its own tops), yet the
    fastest NCHW conv2d and depthwise kernels measured are in them. Roller's tree builds them, not Gensor's walk.
    Measurements: docs/decisions/direct-order.md and docs/decisions/row-order.md."""
    try:
        model = Model(space, workload, hardware, target)
    except TiletuneError:
        return []
    return _direct_tops(model)


def _direct_tops(model: Model) -> list[Config]:
    """Roller's top construction in each of ``model``'s direct loop orders, a configuration once."""
    out: list[Config] = []
    orders = [model.in_direct_order(plan) for plan in model.direct_orders()]
    orders += [model.in_row_order()] if model.row_order() else []
    for order in orders:
        ranked = RollerTree(model.space, order).construct()
        if ranked and ranked[0][1] not in out:
            out.append(ranked[0][1])
    return out


def is_direct(space: Space, config: Config) -> bool:
    """Does ``config`` hold its reduction in a direct loop order: the longest reduction axis (one longest, of
    two or more) whole in the last reduction level, every other reduction axis whole in the last or the first?
    Or is it in the row order (``is_row``)?"""
    main = longest_reduction(space)
    if main is None:
        return is_row(space, config)
    for ki, k in space.split_knobs:
        f = config.values[ki]
        if k.kind == "R" and f[-1] != k.extent and (k.axis == main or f[0] != k.extent):
            return False
    return True


def is_row(space: Space, config: Config) -> bool:
    """Is ``config`` in the row order (``tiletune.analytic.etir.Model.row_order``): in a space whose reduction
    is a 2-D window (two or more reduction axes, none longest: the spaces the row order applies to, told apart
    without building their model), the vectorised (last spatial) axis whole in one factor between S0 and S2 (no
    S0, S2, S3 split), every reduction axis whole in its last level? Other spatial tiles are not looked at (the
    local searches move them)."""
    spatial = [(ki, k) for ki, k in space.split_knobs if k.kind == "S"]
    reduction = [(ki, k) for ki, k in space.split_knobs if k.kind == "R"]
    if (not spatial or len(reduction) < 2 or longest_reduction(space) is not None
            or spatial[-1][1].levels < 3):
        return False
    ki, k = spatial[-1]
    f = config.values[ki]
    return (f[0] == 1 and f[-1] == 1 and f[-2] == 1 and k.extent > 1
            and all(config.values[j][-1] == r.extent for j, r in reduction))


def choice_sweep(space: Space, config: Config) -> list[Config]:
    """``config`` with each other value of each choice knob (``unroll``, ``pack``, ``pad_buffer``, ...), one knob
    at a time, the other knobs as constructed; those the space's constraint allows, in the space's knob order.

    The analytic model ranks tilings, not these knobs: ``to_config`` sets them by rule (unroll: the largest depth
    within the micro-kernel), and the rule's choice was often the worst, with no rule best everywhere. So a
    constructive start can measure these values instead of predicting them (the local searches' option
    ``start_sweep``; docs/decisions/start-sweep.md)."""
    out: list[Config] = []
    for i, knob in enumerate(space.knobs):
        if not isinstance(knob, ChoiceKnob):
            continue
        for v in knob.values:
            if v == config.values[i]:
                continue
            vals = list(config.values)
            vals[i] = v
            c = Config(tuple(vals))
            if space.allows(c):  # the knobs' own values: only the space's constraint can refuse it
                out.append(c)
    return out


__all__ = ["METHODS", "GensorWalk", "RollerTree", "choice_sweep", "constructions", "direct_constructions",
           "is_direct", "is_row", "panel_constructions", "row_starts"]
