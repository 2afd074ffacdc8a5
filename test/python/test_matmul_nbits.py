"""onnxruntime's MatMulNBits (int4 and int8 weights, the builder's `-p int4`)
on models built with onnx.helper, the weights packed here in numpy as
onnxruntime reads them, compiled and run on host ranks against
onnxruntime's CPU kernel: equal at accuracy levels 0 and 1 (fp32 arithmetic
on the dequantized weight, as Partita computes), and at level 4 (A
quantized to int8 by onnxruntime) within the gap between the levels."""

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (BUILD, compile_and_run, onnx_model, value_info as vi,
                      initializer as const)

F = TensorProto.FLOAT
MS = "com.microsoft"


def pack(k, n, bits, block, zero_points, rng):
    """Random B, scales and zero points of a [k, n] weight, laid out as
    MatMulNBits reads them: column after column, blocks along k, the low
    nibble of each byte first."""
    blocks = -(-k // block)
    levels = 2 ** bits
    q = rng.integers(0, levels, (n, blocks, block))
    scales = (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32)
    zp = rng.integers(0, levels, (n, blocks))
    if bits == 4:
        packed = q[..., 0::2] | (q[..., 1::2] << 4)
        padded = np.zeros((n, blocks + blocks % 2), np.int64)
        padded[:, :blocks] = zp
        zbytes = padded[:, 0::2] | (padded[:, 1::2] << 4)
    else:
        packed, zbytes = q, zp
    return (packed.astype(np.uint8), scales,
            zbytes.astype(np.uint8) if zero_points else None)


def nbits_model(k, n, bits=4, block=32, zero_points=False, bias=False,
                a_shape=None, level=0, scales_1d=False, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    packed, scales, zp = pack(k, n, bits, block, zero_points, rng)
    if scales_1d:
        scales = scales.reshape(-1)
    inits = [const("B", packed), const("scales", scales)]
    inputs = ["A", "B", "scales"]
    if zp is not None:
        inits.append(const("zp", zp))
        inputs.append("zp")
    if bias:
        inputs += [""] * (5 - len(inputs)) + ["bias"]
        inits.append(const("bias", rng.standard_normal(n).astype(np.float32)))
    a_shape = a_shape or [2, 3, k]
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain=MS, K=k, N=n,
                            bits=bits, block_size=block, accuracy_level=level,
                            **attrs)
    return onnx_model([node], [vi("A", F, a_shape)],
                      [vi("Y", F, a_shape[:-1] + [n])], inits, opset=21,
                      domains=[(MS, 1)])


def onnxruntime(tmp_path, m, feeds):
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    return path, session.run(None, feeds)[0]


def partita(tmp_path, path, feeds, mesh=None):
    flags = ["--mesh", *mesh.split()] if mesh else []
    outputs, report = compile_and_run(tmp_path / "run", path, feeds, *flags)
    return outputs["Y"], report


def a_for(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(
        np.float32)


@pytest.mark.parametrize("k,n,bits,block,zero_points,bias,a_shape", [
    (64, 48, 4, 32, False, False, None),       # the builder's default
    (64, 48, 4, 32, True, True, None),         # asymmetric, with a bias
    (96, 40, 4, 32, True, False, None),        # three blocks: odd zero points
    (40, 24, 4, 16, True, False, None),        # a short last block
    (128, 32, 4, 128, False, False, [5, 128]), # one block per column, rank 2
    (64, 48, 8, 16, True, True, None),         # int8
    (72, 16, 8, 64, False, False, [1, 1, 72]), # int8, a short block, one row
])
def test_matmul_nbits_matches_onnxruntime(tmp_path, k, n, bits, block,
                                          zero_points, bias, a_shape):
    m = nbits_model(k, n, bits, block, zero_points, bias, a_shape)
    feeds = {"A": a_for(a_shape or [2, 3, k])}
    path, want = onnxruntime(tmp_path, m, feeds)
    got, _ = partita(tmp_path, path, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_one_dimensional_scales(tmp_path):
    # Older quantizers write scales as [N * blocks].
    m = nbits_model(64, 32, zero_points=True, scales_1d=True)
    feeds = {"A": a_for([2, 3, 64])}
    path, want = onnxruntime(tmp_path, m, feeds)
    got, _ = partita(tmp_path, path, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("level", [1, 4])
def test_accuracy_levels(tmp_path, level):
    # Partita computes in fp32 at every level: level 1 is level 0's
    # arithmetic; level 4 quantizes A to int8 in onnxruntime, and Partita
    # stays within the gap between the two levels.
    shape = [4, 8, 256]
    feeds = {"A": a_for(shape, seed=3)}
    for sub in ("l0", "lv"):
        (tmp_path / sub).mkdir()
    _, exact = onnxruntime(
        tmp_path / "l0",
        nbits_model(256, 64, zero_points=True, a_shape=shape, level=0), feeds)
    path, want = onnxruntime(
        tmp_path / "lv",
        nbits_model(256, 64, zero_points=True, a_shape=shape, level=level),
        feeds)
    got, _ = partita(tmp_path, path, feeds)
    if level == 1:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        return
    gap = np.abs(want - exact).max()
    assert gap > 0
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-5)
    assert np.abs(got - want).max() <= 1.01 * gap


@pytest.mark.parametrize("mesh", ["tp=2", "tp=4", "dp=2,tp=2"])
def test_tensor_parallel_mlp_splits_the_packed_blocks(tmp_path, mesh):
    # up (column-parallel) -> Relu -> down (row-parallel, zero points): each
    # rank holds its columns and its whole blocks of rows, packed.
    rng = np.random.default_rng(7)
    up_q, up_s, _ = pack(128, 256, 4, 32, False, rng)
    down_q, down_s, down_z = pack(256, 128, 4, 16, True, rng)
    nodes = [
        helper.make_node("MatMulNBits", ["A", "up_q", "up_s"], ["u"],
                         domain=MS, K=128, N=256, bits=4, block_size=32),
        helper.make_node("Relu", ["u"], ["h"]),
        helper.make_node("MatMulNBits", ["h", "down_q", "down_s", "down_z"],
                         ["Y"], domain=MS, K=256, N=128, bits=4,
                         block_size=16),
    ]
    m = onnx_model(nodes, [vi("A", F, [4, 3, 128])],
                   [vi("Y", F, [4, 3, 128])],
                   [const("up_q", up_q), const("up_s", up_s),
                    const("down_q", down_q), const("down_s", down_s),
                    const("down_z", down_z)], opset=21, domains=[(MS, 1)])
    feeds = {"A": a_for([4, 3, 128])}
    path, want = onnxruntime(tmp_path, m, feeds)
    got, report = partita(tmp_path, path, feeds, mesh)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # Each rank holds 1/tp of every packed tensor (4 bits per weight, a
    # scale per block, the down projection's zero points), never a float
    # weight. Blocks of at most 1 KiB stay inline in the program, outside
    # weight_bytes.
    tp = int(mesh.split("tp=")[1])
    shards = [a.nbytes // tp for a in (up_q, up_s, down_q, down_s, down_z)]
    for rank in report["ranks"]:
        assert rank["weight_bytes"] == sum(b for b in shards if b > 1024)


@pytest.mark.parametrize("change,message", [
    ({"bits": 2}, "MatMulNBits bits=2 is not supported (4 and 8 are)"),
    ({"block_size": 8}, "MatMulNBits block_size must be a power of two of at "
                        "least 16, got 8"),
    ({"K": 48}, "MatMulNBits A 'tensor<2x3x64xf32>' must end in K = 48"),
])
def test_matmul_nbits_refusals(compile_model, change, message):
    m = nbits_model(64, 32)
    for attribute in m.graph.node[0].attribute:
        if attribute.name in change:
            attribute.i = change[attribute.name]
    result = compile_model(m)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_g_idx_and_float_zero_points_are_refused(compile_model):
    m = nbits_model(64, 32)
    m.graph.initializer.append(const("g", np.zeros(64, np.int32)))
    m.graph.node[0].input.extend(["", "g"])
    result = compile_model(m)
    assert "MatMulNBits g_idx (a permuted block order) is not supported" in \
        result.stderr
    m = nbits_model(64, 32)
    m.graph.initializer.append(const("zf", np.zeros((32, 2), np.float32)))
    m.graph.node[0].input.append("zf")
    result = compile_model(m)
    assert result.returncode == 1
    assert "MatMulNBits zero_points of type float are not supported " \
        "(packed uint8 ones are)" in result.stderr


def test_packed_weights_as_inputs_are_refused(compile_model):
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"],
                            domain=MS, K=64, N=32, bits=4, block_size=32)
    m = onnx_model([node], [vi("A", F, [2, 64]),
                            vi("B", TensorProto.UINT8, [32, 2, 16])],
                   [vi("Y", F, [2, 32])],
                   [const("scales", np.ones((32, 2), np.float32))], opset=21,
                   domains=[(MS, 1)])
    result = compile_model(m)
    assert result.returncode == 1
    assert "input 'B' has type uint8, which Partita does not support" in \
        result.stderr


def test_training_int4_weights_is_refused(compile_model):
    result = compile_model(nbits_model(64, 32), "--train", "--loss",
                           "mse:Y", "--optimizer", "sgd:lr=0.1")
    assert result.returncode == 1
    assert "--train: MatMulNBits weights are packed integers" in result.stderr


@pytest.mark.parametrize("rows,block,zero_points,message", [
    # 64 rows in blocks of 32 with zero points two blocks to a byte: one
    # byte per column, which tp=2 cannot split.
    (64, 32, True, "its 2 blocks of 32 rows do not divide into 2 parts of "
     "whole blocks and whole bytes of zero points (2 blocks to a byte)"),
    # 40 rows in blocks of 16: the last block is short.
    (40, 16, False, "its 40 rows end in a short block of 8 (block_size "
     "16), and a split may not cut a block"),
])
def test_a_split_that_cuts_a_block_is_refused(tmp_path, rows, block,
                                              zero_points, message):
    rng = np.random.default_rng(8)
    up_q, up_s, _ = pack(32, rows, 4, 32, False, rng)
    down_q, down_s, down_z = pack(rows, 32, 4, block, zero_points, rng)
    inputs = ["h", "down_q", "down_s"] + (["down_z"] if zero_points else [])
    nodes = [
        helper.make_node("MatMulNBits", ["A", "up_q", "up_s"], ["u"],
                         domain=MS, K=32, N=rows, bits=4, block_size=32),
        helper.make_node("Relu", ["u"], ["h"]),
        helper.make_node("MatMulNBits", inputs, ["Y"], domain=MS, K=rows,
                         N=32, bits=4, block_size=block),
    ]
    inits = [const("up_q", up_q), const("up_s", up_s),
             const("down_q", down_q), const("down_s", down_s)]
    if zero_points:
        inits.append(const("down_z", down_z))
    m = onnx_model(nodes, [vi("A", F, [2, 32])], [vi("Y", F, [2, 32])],
                   inits, opset=21, domains=[(MS, 1)])
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    result = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(path), "--emit", "dist",
         "--mesh", "tp=2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "cannot split int4 weight 'down_q' (MLP down projection) over " \
        "tp=2: " + message in result.stderr, result.stderr
