"""Writes a model of onnxruntime's fused mixture of experts
(com.microsoft.MoE, 4 experts, a [2, 5, 64] input) with random inputs and
its reference outputs, for the CUDA emulation test: MODELS_DIR/NAME.onnx,
NAME.inputs.npz, NAME.outputs.npz. Its import is the router's softmax and
top k (k rounds of reductions) and nn.moe, which the generated grouped
kernels compute (lib/Target/CUDA/Moe.cpp).

FORM (default gpt_oss):
  gpt_oss  top 2 renormalized, SwiGLU interleaved with gpt-oss's alpha and
           beta and a limit that clamps, biases;
onnxruntime's outputs. fc3 top 2 renormalized, SwiGLU with a
    separate fc3 and every bias;
halves top 3,
    SwiGLU over fc1 's halves, no biases: forms onnxruntime' s
        CPU kernel refuses,
    so the reference is the schema's formula in float64 NumPy.gelu top 1,
    gelu(
        onnxruntime's tanh approximation), biases; onnxruntime's outputs. qmoe
            gpt_oss's form with int4 experts (com.microsoft.QMoE, blocks of 16 along
                each row,
        symmetric)
    : a batched nn.dequantize of the packed experts before nn.moe; onnxruntime's outputs.

Usage: make_moe_case.py MODELS_DIR NAME [FORM]
"""

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from make_case import ROOT, save_reference

sys.path.insert(0, str(ROOT / "test" / "python"))
from moe_reference import moe_reference  # noqa: E402

BATCH, SEQ, HIDDEN, FFN, EXPERTS = 2, 5, 64, 96, 4

FORMS = {
    "gpt_oss": dict(k=2, activation_type="swiglu", swiglu_fusion=1,
                    normalize_routing_weights=1, activation_alpha=1.702,
                    activation_beta=1.0, swiglu_limit=0.5, biases=True),
    "fc3": dict(k=2, activation_type="swiglu", swiglu_fusion=0,
                normalize_routing_weights=1, activation_alpha=1.702,
                activation_beta=1.0, biases=True, fc3=True),
    "halves": dict(k=3, activation_type="swiglu", swiglu_fusion=2,
                   normalize_routing_weights=0),
    "gelu": dict(k=1, activation_type="gelu", normalize_routing_weights=0,
                 biases=True),
    "qmoe": dict(k=2, activation_type="swiglu", swiglu_fusion=1,
                 normalize_routing_weights=1, activation_alpha=1.702,
                 activation_beta=1.0, swiglu_limit=0.5, biases=True,
                 int4=True),
}

BLOCK = 16


def int4(weights):
    """Symmetric int4 blocks of 16 along each row: the packed bytes (low
    nibble first) and the scales [E, rows, columns / 16]."""
    e, rows, cols = weights.shape
    blocks = weights.reshape(e, rows, cols // BLOCK, BLOCK)
    scales = np.abs(blocks).max(axis=3) / 7 + 1e-6
    q = np.clip(np.round(blocks / scales[..., None]) + 8, 0, 15)
    q = q.reshape(e, rows, cols).astype(np.uint8)
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8), \
        scales.astype(np.float32)


def main():
    folder, name = pathlib.Path(sys.argv[1]), sys.argv[2]
    form = dict(FORMS[sys.argv[3] if len(sys.argv) > 3 else "gpt_oss"])
    biases, fc3 = form.pop("biases", False), form.pop("fc3", False)
    quantize = form.pop("int4", False)
    rng = np.random.default_rng(37)
    tokens = BATCH * SEQ

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    swiglu = form["activation_type"] == "swiglu"
    fused = 2 * FFN if swiglu and form.get("swiglu_fusion") else FFN
    arrays = {
  "w1" : normal(EXPERTS, fused, HIDDEN), "w2" : normal(EXPERTS, HIDDEN, FFN)}
    if biases:
        arrays["b1"] = normal(EXPERTS, fused)
        arrays["b2"] = normal(EXPERTS, HIDDEN)
    moe_inputs = ["x", "logits", "w1", "b1" if biases else "", "w2",
                  "b2" if biases else ""]
    if fc3:
        arrays["w3"] = normal(EXPERTS, FFN, HIDDEN)
        arrays["b3"] = normal(EXPERTS, FFN)
        moe_inputs += ["w3", "b3"]
    router = normal(HIDDEN, EXPERTS, scale=1.0)
    op = "MoE"
    if quantize:
        op = "QMoE"
        form.update(expert_weight_bits=4, block_size=BLOCK)
        for weight in ("w1", "w2"):
            arrays[weight], arrays[weight + "_s"] = int4(arrays[weight])
        moe_inputs = ["x", "logits", "w1", "w1_s", "b1", "w2", "w2_s", "b2"]
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    inits += [numpy_helper.from_array(router, "router"),
              numpy_helper.from_array(np.array([tokens, HIDDEN], np.int64),
                                      "rows")]
    nodes = [
        helper.make_node("Reshape", ["x", "rows"], ["flat"]),
        helper.make_node("MatMul", ["flat", "router"], ["logits"]),
        helper.make_node(op, moe_inputs, ["y"], domain="com.microsoft",
                         **form)]
    graph = helper.make_graph(
        nodes, "moe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                       [BATCH, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [BATCH, SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    path = folder / f"{name}.onnx"
    onnx.save(model, str(path))
    x = normal(BATCH, SEQ, HIDDEN, scale=1.0)
    if not swiglu or form["swiglu_fusion"] == 1:
        session = ort.InferenceSession(str(path),
                                       providers=["CPUExecutionProvider"])
        save_reference(session, {"x": x}, folder, name)
        return
    flat = x.reshape(tokens, HIDDEN)
    logits = flat.astype(np.float64) @ router.astype(np.float64)
    names = {"w1": "fc1", "w2": "fc2", "w3": "fc3", "b1": "fc1_b",
             "b2": "fc2_b", "b3": "fc3_b"}
    y = moe_reference(flat, logits, {names[n]: a.astype(np.float64)
                                     for n, a in arrays.items()},
                      form["k"], form["normalize_routing_weights"], "swiglu",
                      form["swiglu_fusion"], form.get("activation_alpha", 1.0),
                      form.get("activation_beta", 0.0))
    np.savez(folder / f"{name}.inputs.npz", x=x)
    np.savez(folder / f"{name}.outputs.npz",
             y=y.reshape(BATCH, SEQ, HIDDEN).astype(np.float32))


if __name__ == "__main__":
    main()
