"""A differential fuzzer for whole models: random small PyTorch models (``generate``, its steps in ``ops``), each
imported through torch.export and through ONNX, built and run against PyTorch (``run``; in a separate process:
``worker``), failures reduced to a small reproducer (``reduce``), many models in a resumable ``campaign``
(``benchmarks/fuzz_campaign.py``)."""
