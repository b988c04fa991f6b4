"""tiletune gpu-bundle DEST [--ffi-wheel WHEEL | --download-ffi | --ffi-from-installed] [--tgz]"""
from __future__ import annotations

from ..measure.gpu_bundle import add_arguments, run_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gpu-bundle", help="write the runtime-only TVM bundle that runs built kernels on a GPU machine",
        description="Copy the installed tvm package without the compiler and sources, the cp312 tvm-ffi and "
        "the GPU runner into DEST, with run.sh to run a batch of kernels there (no TVM install needed).")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    return run_args(args)
