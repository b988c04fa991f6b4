"""The one error type users can cause, and error messages in one line."""
import re


class TiletuneError(Exception):
    """A problem the user can fix: bad workload spec, unknown strategy or option, unreadable file.

    The message says what was wrong and what is accepted.
    """


def one_line(message: str, width: int = 200) -> str:
    """An error message (TVM's are many lines, with IR dumps) in one line: the first line that names an error
    (``...Error: ...``, ``Check failed``, ``error:``, ``Unsupported``), else the last line that is not a
    comment of a dump."""
    lines = [ln.strip() for ln in str(message or "").splitlines() if ln.strip()]
    named = [ln for ln in lines if re.search(r"\w+Error\b|Check failed|error:|^Unsupported", ln)]
    plain = [ln for ln in lines if not ln.startswith("#")]
    pick = named[0] if named else plain[-1] if plain else lines[-1] if lines else "no message"
    return pick[:width]
