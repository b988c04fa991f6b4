"""The memory a local measurement of a workload needs (the index range is checked at parse time:
``Workload.check_index_range``).

``check_memory`` is called where a measurement on this machine is set up (``LocalMeasurer``), not when a
spec is parsed: records, reports and remote targets name workloads that this machine never allocates.

The estimate follows what the workers of ``tiletune.measure.local`` allocate. Each worker that runs a kernel
keeps the inputs and the numpy reference output; the worker running a kernel also holds the inputs' device
copies, the output, its copy for the check and the check's temporaries (``numpy.allclose``: about three
output-sized arrays), and the kernel's packed copies of inputs (the ``pack`` knob); before that, drawing
the inputs takes a float64 array of the largest one and a convolution's reference builds its windows.
"""
from __future__ import annotations

import math
from typing import Sequence

import psutil

from ..errors import TiletuneError
from .access import DTYPE_BYTES, tensor_accesses
from .base import Workload

GIB = 2**30


def memory_bytes(workload: Workload, *, workers: int = 1, packed: Sequence[str] = ()) -> dict[str, int]:
    """Estimated bytes of a local measurement with ``workers`` workers: ``{"total": ..., "per_worker": ...,
    "run": ...}`` (``per_worker``: inputs and reference kept by each; ``run``: the peak added by the one
    worker that prepares or runs a kernel). ``packed``: names of inputs the kernels may copy into panels."""
    item = DTYPE_BYTES.get(workload.dtype, 4)
    ins = [math.prod(s) for s in workload.input_shapes()]
    out = math.prod(workload.output_shape())
    sizes = {t.name: math.prod(d.size for d in t.dims) for t in tensor_accesses(workload)} if packed else {}
    keep = (sum(ins) + out) * item
    prepare = max(8 * max(ins, default=0), workload.reference_scratch_elements() * item)
    run = (sum(ins) + sum(sizes.get(p, 0) for p in packed) + 5 * out) * item
    extra = max(prepare, run)
    return {"total": workers * keep + extra, "per_worker": keep, "run": extra}


def check_memory(workload: Workload, *, workers: int = 1, packed: Sequence[str] = (),
                 available: int | None = None) -> None:
    """TiletuneError when measuring ``workload`` here needs more memory than is available (psutil's
    ``available``: free plus reclaimable memory; ``available`` overrides it, e.g. in tests)."""
    est = memory_bytes(workload, workers=workers, packed=packed)
    vm = psutil.virtual_memory()
    avail = vm.available if available is None else available
    if est["total"] > avail:
        raise TiletuneError(
            f"{workload.key}: measuring it here needs about {est['total'] / GIB:.1f} GiB (inputs and reference "
            f"{est['per_worker'] / GIB:.1f} GiB in each of {workers} worker(s), plus {est['run'] / GIB:.1f} GiB "
            f"while a kernel runs), more than the {avail / GIB:.1f} GiB of memory available on this machine "
            f"(of {vm.total / GIB:.1f} GiB total); tune a smaller problem or fewer workers")
