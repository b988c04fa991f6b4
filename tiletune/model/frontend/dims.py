"""Binding a model's symbolic dimensions: ``--shapes`` parsed into bindings, and a module bound to one.

Shared by ``tiletune.model.kernels.tasks`` (a dynamic model taken at its example's shape) and
``tiletune.model.dynamic.shapes`` (tuning and building at several shapes); see the latter for ``--shapes``' syntax.
"""
from __future__ import annotations

import itertools
import re

from ...errors import TiletuneError
from .source import ModelSource


def static_shape(shape) -> tuple[int, ...] | None:
    """``shape``'s extents as ints, or None where one of them is symbolic (or the shape is unknown)."""
    try:
        return tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        return None


def label(binding: dict[str, int]) -> str:
    """``seq=32`` (``batch=1,seq=32`` for several dimensions)."""
    return ",".join(f"{k}={v}" for k, v in binding.items())


def tag(binding: dict[str, int]) -> str:
    """A function-name-safe label: ``seq32``."""
    return "_".join(f"{k}{v}" for k, v in binding.items())


def parse_shapes(texts: list[str] | None, source: ModelSource) -> list[dict[str, int]]:
    """The bindings of ``--shapes`` (see the module docstring); ``texts`` None: the example inputs' shape."""
    dims = source.dims
    if not dims:
        if texts:
            raise TiletuneError(f"--shapes: {source.spec} has no symbolic dimension (its shapes are static)")
        return []
    names = ", ".join(f"{n} {d.bounds}" for n, d in dims.items())
    given: dict[str, list[int]] = {}
    for text in texts or []:
        for part in (p.strip() for p in re.split(r"[;\s]+", text)):
            if not part:
                continue
            name, eq, values = part.partition("=")
            name = name.strip()
            if not eq or not name or not values.strip():
                raise TiletuneError(f"--shapes: {part!r} is not NAME=V1,V2,... (e.g. {next(iter(dims))}=32,64)")
            if name not in dims:
                raise TiletuneError(f"--shapes: unknown dimension {name!r} (the model's: {names})")
            if name in given:
                raise TiletuneError(f"--shapes: {name} is given twice")
            vals = []
            for v in values.split(","):
                v = v.strip()
                try:
                    x = int(v)
                except ValueError:
                    raise TiletuneError(f"--shapes: {name}={v or '(empty)'} is not an integer") from None
                if not dims[name].contains(x):
                    raise TiletuneError(f"--shapes: {name}={x} is outside {name}'s bounds {dims[name].bounds}")
                if x not in vals:
                    vals.append(x)
            given[name] = vals
    for name, d in dims.items():
        if name not in given:
            if d.example is None:
                raise TiletuneError(f"--shapes: give {name} (the model has no example value for it; bounds "
                                    f"{d.bounds}), e.g. --shapes {name}=32")
            given[name] = [d.example]
    order = list(dims)
    return [dict(zip(order, combo)) for combo in itertools.product(*(given[n] for n in order))]



def bind(mod, binding: dict[str, int]):
    """``mod`` with its symbolic dimensions replaced by ``binding``'s values (no bounds attributes left)."""
    import tvm
    from tvm import relax

    out = relax.transform.BindSymbolicVars({k: int(v) for k, v in binding.items()})(mod)
    out = tvm.IRModule(dict(out.functions.items()), attrs=out.attrs)
    for gv, f in list(out.functions.items()):
        if isinstance(f, relax.Function):
            for a in ("tir_var_lower_bound", "tir_var_upper_bound"):
                if a in (f.attrs or {}):
                    f = f.without_attr(a)
            out[gv] = f
    return out
