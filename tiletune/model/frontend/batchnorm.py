"""BatchNorm folded into the convolution before it, for inference: one convolution with scaled weights and a bias.

A folded convolution is the kernel ``tiletune model tune`` tunes; left unfolded, BatchNorm is an elementwise
epilogue of the convolution's kernel (the importer decomposes it), a kernel of another workload key. Two forms:

- **modules**: a ``Conv2d`` followed by a ``BatchNorm2d`` (``torch.fx.experimental.optimization.fuse``), as a model
  written with ``nn`` modules traces;
- **functions**: ``torch.conv2d`` / ``F.conv2d`` followed by ``F.batch_norm(..., training=False)`` on constants
  (the graph's ``get_attr`` tensors), as dynamo hands a module's graph to a ``torch.compile`` backend (the
  parameters lifted, the modules' calls as functions; ``tiletune.torch_backend.graph`` makes them constants).

Both use ``torch.nn.utils.fusion.fuse_conv_bn_weights`` (the same arithmetic, so the two forms give the same
weights). A module that fx cannot trace (data-dependent control flow) keeps its BatchNorm.
"""
from __future__ import annotations

import copy
import inspect


def fold_batchnorm(module):
    """A copy of ``module`` with BatchNorm folded into the convolutions before it (the module docstring), or the
    module itself where fx cannot trace it."""
    try:
        from torch.fx.experimental.optimization import fuse

        traced = fuse(copy.deepcopy(module))
    except Exception:  # noqa: BLE001  (data-dependent control flow, untraceable modules: keep the module)
        return module
    fold_functional(traced)
    return traced


def _conv_bn_signatures():
    import torch.nn.functional as F

    def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
        pass

    return inspect.signature(conv), inspect.signature(F.batch_norm)


def _bound(sig, node) -> dict | None:
    try:
        b = sig.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    b.apply_defaults()
    return dict(b.arguments)


def _constant(gm, arg):
    """The tensor a ``get_attr`` node names, None for None; False for anything else (not foldable)."""
    import torch

    if arg is None:
        return None
    if getattr(arg, "op", None) != "get_attr":
        return False
    value = gm
    for part in arg.target.split("."):
        value = getattr(value, part, None)
    return value.detach() if isinstance(value, torch.Tensor) else False


def fold_functional(gm) -> int:
    """Fold every ``F.batch_norm`` (inference) whose input is a 2-D convolution used by it alone, both on
    constants, into that convolution (in place: the folded weights become buffers of ``gm``); the number folded."""
    import torch
    import torch.nn.functional as F
    from torch.nn.utils.fusion import fuse_conv_bn_weights

    conv_sig, bn_sig = _conv_bn_signatures()
    folded = 0
    for bn in list(gm.graph.nodes):
        if bn.op != "call_function" or bn.target is not F.batch_norm:
            continue
        conv = bn.args[0] if bn.args else None
        if getattr(conv, "op", None) != "call_function" or conv.target not in (torch.conv2d, F.conv2d):
            continue
        if len(conv.users) != 1:
            continue
        b, c = _bound(bn_sig, bn), _bound(conv_sig, conv)
        if b is None or c is None or b["training"] is not False:
            continue
        tensors = [_constant(gm, x) for x in (c["weight"], c["bias"], b["running_mean"], b["running_var"],
                                               b["weight"], b["bias"])]
        if any(t is False for t in tensors) or tensors[0] is None or tensors[2] is None or tensors[3] is None:
            continue
        cw, cb, mean, var, bw, bb = tensors
        w, bias = fuse_conv_bn_weights(cw, cb, mean, var, float(b["eps"]), bw, bb)
        names = []
        for kind, t in (("weight", w), ("bias", bias)):
            name = f"_bn_folded_{kind}_{folded}"
            while hasattr(gm, name):
                name += "_"
            gm.register_buffer(name, t.detach())
            names.append(name)
        with gm.graph.inserting_before(conv):
            nw, nb = gm.graph.get_attr(names[0]), gm.graph.get_attr(names[1])
        c["weight"], c["bias"] = nw, nb
        conv.args, conv.kwargs = tuple(c.values()), {}
        bn.replace_all_uses_with(conv)
        gm.graph.erase_node(bn)
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded
