"""ONNX LSTM / GRU / RNN converters (tiletune.model.frontend.onnx_ops): torch's exports imported by TVM's ONNX frontend,
compiled for the CPU and compared output by output with torch; hand-made nodes that torch never writes
(GRU linear_before_reset=0, reverse direction, sequence_lens) against ONNX Runtime; refusals in one line."""
import warnings

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx, onnx_frontend  # noqa: E402

from tiletune.errors import TiletuneError  # noqa: E402
from tiletune.model.frontend.onnx_ops import onnx_converters  # noqa: E402

INPUT, HIDDEN, SEQ, BATCH = 5, 7, 4, 2


def run_tvm(model, feeds: dict):
    """Import ``model`` (an onnx ModelProto) under the converters, compile for llvm, run on ``feeds``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with onnx_converters():
            mod = from_onnx(model, shape_dict={k: list(v.shape) for k, v in feeds.items()},
                            dtype_dict={k: str(v.dtype) for k, v in feeds.items()}, keep_params_in_input=False)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    return [o.numpy() for o in out]  # every recurrent node here has several outputs: the VM returns a tuple


def export(module, args, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), opset_version=17, dynamo=False)
    return onnx.load(str(path))


CASES = [  # (cell, layers, bidirectional, batch_first, initial states as inputs, extra options)
    ("LSTM", 1, False, False, False, {}),
    ("LSTM", 2, True, True, True, {}),
    ("LSTM", 2, False, True, False, {}),
    ("GRU", 1, False, False, False, {}),
    ("GRU", 2, True, True, True, {}),
    ("RNN", 1, True, False, True, {}),
    ("RNN", 1, False, True, False, {"nonlinearity": "relu"}),
]


@pytest.mark.parametrize("cell,layers,bidir,batch_first,states,opts", CASES,
                         ids=[f"{c[0]}-l{c[1]}-{'bi' if c[2] else 'fw'}-{'bf' if c[3] else 'sf'}"
                              f"-{'h0' if c[4] else 'noh0'}{'-relu' if c[5] else ''}" for c in CASES])
def test_torch_export_matches_torch(tmp_path, cell, layers, bidir, batch_first, states, opts):
    torch.manual_seed(0)
    m = getattr(torch.nn, cell)(INPUT, HIDDEN, num_layers=layers, bidirectional=bidir, batch_first=batch_first,
                                **opts).eval()
    x = torch.randn((BATCH, SEQ, INPUT) if batch_first else (SEQ, BATCH, INPUT))
    h_shape = (layers * (2 if bidir else 1), BATCH, HIDDEN)
    if states:
        h0 = torch.randn(h_shape)
        args = (x, (h0, torch.randn(h_shape))) if cell == "LSTM" else (x, h0)
    else:
        args = (x,)
    with torch.no_grad():
        out = m(*args)
    want = [out[0], *out[1]] if cell == "LSTM" else list(out)
    model = export(m, args, tmp_path / "m.onnx")
    flat = [x] + (list(args[1]) if cell == "LSTM" and states else [args[1]] if states else [])
    names = [i.name for i in model.graph.input]
    assert len(names) == len(flat)
    got = run_tvm(model, {n: t.numpy() for n, t in zip(names, flat)})
    assert len(got) == len(want) == (3 if cell == "LSTM" else 2)
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape)
        np.testing.assert_allclose(g, w.numpy(), atol=1e-5, rtol=0)


def gru_node_model(lbr: int, direction: str, with_bias=True, with_h0=True, seq_lens=None, extra_attrs=None,
                   op="GRU", peephole=False, seq=SEQ):
    """One hand-made ONNX GRU/LSTM node (weights as initializers), inputs X (and initial_h)."""
    rng = np.random.default_rng(1)
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    inits = [helper.make_tensor("W", TensorProto.FLOAT, (dirs, gates * HIDDEN, INPUT),
                                rng.standard_normal((dirs, gates * HIDDEN, INPUT)).astype(np.float32).ravel()),
             helper.make_tensor("R", TensorProto.FLOAT, (dirs, gates * HIDDEN, HIDDEN),
                                rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)).astype(np.float32).ravel())]
    node_inputs = ["X", "W", "R", "", "", ""]
    if with_bias:
        inits.append(helper.make_tensor("B", TensorProto.FLOAT, (dirs, 2 * gates * HIDDEN),
                                        rng.standard_normal((dirs, 2 * gates * HIDDEN)).astype(np.float32).ravel()))
        node_inputs[3] = "B"
    if seq_lens is not None:
        inits.append(helper.make_tensor("L", TensorProto.INT32, (BATCH,), seq_lens))
        node_inputs[4] = "L"
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, (seq, BATCH, INPUT))]
    if with_h0:
        graph_inputs.append(helper.make_tensor_value_info("H0", TensorProto.FLOAT, (dirs, BATCH, HIDDEN)))
        node_inputs[5] = "H0"
    if peephole:
        inits.append(helper.make_tensor("P", TensorProto.FLOAT, (dirs, 3 * HIDDEN), np.zeros(dirs * 3 * HIDDEN)))
        node_inputs += ["", "P"]
    attrs = {"hidden_size": HIDDEN, "direction": direction, **(extra_attrs or {})}
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    node = helper.make_node(op, node_inputs, ["Y", "Y_h"], **attrs)
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (seq, dirs, BATCH, HIDDEN)),
               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, (dirs, BATCH, HIDDEN))]
    graph = helper.make_graph([node], "g", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("lbr,direction,with_bias,with_h0,seq", [
    (0, "bidirectional", True, True, SEQ), (0, "reverse", False, False, SEQ), (1, "reverse", True, False, 1)])
def test_hand_made_gru_matches_onnxruntime(lbr, direction, with_bias, with_h0, seq):
    ort = pytest.importorskip("onnxruntime")
    model = gru_node_model(lbr, direction, with_bias, with_h0, seq_lens=[seq] * BATCH, seq=seq)
    rng = np.random.default_rng(2)
    feeds = {"X": rng.standard_normal((seq, BATCH, INPUT)).astype(np.float32)}
    if with_h0:
        feeds["H0"] = rng.standard_normal((2 if direction == "bidirectional" else 1, BATCH, HIDDEN)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_tvm(model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kwargs,message", [
    ({"seq_lens": [SEQ, SEQ - 1]}, "sequence_lens"),
    ({"extra_attrs": {"activations": ["Relu", "Tanh"]}}, "activations"),
    ({"extra_attrs": {"clip": 3.0}}, "clip"),
    ({"extra_attrs": {"layout": 1}}, "layout"),
    ({"op": "LSTM", "peephole": True}, "peephole"),
])
def test_unsupported_forms_are_refused_in_one_line(kwargs, message):
    model = gru_node_model(1, "forward", **kwargs)
    feeds = {"X": (SEQ, BATCH, INPUT), "H0": (1, BATCH, HIDDEN)}
    with pytest.raises(TiletuneError, match=message) as e, warnings.catch_warnings(), onnx_converters():
        warnings.simplefilter("ignore")
        from_onnx(model, shape_dict=feeds, keep_params_in_input=False)
    assert "\n" not in str(e.value)


def test_converters_are_registered_only_inside_the_block():
    original = onnx_frontend._get_convert_map
    model = gru_node_model(1, "forward")
    shapes = {"X": (SEQ, BATCH, INPUT), "H0": (1, BATCH, HIDDEN)}
    with pytest.raises(tvm.error.OpNotImplemented, match="GRU"):
        from_onnx(model, shape_dict=shapes)
    with pytest.raises(RuntimeError, match="boom"), onnx_converters():
        assert {"LSTM", "GRU", "RNN"} <= set(onnx_frontend._get_convert_map())
        raise RuntimeError("boom")
    assert onnx_frontend._get_convert_map is original  # restored after an error
    assert "GRU" not in onnx_frontend._get_convert_map()
