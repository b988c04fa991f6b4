"""Keep TVM's log lines that a user cannot act on out of the terminal.

TVM's C++ ``LOG(WARNING)`` writes straight to ``std::cerr`` (file descriptor 2), and no environment variable
or logging level turns warnings off (``TVM_LOG_DEBUG`` only enables the debug and verbose levels). So
``quiet_tvm()`` points fd 2 at a temporary file around a call into TVM, then writes back every line that is
not known noise (``NOISE``): other warnings and errors still reach the user, once the call returns. Noise:

- ``Scope Saving:`` / ``Scope Loaded:`` (relax VM executable): one line per constant when a model library is
  exported or loaded;
- ``Detected pow(x, y) where y >= 3`` (tirx ``pow``): once per GELU-like ``pow(x, 3)`` when it is legalized;
- ``Unknown pragma pragma_scope`` (LLVM code generator): once per loop of TVM's hand-written scatter kernels
  (``scatter_add``, ``scatter_reduce``) when they are compiled; the CPU code generator ignores the pragma.

Lines that announce a wrong result are not noise (``WRONG``): ``quiet_tvm`` keeps them out of the terminal and
raises them, once the call into TVM has returned, as one TiletuneError in the project's words. ``Fast mode
segfaults when there are out-of-bounds indices`` (topi ``take`` in its ``fast`` mode, which reads a negative or
too large index outside its tensor) is one: ``tiletune.model.passes.indices`` gives every gather a bounds rule, so a
model's legalization never meets it, and one that does is refused rather than built.

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

from .errors import TiletuneError

#: the environment variable that shows everything TVM logs (any value but "", "0")
VERBOSE_ENV = "TILETUNE_VERBOSE"

#: TVM log lines dropped by quiet_tvm (see the module docstring)
NOISE = (
    re.compile(r"Warning: Scope (Saving|Loaded):"),
    re.compile(r"Warning: Detected pow\(x, y\) where y >= 3"),
    re.compile(r"Warning: Unknown pragma pragma_scope"),
)


#: TVM log lines that announce a wrong result, and what quiet_tvm raises for them (see the module docstring)
WRONG = (
    (re.compile(r"Fast mode segfaults when there are out-of-bounds indices"),
     "a gather of the model reads its indices without a bounds rule (TVM's fast-mode take): an index outside its "
     "tensor would read memory the model does not own, so it is not built"),
)


def verbose() -> bool:
    """True when the user asked to see everything TVM logs."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def is_noise(line: str) -> bool:
    return any(p.search(line) for p in NOISE)


def filtered(text: str) -> str:
    """``text`` without its noise lines and without the lines of ``WRONG``."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_noise(line) and not wrong(line))


def wrong(line: str) -> str | None:
    """The project's message for a line of ``WRONG``; None for any other line."""
    return next((msg for p, msg in WRONG if p.search(line)), None)


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
    the call returns or raises; a line of ``WRONG`` is raised as a TiletuneError when the outermost window closes
    (unless an exception is already on its way). A no-op with ``TILETUNE_VERBOSE`` set, or when fd 2 cannot be
    duplicated.
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
    found: list[str] = []
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _state is not None:
                found = _restore(*_state)
                _state = None
    if found:
        raise TiletuneError(found[0])


def _restore(saved: int, buf) -> list[str]:
    """fd 2 back to ``saved``; the buffer's lines that are not noise written to it. Returns the messages of its
    ``WRONG`` lines."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    try:
        os.dup2(saved, 2)
        buf.seek(0)
        text = buf.read().decode(errors="replace")
        kept = filtered(text).encode()
        while kept:
            kept = kept[os.write(2, kept):]
        return [m for m in map(wrong, text.splitlines()) if m]
    finally:
        os.close(saved)
        buf.close()
