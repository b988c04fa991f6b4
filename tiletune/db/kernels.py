"""The tuning database in a model's build: the tasks that the records file given with ``-r`` leaves without a kernel
take the database's (``database_configs``); what ``-r FILE`` holds is added to the database (``Database.absorb``),
so the records file is read first and the database learns it."""
from __future__ import annotations

from ..model.build import Chosen, best_configs
from ..model.kernels.tasks import ModelTasks
from ..records import kernel_identity
from ..target import target_key
from .store import Database


def database_configs(tasks: ModelTasks, chosen: dict[str, Chosen], db: Database | None = None) -> dict[str, Chosen]:
    """``chosen`` (by kernel hash) with every task it lacks given the database's kernel for the tasks' target,
    where the database has one; the database's records of other models are not looked at."""
    db = db or Database()
    missing = {kernel_identity(k.workload.key) for k in tasks.tasks if k.hash not in chosen}
    if not missing:
        return dict(chosen)
    recs = [r for r in db.records(target_key(tasks.target)) if kernel_identity(r.workload) in missing]
    if not recs:
        return dict(chosen)
    found = best_configs(tasks, "the tuning database", recs)
    return {**{h: c for h, c in found.items() if h not in chosen}, **chosen}
