"""Quantized matrix products: uint8 activations times int8 weights, accumulated exactly in int32, with the zero
point and the dequantize or requantize epilogue in the same kernel (``qgemm``, ``qbatch_matmul``).

``qgemm:M,N,K[,per_channel=0|1][,dtype=uint8][,out_dtype=uint8|int32|float32]`` computes, as ONNX's
``MatMulInteger`` followed by ``DequantizeLinear``/``QuantizeLinear`` defines them, with the weight's zero point 0
(symmetric int8 weights, ONNX Runtime's default for ``QInt8``):

    acc[m, n] = sum_k A[m, k] W[k, n] - za wsum[n]          (int32, exact; wsum[n] = sum_k W[k, n], a weight)
    out_dtype=int32:   acc
    out_dtype=float32: float32(acc) * scale[n]              (dequantize; scale = the activation's times the weight's)
    out_dtype=uint8:   clip(rint(float32(acc) * scale[n]) + zo, 0, 255)   (requantize; round half to even, as
                                                                           ONNX's QuantizeLinear)

``scale`` has one entry per output column with ``per_channel=1``, else one. The inputs, in order: ``A`` (uint8
[M, K]), ``W`` (int8 [K, N]), ``wsum`` (int32 [N]), ``za`` (uint8 [1], the activation's zero point), then ``scale``
(float32) and, for a uint8 output, ``zo`` (uint8 [1]). ``W`` and ``wsum`` are weights: the CPU template
(``tiletune.schedules.x86_int8``) takes ``W`` packed once into the layout ``vpdpbusd`` reads.
``qbatch_matmul:B,M,N,K`` is the same per batch, its ``W`` [B, K, N] an activation (packed by the kernel on every
call) and ``wsum`` [B, N].

The reference is numpy's: the accumulator in int64 (exact, then int32), the epilogue in float32 in the same order
of operations as the kernel. FLOPs count one multiply and one add per multiply-accumulate (integer operations).
"""
from __future__ import annotations

import numpy as np

from ..errors import TiletuneError
from .access import IndexExpr, TensorAccess
from .base import QUANTIZED_DTYPES, Axis, Param, Workload, register

#: the tile of one ``vpdpbusd``: 16 int32 lanes, each summing 4 products along the reduction
LANES, DEPTH = 16, 4


