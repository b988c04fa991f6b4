"""A model (``ModelSource``) as a Relax IRModule with its weights bound as constants.

- torch: BatchNorm is folded into the preceding convolution for inference first
  (``tiletune.model.frontend.batchnorm``: conv + BN -> one conv with scaled weights and a bias, modules and
  functional calls alike), where the module traces symbolically; then ``torch.export.export`` (under ``no_grad``) and
  ``tvm.relax.frontend.torch.from_exported_program(keep_params_as_input=False)``.
- ONNX: constants folded first (``tiletune.model.frontend.onnx_fold``: pads and shapes the exporter computes at run
  time), then ``tvm.relax.frontend.onnx.from_onnx`` (weights as constants) with converters for LSTM, GRU,
  RNN and Celu, which it lacks (``tiletune.model.frontend.onnx_ops``).
- Dynamic shapes (``source.dims``): torch.export gets the factory's ``dynamic_shapes``; the imported module's
  symbolic variables (torch names them ``s27``; ONNX by its ``dim_param``) are renamed to the dimensions'
  names, and ``main`` keeps TVM's ``tir_var_lower_bound`` / ``tir_var_upper_bound`` attributes under those
  names (``tiletune.model.dynamic.shapes`` binds them to values).
- Then, for both: comparisons of bool tensors are made on int8 (TVM's LLVM back end cannot compile them;
  ``_bool_compares_as_int8``), and BatchNorm that is still there (a model fx cannot trace, an ONNX BatchNormalization)
  is decomposed for inference (``DecomposeOpsForInference`` + ``CanonicalizeBindings``): it becomes an
  elementwise epilogue of the convolution's kernel.

The importer only imports: the rewrites that make the module ready for fusion (indices, split slices, hoisting,
dtype, layout) are ``tiletune.model.passes.pipeline.prepare``'s.

A model that fails to export or import is one TiletuneError line naming the step and the reason.
"""
from __future__ import annotations

import warnings

from ...errors import TiletuneError
from .advanced_index import index_tensor
from .batchnorm import fold_batchnorm
from .onnx_fold import fold_constants
from .onnx_ops import onnx_converters
from .scatter_ops import scatter_converters
from .source import ModelSource


def _reason(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).strip().splitlines() if s.strip()]
    return f"{type(e).__name__}: {lines[0][:300]}" if lines else type(e).__name__


#: warnings of TVM's frontends that announce a result other than the model's (here they refuse the import):
#: an ONNX Softmax, LogSoftmax or Hardmax of opset 12 or below (which flattens the tensor from ``axis`` on) on a
#: tensor of unknown rank is imported as the operator along ``axis`` alone
WRONG_IMPORT = (r".*opset<=12 fallback: static rank/shape is unavailable",)


def to_relax(source: ModelSource):
    """The Relax IRModule of ``source`` as imported (``main`` takes the inputs, weights are constants);
    ``tiletune.model.passes.pipeline.prepare`` makes it ready for fusion."""
    with warnings.catch_warnings():  # torch's export and TVM's frontends warn about their own internals
        warnings.simplefilter("ignore")
        for message in WRONG_IMPORT:  # except where they announce a wrong result: an error (the import refused)
            warnings.filterwarnings("error", message=message)
        return _to_relax(source)


def _to_relax(source: ModelSource):
    import tvm
    from tvm import relax

    if source.kind == "torch":
        import torch
        from tvm.relax.frontend.torch import from_exported_program

        module = fold_batchnorm(source.module)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = torch.export.export(module, source.example, dynamic_shapes=source.dynamic_shapes)
        except Exception as e:  # noqa: BLE001
            raise TiletuneError(f"{source.spec}: torch.export failed ({_reason(e)})") from None
        try:
            mod = from_exported_program(ep, keep_params_as_input=False, unwrap_unit_return_tuple=True,
                                        custom_convert_map=extra_converters())
        except Exception as e:  # noqa: BLE001
            raise TiletuneError(f"{source.spec}: TVM's PyTorch frontend cannot import it ({_reason(e)})") from None
    else:
        import onnx
        from tvm.relax.frontend.onnx import from_onnx

        try:
            model = fold_constants(onnx.load(source.onnx_path))
            shapes = {i.name: list(i.shape) for i in source.inputs if not any(isinstance(d, str) for d in i.shape)}
            dtypes = {i.name: i.dtype for i in source.inputs}
            with onnx_converters():  # LSTM, GRU, RNN, Celu
                mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False)
        except Exception as e:  # noqa: BLE001
            raise TiletuneError(f"{source.spec}: TVM's ONNX frontend cannot import it ({_reason(e)})") from None
    try:
        mod = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                        relax.transform.CanonicalizeBindings()])(mod)
    except Exception as e:  # noqa: BLE001
        raise TiletuneError(f"{source.spec}: preparing the imported model failed ({_reason(e)})") from None
    _check_static(source, mod)
    if source.dynamic:
        mod = _name_symbolic_vars(source, mod)
    return _bool_compares_as_int8(mod)


