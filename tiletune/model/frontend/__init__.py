"""The model as it comes in: what a spec names (``source``: built-in ``zoo``, layer ``families``, a factory, an ONNX
file; its symbolic ``dims``) and its import to Relax (``importer``, with the ONNX constant folding and converters,
advanced indexing and scatters). It only imports."""
