"""ONNX ``LSTM``, ``GRU``, ``RNN`` and ``Celu`` for TVM 0.27's Relax ONNX frontend, which has no converter for
them, and ``ScatterElements`` with a ``min`` or ``max`` reduction below opset 18 (``OVERRIDES``).

Use ``with onnx_converters(): mod = from_onnx(...)``: inside the block the frontend's operator table
(``onnx_frontend._get_convert_map``, which the importer calls when it checks for unsupported operators and
again for each node) also holds these; on exit the original table function is back, errors included.

Each converter unrolls the time loop (the sequence length must be static) into Relax matmuls and elementwise
ops: the input projection of all steps is one matmul per direction, then one matmul by the recurrence weights
per step. What ``torch.onnx.export`` emits for ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` is covered: ``layout`` 0,
directions forward, reverse and bidirectional, one ONNX op per layer, ``B``, ``initial_h`` and ``initial_c``
given or absent, ``sequence_lens`` absent (or a constant equal to the full length), GRU's
``linear_before_reset`` 0 and 1, the default activations (RNN: ``Tanh`` or ``Relu``). Anything else (peepholes
``P``, ``clip``, ``input_forget``, other activations, ``layout`` 1, shorter sequences) is refused with a
``TiletuneError`` naming the node's operator and the attribute.

Outputs are a Relax ``Tuple``: ``(Y, Y_h, Y_c)`` for LSTM, ``(Y, Y_h)`` for GRU and RNN, with ``Y`` of shape
``[seq, num_directions, batch, hidden]`` and ``Y_h`` / ``Y_c`` of ``[num_directions, batch, hidden]``. The
frontend binds a node's listed outputs to the tuple's fields in order; an output the node leaves out is
simply unused.
"""
from __future__ import annotations

import contextlib
import io
import re
import sys

import numpy as np
import tvm
from tvm import relax

from ...errors import TiletuneError
from .scatter_ops import elements

_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _split(bb, t, sections, axis: int) -> list:
    """``t`` split along ``axis`` (one split op), its parts emitted."""
    parts = bb.emit(relax.op.split(t, sections, axis=axis))
    n = sections if isinstance(sections, int) else len(sections) + 1
    return [bb.emit(relax.TupleGetItem(parts, i)) for i in range(n)]


def _static_shape(expr, what: str, op: str) -> list[int]:
    try:
        return [int(d) for d in expr.ty.shape]
    except Exception:  # noqa: BLE001  (symbolic dimension or unknown shape)
        raise TiletuneError(f"ONNX {op}: {what} needs a static shape (got {getattr(expr.ty, 'shape', None)})") \
            from None


class _Converter:
    """What TVM's ONNX frontend asks of a converter (its ``OnnxOpConverter`` contract, written here so that this
    module imports without onnx): ``get_converter(opset)`` gives the ``_impl_vN`` of the largest N <= opset."""

    @classmethod
    def get_converter(cls, opset):
        versions = sorted(int(d[len("_impl_v"):]) for d in dir(cls) if d.startswith("_impl_v"))
        fit = [v for v in versions if v <= opset]
        return getattr(cls, f"_impl_v{max(fit) if fit else versions[0]}")


