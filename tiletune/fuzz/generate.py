"""Random small PyTorch models, written as Python source.

A model is a ``Spec``: a seed and its list of steps ``(position, op)``. ``build(spec)`` turns it into a
``Generated``: the source of a module (``class Fuzz`` and a factory ``model()`` returning ``(module,
example_inputs[, dynamic_shapes])``, the convention of ``tiletune.model.frontend.source``) and a one-line description
of its ops. Design choices:

- The source text is the single form of a model: the fuzzer executes it, and a reproducer is the same text
  written to a file (``tiletune model build repro.py:model`` takes it as it is).
- The frame (the inputs, and whether the first axis is a symbolic ``torch.export.Dim``) comes from the seed
  alone; each step draws from its own ``random.Random`` seeded by ``(seed, position, op)``. Dropping a step
  (``tiletune.fuzz.reduce``) therefore leaves every other step's draws as they were; a step adapts to the shapes
  it now meets, and one that no longer applies (no tensor it fits) writes nothing.
- Every tensor stays tiny (``LIMIT`` elements), so a build takes about a second.
- Results must not depend on ties or on rounding across a discontinuity: the indices of sort, topk and argmax
  are used only to gather the values back (any correct index gives the same output); run-time index inputs
  and constant indices are valid for PyTorch (in bounds; negative only where PyTorch accepts them).
- The outputs: every computed tensor no later step reads (so no step is dead code), and those an ``output``
  step names. An input no step reads is still returned (through one multiply): an ONNX export drops unused
  inputs.
"""
from __future__ import annotations

import random

from .frame import LIMIT, SYM, SYM_MAX, SYM_MIN, Generated, Model, Spec, T
from .ops import OPS, WEIGHTS

__all__ = ["LIMIT", "SYM", "SYM_MAX", "SYM_MIN", "Generated", "Model", "Spec", "T", "build", "generate"]


def build(spec: Spec) -> Generated:
    """The model of ``spec`` (see the module docstring)."""
    m = Model(spec.seed)
    for pos, op in spec.steps:
        OPS[op](m, random.Random(f"{spec.seed}:{pos}:{op}"))
    return m.finish(spec)


def generate(seed: int, steps: tuple[int, int] = (2, 6)) -> Generated:
    """A random model: ``steps`` (inclusive range) ops drawn until each applies, all from ``seed``."""
    r = random.Random(f"{seed}:steps")
    want = r.randint(*steps)
    m = Model(seed)
    chosen: list[tuple[int, str]] = []
    names = list(WEIGHTS)
    pos = 0
    while len(chosen) < want and pos < 40 * want:
        op = r.choices(names, weights=[WEIGHTS[n] for n in names])[0]
        before = len(m.lines) + len(m.outputs)
        OPS[op](m, random.Random(f"{seed}:{pos}:{op}"))
        if len(m.lines) + len(m.outputs) > before:
            chosen.append((pos, op))
        pos += 1
    return build(Spec(seed, tuple(chosen)))
