"""The options of the PyTorch backend: ``torch.compile(model, backend="tiletune", options={...})`` or
``tiletune.compile(model, **options)``. Unknown options and bad values are one TiletuneError line."""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import TiletuneError
from ..model.passes.layout import DEFAULT_LAYOUT

MODES = ("construct", "tune", "background")
#: shapes of one dynamic graph compiled before the others run in PyTorch (bounded recompilation)
MAX_SHAPES = 8


@dataclass(frozen=True)
class Options:
    mode: str = "construct"  # construct: no measurement; tune: measure at compile time; background: tune aside
    trials: int | None = None  # tune / background: the whole graph's trial budget
    seconds: float | None = None  # tune / background: the wall-time budget
    strategy: str = "xgb"  # tune / background: the tasks' strategy (tiletune.model.tuning.tuner)
    construct: str = "gensor"  # the construction of kernels without records (no measurement)
    target: str | None = None  # None: the inputs' device (this CPU, or CUDA for CUDA tensors)
    layout: str = DEFAULT_LAYOUT
    cache: bool = True  # keep compiled graphs in the cache (TILETUNE_CACHE_DIR/graphs)
    check: bool = True  # compare each compiled graph with PyTorch on its first inputs; a mismatch falls back
    symbolic: bool = True  # a dynamic graph in construct mode: one library for every shape (else one per shape)
    max_shapes: int = MAX_SHAPES  # a dynamic graph compiled per shape: shapes compiled before the others run in PyTorch
    poll: float = 2.0  # background: seconds between looks at the database
    quiet: bool = False  # no line per compiled graph (fallbacks are always said)

    @classmethod
    def parse(cls, given: dict | None) -> "Options":
        given = dict(given or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise TiletuneError(f"unknown tiletune option(s) {', '.join(unknown)}; accepted: {', '.join(known)}")
        opts = cls(**given)
        if opts.mode not in MODES:
            raise TiletuneError(f"tiletune option mode={opts.mode!r}: one of {', '.join(MODES)}")
        if opts.mode != "construct" and opts.trials is None and opts.seconds is None:
            raise TiletuneError(f"tiletune mode={opts.mode} needs a budget: trials=N and/or seconds=S")
        if opts.trials is not None and (not isinstance(opts.trials, int) or opts.trials < 1):
            raise TiletuneError(f"tiletune option trials={opts.trials!r}: a whole number >= 1")
        if opts.seconds is not None and not (isinstance(opts.seconds, (int, float)) and opts.seconds > 0):
            raise TiletuneError(f"tiletune option seconds={opts.seconds!r}: a number > 0")
        if opts.construct not in ("gensor", "roller"):
            raise TiletuneError(f"tiletune option construct={opts.construct!r}: gensor or roller")
        if not isinstance(opts.max_shapes, int) or opts.max_shapes < 1:
            raise TiletuneError(f"tiletune option max_shapes={opts.max_shapes!r}: a whole number >= 1")
        return opts
