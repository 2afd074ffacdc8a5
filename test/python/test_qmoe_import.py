"""onnxruntime's quantized mixture of experts (com.microsoft.QMoE: what
onnxruntime-genai's builder writes for int4 mixtures) imports as batched
nn.dequantize of the stacked packed experts and nn.moe, and runs like
onnxruntime's CPU kernel; the forms that kernel refuses against a float64
NumPy reference on the dequantized weights."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import compile_and_run
from moe_reference import moe_reference

F32 = TensorProto.FLOAT


def quantized(rng, experts, rows, cols, bits, block, zero_points):
    """Random `bits`-bit experts [E, rows, cols]: the packed bytes (each
    row's values, the low bits of a byte first), the scales (a block of
    `block` columns each, or one per row when block is 0), the packed zero
    points, and the dequantized float64 weights."""
    levels = 1 << bits
    q = rng.integers(0, levels, (experts, rows, cols))
    per = block or cols
    blocks = cols // per
    scales = (rng.random((experts, rows, blocks)) * 0.05 + 0.01).astype(
        np.float32)
    if zero_points:
        zero = rng.integers(0, levels, (experts, rows, blocks))
    else:
        zero = np.full((experts, rows, blocks), levels // 2)
    weights = (q - np.repeat(zero, per, axis=2)) * \
        np.repeat(scales.astype(np.float64), per, axis=2)
    if bits == 4:
        packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
        zp = zero if blocks % 2 == 0 else np.concatenate(
            [zero, np.zeros((experts, rows, 1), zero.dtype)], axis=2)
        zp = (zp[..., 0::2] | (zp[..., 1::2] << 4)).astype(np.uint8)
    else:
        packed, zp = q.astype(np.uint8), zero.astype(np.uint8)
    if not block:  # Per row: scales and zero points [E, rows].
        return packed, scales[..., 0], zp[..., 0], weights
    return packed, scales, zp, weights


def qmoe_model(tokens=6, hidden=32, inter=16, experts=4, k=2,
               activation="swiglu", fusion=1, bits=4, block=16,
               zero_points=False, bias=False, fc3=False, normalize=1,
               attrs=None, seed=0):
    rng = np.random.default_rng(seed)
    swiglu = activation == "swiglu"
    fused = 2 * inter if swiglu and fusion else inter
    arrays, floats, inputs = {}, {}, ["x", "r"]
    for name, rows, cols in [("fc1", fused, hidden), ("fc2", hidden, inter),
                             ("fc3", inter, hidden)]:
        if name == "fc3" and not fc3:
            inputs += ["", "", ""]
            continue
        packed, scales, zp, weights = quantized(rng, experts, rows, cols,
                                                bits, block, zero_points)
        arrays[f"{name}_w"], arrays[f"{name}_s"] = packed, scales
        if zero_points:
            arrays[f"{name}_z"] = zp
        floats[name] = weights
        inputs += [f"{name}_w", f"{name}_s"]
        if bias:
            floats[f"{name}_b"] = rng.standard_normal((experts, rows)) * 0.1
            arrays[f"{name}_b"] = floats[f"{name}_b"].astype(np.float32)
            inputs.append(f"{name}_b")
        else:
            inputs.append("")
    for name in ("fc1", "fc2", "fc3"):
        inputs.append(f"{name}_z" if f"{name}_z" in arrays else "")
    while inputs and inputs[-1] == "":
        inputs.pop()
    node = helper.make_node(
        "QMoE", inputs, ["y"], domain="com.microsoft", k=k,
        activation_type=activation, normalize_routing_weights=normalize,
        swiglu_fusion=fusion, expert_weight_bits=bits,
        **({
  "block_size" : block} if block else {}), **(attrs or {}))
    graph = helper.make_graph(
        [node], "qmoe",
        [helper.make_tensor_value_info("x", F32, [tokens, hidden]),
         helper.make_tensor_value_info("r", F32, [tokens, experts])],
        [helper.make_tensor_value_info("y", F32, [tokens, hidden])],
        [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    feeds = {
  "x" : rng.standard_normal((tokens, hidden)).astype(np.float32),
      "r" : rng.standard_normal((tokens, experts)).astype(np.float32)}
    return model, feeds, floats


def reference(feeds, floats, k, normalize, activation, fusion, alpha=1.0,
              beta=0.0, limit=None):
    """QMoE's formula on the dequantized experts."""
    return moe_reference(feeds["x"], feeds["r"], floats, k, normalize,
                         activation, fusion, alpha, beta, limit)


def partita(tmp_path, model, feeds, *flags):
    path = tmp_path / "qmoe.onnx"
    onnx.save(model, str(path))
    outputs, report = compile_and_run(tmp_path / "run", path, feeds, *flags)
    return outputs["y"], report


def onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


GPT_OSS = dict(activation="swiglu", fusion=1, bias=True, normalize=1,
               attrs=dict(activation_alpha=1.702, activation_beta=1.0,
                          swiglu_limit=0.5))
