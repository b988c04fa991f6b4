"""A differential fuzzer for whole models: random small PyTorch models (``generate``, ``ops``), each imported
through torch.export and through ONNX, built and run against PyTorch (``run``), failures reduced to a small
reproducer (``reduce``). ``benchmarks/fuzz_campaign.py`` runs a campaign."""
