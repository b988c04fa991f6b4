"""Cost models (learned and analytic) and the model-based search around them (AutoTVM; Zheng,
"Automated linear algebra program optimization using ML").

- ``xgb.XGBCostModel``: XGBoost with reg / rank / rank-binary losses, plain fit(X, y) / predict(X).
- ``sa.SimulatedAnnealing``: AutoTVM's parallel simulated annealing with the model as energy, plus
  Zheng's proposed cooling schedule and restarts as options.
- ``transfer.load_transfer``: training data from the records of other workloads (Zheng 4.3).
- ``surrogate.Surrogate``: features + XGBCostModel trained on normalised throughput, with the analytic prior
  and transfer data as background rows: the model of xgb, evo and dgd (AutoTVM, Ansor, TVM-AF-DS).
- ``prior.analytic_prior``: pseudo-measurements from the analytic models of ``tiletune.analytic``, the
  ``prior=analytic`` option of the learned cost models (xgb, evo, dgd).
"""
from .xgb import LOSSES, XGBCostModel, average_recall

__all__ = ["LOSSES", "XGBCostModel", "average_recall"]
