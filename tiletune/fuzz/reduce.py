"""Reduce a failing generated model to a small reproducer.

``reduce_spec(spec, fails)`` is delta debugging (ddmin) over the model's steps: it drops chunks of steps,
halves first and then smaller, keeping a smaller model whenever ``fails`` still holds for it, until no single
step can be dropped (1-minimal). Dropping a step leaves the others' random draws as they were
(``tiletune.fuzz.generate``), so what remains is the same model less that step. ``still_fails`` is the
predicate of a real failure: the same outcome (and, for a crash, the same reason) on the same path, run in a
``Worker`` so a crash of a candidate is counted, not fatal. ``write_reproducer`` writes the reduced model as a
standalone factory file (``tiletune model build repro.py:model``).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from .generate import Spec, build


def reduce_spec(spec: Spec, fails: Callable[[Spec], bool]) -> Spec:
    """The smallest ``spec`` less some steps for which ``fails`` holds (see the module docstring); ``fails(spec)``
    is assumed true."""
    steps = list(spec.steps)
    n = 2
    while steps:
        size = math.ceil(len(steps) / n)
        chunks = [steps[i:i + size] for i in range(0, len(steps), size)]
        for chunk in chunks:
            rest = [s for s in steps if s not in chunk]
            if fails(Spec(spec.seed, tuple(rest))):
                steps, n = rest, max(n - 1, 2)
                break
        else:
            if size == 1:
                break
            n = min(len(steps), 2 * n)
    return Spec(spec.seed, tuple(steps))


def still_fails(worker, path: str, outcome: str, reason: str = "", tune: int = 0) -> Callable[[Spec], bool]:
    """The predicate of ``reduce_spec`` for a failure seen on ``path``: the model, run by ``worker``
    (``tiletune.fuzz.worker.Worker``), has that ``outcome`` there again; a crash with the same ``reason``, except
    that a dead process is one reason whatever the signal (memory corruption aborts or segfaults by chance). A
    crash is tried in a fresh process, so that no candidate inherits a heap an earlier one corrupted, and twice
    before a candidate counts as passing (memory corruption does not bring a process down every time)."""
    def same(got: str) -> bool:
        return got == reason or (got.startswith("died:") and reason.startswith("died:"))

    def once(spec: Spec) -> bool:
        if outcome == "crash":
            worker.restart()
        row = worker.run(spec, paths=(path,), tune=tune)
        got = row.get("paths", {}).get(path, {})
        return got.get("outcome") == outcome and (outcome != "crash" or same(got.get("reason", "")))

    def fails(spec: Spec) -> bool:
        return any(once(spec) for _ in range(2 if outcome == "crash" else 1))
    return fails


def write_reproducer(spec: Spec, path: str, note: str) -> str:
    """Write ``spec``'s model to ``path`` as a factory file, ``note`` (the failure, one line) at its top."""
    gen = build(spec)
    head = [f"# tiletune fuzz reproducer: {note}",
            f"# model: {gen.description}",
            f"# spec: {spec.to_json()}",
            f"# run: tiletune model build {Path(path).name}:model", ""]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(head) + gen.code)
    return str(p)
