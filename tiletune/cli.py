"""The ``tiletune`` command. Each subcommand lives in ``tiletune/commands/<name>.py`` and exposes
``add_parser(subparsers)`` which registers itself with ``set_defaults(func=run)``; ``run(args)``
returns an exit status. The environment and command line are read only here and in those modules.
"""
from __future__ import annotations

import argparse
import os
import sys

from .commands import bench, best, build, db, hardware, model, rpc, source, space, strategies, table, tune
from .errors import TiletuneError
from .quiet import VERBOSE_ENV

# the command modules, in --help order
COMMANDS = [tune, space, strategies, best, build, source, hardware, table, bench, rpc, model, db]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tiletune",
        description="Auto-tune the tiling of tensor operators (GEMM, conv2d, GEMV, pooling) with Apache TVM.",
        epilog="Workload specs look like gemm:M=1024,N=1024,K=1024 or "
        "conv2d:N=1,C=128,H=28,W=28,K=256,R=3,S=3,stride=2,pad=1. Run 'tiletune COMMAND --help' for details.",
    )
    p.add_argument("--verbose", dest="tvm_verbose", action="store_true",
                   help="show everything TVM logs, also the lines tiletune filters out as noise (same as "
                        "TILETUNE_VERBOSE=1; see tiletune.quiet)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in COMMANDS:
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tvm_verbose:
        os.environ[VERBOSE_ENV] = "1"
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:  # the reader went away (`tiletune hardware | head`): stop quietly, like cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python exits
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by the closed pipe
    except TiletuneError as e:
        print(f"tiletune: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tiletune: interrupted (records written so far are kept)", file=sys.stderr)
        return 130
    finally:  # tune, model tune, model build: the records file joins the tuning database (tiletune.commands.db)
        _absorb(args)


def _absorb(args) -> None:
    try:
        db.absorb_records(args)
    except (TiletuneError, OSError) as e:
        print(f"tiletune: warning: the records file was not added to the tuning database ({e})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
