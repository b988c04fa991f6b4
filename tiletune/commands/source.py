"""tiletune source WORKLOAD [--target T] [--config JSON | -r RECORDS] [-o FILE] [--asm]"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..construct import constructions
from ..errors import TiletuneError
from ..paths import check_output
from ..records import best, load
from ..schedules import build, check, cuda_mma, cuda_wgmma, make_space, schedule
from ..schedules.cpu import InvalidConfig
from ..schedules.cuda import cuda_source
from ..target import parse_target
from ..workloads import parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "source", help="write the code of one configuration (CUDA C for a GPU, TVMScript or assembly for a CPU)",
        description="Write the code TVM generates for one configuration of WORKLOAD: for a CUDA target the "
        "CUDA C of the kernel (nvcc compiles it as it is: nvcc -arch=sm_90 -cubin FILE.cu), for a CPU target "
        "the scheduled TVMScript, or with --asm its assembly. The configuration is the best one in RECORDS "
        "(-r), the one given as JSON (--config), or by default the first construction (the tensor-core "
        "template's default configuration, Gensor's first construction for the other templates).")
    p.add_argument("workload", help="workload spec, e.g. gemm:M=1024,N=1024,K=1024,dtype=float16")
    p.add_argument("--target", "-t", default=None,
                   help="'host' (default, or the records' target with -r), 'llvm', 'cuda[:sm_XX]' or a JSON target")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--config", "-c", default=None, help="the configuration as JSON, e.g. as 'tiletune best' "
                     "prints it")
    how.add_argument("--records", "-r", default=None, help="records file: its best configuration of WORKLOAD")
    p.add_argument("--output", "-o", default=None, help="file to write (default: standard output)")
    p.add_argument("--asm", action="store_true", help="CPU targets: the assembly instead of the TVMScript")
    p.set_defaults(func=run)


def run(args) -> int:
    text = source(args.workload, target=args.target, config=args.config, records=args.records, asm=args.asm)
    if args.output:
        check_output(args.output, "source file")
        Path(args.output).write_text(text)
        print(f"wrote {args.output} ({len(text.splitlines())} lines)", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def source(workload: str, *, target=None, config: str | None = None, records: str | None = None,
           asm: bool = False) -> str:
    """The code of one configuration (see the command's description)."""

    wl = parse(workload)
    chosen = None
    if records is not None:
        recs = load(records, workload=wl.key)
        chosen = best(recs)
        if chosen is None:
            raise TiletuneError(f"no successful trial of {wl.key} in {records}")
        if target is None:
            target = json.loads(chosen.target) if isinstance(chosen.target, str) else chosen.target
    tgt = parse_target(target)
    cuda = tgt.get("kind") == "cuda"
    if asm and cuda:
        raise TiletuneError("--asm is for CPU targets; for CUDA, compile the CUDA C: nvcc -arch=sm_90 -cubin FILE.cu "
                            "&& cuobjdump -sass FILE.cubin")
    space = make_space(wl, target=tgt)
    if chosen is not None:
        cfg = _from_dict(wl, space, tgt, chosen.config, f"the best record in {records}")
    elif config is not None:
        try:
            given = json.loads(config)
        except json.JSONDecodeError as e:
            raise TiletuneError(f"--config is not JSON ({e.msg} at character {e.pos}): {config[:80]!r}") from None
        if not isinstance(given, dict):
            raise TiletuneError(f"--config must be a JSON object of knob values, e.g. {json.dumps(_example(space))}")
        cfg = _from_dict(wl, space, tgt, given, "--config")
    else:
        cfg = default_config(wl, space, tgt)
    if not cuda and not asm:
        return schedule(wl, space, cfg, tgt).mod.script()
    ex = build(wl, space, cfg, tgt)
    if cuda:

        return cuda_source(ex)
    return ex.mod.inspect_source("asm")


def default_config(wl, space, target):
    """The tensor-core template's default configuration, else Gensor's first construction (else the first
    allowed configuration of the space)."""
    import numpy as np

    if cuda_wgmma.owns(space):
        return cuda_wgmma.default_config(wl, space, target)
    if any(k.name == "block_m" for k in space.knobs):
        return cuda_mma.default_config(wl, space, target)
    try:

        return constructions("gensor", space, workload=wl, target=target, k=1, rng=np.random.default_rng(0))[0]
    except (TiletuneError, IndexError):
        for i in range(min(space.size, 100_000)):
            c = space.get(i)
            if space.allows(c):
                return c
    raise TiletuneError(f"{wl.key}: no configuration of its space fits the target's limits")


def _from_dict(wl, space, target, values: dict, what: str):

    try:
        cfg = space.from_dict(values)
    except TiletuneError as e:
        raise TiletuneError(f"{what}: {e}") from None
    try:
        check(wl, space, cfg, target)
    except InvalidConfig as e:
        raise TiletuneError(f"{what} is invalid for {wl.key}: {e}") from None
    if not space.allows(cfg):
        raise TiletuneError(f"{what} is outside the space's constraint ({space.constraint.describe()})")
    return cfg


def _example(space) -> dict:
    c = space.get(0)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in space.to_dict(c).items()}
