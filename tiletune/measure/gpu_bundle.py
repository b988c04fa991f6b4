"""The runtime-only TVM bundle for the GPU machine (Python 3.12, torch, CUDA; no TVM, no network).

    python -m tiletune.measure.gpu_bundle DEST [--ffi-wheel WHEEL | --download-ffi | --ffi-from-installed] [--tgz]
    tiletune gpu-bundle DEST ...                  (the same, as a subcommand)

writes::

    DEST/site/tvm/          the installed tvm package without libtvm_compiler.so, 3rdparty/, include/, src/,
                            web/ (and __pycache__): ``import tvm`` then runs in runtime-only mode
                            (libtvm_runtime.so + libtvm_runtime_cuda.so), about 27 MB
    DEST/site/tvm_ffi/      apache-tvm-ffi==0.1.14.post0 built for the GPU machine's Python (cp312), unpacked
                            from its wheel (a wheel is a zip; nothing is compiled or installed)
    DEST/gpu_runner.py      the runner (tiletune/measure/gpu_runner.py)
    DEST/run.sh             ``sh DEST/run.sh BATCH_DIR [--out FILE] [--device cuda|cpu]``: puts DEST/site first
                            on PYTHONPATH, sets TVM_USE_RUNTIME_LIB=1 and runs the runner with ``python3``
                            (or $PYTHON)
    DEST/README.txt         these instructions
    DEST.tgz                with --tgz (about 10 MB: fits a 64 MiB transfer with room for kernels)

apache-tvm-ffi has a compiled core per Python version, so this machine's (cp311) copy does not load on
Python 3.12. Get the cp312 wheel with (one download, ~3 MB)::

    pip download apache-tvm-ffi==0.1.14.post0 --python-version 3.12 --only-binary=:all: --no-deps -d WHEELDIR

and pass it as ``--ffi-wheel WHEELDIR/apache_tvm_ffi-0.1.14.post0-cp312-*.whl``, or let ``--download-ffi`` run
that command. ``--ffi-from-installed`` copies this interpreter's tvm_ffi instead (only for a GPU machine with
the same Python version as this one, and for tests). The TVM notes (0.1.14.post0, not the newest: with
0.1.15 TVM segfaults in JSON serialization) apply there too; ml_dtypes and typing_extensions, which the
runtime imports, are installed on the lent GPU machines.

With the agent's device tool (``run``: copies the working tree, runs a command, returns the files written
under $OUT), from the repository root::

    echo /gpu-bundle/ >> .git/info/exclude; echo /gpu-batches/ >> .git/info/exclude
    python -m tiletune.measure.gpu_bundle gpu-bundle --download-ffi
    python -m tiletune.measure.remote prepare gemm:M=1024,N=1024,K=1024 --target cuda:sm_90 --sample 32
    # device run, carry ["gpu-bundle", "gpu-batches"]:
    #     sh gpu-bundle/run.sh gpu-batches/batch0001-XXXX --out $OUT/results.json
    python -m tiletune.measure.remote collect gpu-batches/batch0001-XXXX --results FILES_AT/results.json

(``RemoteMeasurer(..., transport=HandoffTransport(), workdir="gpu-batches", keep=True)`` does the same inside
a tuning run: it prints that command for each batch and waits for results.json to appear in the batch.)
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from ..errors import TiletuneError

FFI_VERSION = "0.1.14.post0"
PYTHON_VERSION = "3.12"
EXCLUDE_TOP = {"3rdparty", "include", "src", "web"}  # folders of the tvm package left out
EXCLUDE_FILES = {"libtvm_compiler.so"}  # in tvm/lib: the compiler (~250 MB)

RUN_SH = """#!/bin/sh
# tiletune GPU bundle: run a batch of kernels with the TVM runtime only.
# usage: sh run.sh BATCH_DIR [--out RESULTS.json] [--device cuda|cpu] [--timeout S]
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHONPATH="$HERE/site${PYTHONPATH:+:$PYTHONPATH}"
TVM_USE_RUNTIME_LIB=1
export PYTHONPATH TVM_USE_RUNTIME_LIB
exec "${PYTHON:-python3}" "$HERE/gpu_runner.py" "$@"
"""


def download_command(dest: str, python_version: str = PYTHON_VERSION) -> list[str]:
    return [sys.executable, "-m", "pip", "download", f"apache-tvm-ffi=={FFI_VERSION}", "--python-version",
            python_version, "--only-binary=:all:", "--no-deps", "-d", dest]


def _ignore(root: str):
    def ignore(directory: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith(".pyc") or n in EXCLUDE_FILES}
        if os.path.abspath(directory) == root:
            skip |= EXCLUDE_TOP & set(names)
        return skip

    return ignore


def copy_tvm_runtime(site: Path) -> Path:
    """Copy the installed tvm package into ``site/tvm`` without the compiler and the sources."""
    import importlib.util

    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        raise TiletuneError("the tvm package is not installed here (pip install apache-tvm==0.27.0.post1)")
    src = os.path.abspath(list(spec.submodule_search_locations)[0])
    dst = site / "tvm"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=_ignore(src))
    return dst


def unpack_ffi_wheel(wheel: Path, site: Path) -> None:
    if not wheel.is_file():
        raise TiletuneError(f"--ffi-wheel {wheel}: no such file")
    if FFI_VERSION not in wheel.name:
        raise TiletuneError(f"--ffi-wheel {wheel.name}: expected apache-tvm-ffi {FFI_VERSION}")
    if (site / "tvm_ffi").exists():
        shutil.rmtree(site / "tvm_ffi")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)


def copy_installed_ffi(site: Path) -> None:
    import importlib.util

    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or not spec.submodule_search_locations:
        raise TiletuneError("tvm_ffi is not installed here")
    src = os.path.abspath(list(spec.submodule_search_locations)[0])
    if (site / "tvm_ffi").exists():
        shutil.rmtree(site / "tvm_ffi")
    shutil.copytree(src, site / "tvm_ffi", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def make_bundle(dest: str | Path, *, ffi_wheel: str | Path | None = None, download_ffi: bool = False,
                ffi_from_installed: bool = False, tgz: bool = False,
                python_version: str = PYTHON_VERSION) -> dict:
    """Write the bundle into ``dest`` (see the module docstring); returns what was written."""
    dest = Path(dest)
    site = dest / "site"
    site.mkdir(parents=True, exist_ok=True)
    copy_tvm_runtime(site)
    ffi = "missing"
    if ffi_wheel is not None:
        unpack_ffi_wheel(Path(ffi_wheel), site)
        ffi = f"wheel {Path(ffi_wheel).name}"
    elif download_ffi:
        wheels = dest / "wheels"
        cmd = download_command(str(wheels), python_version)
        p = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(wheels.glob(f"apache_tvm_ffi-{FFI_VERSION}-*.whl")) if wheels.exists() else []
        if p.returncode != 0 or not found:
            raise TiletuneError("could not download the tvm-ffi wheel: " + (p.stderr or p.stdout)[-800:])
        unpack_ffi_wheel(found[0], site)
        shutil.rmtree(wheels, ignore_errors=True)
        ffi = f"downloaded {found[0].name}"
    elif ffi_from_installed:
        copy_installed_ffi(site)
        ffi = f"copied from this Python ({sys.version_info.major}.{sys.version_info.minor})"
    runner = Path(__file__).with_name("gpu_runner.py")
    shutil.copy2(runner, dest / "gpu_runner.py")
    (dest / "run.sh").write_text(RUN_SH)
    os.chmod(dest / "run.sh", 0o755)
    (dest / "README.txt").write_text(__doc__ or "")
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    out = {"dest": str(dest), "bytes": size, "tvm_ffi": ffi}
    if tgz:
        archive = dest.with_suffix(".tgz") if dest.suffix == "" else Path(str(dest) + ".tgz")
        with tarfile.open(archive, "w:gz") as t:
            t.add(dest, arcname=dest.name)
        out["tgz"] = str(archive)
        out["tgz_bytes"] = archive.stat().st_size
    if ffi == "missing":
        out["next"] = ("tvm_ffi is missing: run " + " ".join(download_command("WHEELDIR", python_version))
                       + f" and then again with --ffi-wheel WHEELDIR/apache_tvm_ffi-{FFI_VERSION}-cp"
                       + python_version.replace(".", "") + "-*.whl (or use --download-ffi)")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", help="directory to write the bundle into")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ffi-wheel", default=None, metavar="WHEEL",
                   help=f"apache-tvm-ffi {FFI_VERSION} wheel for the GPU machine's Python (cp312) to unpack")
    g.add_argument("--download-ffi", action="store_true", help="pip download that wheel (needs the network)")
    g.add_argument("--ffi-from-installed", action="store_true",
                   help="copy this interpreter's tvm_ffi (only if the GPU machine runs the same Python version)")
    p.add_argument("--python-version", default=PYTHON_VERSION, help="the GPU machine's Python (default 3.12)")
    p.add_argument("--tgz", action="store_true", help="also write DEST.tgz")


def run_args(args) -> int:
    out = make_bundle(args.dest, ffi_wheel=args.ffi_wheel, download_ffi=args.download_ffi,
                      ffi_from_installed=args.ffi_from_installed, tgz=args.tgz, python_version=args.python_version)
    print(f"bundle: {out['dest']} ({out['bytes'] / 1e6:.1f} MB), tvm_ffi: {out['tvm_ffi']}")
    if "tgz" in out:
        print(f"archive: {out['tgz']} ({out['tgz_bytes'] / 1e6:.1f} MB)")
    print(f"on the GPU machine: sh {out['dest']}/run.sh BATCH_DIR [--out RESULTS.json]")
    if "next" in out:
        print(out["next"])
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tiletune.measure.gpu_bundle",
                                description="Write the runtime-only TVM bundle for a GPU machine.")
    add_arguments(p)
    try:
        return run_args(p.parse_args(argv))
    except TiletuneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
