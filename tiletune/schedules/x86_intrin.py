"""The tensor intrinsics the bf16 (``tiletune.schedules.x86_bf16``) and int8 (``tiletune.schedules.x86_int8``)
templates share.

- ``dot_description``: 16 lanes of a 32-bit accumulator, each summing ``group`` products along the reduction (the
  description of ``vdpbf16ps``, 2 bf16 pairs, and of ``vpdpbusd``, 4 u8 x s8); each template gives its own
  implementation.

One AMX tile step (``tdpbf16ps``, ``tdpbusd``): ``C[16, 16] += A[16, K] x B`` on tile registers, where B is 16 rows of
64 bytes (16 output columns x ``group`` consecutive reduction elements: the pair- or quad-interleaved layout the
instruction reads) and ``K`` is 64 bytes of A's dtype (32 bf16, 64 uint8). The accumulator is 32-bit (fp32 or int32).

- ``step_llvm``: the step as a short LLVM function, linked into the kernel (``pragma_import_llvm``) and inlined: C, A
  and B are loaded into tiles, the instruction runs, C is stored. The shapes are constants, so LLVM's tile
  configuration pass writes one ``ldtilecfg`` per kernel. Pointers come as base pointers plus element offsets (an
  ``access_ptr`` of a bf16 buffer does not survive TVM's bf16 legalization).
- ``register_step``: the tensor intrinsic of that step (its description as a TensorIR block, its implementation the
  call of the LLVM function), under ``name``.

The process that runs such a kernel asks Linux for the tile state first (``tiletune.cpu_features.request_amx``).
"""
from __future__ import annotations

#: a tile's rows and its bytes per row (the AMX palette 1 maximum)
TILE_ROWS, ROW_BYTES = 16, 64
#: 32-bit lanes of an AVX-512 register
LANES = 16
#: AMX's 8 tile registers
TILE_REGISTERS = 8

_LLVM_TYPE = {"bfloat16": ("i16", 2), "uint8": ("i8", 1), "int8": ("i8", 1), "float32": ("float", 4),
              "int32": ("i32", 4)}


def step_llvm(function: str, instruction: str, a_dtype: str, c_dtype: str) -> str:
    """The LLVM IR of ``void function(c, c_offset, ldc, a, a_offset, lda, b, b_offset)`` (leading dimensions in
    elements): one 16 x 16 x K step of ``llvm.x86.<instruction>.internal``."""
    a_type, a_bytes = _LLVM_TYPE[a_dtype]
    c_type, c_bytes = _LLVM_TYPE[c_dtype]
    return rf"""
define linkonce_odr void @{function}(ptr %c0, i64 %co, i64 %ldc, ptr %a0, i64 %ao, i64 %lda, ptr %b0,
                                     i64 %bo) alwaysinline {{
  %c = getelementptr {c_type}, ptr %c0, i64 %co
  %a = getelementptr {a_type}, ptr %a0, i64 %ao
  %b = getelementptr {a_type}, ptr %b0, i64 %bo
  %cs = mul i64 %ldc, {c_bytes}
  %as = mul i64 %lda, {a_bytes}
  %tc = call x86_amx @llvm.x86.tileloadd64.internal(i16 {TILE_ROWS}, i16 {ROW_BYTES}, ptr %c, i64 %cs)
  %ta = call x86_amx @llvm.x86.tileloadd64.internal(i16 {TILE_ROWS}, i16 {ROW_BYTES}, ptr %a, i64 %as)
  %tb = call x86_amx @llvm.x86.tileloadd64.internal(i16 {TILE_ROWS}, i16 {ROW_BYTES}, ptr %b, i64 {ROW_BYTES})
  %td = call x86_amx @llvm.x86.{instruction}.internal(i16 {TILE_ROWS}, i16 {ROW_BYTES}, i16 {ROW_BYTES}, x86_amx %tc,
                                                     x86_amx %ta, x86_amx %tb)
  call void @llvm.x86.tilestored64.internal(i16 {TILE_ROWS}, i16 {ROW_BYTES}, ptr %c, i64 %cs, x86_amx %td)
  ret void
}}
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.{instruction}.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
"""


def dot_description(a_dtype: str, b_dtype: str, c_dtype: str, group: int, offset_factor: int):
    """The TensorIR description ``C[16] += sum_k A[k] x B[16, k]`` (``group`` values of k), the accumulator local."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((group,), a_dtype, offset_factor=offset_factor),
             B: T.Buffer((LANES, group), b_dtype, offset_factor=offset_factor),
             C: T.Buffer((LANES,), c_dtype, offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(C[0:LANES], A[0:group], B[0:LANES, 0:group])
            T.writes(C[0:LANES])
            for i in T.serial(0, LANES):
                for k in T.serial(0, group):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], c_dtype) * T.cast(B[vi, vk], c_dtype)

    return desc


def register_step(name: str, function: str, a_dtype: str, b_dtype: str, c_dtype: str) -> None:
    """Register the tensor intrinsic ``name``: C (``c_dtype``, 16 x 16, local) += A (``a_dtype``, 16 x K) x B
    (``b_dtype``, K / group x 16 x group), computed by the LLVM function ``function`` (``step_llvm``)."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    a_bytes = _LLVM_TYPE[a_dtype][1]
    depth = ROW_BYTES // a_bytes  # K: 32 bf16, 64 uint8
    group = 4 // a_bytes  # reduction elements per 32-bit lane: 2 bf16, 4 int8
    rows = depth // group  # B's rows of 16 x group elements

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        lda = T.int32()
        ldc = T.int32()
        A = T.match_buffer(a, (TILE_ROWS, depth), a_dtype, offset_factor=a_bytes, strides=[lda, 1])
        B = T.match_buffer(b, (rows, TILE_ROWS, group), b_dtype, offset_factor=depth)
        C = T.match_buffer(c, (TILE_ROWS, TILE_ROWS), c_dtype, offset_factor=1, scope="local", strides=[ldc, 1])
        with T.sblock("root"):
            T.reads(C[0:TILE_ROWS, 0:TILE_ROWS], A[0:TILE_ROWS, 0:depth], B[0:rows, 0:TILE_ROWS, 0:group])
            T.writes(C[0:TILE_ROWS, 0:TILE_ROWS])
            for i, j, k in T.grid(TILE_ROWS, TILE_ROWS, depth):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi, vk], c_dtype) * T.cast(B[vk // group, vj, vk % group],
                                                                                  c_dtype)

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        lda = T.int32()
        ldc = T.int32()
        A = T.match_buffer(a, (TILE_ROWS, depth), a_dtype, offset_factor=a_bytes, strides=[lda, 1])
        B = T.match_buffer(b, (rows, TILE_ROWS, group), b_dtype, offset_factor=depth)
        C = T.match_buffer(c, (TILE_ROWS, TILE_ROWS), c_dtype, offset_factor=1, scope="local", strides=[ldc, 1])
        with T.sblock("root"):
            T.reads(C[0:TILE_ROWS, 0:TILE_ROWS], A[0:TILE_ROWS, 0:depth], B[0:rows, 0:TILE_ROWS, 0:group])
            T.writes(C[0:TILE_ROWS, 0:TILE_ROWS])
            T.evaluate(T.call_extern("void", function, C.data, T.int64(C.elem_offset), T.int64(ldc),
                                     A.data, T.int64(A.elem_offset), T.int64(lda), B.data, T.int64(B.elem_offset)))

    TensorIntrin.register(name, desc, impl, override=True)
