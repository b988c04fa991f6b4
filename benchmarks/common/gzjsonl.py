"""The committed results under benchmarks/out keep their large JSON Lines files (records, traces) compressed,
as ``FILE.jsonl.gz`` in place of ``FILE.jsonl`` (benchmarks/out/README.md). The benchmark scripts name the plain path;
these helpers read whichever of the two is there (the plain one first: a resumed run appends to it), and
``unpack`` writes the plain file back from the compressed one before a script appends to it."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path


def gz(path: Path) -> Path:
    return path.with_name(path.name + ".gz")


def existing(path: Path) -> Path | None:
    """``path`` if it exists, else ``path.gz`` if that does, else None."""
    path = Path(path)
    for p in (path, gz(path)):
        if p.exists():
            return p
    return None


def read_text(path: Path) -> str:
    """The text of ``path`` or of ``path.gz``; FileNotFoundError (naming ``path``) when neither exists."""
    p = existing(path)
    if p is None:
        raise FileNotFoundError(f"{path} (or {gz(Path(path)).name}) does not exist")
    if p.suffix == ".gz":
        with gzip.open(p, "rt", encoding="utf-8") as f:
            return f.read()
    return p.read_text(encoding="utf-8")


def read_lines(path: Path) -> list[str]:
    """The non-blank lines of ``path`` or ``path.gz`` ([] when neither exists)."""
    if existing(path) is None:
        return []
    return [line for line in read_text(path).splitlines() if line.strip()]


def plain_copy(src: Path, dst: Path) -> None:
    """Write ``dst`` as the plain text of ``src`` (decompressed where ``src`` ends in ``.gz``)."""
    src = Path(src)
    with (gzip.open if src.suffix == ".gz" else open)(src, "rb") as f, open(dst, "wb") as g:
        shutil.copyfileobj(f, g)


def unpack(path: Path) -> bool:
    """Before appending to ``path`` (a resumed run): when only ``path.gz`` exists, write ``path`` from it (the
    ``.gz`` stays; compress the grown file again before committing it). True if it wrote ``path``."""
    path = Path(path)
    if path.exists() or not gz(path).exists():
        return False
    plain_copy(gz(path), path)
    return True
