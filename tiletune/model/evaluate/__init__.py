"""Measuring a built model: ``model bench`` against ONNX Runtime, torch and TVM's own builds (``bench``,
``baselines``), and the layer-family conformance suite (``conformance``)."""
