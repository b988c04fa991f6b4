"""Cost models and the model-based search around them (AutoTVM; Zheng, "Automated linear algebra
program optimization using ML").

- ``xgb.XGBCostModel``: XGBoost with reg / rank / rank-binary losses, plain fit(X, y) / predict(X).
- ``sa.SimulatedAnnealing``: AutoTVM's parallel simulated annealing with the model as energy, plus
  Zheng's proposed cooling schedule and restarts as options.
- ``transfer.load_transfer``: training data from the records of other workloads (Zheng 4.3).
"""
from .xgb import LOSSES, XGBCostModel, average_recall

__all__ = ["LOSSES", "XGBCostModel", "average_recall"]
