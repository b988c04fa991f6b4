"""Feature extractors for cost models: Config list -> fixed-width 2-D float32 array.

Types (AutoTVM's three, plus Zheng's corrected curve):
- ``knob``    the configuration vector itself (tiletune.features.knob; pure Python, no TVM);
- ``itervar`` per-loop touch features of the lowered loop nest (tiletune.features.itervar);
- ``curve``   Zheng's corrected relation features: n points (default 30) of the touch count vs
              reuse ratio curves (tiletune.features.curve);
- ``curve1``  AutoTVM's shipped relation features: 1 point on four curves.

The TVM types need the workload (``TuneContext.workload``) and the target; without a workload they
raise TiletuneError at construction. They run in a process pool ('forkserver' context; TVM is
imported in the workers, never in the tuning process) and work is sent in chunks, one or two per worker
and call, so that a batch of configurations costs one round trip. Every extractor keeps a dict cache
keyed by Config and timing statistics in ``stats`` (``computed``, ``cache_hits``, ``seconds``: wall time
of the calls that computed something, ``worker_seconds``: time spent inside the workers, ``failures``:
configurations the template rejects, whose features are all zeros as in AutoTVM), and
``per_config_ms`` for benchmarks.

Modules: ``base`` (the FeatureExtractor interface and its cache), ``knob`` (the encoding and its
KnobExtractor), ``tvm_extractor`` (itervar / curve / curve1 in a worker pool), ``analytical``; this
package's ``make_extractor`` picks one by name.
"""
from __future__ import annotations

from ..errors import TiletuneError
from ..space import Space
from .analytical import AnalyticalExtractor, hardware_for
from .base import FeatureExtractor
from .knob import KnobExtractor
from .tvm_extractor import TVMExtractor, compute_one

FEATURE_TYPES = ("knob", "itervar", "curve", "curve1", "analytical")


def make_extractor(kind: str, space: Space, workload=None, target: dict | None = None, *, workers: int = 2,
                   curve_n: int = 30, hardware=None) -> FeatureExtractor:
    if kind == "knob":
        return KnobExtractor(space)
    if kind == "analytical":  # the seven TVM-AF-DS features (tiletune.features.analytical)
        return AnalyticalExtractor(space, workload, hardware_for(hardware, target), target)
    if kind in FEATURE_TYPES:
        return TVMExtractor(kind, space, workload, target, workers=workers, curve_n=curve_n)
    raise TiletuneError(f"unknown feature type {kind!r}; accepted: {', '.join(FEATURE_TYPES)}")


__all__ = ["FEATURE_TYPES", "FeatureExtractor", "KnobExtractor", "TVMExtractor", "make_extractor", "compute_one"]
