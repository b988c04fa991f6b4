"""The one error type users can cause."""


class TiletuneError(Exception):
    """A problem the user can fix: bad workload spec, unknown strategy or option, unreadable file.

    The message says what was wrong and what is accepted.
    """
