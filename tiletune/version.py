"""The package's version (``tiletune.__version__``; part of the compiled-graph cache key, ``tiletune.torch_backend.cache``)."""
__version__ = "0.1.0"
