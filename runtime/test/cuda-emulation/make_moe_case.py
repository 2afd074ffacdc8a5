"""Writes a model of onnxruntime's fused mixture of experts
(com.microsoft.MoE: 4 experts, top 2 renormalized, SwiGLU interleaved with
gpt-oss's alpha, beta and limit, biases; a [2, 5, 64] input) with random
inputs and onnxruntime's outputs, for the CUDA emulation test:
MODELS_DIR/NAME.onnx, NAME.inputs.npz, NAME.outputs.npz. Its import is
the router's softmax and top k (k rounds of reductions) and nn.moe, which
the exec pipeline writes densely for CUDA (partita-expand-moe): batched
matmuls over the stacked expert weights, strided slices and `where`.

Usage: make_moe_case.py MODELS_DIR NAME
"""

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from make_case import save_reference

BATCH, SEQ, HIDDEN, FFN, EXPERTS = 2, 5, 64, 96, 4


def main():
    folder, name = pathlib.Path(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(37)
    tokens = BATCH * SEQ

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = [numpy_helper.from_array(normal(EXPERTS, 2 * FFN, HIDDEN), "w1"),
             numpy_helper.from_array(normal(EXPERTS, 2 * FFN), "b1"),
             numpy_helper.from_array(normal(EXPERTS, HIDDEN, FFN), "w2"),
             numpy_helper.from_array(normal(EXPERTS, HIDDEN), "b2"),
             numpy_helper.from_array(normal(HIDDEN, EXPERTS, scale=1.0),
                                     "router")]
    nodes = [
        helper.make_node("Reshape", ["x", "rows"], ["flat"]),
        helper.make_node("MatMul", ["flat", "router"], ["logits"]),
        helper.make_node("MoE", ["x", "logits", "w1", "b1", "w2", "b2"],
                         ["y"], domain="com.microsoft", k=2,
                         activation_type="swiglu", swiglu_fusion=1,
                         normalize_routing_weights=1, activation_alpha=1.702,
                         activation_beta=1.0, swiglu_limit=0.5)]
    inits.append(numpy_helper.from_array(np.array([tokens, HIDDEN],
                                                  np.int64), "rows"))
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
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    save_reference(session, {"x": normal(BATCH, SEQ, HIDDEN, scale=1.0)},
                   folder, name)


if __name__ == "__main__":
    main()
