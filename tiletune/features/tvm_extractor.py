"""itervar / curve / curve1 features, computed by TVM in a pool of worker processes.

The pool uses the 'forkserver' context ('spawn' elsewhere); TVM is imported in the workers, never in the
tuning process. Work goes out in chunks, one or two per worker and call, so that a batch of configurations
costs one round trip. A configuration the template rejects (or whose lowering fails) has no features:
``FeatureExtractor.extract`` gives it all zeros, as AutoTVM did.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import time
import weakref
from typing import Any

import cloudpickle

from ..errors import TiletuneError
from ..lifetime import die_with_parent
from ..schedules.cpu import InvalidConfig
from ..space import Config, Space
from ..workloads import parse
from . import curve, itervar
from .base import FeatureExtractor

# ---- the TVM side (runs in the workers) -----------------------------------------------------------
_W: dict[str, Any] = {}


def _worker_init(payload: bytes) -> None:
    die_with_parent()  # end with the tuning process, even inside a long lowering (tiletune.lifetime)
    kind, key, space, target, curve_n = cloudpickle.loads(payload)
    _W.clear()
    _W.update(kind=kind, key=key, space=space, target=target, curve_n=curve_n, layout=None)
    import tvm  # noqa: F401  (warm the worker while the tuner measures its first batch)


def _worker_state():
    if "workload" not in _W:
        _W["workload"] = parse(_W["key"])
    if _W["kind"] == "itervar" and _W["layout"] is None:
        _W["layout"] = itervar.layout(_W["workload"], _W["space"], _W["target"])
    return _W


def compute_one(kind: str, workload, space: Space, target, config: Config, layout=None, curve_n: int = 30):
    """Feature vector of one configuration (None when the template rejects it)."""
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
                n, rel = (self.curve_n, curve.CURVE_RELATIONS) if self.kind == "curve" else \
                    (1, curve.CURVE1_RELATIONS)
                self._dim = curve.curve_dim(self.space, n, rel)
            elif self.workers == 0:
                self._dim = self._local_layout().dim
            else:
                self._dim = int(self._get_pool().apply(_worker_dim))
        return self._dim

    def _local_layout(self):
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