def _name_symbolic_vars(source: ModelSource, mod):
    """``mod`` with the symbolic variables of ``main``'s inputs renamed to ``source.dims``' names and its bounds
    attributes set from them (a TiletuneError when the import made a symbolic axis static: the model
    specialised it)."""
    import tvm
    from tvm import relax, tirx

    main = mod["main"]
    rename: dict = {}
    for spec, param in zip(source.inputs, main.params):
        shape = list(getattr(param.ty, "shape", None) or [])
        for axis, d in enumerate(spec.shape):
            if not isinstance(d, str) or axis >= len(shape):
                continue
            v = shape[axis]
            if not isinstance(v, tirx.Var):
                raise TiletuneError(f"{source.spec}: axis {axis} of {spec.name} ({d}) is not symbolic in the imported "
                                    f"model ({v}): the model fixes its size")
            rename.setdefault(v, tirx.Var(d, "int64"))
    if rename:
        mod = relax.transform.BindSymbolicVars(rename)(mod)
    dims = source.dims
    lo = {n: d.lo for n, d in dims.items()}
    hi = {n: d.hi for n, d in dims.items() if d.hi is not None}
    main = mod["main"].without_attr("tir_var_lower_bound").without_attr("tir_var_upper_bound")
    main = main.with_attr("tir_var_lower_bound", lo)
    if hi:
        main = main.with_attr("tir_var_upper_bound", hi)
    mod = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    mod["main"] = main
    return mod


def extra_converters() -> dict:
    """Converters for ATen operators that TVM 0.27's PyTorch frontend lacks or gets wrong: ``amax`` and ``amin``
    (a max or min over dimensions: global max pooling, masks); ``adaptive_max_pool2d`` where the output size
    divides the input's (a max pool of stride = window = input / output; the global pool included; overlapping
    cells are refused in one line); ``elu`` with its ``scale`` and ``input_scale`` (TVM ignores them, and
    torch.export writes SELU as ``elu(x, alpha, scale)``: TVM's SELU was off by the factor 1.0507); ``scatter_add``,
    ``scatter_reduce`` and ``scatter`` of a value or with ``reduce=`` (``tiletune.model.frontend.scatter_ops``); ``sort``
    with ``stable=True`` (``sort.stable``, whose arguments after the tensor are keywords) by TVM's own ``sort``
    converter, which reads them as keywords: its argsort keeps equal elements in their order (a stable sort);
    advanced indexing with several index tensors (``index.Tensor``, ``tiletune.model.frontend.advanced_index``)."""
    from tvm import relax

    def reduce(op):
        def convert(node, imp):
            args = imp.retrieve_args(node)
            dim = args[1] if len(node.args) > 1 else node.kwargs.get("dim", None)
            keep = args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
            return imp.block_builder.emit(op(args[0], list(dim) if dim else None, keepdims=bool(keep)))
        return convert

    def adaptive_max_pool2d(node, imp):
        args = imp.retrieve_args(node)
        x, size = args[0], list(args[1])
        h, w = (int(v) for v in list(x.ty.shape)[-2:])
        oh, ow = (d if d is not None else full for d, full in zip(size, (h, w)))
        if h % oh or w % ow:
            raise TiletuneError(f"adaptive_max_pool2d from {h}x{w} to {oh}x{ow}: only output sizes that divide "
                                "the input's are supported")
        out = imp.block_builder.emit(relax.op.nn.max_pool2d(x, pool_size=(h // oh, w // ow),
                                                            strides=(h // oh, w // ow)))
        return imp.block_builder.emit(relax.Tuple([out, relax.op.zeros_like(out)]))

    def elu(node, imp):  # ATen's elu(x, alpha, scale, input_scale); TVM's converter drops scale (SELU's)
        args = imp.retrieve_args(node)
        x = args[0]
        alpha, scale, input_scale = (float(args[i]) if len(args) > i else 1.0 for i in (1, 2, 3))
        dtype = x.ty.dtype

        def c(v):
            return relax.const(v, dtype)

        expm1 = relax.op.subtract(relax.op.exp(relax.op.multiply(x, c(input_scale))), c(1.0))
        out = relax.op.where(relax.op.greater(x, c(0.0)), x, relax.op.multiply(c(alpha), expm1))
        return imp.block_builder.emit(relax.op.multiply(out, c(scale)))

    return {"amax.default": reduce(relax.op.max), "amin.default": reduce(relax.op.min),
            "adaptive_max_pool2d.default": adaptive_max_pool2d, "elu.default": elu,
            "sort.stable": lambda node, imp: imp._sort(node), "index.Tensor": index_tensor, **scatter_converters()}


def _bool_compares_as_int8(mod):
    """``equal`` / ``not_equal`` of two bool tensors compared as int8: TVM 0.27's LLVM code generator emits
    a floating-point compare for bools (LLVM verification fails: "Invalid operand types for FCmp
    instruction"); GPT-2's causal mask has one."""
    from tvm import relax

    @relax.expr_functor.mutator
    class BoolCompare(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            op = getattr(call.op, "name", "")
            if op in ("relax.equal", "relax.not_equal") and all(
                    getattr(getattr(a, "ty", None), "dtype", "") == "bool" for a in call.args):
                a, b = [relax.op.astype(x, "int8") for x in call.args]
                return relax.op.equal(a, b) if op == "relax.equal" else relax.op.not_equal(a, b)
            return call

    for gv, f in list(mod.functions.items()):
        if isinstance(f, relax.Function):
            mod[gv] = BoolCompare().visit_expr(f)
    return mod


def _check_static(source: ModelSource, mod) -> None:
    """TiletuneError naming the first operator whose result has no static shape (kernels need them)."""
    from tvm import relax

    for block in getattr(mod["main"].body, "blocks", ()):
        for b in block.bindings:
            ty = getattr(b.var, "ty", None)
            if isinstance(ty, relax.TensorType) and ty.shape is None:
                op = getattr(getattr(b.value, "op", None), "name", type(b.value).__name__)
                raise TiletuneError(f"{source.spec}: the imported model computes a tensor of unknown shape ({op}); "
                                    "only static shapes are supported (export with static shapes and constant "
                                    "folding)")
