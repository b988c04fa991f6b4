"""Whole models, in the order a model flows through them:

1. ``frontend``: the source (PyTorch module, ONNX file, built-in) imported to Relax;
2. ``passes``: the imported module made ready for fusion (``passes.pipeline.prepare``: indices, slices, hoisting,
   dtype, layout);
3. ``kernels``: fused into TIR kernels, the tunable ones as tasks, default schedules for the rest;
4. ``tuning``: the tasks tuned under one budget;
5. ``build`` (compile, check, export) and ``library`` (``build_model``: the one facade of a build);
6. ``dynamic``: the same for models with symbolic dimensions (several shapes in one library);
7. ``evaluate``: built models measured against other engines, and the conformance suite.

``tiletune model tasks|tune|build|bench`` drives them."""
