"""tiletune rpc tracker|server|query: start (or print the command of) a TVM RPC tracker and servers, list them.

A farm of devices for ``--rpc HOST:PORT:KEY``: one tracker, one server per device registered with it under a
key. The tracker and the servers are TVM's own (``python -m tvm.exec.rpc_tracker``, ``python -m
tvm.exec.rpc_server``): ``start`` runs that command in place of this process (``exec``), ``--print`` prints
it, for a machine where tiletune is not installed (a server needs only ``apache-tvm`` and numpy; the tracker
also needs tornado: ``pip install -e ".[rpc]"``). Both listen on 127.0.0.1 unless ``--host`` says otherwise;
TVM's RPC runs whatever code it is sent, so give a public address only on a trusted network.
"""
from __future__ import annotations

import os
import shlex
import sys

from ..errors import TiletuneError
from ..measure.rpc import Tracker, check_tornado, nvidia_gpu_here, server_address, server_command, tracker_command
from ..target import host_cores
from .common import HelpFormatter


def add_parser(sub) -> None:
    p = sub.add_parser("rpc", help="start or print a TVM RPC tracker or server, list a tracker's devices",
                       formatter_class=HelpFormatter, description=__doc__.split("\n\n")[1])
    rs = p.add_subparsers(dest="rpc_command", metavar="{tracker,server,query}")
    t = rs.add_parser("tracker", help="start a tracker (needs tornado)", formatter_class=HelpFormatter)
    t.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    t.add_argument("--port", type=int, default=9190, help="port (default: %(default)s)")
    t.add_argument("--print", action="store_true", help="print the command instead of running it")
    s = rs.add_parser("server", help="start a server for this machine's device, registered with a tracker",
                      formatter_class=HelpFormatter)
    s.add_argument("--tracker", required=True, metavar="HOST:PORT", help="the tracker's address")
    s.add_argument("--key", required=True, help="the device kind, as tune/bench name it in --rpc HOST:PORT:KEY")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    s.add_argument("--port", type=int, default=9090, help="first port to try (default: %(default)s)")
    s.add_argument("--fork", choices=("auto", "yes", "no"), default="auto",
                   help="run each session in a fork of the server (yes) or a spawned process (no: TVM's --no-fork); "
                        "auto: no on a machine with an NVIDIA GPU, where forked sessions failed CUDA's "
                        "initialization (an H200: cudaErrorInitializationError), yes elsewhere (default: %(default)s)")
    s.add_argument("--print", action="store_true", help="print the command instead of running it")
    q = rs.add_parser("query", help="list the servers registered with a tracker")
    q.add_argument("tracker", metavar="HOST:PORT")
    q.add_argument("--key", default=None, help="only the servers with this key")
    p.set_defaults(func=run)


def _tracker(text: str, key: str = "any") -> Tracker:
    return Tracker.parse(f"{text}:{key}")


def _port(port: int) -> int:
    if not 0 < port < 65536:
        raise TiletuneError(f"--port must be in 1..65535, got {port}")
    return port


def run(args) -> int:
    if args.rpc_command is None:
        raise TiletuneError("give a subcommand: tiletune rpc tracker|server|query (see tiletune rpc --help)")
    if args.rpc_command == "query":
        tr = _tracker(args.tracker, args.key or "any")
        info = tr.summary()
        servers = [s for s in info.get("server_info", [])
                   if args.key is None or s.get("key") == "server:" + args.key]
        for s in sorted(servers, key=lambda s: (s.get("key", ""), s.get("addr", []))):
            print(f"{s.get('key', '').partition(':')[2]:20s} {server_address(s)}")
        queues = info.get("queue_info", {})
        for key, q in sorted(queues.items()):
            if args.key is None or key == args.key:
                print(f"key {key}: {q.get('free', 0)} free, {q.get('pending', 0)} requests pending")
        if not servers:
            print(f"no servers{'' if args.key is None else ' with key ' + repr(args.key)} at {tr.where}")
            return 1
        return 0
    if args.rpc_command == "tracker":
        cmd = tracker_command(host=args.host, port=_port(args.port), port_end=_port(args.port) + 1,
                              python="python3" if args.print else sys.executable)
        if not args.print:
            check_tornado()
    else:
        tr = _tracker(args.tracker, args.key)
        fork = args.fork == "yes" or (args.fork == "auto" and not nvidia_gpu_here())
        cmd = server_command(tr.where, tr.key, host=args.host, port=_port(args.port), port_end=_port(args.port) + 100,
                             python="python3" if args.print else sys.executable, fork=fork)
        # TVM's runtime defaults to half the hardware threads on x86 (it assumes hyper-threads): a kernel tuned
        # for all cores would run on half of them on the device. All cores unless TVM_NUM_THREADS says otherwise
        # (printed: the device shell's own core count).
        os.environ.setdefault("TVM_NUM_THREADS", str(host_cores()))
    if args.print:
        print(("TVM_NUM_THREADS=$(nproc) " if args.rpc_command == "server" else "") + shlex.join(cmd))
        return 0
    sys.stdout.flush()
    os.execv(cmd[0], cmd)  # the tracker or server runs as this process (same pid: stopping it stops the server)
    return 0  # pragma: no cover
