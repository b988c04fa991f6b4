"""AutoTVM's ``curve`` (relation) features, and Zheng's corrected version.

From the same touch analysis as ``itervar`` (``tiletune.features.itervar.touch_analysis``), following
AutoTVM's GetCurveSampleFeatureFlatten (src/autotvm/touch_extractor.cc):

1. The *innermost buffers*: the accesses made by the loops of maximum nest depth, one per raw buffer
   name (the access counter and a ``.scope`` suffix stripped; going through the loops in reverse order,
   the last occurrence wins), sorted by name.
2. For each innermost buffer b, one point per loop v that encloses b: its touch count log2 count(v, b),
   its reuse ratio log2 reuse(v, b), and the loop's top-down product log2 topdown(v); every curve starts
   with an extra point 0. Each coordinate list is sorted on its own (as AutoTVM did).
3. ``sample_curve(x, y)``: at the n abscissae xx = 0, 1, ..., n-1 (log2 units), the largest j with
   x[j] <= xx gives two numbers: y[j] and xx - x[j]. So one relation costs 2 n numbers.

Two versions (Zheng, section 4.2):
- ``curve1``: what AutoTVM shipped. Its C++ entry point read ``sample_n`` into a ``bool``, so n was
  forced to 1 whatever the caller asked: one point per curve, mostly zeros. Relations: AutoTVM's four,
  count->reuse, reuse->count, count->topdown, topdown->count.
- ``curve`` (Zheng's "curve-fix"): n points (default 30, as in Zheng's experiments) on the relation his
  ablation found best, memory buffer touch count vs memory reuse ratio, in both directions
  (count->reuse and reuse->count).

Fixed length: ``MAX_BUFFERS`` (4) innermost-buffer slots in name order, zero-padded or truncated,
times the relations times 2 n, plus the template's categorical knobs (as AutoTVM appended
``get_other_option()``), by name (``CHOICES``: unroll as log2(1+value), pack; 0 where a space lacks
one). The length does not depend on the operator, so curve features transfer
across shapes and across operator kinds (GEMM -> conv2d), which itervar and knob features cannot.
"""
from __future__ import annotations

import math

import numpy as np

from ..space import Config, Space
from .itervar import Analysis

MAX_BUFFERS = 4
# categorical knobs appended by name (0 where a space lacks one), so the length is operator-independent
CHOICES = ("unroll", "pack")
CURVE_RELATIONS = (("count", "reuse"), ("reuse", "count"))
CURVE1_RELATIONS = (("count", "reuse"), ("reuse", "count"), ("count", "topdown"), ("topdown", "count"))


def _raw(name: str) -> str:
    raw = name[: name.rfind("_")] if "_" in name else name
    return raw.split(".")[0]


def innermost_buffers(an: Analysis) -> list[str]:
    if not an.loops:
        return []
    depth = max(lp.nest_level for lp in an.loops)
    chosen, added = [], set()
    for lp in reversed(an.loops):
        if lp.nest_level != depth:
            continue
        for buf in lp.touch:
            raw = _raw(buf)
            if raw not in added:
                added.add(raw)
                chosen.append(buf)
    return sorted(chosen)


def curves(an: Analysis) -> dict[str, dict[str, list[float]]]:
    """buffer -> {"count", "reuse", "topdown"} -> sorted log2 values (first point 0)."""
    out = {b: {"count": [0.0], "reuse": [0.0], "topdown": [0.0]} for b in innermost_buffers(an)}
    for lp in an.loops:
        for buf, tp in lp.touch.items():
            if buf in out:
                out[buf]["count"].append(math.log2(max(tp.count, 1)))
                out[buf]["reuse"].append(math.log2(max(tp.reuse, 1)))
                out[buf]["topdown"].append(math.log2(max(lp.topdown, 1)))
    for c in out.values():
        for k in c:
            c[k].sort()
    return out


def sample_curve(x: list[float], y: list[float], n: int) -> list[float]:
    out: list[float] = []
    for i in range(n):
        xx = float(i)
        for j in range(len(x) - 1, -1, -1):
            if xx > x[j] - 1e-6:
                out += [y[j], xx - x[j]]
                break
        else:  # unreachable: every curve starts at 0
            out += [0.0, 0.0]
    return out


def curve_dim(space: Space, n: int, relations) -> int:
    return MAX_BUFFERS * len(relations) * 2 * n + len(CHOICES)


def named_choices(space: Space, config: Config) -> list[float]:
    d = space.to_dict(config)
    out = []
    for name in CHOICES:
        v = d.get(name, 0)
        out.append(math.log2(1 + float(v)) if isinstance(v, (int, float)) else 0.0)
    return out


def curve_vector(an: Analysis, space: Space, config: Config, n: int, relations) -> np.ndarray:
    block = len(relations) * 2 * n
    out = np.zeros(curve_dim(space, n, relations), dtype=np.float32)
    for slot, (buf, c) in enumerate(sorted(curves(an).items())[:MAX_BUFFERS]):
        vals: list[float] = []
        for xs, ys in relations:
            vals += sample_curve(c[xs], c[ys], n)
        out[slot * block:(slot + 1) * block] = vals
    out[-len(CHOICES):] = named_choices(space, config)
    return out
