"""Operator families; ``parse("gemm:M=512,N=512,K=512")`` gives a Workload."""
from . import conv, matmul, pool  # noqa: F401  (registration)
from .base import Axis, Param, Workload, make, operators, parse, register

__all__ = ["Axis", "Param", "Workload", "make", "operators", "parse", "register"]
