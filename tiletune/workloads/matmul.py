"""Matrix products: gemm (M,N,K), batch_matmul (B,M,N,K) and gemv (M,K).

Layouts: gemm C[m,n] = sum_k A[m,k] B[k,n]; batch_matmul C[b,m,n] = sum_k A[b,m,k] B[b,k,n];
gemv y[m] = sum_k A[m,k] x[k]. FLOPs count one multiply and one add per multiply-accumulate.
dtype=float16|bfloat16 multiplies and accumulates in float32; the output is the input dtype (a cast stage
``C_cast`` after the reduction) or float32 with ``out_dtype=float32`` (``Workload.mac``, ``Workload.finish``).
"""
from __future__ import annotations

import numpy as np

from .base import DTYPES, Axis, Param, Workload, register


@register
class Gemm(Workload):
    op = "gemm"
    dtypes = DTYPES
    mixed_precision = True
    params = (Param("M", "rows of A and C"), Param("N", "columns of B and C"), Param("K", "reduction length"))

    def input_shapes(self):
        return [(self.M, self.K), (self.K, self.N)]

    def output_shape(self):
        return (self.M, self.N)

    def _compute(self):
        from tvm import te

        A = te.placeholder((self.M, self.K), self.dtype, name="A")
        B = te.placeholder((self.K, self.N), self.dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        C = te.compute((self.M, self.N), lambda m, n: te.sum(self.mac(A[m, k], B[k, n]), axis=k), name="C")
        return [A, B, self.finish(C)]

    def axes_no_tvm(self):
        return [Axis("m", self.M, "S"), Axis("n", self.N, "S"), Axis("k", self.K, "R")]

    def reference(self, a, b):
        a, b = self.to_acc(a, b)
        return self.to_out(a @ b)

    @property
    def flops(self):
        return 2 * self.M * self.N * self.K


@register
class BatchMatmul(Workload):
    op = "batch_matmul"
    dtypes = DTYPES
    mixed_precision = True
    params = (
        Param("B", "batch size"),
        Param("M", "rows of A and C"),
        Param("N", "columns of B and C"),
        Param("K", "reduction length"),
    )

    def input_shapes(self):
        return [(self.B, self.M, self.K), (self.B, self.K, self.N)]

    def output_shape(self):
        return (self.B, self.M, self.N)

    def _compute(self):
        from tvm import te

        A = te.placeholder((self.B, self.M, self.K), self.dtype, name="A")
        Bt = te.placeholder((self.B, self.K, self.N), self.dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        C = te.compute(
            (self.B, self.M, self.N), lambda b, m, n: te.sum(self.mac(A[b, m, k], Bt[b, k, n]), axis=k), name="C"
        )
        return [A, Bt, self.finish(C)]

    def axes_no_tvm(self):
        return [Axis("b", self.B, "S"), Axis("m", self.M, "S"), Axis("n", self.N, "S"), Axis("k", self.K, "R")]

    def reference(self, a, b):
        a, b = self.to_acc(a, b)
        return self.to_out(np.matmul(a, b))

    @property
    def flops(self):
        return 2 * self.B * self.M * self.N * self.K


@register
class Gemv(Workload):
    op = "gemv"
    dtypes = DTYPES
    mixed_precision = True
    params = (Param("M", "rows of A (length of y)"), Param("K", "columns of A (length of x)"))

    def input_shapes(self):
        return [(self.M, self.K), (self.K,)]

    def output_shape(self):
        return (self.M,)

    def _compute(self):
        from tvm import te

        A = te.placeholder((self.M, self.K), self.dtype, name="A")
        x = te.placeholder((self.K,), self.dtype, name="x")
        k = te.reduce_axis((0, self.K), name="k")
        y = te.compute((self.M,), lambda m: te.sum(self.mac(A[m, k], x[k]), axis=k), name="y")
        return [A, x, self.finish(y)]

    def axes_no_tvm(self):
        return [Axis("m", self.M, "S"), Axis("k", self.K, "R")]

    def reference(self, a, x):
        a, x = self.to_acc(a, x)
        return self.to_out(a @ x)

    @property
    def flops(self):
        return 2 * self.M * self.K
