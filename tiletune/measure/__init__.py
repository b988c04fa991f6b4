"""Measurement: build, run, check. Local warm workers, replay tables and synthetic costs."""
from .base import ERROR_KINDS, MeasureResult, MeasureSettings, Measurer
from .synthetic import FunctionMeasurer

__all__ = ["ERROR_KINDS", "MeasureResult", "MeasureSettings", "Measurer", "FunctionMeasurer"]
