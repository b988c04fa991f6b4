"""Measurement: build, run, check. Local warm workers (``local``) or a Ray cluster's (``cluster``), the two
implementations of one builder/runner interface (``kernel_pool``); replay tables (``replay``), synthetic costs
(``synthetic``) and the devices of a TVM RPC tracker (``rpc``); ``factory.make_measurer`` picks one for a run."""
from .base import ERROR_KINDS, MeasureResult, MeasureSettings, Measurer
from .synthetic import FunctionMeasurer

__all__ = ["ERROR_KINDS", "MeasureResult", "MeasureSettings", "Measurer", "FunctionMeasurer"]
