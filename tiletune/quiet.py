"""Keep TVM's log lines that a user cannot act on out of the terminal.

TVM's C++ ``LOG(WARNING)`` writes straight to ``std::cerr`` (file descriptor 2), and no environment variable
or logging level turns warnings off (``TVM_LOG_DEBUG`` only enables the debug and verbose levels). So
``quiet_tvm()`` points fd 2 at a temporary file around a call into TVM, then writes back every line that is
not known noise (``NOISE``): other warnings and errors still reach the user, once the call returns. Noise:

- ``Scope Saving:`` / ``Scope Loaded:`` (relax VM executable): one line per constant when a model library is
  exported or loaded;
- ``Fast mode segfaults when there are out-of-bounds indices`` (topi ``take``): once per gather when a model
  with embeddings is legalized;
- ``Detected pow(x, y) where y >= 3`` (tirx ``pow``): once per GELU-like ``pow(x, 3)`` when it is legalized;
- ``Unknown pragma pragma_scope`` (LLVM code generator): once per loop of TVM's hand-written scatter kernels
  (``scatter_add``, ``scatter_reduce``) when they are compiled; the CPU code generator ignores the pragma.

``TILETUNE_VERBOSE=1`` in the environment (``tiletune --verbose`` sets it) turns the filter off: everything TVM
prints goes to the terminal as it comes.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from contextlib import contextmanager
from typing import Iterator

#: the environment variable that shows everything TVM logs (any value but "", "0")
VERBOSE_ENV = "TILETUNE_VERBOSE"

#: TVM log lines dropped by quiet_tvm (see the module docstring)
NOISE = (
    re.compile(r"Warning: Scope (Saving|Loaded):"),
    re.compile(r"Warning: Fast mode segfaults when there are out-of-bounds indices"),
    re.compile(r"Warning: Detected pow\(x, y\) where y >= 3"),
    re.compile(r"Warning: Unknown pragma pragma_scope"),
)


def verbose() -> bool:
    """True when the user asked to see everything TVM logs."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def is_noise(line: str) -> bool:
    return any(p.search(line) for p in NOISE)


def filtered(text: str) -> str:
    """``text`` without its noise lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_noise(line))


_lock = threading.Lock()
_depth = 0  # quiet_tvm windows open in this process (all threads): only the outermost redirects fd 2
_state: tuple | None = None  # (saved fd 2, buffer file) while redirected


def _reset_in_child() -> None:  # a process forked inside a window writes to its parent's buffer
    global _lock, _depth, _state
    _lock, _depth, _state = threading.Lock(), 0, None


os.register_at_fork(after_in_child=_reset_in_child)


@contextmanager
def quiet_tvm() -> Iterator[None]:
    """Around a call into TVM: what it writes to fd 2 is held back, and written back without ``NOISE`` when
    the call returns or raises. A no-op with ``TILETUNE_VERBOSE`` set, or when fd 2 cannot be duplicated.
    Anything else this process writes to fd 2 meanwhile (another thread included) comes out afterwards.
    Nested or concurrent windows (threads) share the outermost one's redirection, which ends with the last."""
    global _depth, _state
    if verbose():
        yield
        return
    with _lock:
        if _depth == 0:
            try:
                sys.stderr.flush()
                saved = os.dup(2)
            except (OSError, ValueError, AttributeError):
                saved = None
            if saved is not None:
                buf = tempfile.TemporaryFile()
                os.dup2(buf.fileno(), 2)
                _state = (saved, buf)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _state is not None:
                _restore(*_state)
                _state = None


def _restore(saved: int, buf) -> None:
    """fd 2 back to ``saved``; the buffer's lines that are not noise written to it."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    try:
        os.dup2(saved, 2)
        buf.seek(0)
        kept = filtered(buf.read().decode(errors="replace")).encode()
        while kept:
            kept = kept[os.write(2, kept):]
    finally:
        os.close(saved)
        buf.close()
