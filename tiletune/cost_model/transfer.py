"""Training data from the records of other workloads (Zheng 4.3: a model trained on C12 warm-starts C7).

``load_transfer(paths, space, feature, ...)`` reads every records file (``tiletune.records.load``),
groups the records by workload key, rebuilds each workload (``tiletune.workloads.parse``) and its space
with the tuned space's levels and choice knobs, maps every record's config into that space, computes
its features with an extractor for *that* workload, and labels it with the throughput normalised
within its workload (best median / median; 0 for failures). Each workload becomes one group (a query
group for the rank losses). Configurations recorded several times keep their last record.

Which features transfer (checked here):
- ``knob``: only between spaces with the same knobs (names, levels, choices): the same operator with
  the same levels. Other shapes of that operator are accepted with a warning, since raw tile factors
  of another extent mean other tiles (Zheng still found C12 -> C7 helpful); another operator kind is
  a TiletuneError.
- ``itervar``: the same operator and levels, any shape (its layout is the template's loop nest); a
  different loop nest is a TiletuneError.
- ``curve`` / ``curve1``: any workload, also across operator kinds (fixed length by construction).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import TiletuneError
from ..features import make_extractor as default_make
from ..features.knob import signature
from ..records import load
from ..schedules.cpu import choice_knobs
from ..space import ChoiceKnob, Space, SplitKnob
from ..workloads import parse


@dataclass
class TransferData:
    X: np.ndarray
    y: np.ndarray
    groups: list[int] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.y)


def space_levels(space: Space) -> tuple[int, int]:
    """(Ls, Lr) of a space built with uniform levels."""
    ls = next((k.levels for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "S"), 4)
    lr = next((k.levels for k in space.knobs if isinstance(k, SplitKnob) and k.kind == "R"), 2)
    return ls, lr


def space_choices(space: Space) -> dict[str, tuple]:
    return {k.name: k.values for k in space.knobs if isinstance(k, ChoiceKnob)}


def _choices_for(workload, space: Space, own_workload) -> dict[str, tuple]:
    """The categorical knobs of the other workload's space, built the way the tuned space was: with
    the CPU template's knobs for that workload when the tuned space has its template's knobs, else
    with the tuned space's own choice knobs."""
    mine = space_choices(space)
    try:
        if own_workload is not None and dict(choice_knobs(own_workload)) == mine:
            return dict(choice_knobs(workload))
    except Exception:
        pass
    return mine


def load_transfer(paths: Sequence[str], space: Space, feature: str, *, workload=None, target=None,
                  levels=None, make_extractor: Callable | None = None, max_records: int = 5000,
                  exclude_workload: str | None = None) -> TransferData:
    """Features and per-workload normalised throughput of the records in ``paths``.

    ``make_extractor(kind, space, workload)`` builds the extractor of another workload (default:
    ``tiletune.features.make_extractor`` with the given target). Records of ``exclude_workload`` (the
    workload being tuned, which the tuning loop already recalls) are skipped.
    """
    if make_extractor is None:
        def make_extractor(kind, sp, wl):
            return default_make(kind, sp, wl, target)

    levels = levels if levels is not None else space_levels(space)
    by_workload: dict[str, list] = {}
    for p in paths:
        for r in load(p):
            by_workload.setdefault(r.workload, []).append(r)
    own_dim = None
    Xs, ys, groups, names = [], [], [], []
    for key in sorted(by_workload):
        if key == exclude_workload:
            continue
        recs = by_workload[key]
        wl = parse(key)
        try:
            axes = wl.axes_no_tvm()
            other = Space.from_axes(axes, levels=levels, choices=_choices_for(wl, space, workload))
        except TiletuneError as e:
            raise TiletuneError(f"transfer: cannot rebuild the space of {key} with levels {levels}: {e}") from None
        if feature == "knob":
            if signature(other) != signature(space):
                raise TiletuneError(
                    f"transfer: knob features of {key} (knobs {other.names}) cannot transfer to this space "
                    f"(knobs {space.names}): knob features only transfer within one template; use "
                    "feature=curve (any operator) or feature=itervar (same operator, any shape)")
            if [k.extent for _, k in other.split_knobs] != [k.extent for _, k in space.split_knobs]:
                warnings.warn(f"transfer: knob features of {key} describe tiles of other extents than this "
                              "workload's; they transfer only approximately (itervar/curve transfer across "
                              "shapes)", stacklevel=2)
        last: dict = {}
        for r in recs:
            try:
                last[other.from_dict(r.config)] = r
            except TiletuneError:
                continue
        if not last:
            continue
        items = list(last.items())[-max_records:]
        ok = [r.median_s for _, r in items if r.ok]
        if not ok:
            continue
        best = min(ok)
        y = np.asarray([best / r.median_s if r.ok else 0.0 for _, r in items], dtype=np.float64)
        ex = make_extractor(feature, other, wl)
        try:
            X = ex.extract([c for c, _ in items])
        finally:
            ex.close()
        if own_dim is None:
            own_dim = X.shape[1]
        Xs.append(X)
        ys.append(y)
        groups.append(len(y))
        names.append(key)
    if not Xs:
        return TransferData(np.zeros((0, 0), np.float32), np.zeros(0), [], [])
    dims = {x.shape[1] for x in Xs}
    if len(dims) > 1:
        raise TiletuneError(f"transfer: {feature} features of {names} have different lengths {sorted(dims)}; "
                            + ("itervar features transfer only between shapes of the same operator"
                               if feature == "itervar" else "the spaces differ"))
    return TransferData(np.concatenate(Xs), np.concatenate(ys), groups, names)


def check_dim(data: TransferData, dim: int, feature: str) -> None:
    if len(data) and data.X.shape[1] != dim:
        hint = {"itervar": "itervar features transfer only between shapes of the same operator and levels "
                           "(same loop nest); use feature=curve across operator kinds",
                "knob": "knob features transfer only within one template"}.get(feature, "the spaces differ")
        raise TiletuneError(f"transfer: {feature} features of {data.workloads} have {data.X.shape[1]} "
                            f"columns, this workload's have {dim}: {hint}")
