"""Transfer across shapes: a dynamic model's task learns from the records of the same kernel at other shapes.

- Which records: for a task (a static kernel at one shape), the kernels of the records file that are the same
  symbolic kernel at another shape (``tiletune.model.dynamic.shape_rule.matches``: the same blocks, iterator kinds and
  static extents, other values where the model's dimensions enter) and whose space has the same knobs, nearest
  first (the sum over the anchor's loops of |log(extent ratio)|), ``NEIGHBOURS`` of them.
- The cost model: their records are the task's transfer data (``tiletune.cost_model.transfer``: background rows
  weighted down as the task's own measurements come, AutoTVM's discount).
- The start: the ``SEEDS`` fastest configurations of the nearest neighbour, each adapted to the task's extents
  (``adapt``: the inner tile factors kept where they divide, the outermost takes the rest), are measured first
  (``TuneContext.seeds``), before the task's constructions.

``shape_transfer(dyn, records, directory)`` -> {task key: ``Transfer``}; the neighbours' records are written to
one file per task in ``directory`` (default: a temporary directory removed when the process exits). ``tiletune
model tune --shapes`` uses it unless ``--no-shape-transfer`` (``DEFAULT``). Measured against tuning each shape alone:
[shape-transfer](../../docs/decisions/shape-transfer.md).
"""
from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import TiletuneError
from ...features.knob import signature as knob_signature
from ...records import load
from ...schedules import make_space
from ...space import ChoiceKnob, Config, Space, SplitKnob, divisors
from ...target import target_key
from ...workloads import parse
from .shape_rule import matches, signature
from ..kernels.tasks import fuse

DEFAULT = False  # model tune --shapes transfers across shapes: docs/decisions/shape-transfer.md
NEIGHBOURS = 2  # kernels of other shapes whose records a task learns from
SEEDS = 4  # configurations of the nearest one measured first


@dataclass
class Transfer:
    paths: tuple[str, ...]  # records files of the neighbours (transfer data of the cost model)
    seeds: tuple[dict, ...]  # adapted configurations, measured first
    neighbours: tuple[str, ...]  # their workload keys, nearest first


def adapt(space: Space, values: dict) -> Config | None:
    """The configuration ``values`` (of the same kernel at other extents) in ``space``: per tile knob, from the
    innermost factor out, the largest divisor of what is left of the extent that is at most the given factor,
    the outermost factor the rest; choice knobs kept where ``space`` has the value. None when the result is not
    in the space or its constraint refuses it."""
    out = []
    for k in space.knobs:
        v = values.get(k.name)
        if isinstance(k, SplitKnob):
            if not isinstance(v, (list, tuple)) or len(v) != k.levels:
                return None
            rem, new = k.extent, [0] * k.levels
            for i in range(k.levels - 1, 0, -1):
                f = max(d for d in divisors(rem) if d <= max(1, int(v[i])))
                new[i], rem = f, rem // f
            new[0] = rem
            v = tuple(new)
        elif isinstance(k, ChoiceKnob) and v not in k.values:
            v = k.values[0]
        try:
            k.index(v)
        except TiletuneError:
            return None
        out.append(v)
    c = Config(tuple(out))
    return c if space.allows(c) else None


def _distance(a: tuple, b: tuple) -> float:
    return sum(abs(math.log(x / y)) for x, y in zip(a, b) if x > 0 and y > 0)


def shape_transfer(dyn, records: str, directory: str | None = None) -> dict[str, Transfer]:
    """See the module docstring. Tasks without a neighbour in ``records`` (or a records file that does not exist)
    get no entry."""
    import tvm

    if not records or not os.path.exists(records):
        return {}
    tkey = target_key(dyn.target)
    by_key: dict[str, list] = {}
    for r in load(records, target=tkey, warn=False):
        by_key.setdefault(r.workload, []).append(r)
    sigs: dict[str, tuple] = {}
    knobs: dict[str, tuple] = {}
    for key in by_key:
        try:
            wl = parse(key)
            sg = signature(wl.func, {})
        except Exception:  # noqa: BLE001  (a workload whose text is not cached here, another kind of workload)
            continue
        if sg is not None:
            sigs[key] = sg
            knobs[key] = knob_signature(make_space(wl, None, dyn.target))
    if not sigs:
        return {}
    fused = fuse(dyn.symbolic, dyn.target, static=False)
    templates = [signature(f, {}, partial=True) for f in fused.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    out: dict[str, Transfer] = {}
    if directory is None:
        directory = tempfile.mkdtemp(prefix="tiletune-shape-transfer-")
        atexit.register(shutil.rmtree, directory, True)
    Path(directory).mkdir(parents=True, exist_ok=True)
    for k in dyn.merged.tasks:
        key = k.workload.key
        own = signature(k.func, {})
        tmpl = next((t for t in templates if matches(t, own)), None)
        if tmpl is None:
            continue
        space = make_space(k.workload, None, dyn.target)
        mine = knob_signature(space)
        near = sorted((_distance(own[2], sg[2]), other) for other, sg in sigs.items()
                      if other != key and knobs[other] == mine and matches(tmpl, sg))
        near = [other for _, other in near[:NEIGHBOURS]]
        if not near:
            continue
        path = Path(directory) / f"{k.hash}.jsonl"
        with open(path, "w") as f:
            for other in near:
                for r in by_key[other]:
                    f.write(r.to_json() + "\n")
        seeds: list[Config] = []
        for r in sorted((r for r in by_key[near[0]] if r.ok), key=lambda r: r.median_s):
            c = adapt(space, r.config)
            if c is not None and c not in seeds:
                seeds.append(c)
            if len(seeds) == SEEDS:
                break
        out[key] = Transfer((str(path),), tuple(space.to_dict(c) for c in seeds), tuple(near))
    return out
