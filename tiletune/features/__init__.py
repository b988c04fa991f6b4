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
"""
from __future__ import annotations

import math
import multiprocessing
import os
import time
import weakref
from typing import Any, Sequence

import numpy as np

from ..errors import TiletuneError
from ..lifetime import die_with_parent
from ..space import Config, Space

FEATURE_TYPES = ("knob", "itervar", "curve", "curve1", "analytical")


class FeatureExtractor:
    """Base: cached ``extract(configs)``; subclasses implement ``_compute`` and ``dim``."""

    kind = ""

    def __init__(self, space: Space):
        self.space = space
        self.cache: dict[Config, np.ndarray] = {}
        self.stats: dict[str, float] = {"computed": 0, "cache_hits": 0, "seconds": 0.0, "worker_seconds": 0.0,
                                        "failures": 0}

    @property
    def dim(self) -> int:
        raise NotImplementedError

    @property
    def per_config_ms(self) -> float:
        return 1e3 * self.stats["seconds"] / max(1, self.stats["computed"])

    def _compute(self, configs: list[Config]) -> list[np.ndarray | None]:
        raise NotImplementedError

    def extract(self, configs: Sequence[Config]) -> np.ndarray:
        todo = list(dict.fromkeys(c for c in configs if c not in self.cache))
        self.stats["cache_hits"] += len(configs) - len(todo)
        if todo:
            t0 = time.perf_counter()
            vecs = self._compute(todo)
            for c, v in zip(todo, vecs):
                if v is None:
                    self.stats["failures"] += 1
                    v = np.zeros(self.dim, dtype=np.float32)
                self.cache[c] = v
            self.stats["computed"] += len(todo)
            self.stats["seconds"] += time.perf_counter() - t0
        if len(self.cache) > 200_000:  # AutoTVM cleared its cache at 100k; keep what was just asked
            keep = {c: self.cache[c] for c in configs}
            self.cache = keep
        if not configs:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self.cache[c] for c in configs])

    def close(self) -> None:
        pass

    def summary(self) -> str:
        s = self.stats
        return (f"{self.kind}: {int(s['computed'])} extracted ({self.per_config_ms:.2f} ms each, "
                f"{s['seconds']:.2f} s wall, {s['worker_seconds']:.2f} s in workers), "
                f"{int(s['cache_hits'])} cache hits, {int(s['failures'])} rejected configs")


class KnobExtractor(FeatureExtractor):
    kind = "knob"

    def __init__(self, space: Space):
        super().__init__(space)
        from .knob import KnobTable

        self.table = KnobTable(space)

    @property
    def dim(self) -> int:
        return self.table.dim

    def _compute(self, configs):
        from .knob import knob_vector

        return [knob_vector(self.space, c) for c in configs]


# ---- the TVM side (runs in the workers) -----------------------------------------------------------
_W: dict[str, Any] = {}


def _worker_init(payload: bytes) -> None:
    die_with_parent()  # end with the tuning process, even inside a long lowering (tiletune.lifetime)
    import cloudpickle

    kind, key, space, target, curve_n = cloudpickle.loads(payload)
    _W.clear()
    _W.update(kind=kind, key=key, space=space, target=target, curve_n=curve_n, layout=None)
    import tvm  # noqa: F401  (warm the worker while the tuner measures its first batch)

    from . import itervar  # noqa: F401
    from ..schedules import cpu  # noqa: F401


def _worker_state():
    from ..workloads import parse
    from . import itervar

    if "workload" not in _W:
        _W["workload"] = parse(_W["key"])
    if _W["kind"] == "itervar" and _W["layout"] is None:
        _W["layout"] = itervar.layout(_W["workload"], _W["space"], _W["target"])
    return _W


def compute_one(kind: str, workload, space: Space, target, config: Config, layout=None, curve_n: int = 30):
    """Feature vector of one configuration (None when the template rejects it)."""
    from ..schedules.cpu import InvalidConfig
    from . import curve, itervar

    try:
        func, _ = itervar.lower(workload, space, config, target)
    except InvalidConfig:
        return None
    an = itervar.touch_analysis(func)
    if kind == "itervar":
        return itervar.itervar_vector(an, layout, space, config)
    if kind == "curve":
        return curve.curve_vector(an, space, config, curve_n, curve.CURVE_RELATIONS)
    if kind == "curve1":
        return curve.curve_vector(an, space, config, 1, curve.CURVE1_RELATIONS)
    raise ValueError(kind)


def _worker_extract(configs: list[Config]) -> tuple[list, float]:
    t0 = time.perf_counter()
    st = _worker_state()
    out = []
    for c in configs:
        try:
            out.append(compute_one(st["kind"], st["workload"], st["space"], st["target"], c, st["layout"],
                                   st["curve_n"]))
        except Exception:  # a schedule/lowering failure is a feature failure, not a crash
            out.append(None)
    return out, time.perf_counter() - t0


def _worker_dim() -> int:
    st = _worker_state()
    if st["kind"] == "itervar":
        return st["layout"].dim
    raise ValueError(st["kind"])


def _terminate(pool) -> None:
    try:
        pool.terminate()
        pool.join()
    except Exception:
        pass


class TVMExtractor(FeatureExtractor):
    """itervar / curve / curve1 features, computed by TVM in worker processes (``workers=0``: in this
    process, for debugging)."""

    def __init__(self, kind: str, space: Space, workload, target: dict | None = None, *, workers: int = 2,
                 curve_n: int = 30):
        if kind not in ("itervar", "curve", "curve1"):
            raise TiletuneError(f"unknown TVM feature type {kind!r}; accepted: itervar, curve, curve1")
        if workload is None:
            raise TiletuneError(
                f"feature type {kind!r} needs the workload to lower configurations (TuneContext.workload is "
                "None, e.g. a synthetic cost function); use feature=knob there")
        if curve_n < 1:
            raise TiletuneError(f"curve_n must be >= 1, got {curve_n}")
        super().__init__(space)
        self.kind = kind
        self.workload = workload
        self.target = target
        self.workers = max(0, int(workers))
        self.curve_n = curve_n
        self._pool = None
        self._dim: int | None = None
        self._layout = None

    def _payload(self) -> bytes:
        import cloudpickle

        return cloudpickle.dumps((self.kind, self.workload.key, self.space, self.target, self.curve_n))

    def _get_pool(self):
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
            self._pool = ctx.Pool(self.workers, initializer=_worker_init, initargs=(self._payload(),))
            self._finalizer = weakref.finalize(self, _terminate, self._pool)
        return self._pool

    def start(self) -> None:
        """Start the worker pool now (TVM imports in the background)."""
        if self.workers > 0:
            self._get_pool()

    @property
    def dim(self) -> int:
        if self._dim is None:
            if self.kind in ("curve", "curve1"):
                from .curve import CURVE1_RELATIONS, CURVE_RELATIONS, curve_dim

                n, rel = (self.curve_n, CURVE_RELATIONS) if self.kind == "curve" else (1, CURVE1_RELATIONS)
                self._dim = curve_dim(self.space, n, rel)
            elif self.workers == 0:
                self._dim = self._local_layout().dim
            else:
                self._dim = int(self._get_pool().apply(_worker_dim))
        return self._dim

    def _local_layout(self):
        from . import itervar

        if self._layout is None:
            self._layout = itervar.layout(self.workload, self.space, self.target)
        return self._layout

    def _compute(self, configs):
        if self.workers == 0:
            t0 = time.perf_counter()
            lay = self._local_layout() if self.kind == "itervar" else None
            out = []
            for c in configs:
                try:
                    out.append(compute_one(self.kind, self.workload, self.space, self.target, c, lay, self.curve_n))
                except Exception:
                    out.append(None)
            self.stats["worker_seconds"] += time.perf_counter() - t0
            return out
        pool = self._get_pool()
        n_chunks = min(len(configs), 2 * self.workers)
        size = math.ceil(len(configs) / n_chunks)
        chunks = [configs[i:i + size] for i in range(0, len(configs), size)]
        out: list = []
        for vecs, secs in pool.map(_worker_extract, chunks):
            out += vecs
            self.stats["worker_seconds"] += secs
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._finalizer()
            self._pool = None


def make_extractor(kind: str, space: Space, workload=None, target: dict | None = None, *, workers: int = 2,
                   curve_n: int = 30, hardware=None) -> FeatureExtractor:
    if kind == "knob":
        return KnobExtractor(space)
    if kind == "analytical":  # the seven TVM-AF-DS features (tiletune.features.analytical)
        from .analytical import AnalyticalExtractor, hardware_for

        return AnalyticalExtractor(space, workload, hardware_for(hardware, target), target)
    if kind in FEATURE_TYPES:
        return TVMExtractor(kind, space, workload, target, workers=workers, curve_n=curve_n)
    raise TiletuneError(f"unknown feature type {kind!r}; accepted: {', '.join(FEATURE_TYPES)}")


__all__ = ["FEATURE_TYPES", "FeatureExtractor", "KnobExtractor", "TVMExtractor", "make_extractor", "compute_one"]
