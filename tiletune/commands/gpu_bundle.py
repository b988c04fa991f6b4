"""tiletune gpu-bundle DEST [--ffi-wheel WHEEL | --download-ffi | --ffi-from-installed] [--tgz]"""
from __future__ import annotations


def add_parser(sub) -> None:
    from ..measure.gpu_bundle import add_arguments

    p = sub.add_parser(
        "gpu-bundle", help="write the runtime-only TVM bundle that runs built kernels on a GPU machine",
        description="Copy the installed tvm package without the compiler and sources, the cp312 tvm-ffi and "
        "the GPU runner into DEST, with run.sh to run a batch of kernels there (no TVM install needed).")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..measure.gpu_bundle import run_args

    return run_args(args)
