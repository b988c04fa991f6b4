"""Construction at first use: the static library of a dynamic model at one shape it was not tuned at, each task
with Gensor's top construction (no measurement), made in its own process the first time ``load_model`` meets the
shape, and kept next to the library for later processes.

``python -m tiletune.model.dynamic.first_use LIB NAME=V[,NAME=V...]`` imports the model named by the library's
description (``LIB.json``: ``source``, its target and layout), binds the shape, fuses and extracts its kernels,
constructs every task (``tiletune.model.build.constructed_configs``, Gensor), compiles, and writes ``path_for(LIB,
binding)`` (``LIB.shapes/<tag>.so`` and its ``.json``) through a temporary name once the library, loaded, matches
the original at that shape (``tiletune.model.build.export_checked``), so that a reader never sees half a file or a
wrong one. ``tiletune.api.Model`` starts it and swaps the library in when it is there (see ``Model``); the library's
own dispatch serves the shape meanwhile (``tiletune.model.dynamic.shape_rule``). Why a construction at first use:
[shape-rule](../../docs/decisions/shape-rule.md).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ..passes.pipeline import prepare
from ...errors import TiletuneError
from ..build import compile_module, constructed_configs, export_checked, scheduled_module
from ..frontend.dims import bind, tag
from ..frontend.source import load
from ..kernels.tasks import extract, fuse

METHOD = "gensor"  # the construction: docs/decisions/shape-rule.md


def portable_spec(spec: str) -> str:
    """``spec`` with a model file's path made absolute (the library may be loaded from another directory)."""
    path, colon, rest = spec.rpartition(":") if spec.count(":") and not spec.endswith(".onnx") else (spec, "", "")
    path = path if colon else spec
    if os.path.exists(path):
        return os.path.abspath(path) + (colon + rest if colon else "")
    return spec


def path_for(lib: str, binding: dict[str, int]) -> str:
    """Where the constructed library of ``binding`` is kept: ``LIB.shapes/<tag>.so``."""
    return str(Path(lib + ".shapes") / f"{tag(binding)}.so")


def parse_binding(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        out[name.strip()] = int(value)
    return out


def construct(lib: str, binding: dict[str, int]) -> dict:
    """Write ``path_for(lib, binding)`` (see the module docstring); returns its description."""
    meta = json.loads(Path(lib + ".json").read_text())
    spec = meta.get("source") or meta["model"]
    target, layout, dtype = meta["target"], meta.get("layout", "NCHW"), meta.get("dtype", "float32")
    t0 = time.perf_counter()
    source = load(spec)
    converted = prepare(source, dtype, layout)
    imported = time.perf_counter() - t0
    tasks = extract(fuse(bind(converted.mod, binding), target, static=False), target, layout)
    chosen = constructed_configs(tasks, METHOD, {})
    mod, how = scheduled_module(tasks, chosen)
    ex = compile_module(mod, target)
    out = path_for(lib, binding)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    desc = {"model": meta["model"], "target": target, "layout": layout, "dtype": dtype, "binding": binding,
            "inputs": [{"name": i.name, "shape": list(i.resolve(binding)), "dtype": i.dtype} for i in source.inputs],
            "kernels": how, "constructed": len(chosen), "tasks": len(tasks.tasks), "import_s": imported,
            "construct_s": time.perf_counter() - t0 - imported}
    export_checked(ex, out, desc, source, [binding], dtype)
    return desc


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tiletune.model.dynamic.first_use LIB NAME=V[,NAME=V...]", file=sys.stderr)
        return 2
    try:
        desc = construct(argv[0], parse_binding(argv[1]))
    except TiletuneError as e:
        print(f"tiletune: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path_for(argv[0], desc['binding'])}: {desc['constructed']} of {desc['tasks']} tasks constructed "
          f"({METHOD}) in {desc['construct_s']:.1f} s after a {desc['import_s']:.1f} s import")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
