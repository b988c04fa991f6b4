"""Builders for the cluster tests (named "module:function" like any builder; they run in the cluster's workers).

Each writes the process id of the worker that runs it into ``$TILETUNE_TEST_MARKS`` (a folder the test makes and
names in the environment before the cluster's nodes start), so that a test can tell which processes held a build."""
from __future__ import annotations

import os
import time

from tiletune.measure.local import build_kernel

SLOW_S = 1.0  # seconds a slow build takes before it compiles: long enough to remove a node under it


def _mark(kind: str) -> None:
    folder = os.environ.get("TILETUNE_TEST_MARKS")
    if folder:
        with open(os.path.join(folder, f"{kind}-{os.getpid()}-{time.monotonic_ns()}"), "w") as f:
            f.write(str(os.getpid()))


def slow_build(workload, space, config, target):
    """The real kernel, after ``SLOW_S`` seconds."""
    _mark("slow")
    time.sleep(SLOW_S)
    return build_kernel(workload, space, config, target)


def hanging_build(workload, space, config, target):
    """Never returns (the test interrupts the driver or the build timeout kills the worker)."""
    _mark("hang")
    time.sleep(3600)
