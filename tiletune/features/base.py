"""The feature extractor interface: ``extract(configs)`` -> 2-D float32 array, cached per Config, with
timing statistics (see ``tiletune.features``)."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ..space import Config, Space


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
