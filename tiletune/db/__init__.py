"""The tuning database every entry point reads and writes (``tiletune.db.store``); a model's build takes its kernels
through ``tiletune.model.build.database_configs``."""
from .store import CACHE_ENV, Database, cache_root

__all__ = ["CACHE_ENV", "Database", "cache_root"]
