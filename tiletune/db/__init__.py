"""The tuning database every entry point reads and writes (``tiletune.db.store``) and the model path's use of it
(``tiletune.db.kernels``)."""
from .store import CACHE_ENV, Database, cache_root

__all__ = ["CACHE_ENV", "Database", "cache_root"]
