"""Checks of the files and directories a command will write, made before anything starts, so that a
path that cannot be written is one line of error (``TiletuneError``) instead of a traceback after the
workers have started."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import TiletuneError


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output(path: str | os.PathLike, what: str, *, directory: bool = False, parents: bool = True) -> None:
    """TiletuneError unless ``path`` can be written: a file (``directory=False``) that exists and is writable,
    or that can be created; a directory (``directory=True``) that exists and is writable, or that can be
    created. ``parents``: missing parent directories will be created by the writer (then the nearest existing
    one must be a writable directory); without it, the parent directory must exist. ``what`` names the path
    in the message (e.g. "records file")."""
    p = Path(path)
    name = str(p)
    if p.exists():
        if directory and not p.is_dir():
            raise TiletuneError(f"{what} {name!r} is a file, not a directory")
        if not directory and p.is_dir():
            raise TiletuneError(f"{what} {name!r} is a directory; give a file name, e.g. {str(p / 'out')!r}")
        if not os.access(p, os.W_OK | (os.X_OK if directory else 0)):
            raise TiletuneError(f"{what} {name!r} is not writable (permission denied or read-only)")
        return
    parent = p.parent
    if not parents and not parent.exists():
        raise TiletuneError(f"cannot write {what} {name!r}: directory {str(parent)!r} does not exist")
    base = _nearest_existing(parent)
    if not base.is_dir():
        raise TiletuneError(f"cannot write {what} {name!r}: {str(base)!r} is a file, not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise TiletuneError(f"cannot write {what} {name!r}: directory {str(base)!r} is not writable "
                            "(permission denied or read-only)")
