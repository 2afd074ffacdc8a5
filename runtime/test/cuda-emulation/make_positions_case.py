"""Writes a model that computes rotary tables and cumulative sums from its
inputs, as Hugging Face dynamic exports do, with random inputs and
onnxruntime's outputs, for the CUDA emulation test: MODELS_DIR/NAME.onnx,
NAME.inputs.npz, NAME.outputs.npz. It exercises nn.sin, nn.cos and both
shapes of the generated cumsum kernel (a warp per row when the scanned axis
is innermost, a thread per line otherwise), with and without epilogues.

    positions = cumsum(mask, 1) - 1              (int64, a warp per row)
    angles    = positions * 100 * inv_freq       (up to about 3000 rad)
    emb       = concat(cos(angles), sin(angles))
    y         = x @ w                            (a matmul, for tp=2)
    rotated   = y * emb
    scan_seq  = cumsum(y, 1, reverse)            (a thread per line)
    scan_feat = cumsum(y, 2, exclusive)          (a warp per row, floats)
    counts    = cast(cumsum(int32(mask), 0, exclusive, reverse))

Usage: make_positions_case.py MODELS_DIR NAME
"""

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from make_case import save_reference

BATCH, SEQ, HIDDEN, HALF = 2, 40, 32, 16


def build():
    inv_freq = (1.0 / 10000 ** (np.arange(0, HIDDEN, 2) / HIDDEN)).astype(
        np.float32)
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(np.int64(1), "axis1"),
        numpy_helper.from_array(np.int64(0), "axis0"),
        numpy_helper.from_array(np.array([2], np.int64), "axis2"),
        numpy_helper.from_array(np.int64(1), "one"),
        numpy_helper.from_array(np.float32(100), "spread"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(inv_freq, "inv_freq"),
        numpy_helper.from_array(
            (rng.standard_normal((HIDDEN, HIDDEN)) / 4).astype(np.float32),
            "w"),
    ]
    nodes = [
        helper.make_node("CumSum", ["mask", "axis1"], ["counted"]),
        helper.make_node("Sub", ["counted", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["pf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["pf", "spread"], ["scaled"]),
        helper.make_node("Unsqueeze", ["scaled", "last"], ["column"]),
        helper.make_node("Mul", ["column", "inv_freq"], ["angles"]),
        helper.make_node("Cos", ["angles"], ["cos"]),
        helper.make_node("Sin", ["angles"], ["sin"]),
        helper.make_node("Concat", ["cos", "sin"], ["emb"], axis=-1),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Mul", ["y", "emb"], ["rotated"]),
        helper.make_node("CumSum", ["y", "axis1"], ["scan_seq"], reverse=1),
        helper.make_node("CumSum", ["y", "axis2"], ["scan_feat"],
                         exclusive=1),
        helper.make_node("Cast", ["mask"], ["mask32"], to=TensorProto.INT32),
        helper.make_node("CumSum", ["mask32", "axis0"], ["count32"],
                         exclusive=1, reverse=1),
        helper.make_node("Cast", ["count32"], ["counts"],
                         to=TensorProto.FLOAT),
    ]
    shape3 = [BATCH, SEQ, HIDDEN]
    graph = helper.make_graph(
        nodes, "positions",
        [helper.make_tensor_value_info("mask", TensorProto.INT64,
                                       [BATCH, SEQ]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, shape3)],
        [helper.make_tensor_value_info("rotated", TensorProto.FLOAT, shape3),
         helper.make_tensor_value_info("scan_seq", TensorProto.FLOAT, shape3),
         helper.make_tensor_value_info("scan_feat", TensorProto.FLOAT, shape3),
         helper.make_tensor_value_info("counts", TensorProto.FLOAT,
                                       [BATCH, SEQ])],
        inits)
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main():
    folder, name = pathlib.Path(sys.argv[1]), sys.argv[2]
    model = build()
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    rng = np.random.default_rng(4)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, :7] = 0  # Left padding.
    feeds = {"mask": mask,
             "x": rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)}
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    save_reference(session, feeds, folder, name)


if __name__ == "__main__":
    main()
