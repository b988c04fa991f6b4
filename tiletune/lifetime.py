"""Child processes that end with the process that started them, and jobs that end at their deadline.

A worker process (the measurement workers of ``tiletune.measure.local``, the feature-extraction pool of
``tiletune.features``) calls ``die_with_parent`` first thing. It then ends, whatever it is doing (a hung
kernel included), when its owner ends, by SIGKILL or SIGTERM as well as normally:

- on Linux the kernel sends it SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``); the owner is
  checked once more after that call, in case it died before;
- a watchdog thread (everywhere) polls the owner, every ``interval`` seconds: the parent process id
  changes when the parent dies (the child is re-parented), a pidfd or ``kill(pid, 0)`` tells the end of an
  owner that is not the parent (a multiprocessing 'forkserver' pool worker's parent is the fork server),
  and the end of the connection to the owner (``fd``) is seen as a hang-up;
- the same thread enforces a per-job deadline: ``Lifeline.arm(seconds)`` before a job, ``disarm()``
  after; past the deadline the process exits (``EXIT_DEADLINE``) so that a job never outlives its time
  limit even where the owner is stuck. The owner's own timeout is shorter (``job_deadline``'s margin),
  so normally the owner kills the worker first and reports the timeout.

The watchdog needs the GIL for a moment; TVM's FFI releases it during calls (compiling, running
kernels), ``time.sleep`` too. The parent-death signal needs nothing.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import select
import signal
import sys
import threading
import time

EXIT_ORPHANED = 75  # the owner ended
EXIT_DEADLINE = 76  # a job exceeded its deadline
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Linux: have the kernel send ``sig`` to this process when the thread that started it ends (for a
    process started from the main thread: when the parent process ends). False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return False


def job_deadline(timeout: float) -> float:
    """The worker-side limit of a job whose owner enforces ``timeout``: later than the owner's, by a margin
    that covers the message's way and a loaded machine's scheduling."""
    return timeout + 5.0 + 0.1 * timeout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - exists, owned by another user
        return True
    return True


class Lifeline:
    """The watchdog thread of one process: exits it when ``owner`` ends (or ``fd`` hangs up) or an armed
    deadline passes. Create it with ``die_with_parent``."""

    def __init__(self, owner: int, *, fd: int | None = None, interval: float = 0.2):
        self.owner = owner
        self.parent = os.getppid()
        self.interval = interval
        self._deadline: float | None = None
        self._what = ""
        self._stopped = False
        self._lock = threading.Lock()
        self._poll = select.poll() if hasattr(select, "poll") else None  # None: Windows (owner checks only)
        self._hangup = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0) if self._poll else 0
        self._fds: dict[int, str] = {}
        if fd is not None and self._poll is not None:
            self._poll.register(fd, self._hangup)  # no POLLIN: the owner's messages are not ours to read
            self._fds[fd] = "connection"
        self._pidfd = None
        if owner != self.parent and hasattr(os, "pidfd_open") and self._poll is not None:
            try:
                self._pidfd = os.pidfd_open(owner)  # readable once the owner has ended
                self._poll.register(self._pidfd, select.POLLIN)
                self._fds[self._pidfd] = "pidfd"
            except OSError:
                self._pidfd = None
        self._thread = threading.Thread(target=self._watch, name="tiletune-lifeline", daemon=True)

    def owner_alive(self) -> bool:
        """False once the parent has ended (this process was re-parented) or the owner has (a zombie owner
        still counts as alive here; the pidfd tells its end)."""
        return os.getppid() == self.parent and (self.owner == self.parent or _pid_alive(self.owner))

    def start(self) -> "Lifeline":
        self._thread.start()
        return self

    def arm(self, seconds: float, what: str = "job") -> None:
        """Exit this process if the job takes more than ``seconds`` from now (a non-finite or non-positive
        value sets no deadline)."""
        with self._lock:
            ok = 0 < seconds < float("inf")
            self._deadline = time.monotonic() + seconds if ok else None
            self._what = what

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def stop(self) -> None:
        """No more checks (a normal shutdown: the owner closing the connection is expected now)."""
        self._stopped = True

    def _exit(self, code: int, message: str = "") -> None:
        if self._stopped:
            return
        if message:
            try:
                os.write(2, f"tiletune worker {os.getpid()}: {message}; exiting\n".encode())
            except OSError:
                pass
        os._exit(code)

    def _watch(self) -> None:
        while not self._stopped:
            if self._poll is None:
                time.sleep(self.interval)
                events = []
            else:
                events = self._poll.poll(self.interval * 1000)
            for fd, ev in events:
                if self._fds.get(fd) == "pidfd" or ev & (self._hangup | select.POLLNVAL):
                    self._exit(EXIT_ORPHANED)
            if not self.owner_alive():
                self._exit(EXIT_ORPHANED)
            with self._lock:
                late = self._deadline is not None and time.monotonic() > self._deadline
                what = self._what
            if late:
                self._exit(EXIT_DEADLINE, f"{what} exceeded its deadline")


def die_with_parent(owner: int | None = None, *, fd: int | None = None, death_signal: bool = True,
                    interval: float = 0.2) -> Lifeline:
    """Make this process end with ``owner`` (default: the multiprocessing parent where this is a
    multiprocessing child, else the parent process); returns the started watchdog, whose ``arm`` /
    ``disarm`` set per-job deadlines. ``fd``: a connection to the owner, whose hang-up also ends this
    process. ``death_signal``: also ask the kernel for SIGKILL at the parent's death (Linux); leave it
    False where the parent started this process from a thread that may end before the parent does."""
    if owner is None:
        mp_parent = multiprocessing.parent_process()
        owner = mp_parent.pid if mp_parent is not None and mp_parent.pid else os.getppid()
    if death_signal:
        set_parent_death_signal(signal.SIGKILL)
    line = Lifeline(owner, fd=fd, interval=interval)
    if not line.owner_alive():
        os._exit(EXIT_ORPHANED)  # the owner died before the death signal was set (a zombie owner: the pidfd)
    return line.start()
