"""Operator families; ``parse("gemm:M=512,N=512,K=512")`` gives a Workload, and so does the path of a file
holding TVMScript (``parse("kernel.tir.py")``: a PrimFunc workload, ``tiletune.workloads.primfunc``), and the
key of a model's row reduction (``rows:NAME[SHAPES]@HASH``, ``tiletune.workloads.rows``)."""
from . import conv, matmul, pool, primfunc, quantized, rows  # noqa: F401  (registration)
from .base import Axis, Param, Workload, make, operators, parse, register
from .primfunc import PrimFuncWorkload
from .rows import RowWorkload

__all__ = ["Axis", "Param", "PrimFuncWorkload", "RowWorkload", "Workload", "make", "operators", "parse", "register"]
