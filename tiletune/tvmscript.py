"""TVMScript parsing at its own speed: ``inspect.getmodule`` answers at once for frames of pseudo-files.

Every ``@T.prim_func`` that TVM parses calls ``inspect.stack()``, which asks ``inspect.getmodule`` for the
module of every frame on the stack. For a frame whose file name is a pseudo-name (``<frozen
importlib._bootstrap>``: every frame of an import in progress) no module is ever found, and each such question
rescans all of ``sys.modules`` (a frame has no ``__name__``, so the answer is None). ``tvm.s_tir.tensor_intrin``
parses several hundred functions at its import, from inside the import machinery: that import alone takes
long (a rescan of ``sys.modules`` per question), and every process that touches it pays it: MetaSchedule,
dlight's GPU matmul rule (a CUDA model's default kernels), the tensor-core template's intrinsics.
``fast_tvmscript_parsing()`` makes ``getmodule`` return None directly for such frames, the same answer, in this
process only; it is installed once and left in place.
"""
from __future__ import annotations

import inspect


def fast_tvmscript_parsing() -> None:
    """Install the shortcut described in the module docstring (idempotent)."""
    orig = inspect.getmodule
    if getattr(orig, "_tiletune_fast", False):
        return

    def getmodule(obj, _filename=None):
        if _filename is not None and _filename.startswith("<") and inspect.isframe(obj):
            return None
        return orig(obj, _filename)

    getmodule._tiletune_fast = True  # type: ignore[attr-defined]
    inspect.getmodule = getmodule
