"""Writes a model of onnxruntime's MatMulNBits (int4 and int8 weights) with
random inputs and onnxruntime's outputs, for the CUDA emulation test:
MODELS_DIR/NAME.onnx, NAME.inputs.npz, NAME.outputs.npz. The weights are
quantized here, in numpy, the way onnxruntime's MatMulNBits reads them
(column after column, blocks along K, the low nibble first), so that the
reference is onnxruntime's arithmetic at accuracy level 0.

    h = gelu(MatMulNBits(x, 4 bits, blocks of 32, zero points) + bias)
    y = MatMulNBits(h, 8 bits, blocks of 16)          (an MLP, for tp=2)
    z = MatMulNBits(x, the first weight again)        (read twice: the
                                                        weight is dequantized
                                                        once, then multiplied)

Usage: make_int4_case.py MODELS_DIR NAME
"""

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from make_case import save_reference

BATCH, SEQ, HIDDEN, FFN = 2, 5, 64, 128


def quantize(k, n, bits, block, rng, zero_points):
    """Random MatMulNBits B, scales and zero points of a [k, n] weight."""
    blocks = -(-k // block)
    levels = 2 ** bits
    q = rng.integers(0, levels, (n, blocks, block))
    scales = (rng.random((n, blocks)) * 0.05 + 0.01).astype(np.float32)
    zp = (rng.integers(0, levels, (n, blocks)) if zero_points else
          np.full((n, blocks), levels // 2))
    if bits == 4:
        packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
        zpad = np.zeros((n, blocks + blocks % 2), np.int64)
        zpad[:, :blocks] = zp
        zbytes = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8)
    else:
        packed = q.astype(np.uint8)
        zbytes = zp.astype(np.uint8)
    return packed, scales, zbytes if zero_points else None


def matmul_nbits(name, a, out, k, n, bits, block, inits, rng, zero_points,
                 bias=None):
    packed, scales, zp = quantize(k, n, bits, block, rng, zero_points)
    inits.append(numpy_helper.from_array(packed, f"{name}_q"))
    inits.append(numpy_helper.from_array(scales, f"{name}_s"))
    inputs = [a, f"{name}_q", f"{name}_s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, f"{name}_zp"))
        inputs.append(f"{name}_zp")
    if bias is not None:
        inputs += ["", ""] if zp is None else [""]
        inits.append(numpy_helper.from_array(bias, f"{name}_b"))
        inputs.append(f"{name}_b")
    return helper.make_node("MatMulNBits", inputs, [out], domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=block,
                            accuracy_level=0)


def build():
    rng = np.random.default_rng(4)
    inits = []
    nodes = [
        matmul_nbits("up", "x", "u", HIDDEN, FFN, 4, 32, inits, rng, True,
                     bias=rng.standard_normal(FFN).astype(np.float32)),
        helper.make_node("Gelu", ["u"], ["h"], approximate="none"),
        matmul_nbits("down", "h", "y", FFN, HIDDEN, 8, 16, inits, rng, False),
    ]
    again = helper.make_node("MatMulNBits", ["x", "up_q", "up_s", "up_zp"],
                             ["z"], domain="com.microsoft", K=HIDDEN, N=FFN,
                             bits=4, block_size=32, accuracy_level=0)
    nodes.append(again)
    graph = helper.make_graph(
        nodes, "int4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                       [BATCH, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [BATCH, SEQ, HIDDEN]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                       [BATCH, SEQ, FFN])],
        inits)
    return helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)])


def main():
    folder, name = pathlib.Path(sys.argv[1]), sys.argv[2]
    model = build()
    onnx.save(model, folder / f"{name}.onnx")
    session = ort.InferenceSession(str(folder / f"{name}.onnx"),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)}
    save_reference(session, feeds, folder, name)


if __name__ == "__main__":
    main()