class _Quantized(Workload):
    dtypes = QUANTIZED_DTYPES
    out_dtypes = ("uint8", "int32", "float32")
    mixed_precision = True  # accumulated in int32 (``ACCUMULATION``)
    batched = False

    # ---- shapes ------------------------------------------------------------------------------------
    def _lead(self) -> tuple[int, ...]:
        return (self.B,) if self.batched else ()

    def _validate(self) -> None:
        if self.N % LANES or self.K % DEPTH:
            raise TiletuneError(f"{self.key}: N={self.N} must be a multiple of {LANES} and K={self.K} of {DEPTH} "
                                f"(the tile of vpdpbusd: {LANES} int32 lanes of {DEPTH} products); pad the weight")
        if self.per_channel not in (0, 1):
            raise TiletuneError(f"{self.key}: per_channel must be 0 or 1, got {self.per_channel}")

    def input_names(self) -> list[str]:
        names = ["A", "W", "wsum", "za"]
        if self.out_dtype != "int32":
            names.append("scale")
        if self.out_dtype == "uint8":
            names.append("zo")
        return names

    def input_shapes(self):
        lead = self._lead()
        shapes = {"A": lead + (self.M, self.K), "W": lead + (self.K, self.N), "wsum": lead + (self.N,), "za": (1,),
                  "scale": (self.N if self.per_channel else 1,), "zo": (1,)}
        return [shapes[n] for n in self.input_names()]

    def input_dtypes(self) -> list[str]:
        dts = {"A": "uint8", "W": "int8", "wsum": "int32", "za": "uint8", "scale": "float32", "zo": "uint8"}
        return [dts[n] for n in self.input_names()]

    def output_shape(self):
        return self._lead() + (self.M, self.N)

    @property
    def weights(self) -> frozenset[str]:
        return frozenset() if self.batched else frozenset({"W", "wsum"})

    def axes_no_tvm(self):
        lead = [Axis("b", self.B, "S")] if self.batched else []
        return lead + [Axis("m", self.M, "S"), Axis("n", self.N, "S"), Axis("k", self.K, "R")]

    @property
    def flops(self):
        return 2 * (self.B if self.batched else 1) * self.M * self.N * self.K

    def tensor_accesses(self):
        """The anchor's accesses (``tiletune.workloads.access``): A [.., m, k] and W [.., k, n] of one byte, the
        int32 accumulator [.., m, n]."""
        lead = [IndexExpr((("b", 1),), self.B)] if self.batched else []
        m, n, k = (IndexExpr(((a, 1),), e) for a, e in (("m", self.M), ("n", self.N), ("k", self.K)))
        return [TensorAccess("A", "input", tuple(lead + [m, k]), 1), TensorAccess("W", "input", tuple(lead + [k, n]), 1),
                TensorAccess("C", "output", tuple(lead + [m, n]), 4)]

    # ---- compute -----------------------------------------------------------------------------------
    def _compute(self):
        import tvm
        from tvm import te

        lead = self._lead()
        names, shapes, dts = self.input_names(), self.input_shapes(), self.input_dtypes()
        ph = {n: te.placeholder(s, d, name=n) for n, s, d in zip(names, shapes, dts)}
        A, W, wsum, za = ph["A"], ph["W"], ph["wsum"], ph["za"]
        k = te.reduce_axis((0, self.K), name="k")
        if self.batched:
            C = te.compute(lead + (self.M, self.N), lambda b, m, n: te.sum(
                A[b, m, k].astype("int32") * W[b, k, n].astype("int32"), axis=k), name="C")
        else:
            C = te.compute((self.M, self.N), lambda m, n: te.sum(
                A[m, k].astype("int32") * W[k, n].astype("int32"), axis=k), name="C")

        def acc(*i):
            return C[i] - za[0].astype("int32") * wsum[i[:-2] + (i[-1],)]

        def scale(*i):
            return ph["scale"][i[-1] if self.per_channel else 0]

        if self.out_dtype == "int32":
            out = te.compute(C.shape, acc, name="C_zp")
        elif self.out_dtype == "float32":
            out = te.compute(C.shape, lambda *i: acc(*i).astype("float32") * scale(*i), name="C_dequant")
        else:
            zo = ph["zo"]

            def requant(*i):
                q = tvm.tirx.nearbyint(acc(*i).astype("float32") * scale(*i)) + zo[0].astype("float32")
                return te.min(te.max(q, tvm.tirx.const(0.0, "float32")), tvm.tirx.const(255.0, "float32")).astype(
                    "uint8")

            out = te.compute(C.shape, requant, name="C_requant")
        return [ph[n] for n in names] + [out]

    def anchor_tensor(self):
        return self.te()[-1].op.input_tensors[0]

    def anchor_name(self) -> str:
        return "C"

    def epilogue_blocks(self) -> tuple[str, ...]:
        return (self.te()[-1].op.name,)

    @property
    def has_cast(self) -> bool:
        return False

    # ---- data --------------------------------------------------------------------------------------
    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        lead = self._lead()
        A = rng.integers(0, 256, size=lead + (self.M, self.K), dtype=np.uint8)
        W = rng.integers(-127, 128, size=lead + (self.K, self.N), dtype=np.int8)
        out = {"A": A, "W": W, "wsum": W.astype(np.int32).sum(axis=-2, dtype=np.int32),
               "za": np.array([rng.integers(0, 256)], dtype=np.uint8),
               "zo": np.array([rng.integers(64, 192)], dtype=np.uint8)}
        # an accumulator's spread is about 128 * 73 * sqrt(K); a requantized output spans a few dozen steps of it
        spread = 128.0 * 73.0 * np.sqrt(self.K)
        n = self.N if self.per_channel else 1
        out["scale"] = (rng.uniform(10.0, 40.0, size=n) / spread).astype(np.float32)
        return [out[name] for name in self.input_names()]

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        d = dict(zip(self.input_names(), inputs))
        acc = np.matmul(d["A"].astype(np.int64), d["W"].astype(np.int64))
        acc = acc - np.int64(d["za"][0]) * d["wsum"].astype(np.int64)[..., None, :]
        acc = acc.astype(np.int32)
        if self.out_dtype == "int32":
            return acc
        scaled = acc.astype(np.float32) * d["scale"].astype(np.float32)
        if self.out_dtype == "float32":
            return scaled
        return np.clip(np.rint(scaled) + np.float32(d["zo"][0]), 0, 255).astype(np.uint8)


@register
class QGemm(_Quantized):
    op = "qgemm"
    doc = "uint8 x int8 -> int32 GEMM with zero point and dequantize/requantize epilogue"
    params = (Param("M", "rows of A and C"), Param("N", "columns of W and C"), Param("K", "reduction length"),
              Param("per_channel", "1: one scale per output column, 0: one scale", default=0, minimum=0))


@register
class QBatchMatmul(_Quantized):
    op = "qbatch_matmul"
    doc = "batched uint8 x int8 -> int32 matmul with zero point and dequantize/requantize epilogue"
    batched = True
    params = (Param("B", "batch size"), Param("M", "rows of A and C"), Param("N", "columns of W and C"),
              Param("K", "reduction length"),
              Param("per_channel", "1: one scale per output column, 0: one scale", default=0, minimum=0))
