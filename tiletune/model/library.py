"""One build of a model into its library: ``build_model(spec, output, ...)`` does all of it and returns a
``BuiltModel`` that says what it did; ``tiletune model build`` only prints that.

The steps, static and dynamic alike: the records file is read once; a model with symbolic dimensions is built at
``shapes`` (``--shapes``), else at the shapes the records were tuned at (``tiletune.model.dynamic.shapes.recorded_shapes``),
else at the example's shape (a note says which); each task takes its chosen kernel (``best_configs``: the records'
best, ``construct``: a construction for the others); the module is scheduled, compiled and written only once the
library, loaded as ``load_model`` loads it, matches the original (``export_checked``); ``database`` also writes
the tuned kernels as a MetaSchedule database.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import TiletuneError
from ..paths import check_output
from ..records import load
from ..target import check_dtype_for, parse_target
from .build import (best_configs, check_waits, compile_module, constructed_configs, database_configs, export_checked,
                    export_database, foreign_workloads, input_sets, scheduled_module, untuned_reasons)
from .frontend.dims import label, parse_shapes
from .dynamic.first_use import portable_spec
from .passes.layout import DEFAULT_LAYOUT
from .dynamic.shapes import dynamic_library, other_shapes, recorded_shapes, shape_tasks
from .frontend.source import load as load_source
from .kernels.tasks import model_tasks


@dataclass
class BuiltModel:
    path: str
    spec: str
    target: dict
    layout: str
    dtype: str
    tasks: int  # tunable tasks
    kernels: int  # distinct kernels
    tuned: int  # tasks with a kernel from the records
    constructed: int  # tasks given a construction (``construct``)
    construct: str | None
    how: dict  # kernel -> how it is scheduled; a dynamic model: shape label (or "near LABEL") -> that
    dims: str = ""  # a dynamic model: "seq in 8..64"
    shapes: list[str] = field(default_factory=list)  # a dynamic model: the tuned shapes built in
    other_shapes: str = ""  # a dynamic model: how every other shape runs
    checked: dict[str, float] | None = None  # {shape label ("": the example's): max error}; None: not checked
    check_sets: int = 0  # input sets per shape of the check
    check_waits: bool = False  # a CUDA library built without a GPU: its check waits for one
    untuned: dict[str, str] = field(default_factory=dict)  # kernel -> why it keeps the default schedule
    foreign: int = 0  # workloads of the records that are not this model's
    database: int | None = None  # tuned kernels written to ``database``
    notes: list[str] = field(default_factory=list)

    @property
    def default_kernels(self) -> int:
        return self.kernels - self.tuned - self.constructed


def build_model(spec: str, output: str, *, records: str | None = None, target: dict | str | None = None,
                layout: str = DEFAULT_LAYOUT, dtype: str = "float32", shapes: list[str] | None = None,
                construct: str | None = None, seed: int = 0, check: bool = True, cuda_graph: bool = False,
                database: str | None = None) -> BuiltModel:
    """Build ``spec`` into the library ``output`` (see the module docstring); a TiletuneError, one line, when a
    step cannot be done (an output that cannot be written, a missing records file: before anything is imported) or the library does not match the original (nothing is written then)."""
    target = target if isinstance(target, dict) else parse_target(target)
    check_dtype_for(dtype, target)
    check_output(output, "model library", parents=False)
    check_output(output + ".json", "model description", parents=False)
    if records is not None and not os.path.exists(records):
        raise TiletuneError(f"records file {records!r} does not exist")
    recs = load(records) if records is not None else None  # read once, here
    source = load_source(spec)
    bindings = parse_shapes(shapes, source)  # a bad --shapes: one line before the import
    notes: list[str] = []
    if source.dynamic and not shapes and recs is not None:
        tuned = recorded_shapes(source, target, layout, recs, dtype=dtype)
        if tuned:
            bindings = tuned
            notes.append(f"building the shapes {records} was tuned at: {'; '.join(label(b) for b in tuned)} "
                         "(--shapes picks others)")
        else:
            notes.append(f"{records} holds no tuned shape of this model: building at the example's shape "
                         f"{label(bindings[0])} (tune with model tune --shapes, or give --shapes)")
    waits = check and check_waits(target)
    against = source if check and not waits else None
    meta = {"model": source.spec, "target": target, "layout": layout, "dtype": dtype,
            "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in source.inputs],
            "cuda_graph": cuda_graph, "seed": seed}
    if source.dynamic:
        dyn = shape_tasks(source, target, layout, bindings, dtype=dtype)
        tasks = dyn.merged
        lib = dynamic_library(dyn, records, construct, cuda_graph=cuda_graph, seed=seed, read=recs)
        ex, chosen, recorded, how, check_at = lib.ex, lib.chosen, lib.recorded, lib.how, lib.check_at
        extra = {"dims": {n: [d.lo, d.hi] for n, d in source.dims.items()},
                 "shapes": [st.label for st in dyn.shapes], "other_shapes": other_shapes(target),
                 "source": portable_spec(source.spec), "first_use": True}
    else:
        tasks = model_tasks(source, target, layout, dtype)
        # the tasks the records leave without a kernel take the tuning database's (tiletune.db)
        chosen = recorded = database_configs(tasks, best_configs(tasks, records, recs))
        if construct:
            chosen = constructed_configs(tasks, construct, recorded, seed=seed)
        mod, how = scheduled_module(tasks, chosen)
        ex, check_at, extra = compile_module(mod, target, cuda_graph), [None], {}
    made = len(chosen) - len(recorded)
    meta.update(extra, layout=tasks.layout, kernels=how, tuned=len(recorded), constructed=made,
                tasks=len(tasks.tasks))
    errors = export_checked(ex, output, meta, against, check_at, dtype=tasks.dtype)
    out = BuiltModel(output, source.spec, target, tasks.layout, tasks.dtype, len(tasks.tasks), len(tasks.kernels),
                     len(recorded), made, construct, how, checked=errors if against is not None else None,
                     check_waits=waits, untuned=untuned_reasons(tasks, records, chosen, recs),
                     foreign=0 if source.dynamic else foreign_workloads(tasks, records, recs),
                     notes=list(tasks.notes) + notes)
    if source.dynamic:
        out.dims = ", ".join(f"{n} in {d.bounds}" for n, d in source.dims.items())
        out.shapes, out.other_shapes = extra["shapes"], extra["other_shapes"]
    if against is not None:
        out.check_sets = len(input_sets(source))
    if database:
        out.database = export_database(tasks, chosen, database)
    return out

