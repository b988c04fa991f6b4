"""The learned cost model and the model-based search around it (AutoTVM; Zheng,
"Automated linear algebra program optimization using ML").

- ``xgb.XGBCostModel``: XGBoost with reg / rank / rank-binary losses, plain fit(X, y) / predict(X).
- ``sa.SimulatedAnnealing``: AutoTVM's parallel simulated annealing with the model as energy, plus
  Zheng's proposed cooling schedule and restarts as options.
- ``transfer.load_transfer``: training data from the records of other workloads (Zheng 4.3).

The model of xgb, evo and dgd built from these (``Surrogate``: features + XGBCostModel with the analytic prior
and transfer data as background rows) and the analytic prior stand with the strategies that use them
(``tiletune.strategies.surrogate``, ``tiletune.strategies.prior``); the analytic models of the hardware in
``tiletune.analytic``.
"""
from .xgb import LOSSES, XGBCostModel, average_recall

__all__ = ["LOSSES", "XGBCostModel", "average_recall"]
