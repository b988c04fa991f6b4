"""Operator families; ``parse("gemm:M=512,N=512,K=512")`` gives a Workload, and so does the path of a file
holding TVMScript (``parse("kernel.tir.py")``: a PrimFunc workload, ``tiletune.workloads.primfunc``)."""
from . import conv, matmul, pool, primfunc  # noqa: F401  (registration)
from .base import Axis, Param, Workload, make, operators, parse, register
from .primfunc import PrimFuncWorkload

__all__ = ["Axis", "Param", "PrimFuncWorkload", "Workload", "make", "operators", "parse", "register"]
