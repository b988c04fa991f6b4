"""A TVM RPC tracker and servers on 127.0.0.1 for the tests (subprocesses in their own process groups,
bounded in time; whoever starts a Farm stops it, also on failure)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from tiletune.errors import TiletuneError
from tiletune.measure.rpc import Tracker

HOST = "127.0.0.1"  # loopback only, ever
KEY = "tiletune-test"
STARTUP_S = 120.0  # a tracker and servers importing TVM on a loaded 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _start(args: list[str]) -> subprocess.Popen:
    # own process group: a server's session processes go with it when it is killed; one thread per server,
    # as the local workers of these tests (two servers share this machine's cores)
    return subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "TVM_NUM_THREADS": "1"})


def _stop(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(10)


class Farm:
    """A tracker and servers on 127.0.0.1 (subprocesses in their own process groups)."""

    def __init__(self):
        self.port = _free_port()
        self.tracker = _start(["-m", "tvm.exec.rpc_tracker", "--host", HOST, "--port", str(self.port),
                               "--port-end", str(self.port + 1), "--silent"])
        self.servers: list[subprocess.Popen] = []
        self.ports: dict[int, int] = {}
        self.rpc = f"{HOST}:{self.port}:{KEY}"

    def wait_tracker(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            assert self.tracker.poll() is None, "the tracker exited"
            try:
                Tracker.parse(self.rpc).summary(timeout=2.0)
                return
            except TiletuneError:
                time.sleep(0.3)
        raise TimeoutError("the tracker did not start")

    def add_server(self) -> subprocess.Popen:
        # through tiletune's own command, which execs TVM's server in its place
        port = _free_port()
        p = _start(["-m", "tiletune.cli", "rpc", "server", "--tracker", f"{HOST}:{self.port}", "--key", KEY,
                    "--host", HOST, "--port", str(port)])
        self.servers.append(p)
        self.ports[p.pid] = port  # where it listens (the first port of its range, free a moment ago)
        return p

    def wait_servers(self, n: int, exactly: bool = False) -> list[str]:
        """The registered servers' ``?:PORT``, once there are ``n`` (at least, or ``exactly``)."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            found = Tracker.parse(self.rpc).servers()
            if len(found) == n or (len(found) > n and not exactly):
                return found
            time.sleep(0.5)
        raise TimeoutError(f"{n} servers did not register")

    def wait_free(self, n: int) -> None:
        """Until the tracker has ``n`` servers free (sessions of an earlier measurer ended); at most STARTUP_S."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if Tracker.parse(self.rpc).summary().get("queue_info", {}).get(KEY, {}).get("free", 0) >= n:
                return
            time.sleep(0.2)
        raise TimeoutError(f"{n} servers did not become free")

    def stop(self) -> None:
        for p in self.servers + [self.tracker]:
            _stop(p)


def start(servers: int = 2) -> Farm:
    """A tracker and ``servers`` servers, all registered; stopped again if start-up fails."""
    f = Farm()
    try:
        f.wait_tracker()
        for _ in range(servers):
            f.add_server()
        f.wait_servers(servers)
    except BaseException:
        f.stop()
        raise
    return f
