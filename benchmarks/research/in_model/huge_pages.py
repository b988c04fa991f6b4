"""One model library loaded twice in one process, its constants on 4 KiB pages and on 2 MiB pages (``huge_pages``
below around one load), taking turns: what huge pages change (not a test). Tried for gpt2 and not kept: no measurable
change (docs/results.md, "gpt2 in a quieter hour").

A CPU model streams its weights through the caches once per inference (gpt2: 340 MB in 4 KiB pages, 85,000 of them).
TVM allocates a library's constants through the C library, which backs them with 4 KiB pages where the kernel's
transparent huge pages are "madvise" (unless glibc's ``glibc.malloc.hugetlb`` tunable was set at the process's start;
numpy advises its own large arrays). ``huge_pages()`` records the process's anonymous memory before a block and, at its
end, advises what the block mapped (``madvise(MADV_HUGEPAGE)``) and asks the kernel to back it with huge pages at once
(``MADV_COLLAPSE``, Linux 6.1 and later).

    TVM_NUM_THREADS=2 python benchmarks/research/in_model/huge_pages.py LIB.so --model gpt2 [--rounds 16] [--calls 10]

``LIB.so``: what ``tiletune model build`` exported. Each round runs ``--calls`` single inferences of each load, the
order alternating between rounds; prints each load's min, median and mean, the median of each turn's first inference
(after the other load's turn) and of the others, the per-round ratio of the medians (4 KiB over 2 MiB: above 1 means
huge pages are faster; the median and range over the rounds) and how many bytes of the process were on huge pages
after each load.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
HUGE = 2 << 20


def anonymous_ranges() -> list[tuple[int, int]]:
    """[(start, end)] of the process's writable private anonymous mappings (the heap included), from /proc/self/maps;
    [] where there is none to read."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 5 or parts[4] != "0" or not parts[1].startswith("rw") or parts[1][3:4] != "p":
                    continue
                if len(parts) > 5 and parts[5] != "[heap]":
                    continue
                lo, hi = parts[0].split("-")
                out.append((int(lo, 16), int(hi, 16)))
    except (OSError, ValueError):
        return []
    return out


def new_ranges(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``after``'s ranges that no range of ``before`` covers (a new mapping, a heap grown at its end)."""
    out = []
    for lo, hi in after:
        pieces = [(lo, hi)]
        for blo, bhi in before:
            pieces = [p for a, b in pieces for p in ((a, min(b, blo)), (max(a, bhi), b)) if p[0] < p[1]]
        out += pieces
    return out


def advise(ranges: list[tuple[int, int]]) -> int:
    """``madvise(MADV_HUGEPAGE)`` then ``MADV_COLLAPSE`` on the whole 2 MiB pages inside each range; the bytes
    advised (0 where the system refuses: transparent huge pages off, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for lo, hi in ranges:
        start, end = -(-lo // HUGE) * HUGE, hi // HUGE * HUGE
        if end - start < HUGE or madvise(start, end - start, MADV_HUGEPAGE) != 0:
            continue
        madvise(start, end - start, MADV_COLLAPSE)  # refused before Linux 6.1, or without free huge pages: fine
        done += end - start
    return done


@contextlib.contextmanager
def huge_pages():
    """Advise onto huge pages the anonymous memory mapped inside the ``with`` block (``advise``): wrap the loading of
    a model, whose constants it allocates."""
    before = anonymous_ranges()
    yield
    advise(new_ranges(before, anonymous_ranges()))


def huge_bytes() -> int:
    """Bytes of this process's anonymous memory on transparent huge pages (AnonHugePages of /proc/self/smaps_rollup);
    0 where it cannot be read."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib")
    ap.add_argument("--model", required=True, help="the model the library was built from (its inputs)")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--huge-first", action="store_true", help="load the copy on 2 MiB pages first")
    a = ap.parse_args()
    import tvm
    from tvm import relax

    from tiletune.model.frontend.source import load
    from tiletune.quiet import quiet_tvm

    dev = tvm.cpu()
    x = [tvm.runtime.tensor(v, dev) for v in load(a.model).random_inputs(0)]
    loads, huge = {}, {}
    for name in ("2 MiB pages", "4 KiB pages") if a.huge_first else ("4 KiB pages", "2 MiB pages"):
        with quiet_tvm(), (huge_pages() if name.startswith("2") else contextlib.nullcontext()):
            vm = relax.VirtualMachine(tvm.runtime.load_module(a.lib), dev)
        loads[name] = vm["main"]
        huge[name] = huge_bytes()
    times: dict[str, list[list[float]]] = {n: [] for n in loads}
    for f in loads.values():
        for _ in range(5):
            f(*x)
    names = sorted(loads, key=lambda n: n.startswith("2"))  # 4 KiB first in the table and in the ratio
    for r in range(a.rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            ts = []
            for _ in range(a.calls):
                t = time.perf_counter()
                loads[n](*x)
                ts.append((time.perf_counter() - t) * 1e3)
            times[n].append(ts)
    print(f"{a.model}: {Path(a.lib).name} loaded twice, {a.rounds} alternating rounds of {a.calls} inferences\n")
    print("| load | bytes on huge pages after it | min ms | median | mean | a turn's first inference: median | "
          "the others' median |\n|---|---:|---:|---:|---:|---:|---:|")
    for n in names:
        flat = [v for t in times[n] for v in t]
        first, rest = [t[0] for t in times[n]], [v for t in times[n] for v in t[1:]]
        print(f"| {n} | {huge[n] / 2**20:.0f} MiB | {min(flat):.2f} | {np.median(flat):.2f} | {np.mean(flat):.2f} | "
              f"{np.median(first):.2f} | {np.median(rest):.2f} |")
    ratios = [np.median(s) / np.median(h) for s, h in zip(*(times[n] for n in names))]
    print(f"\nper round, 4 KiB over 2 MiB: {np.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
