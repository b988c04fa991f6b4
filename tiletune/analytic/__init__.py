"""Analytic models of the hardware: the time of a configuration computed, not measured, with no learning.

- ``etir``: Gensor's ETIR state and analytic (roofline) model of a space of the CPU and SIMT templates
  (``etir.Model``); Gensor and Roller construct configurations with it (``tiletune.construct``).
- ``mma``: the analytic model of the tensor-core template's kernel (``mma.MmaModel``), for the constructions on
  its space and the analytic features (``tiletune.features.analytical``).

Both stand below their users: the constructions, the features and the analytic prior of the learned cost models
(``tiletune.strategies.prior``) import them.
"""
