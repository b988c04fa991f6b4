"""Fusing a kernel's epilogue into the accumulator's write-back: one step shared by the templates and by the
check a PrimFunc workload makes when it is created.

An epilogue is the list of blocks after the anchor (reduction) block, in program order; the last one writes
the function's output. It need not be a chain: SiLU is ``t = conv + bias; s = sigmoid(t); out = t * s``, so
``t`` is read twice (GELU in its erf and tanh forms, Mish and an activation followed by a residual add are
DAGs too). ``reverse_compute_inline`` of such a block into its producer would drop the buffer its other
reader still needs, so the epilogue is fused in two steps that hold for chains and DAGs alike:

1. every epilogue block but the last is inlined into its readers (``compute_inline``: each reader recomputes
   the elementwise expression; LLVM and NVCC merge the repeated subexpressions), so that the last block
   reads only the anchor's output (possibly at several places of its expression) and the other inputs;
2. the last block is inlined into the write-back (``reverse_compute_inline``), which then computes the
   function's output from the accumulator.

A block that cannot be fused so raises ``EpilogueError`` naming it, the step and TVM's first line.
"""
from __future__ import annotations

from ..errors import one_line


class EpilogueError(Exception):
    """An epilogue block that cannot be fused into the write-back: ``block``, ``step``, TVM's ``reason``."""

    def __init__(self, block: str, step: str, reason: str):
        super().__init__(f"block {block!r}: {step}: {reason}")
        self.block, self.step, self.reason = block, step, reason


def fuse_epilogue(sch, epilogue: tuple[str, ...] | list[str]) -> None:
    """Fuse the blocks ``epilogue`` (names, in program order) of ``sch`` into the write-back of the anchor's
    accumulator (the anchor's ``cache_write`` must already be in place): see the module docstring."""
    names = list(epilogue)
    for step, group in (("compute_inline", names[:-1]), ("reverse_compute_inline", names[-1:])):
        for name in group:
            try:
                getattr(sch, step)(sch.get_sblock(name))
            except Exception as e:  # noqa: BLE001  (TVM's ScheduleError: not elementwise, not a single write, ...)
                raise EpilogueError(name, step, one_line(str(e) or type(e).__name__, 300)) from None