class _Recurrent(_Converter):
    """What the three converters share: attribute checks, per-direction slicing, the unrolled loop."""

    op = ""

    @classmethod
    def _check(cls, inputs, attr, seq: int) -> tuple[str, int, tuple[str, ...]]:
        op = cls.op
        direction = _text(attr.get("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            raise TiletuneError(f"ONNX {op}: unknown direction {direction!r}")
        dirs = 2 if direction == "bidirectional" else 1
        if int(attr.get("layout", 0)) != 0:
            raise TiletuneError(f"ONNX {op}: layout={attr['layout']} is not supported (only layout=0, "
                                "[seq, batch, input], as torch.onnx.export writes it)")
        if "clip" in attr:
            raise TiletuneError(f"ONNX {op}: the clip attribute is not supported")
        if int(attr.get("input_forget", 0)) != 0:
            raise TiletuneError(f"ONNX {op}: input_forget=1 (coupled input and forget gates) is not supported")
        if op == "LSTM" and inputs[7] is not None:
            raise TiletuneError("ONNX LSTM: peephole weights (input P) are not supported")
        default = _DEFAULT_ACTIVATIONS[op]
        acts = tuple(_text(a) for a in attr.get("activations", default * dirs))
        allowed = [default * dirs] + ([("Relu",) * dirs] if op == "RNN" else [])
        if acts not in allowed:
            raise TiletuneError(f"ONNX {op}: activations {list(acts)} are not supported (only "
                                + " or ".join(str(list(a)) for a in allowed) + ")")
        lens = inputs[4]
        if lens is not None:
            if not isinstance(lens, tvm.ir.GenericConst) or not np.all(lens.value.numpy() == seq):
                raise TiletuneError(f"ONNX {op}: sequence_lens must be absent or a constant equal to the full "
                                    f"sequence length {seq} (shorter or run-time sequence lengths are not supported)")
        return direction, dirs, acts

    @classmethod
    def _convert(cls, bb, inputs, attr):
        op, gates = cls.op, _GATES[cls.op]
        x, w, r, b = inputs[0], inputs[1], inputs[2], inputs[3]
        seq, batch, n_in = _static_shape(x, "X", op)
        direction, dirs, acts = cls._check(inputs, attr, seq)
        hidden = _static_shape(r, "R", op)[-1]
        for name, t, cols in (("W", w, n_in), ("R", r, hidden)):
            want = [dirs, gates * hidden, cols]
            if _static_shape(t, name, op) != want:
                raise TiletuneError(f"ONNX {op}: {name} has shape {_static_shape(t, name, op)}, expected {want}")
        if "hidden_size" in attr and int(attr["hidden_size"]) != hidden:
            raise TiletuneError(f"ONNX {op}: hidden_size={attr['hidden_size']} but R has {hidden} columns")
        dtype = str(x.ty.dtype)
        h0, c0 = inputs[5], (inputs[6] if op == "LSTM" else None)
        emit = bb.emit

        def direction_slice(t, d):  # [num_directions, ...] -> the [...] of direction d
            return emit(relax.op.squeeze(relax.op.strided_slice(t, axes=[0], begin=[d], end=[d + 1]), axis=[0]))

        def zeros():
            return relax.const(np.zeros((batch, hidden), dtype=dtype))

        def unstack(t):  # [seq, ...] -> seq tensors [...]
            if seq == 1:  # split into one section gives the tensor, not a tuple
                return [emit(relax.op.squeeze(t, axis=[0]))]
            return [emit(relax.op.squeeze(p, axis=[0])) for p in _split(bb, t, seq, 0)]

        ys, hs, cs = [], [], []
        for d in range(dirs):
            reverse = direction == "reverse" or d == 1
            w_t = emit(relax.op.permute_dims(direction_slice(w, d), [1, 0]))  # [input, gates * hidden]
            r_d = direction_slice(r, d)  # [gates * hidden, hidden]
            wb = rb = None
            if b is not None:
                bias = direction_slice(b, d)  # [2 * gates * hidden]: Wb then Rb
                wb, rb = _split(bb, bias, 2, 0)
            # the input projection of every step in one matmul, its bias Wb included; the recurrence bias Rb
            # is added per step by _step (GRU with linear_before_reset needs it inside the reset product)
            xw = emit(relax.op.matmul(x, w_t))  # [seq, batch, gates * hidden]
            if wb is not None:
                xw = emit(relax.op.add(xw, wb))
            xs = unstack(xw)
            h = direction_slice(h0, d) if h0 is not None else zeros()
            c = (direction_slice(c0, d) if c0 is not None else zeros()) if op == "LSTM" else None
            state = cls._recurrence(bb, r_d, rb, hidden)
            out = [None] * seq
            for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
                h, c = cls._step(bb, xs[t], h, c, state, attr, acts[d * len(acts) // dirs:])
                out[t] = h
            ys.append(emit(relax.op.stack(out, axis=0)))  # [seq, batch, hidden]
            hs.append(h)
            cs.append(c)
        y = emit(relax.op.stack(ys, axis=1))  # [seq, num_directions, batch, hidden]
        y_h = emit(relax.op.stack(hs, axis=0))  # [num_directions, batch, hidden]
        if op == "LSTM":
            return relax.Tuple([y, y_h, emit(relax.op.stack(cs, axis=0))])
        return relax.Tuple([y, y_h])

    @classmethod
    def _recurrence(cls, bb, r_d, rb, hidden):
        return {"r_t": bb.emit(relax.op.permute_dims(r_d, [1, 0])), "rb": rb}

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        return cls._convert(bb, inputs, attr)

    @staticmethod
    def _gates(bb, xw, h, state):
        """The pre-activations of one step: X W^T (all steps at once, ``xw``) + H R^T + the recurrence bias."""
        g = bb.emit(relax.op.add(xw, bb.emit(relax.op.matmul(h, state["r_t"]))))
        return g if state["rb"] is None else bb.emit(relax.op.add(g, state["rb"]))

    @staticmethod
    def _act(name, v):
        return {"Sigmoid": relax.op.sigmoid, "Tanh": relax.op.tanh, "Relu": relax.op.nn.relu}[name](v)


class LSTM(_Recurrent):
    """ONNX LSTM (gates i, o, f, c): C = f*C + i*tanh(.), H = o*tanh(C)."""

    op = "LSTM"

    @classmethod
    def _step(cls, bb, xw, h, c, state, attr, acts):
        e = bb.emit
        i, o, f, cc = _split(bb, cls._gates(bb, xw, h, state), 4, -1)
        i, o, f = (e(cls._act(acts[0], v)) for v in (i, o, f))
        cc = e(cls._act(acts[1], cc))
        c = e(relax.op.add(e(relax.op.multiply(f, c)), e(relax.op.multiply(i, cc))))
        h = e(relax.op.multiply(o, e(cls._act(acts[2], c))))
        return h, c


class GRU(_Recurrent):
    """ONNX GRU (gates z, r, h): H = (1 - z) * h~ + z * H, with h~ from the reset gate before
    (linear_before_reset=0) or after (=1, torch's form) the recurrence matmul."""

    op = "GRU"

    @classmethod
    def _recurrence(cls, bb, r_d, rb, hidden):
        e = bb.emit
        r_t = e(relax.op.permute_dims(r_d, [1, 0]))  # [hidden, 3 * hidden]
        rzr, rh = _split(bb, r_t, [2 * hidden], 1)
        s = {"r_t": r_t, "r_zr": rzr, "r_h": rh, "rb": rb, "rb_zr": None, "rb_h": None}
        if rb is not None:
            s["rb_zr"], s["rb_h"] = _split(bb, rb, [2 * hidden], 0)
        return s

    @classmethod
    def _step(cls, bb, xw, h, c, state, attr, acts):
        e = bb.emit
        dtype = str(xw.ty.dtype)
        xz, xr, xh = _split(bb, xw, 3, -1)
        if int(attr.get("linear_before_reset", 0)):
            hr = e(relax.op.matmul(h, state["r_t"]))
            if state["rb"] is not None:
                hr = e(relax.op.add(hr, state["rb"]))
            hz, hrr, hh = _split(bb, hr, 3, -1)
            z = e(cls._act(acts[0], e(relax.op.add(xz, hz))))
            r = e(cls._act(acts[0], e(relax.op.add(xr, hrr))))
            cand = e(cls._act(acts[1], e(relax.op.add(xh, e(relax.op.multiply(r, hh))))))
        else:
            hzr = e(relax.op.matmul(h, state["r_zr"]))
            if state["rb_zr"] is not None:
                hzr = e(relax.op.add(hzr, state["rb_zr"]))
            hz, hrr = _split(bb, hzr, 2, -1)
            z = e(cls._act(acts[0], e(relax.op.add(xz, hz))))
            r = e(cls._act(acts[0], e(relax.op.add(xr, hrr))))
            hh = e(relax.op.matmul(e(relax.op.multiply(r, h)), state["r_h"]))
            if state["rb_h"] is not None:
                hh = e(relax.op.add(hh, state["rb_h"]))
            cand = e(cls._act(acts[1], e(relax.op.add(xh, hh))))
        one = relax.const(1.0, dtype)
        h = e(relax.op.add(e(relax.op.multiply(e(relax.op.subtract(one, z)), cand)), e(relax.op.multiply(z, h))))
        return h, None


class RNN(_Recurrent):
    """ONNX RNN: H = f(X W^T + H R^T + Wb + Rb), f Tanh (default) or Relu."""

    op = "RNN"

    @classmethod
    def _step(cls, bb, xw, h, c, state, attr, acts):
        return bb.emit(cls._act(acts[0], cls._gates(bb, xw, h, state))), None


class Celu(_Converter):
    """ONNX Celu: max(0, x) + min(0, alpha (exp(x / alpha) - 1)), alpha an attribute (default 1)."""

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        x = inputs[0]
        dtype = x.ty.dtype
        alpha = float(attr.get("alpha", 1.0))
        a = relax.const(alpha, dtype)
        neg = relax.op.multiply(a, relax.op.subtract(relax.op.exp(relax.op.divide(x, a)), relax.const(1.0, dtype)))
        zero = relax.const(0.0, dtype)
        return bb.emit(relax.op.add(relax.op.maximum(x, zero), relax.op.minimum(neg, zero)))


class ScatterElements(_Converter):
    """ONNX ScatterElements with any of its reductions (none, add, mul, min, max) at every opset: torch's
    exporter writes ``scatter_reduce(..., "amax"/"amin")`` as ``min`` / ``max`` at opset 17 (ONNX Runtime runs
    it), which TVM's converter takes from opset 18 only; and an index shorter than the data off the scatter axis
    padded first (``tiletune.model.frontend.scatter_ops.elements``: TVM's kernel wrote to the wrong places)."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        reduction = _text(attr.get("reduction", "none"))
        if reduction not in ("none", "add", "mul", "min", "max"):
            raise TiletuneError(f"ONNX ScatterElements with reduction {reduction!r}: only none, add, mul, min and "
                                "max are supported")
        data = inputs[0]
        axis = int(attr.get("axis", 0)) % len(data.ty.shape)
        return elements(bb, data, inputs[1], inputs[2], axis, "update" if reduction == "none" else reduction)


CONVERTERS = {"LSTM": LSTM, "GRU": GRU, "RNN": RNN, "Celu": Celu}
#: converters used instead of the frontend's own
OVERRIDES = {"ScatterElements": ScatterElements}


#: what TVM's ONNX frontend prints (to stdout, with every input's IR) before it re-raises a converter's error
_CONVERTING = re.compile(r"^Error converting operator (\w+)")


@contextlib.contextmanager
def onnx_converters():
    """Within the block, TVM's Relax ONNX frontend also converts ``LSTM``, ``GRU``, ``RNN`` and ``Celu`` (its own
    converter wins where it has one), and ``ScatterElements`` by ours (``OVERRIDES``). Only the module function
    ``onnx_frontend._get_convert_map`` is replaced, and put back on exit whatever happens; nested blocks restore
    in order.

    The frontend's "Error converting operator OP, with inputs: ..." line (printed to stdout, inputs' IR and all)
    is kept out of the terminal: the error that follows it names the operator instead (its message starts with
    ``ONNX operator OP:``); anything else printed in the block is printed when it ends."""
    from tvm.relax.frontend.onnx import onnx_frontend

    original = onnx_frontend._get_convert_map

    def extended():
        table = original()
        for name, conv in CONVERTERS.items():
            table.setdefault(name, conv)
        table.update(OVERRIDES)
        return table

    onnx_frontend._get_convert_map = extended
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            yield
    except Exception as e:
        op = next((m.group(1) for m in map(_CONVERTING.match, printed.getvalue().splitlines()) if m), None)
        if op and e.args and isinstance(e.args[0], str) and not e.args[0].startswith("ONNX operator"):
            e.args = (f"ONNX operator {op}: {e.args[0]}",) + tuple(e.args[1:])
        raise
    finally:
        onnx_frontend._get_convert_map = original
        rest = [ln for ln in printed.getvalue().splitlines(keepends=True) if not _CONVERTING.match(ln)]
        sys.stdout.write("".join(rest))