CASES = {
#onnxruntime - genai's gpt-oss form: int4 blocks of 16, interleaved
#SwiGLU with alpha, beta and a limit that clamps, biases.
  "gpt_oss" : GPT_OSS,
              "zero_points" : dict(zero_points = True),
                              "zero_points_block32"
      : dict(zero_points = True, block = 32, hidden = 64, inter = 32),
        "int8" : dict(bits = 8, zero_points = True),
                 "int8_per_row" : dict(bits = 8, block = 0, zero_points = True),
                                  "int4_per_row" : dict(block = 0),
                                                   "relu_top1"
      : dict(activation = "relu", fusion = 0, k = 1, normalize = 0),
        "silu" : dict(activation = "silu", fusion = 0, bias = True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_qmoe_runs_like_onnxruntime_and_the_formula(tmp_path, case):
    params = CASES[case]
    model, feeds, floats = qmoe_model(**params)
    got, _ = partita(tmp_path, model, feeds)
    attrs = params.get("attrs", {})
    want = reference(feeds, floats, params.get("k", 2),
                     params.get("normalize", 1),
                     params.get("activation", "swiglu"),
                     params.get("fusion", 1),
                     attrs.get("activation_alpha", 1.0),
                     attrs.get("activation_beta", 0.0),
                     attrs.get("swiglu_limit"))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if not params.get("normalize", 1):
#onnxruntime's CPU QMoE renormalizes the top k whatever
#normalize_routing_weights says(its MoE and the schema do not).
        return
    theirs = onnxruntime(model, feeds)
    if params.get("bits", 4) == 8:
#onnxruntime's CPU kernel computes 8-bit experts approximately
#(about 1 % of the largest output here); Partita in fp32 on the
#dequantized weights, as for MatMulNBits.
        assert np.abs(theirs - want).max() <= 2e-2 * np.abs(want).max()
    else:
        np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fusion,fc3", [(0, True), (2, False)])
def test_qmoe_swiglu_forms_onnxruntime_refuses_match_the_formula(
        tmp_path, fusion, fc3):
    model, feeds, floats = qmoe_model(fusion=fusion, fc3=fc3, bias=True,
                                      zero_points=True)
    got, _ = partita(tmp_path, model, feeds)
    np.testing.assert_allclose(
        got, reference(feeds, floats, 2, 1, "swiglu", fusion), rtol=1e-4,
        atol=1e-5)


@pytest.mark.parametrize("mesh", ["ep=2", "tp=2", "ep=2,tp=2", "dp=2",
                                  "ep=4"])
def test_qmoe_runs_like_onnxruntime_on_meshes(tmp_path, mesh):
    model, feeds, _ = qmoe_model(**GPT_OSS)
    got, report = partita(tmp_path, model, feeds, "--mesh", mesh)
    np.testing.assert_allclose(got, onnxruntime(model, feeds), rtol=1e-4,
                               atol=1e-5)
    if mesh.startswith("ep="):
#Each rank holds its experts' packed bytes only.
        one = sum(a.nbytes for a in (numpy_helper.to_array(t) for t in
                                     model.graph.initializer))
        ep = int(mesh.split(",")[0].split("=")[1])
        held = max(rank["weight_bytes"] for rank in report["ranks"])
        assert held <= one / ep + 64, (held, one)


@pytest.mark.parametrize("change,message", [
    (dict(attrs=dict(quant_type="fp4")),
     "QMoE's quant_type 'fp4' is not supported (int is)"),
    (dict(attrs=dict(weights_prepacked=1)),
     "QMoE's prepacked weights (CUTLASS's layout) are not supported"),
    (dict(attrs=dict(fc2_expert_weight_bits=2)),
     "QMoE's fc2 has 2-bit weights (4 and 8 are supported)"),
    (dict(block=8), "QMoE's fc1 has rows of 32 elements and block_size 8; "
     "Partita needs blocks of a power of two of at least 16"),
    (dict(block=0, zero_points=True),
     "QMoE's fc1_zero_points without block_size (two rows' to a byte) are "
     "not supported; give block_size"),
    (dict(attrs=dict(use_sparse_mixer=1)),
     "QMoE's sparse mixer is not supported"),
    (dict(k=5), "QMoE's k is 5, but there are 4 experts")])
def test_qmoe_refusals(compile_model, change, message):
    model, _, _ = qmoe_model(**change)
    result = compile_model(model)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_qmoe_fc3_parts_without_fc3_are_refused(compile_model):
    # Found by the fuzz campaign: onnxruntime refuses fc3's zero points
    # without fc3's weights; they were ignored.
    model, _, _ = qmoe_model(zero_points=True)
    node = model.graph.node[0]
    node.input.append(node.input[12])
    result = compile_model(model)
    assert result.returncode == 1
    assert "QMoE's fc3_zero_points is given without fc3_experts_weights" \
        in result.stderr, result.stderr


def test_qmoe_router_weights_are_refused_by_name(compile_model):
    model, _, _ = qmoe_model()
    node = model.graph.node[0]
    while len(node.input) < 14:
        node.input.append("")
    node.input.append("r")
    result = compile_model(model)
    assert result.returncode == 1
    assert "QMoE's router_weights input is not supported" in result.stderr


def test_qmoe_is_not_trained(compile_model):
    model, _, _ = qmoe_model()
    result = compile_model(model, "--train", "--loss", "mse:y",
                           "--optimizer", "sgd:lr=0.1")
    assert result.returncode == 1
    assert "--train: QMoE's experts are packed integers" in result.stderr, \
        result.stderr
