"""The attention and rotary-embedding forms torch 2 exporters write, built
with onnx.helper as the exporters write them: each raises (to nn.attention
or nn.rope, no softmax or rotate_half left) and, compiled and run, equals
onnxruntime (fp32: rtol 1e-4, atol 1e-5), including queries that see no
key at all.

IsNaN is written as Not(Equal(x, x)), which is the same test and which the
importer takes today; the importer maps IsNaN itself to compare ne."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import compile_and_run

F = TensorProto.FLOAT
B, H, S, D = 2, 4, 8, 16
MIN = float(np.finfo(np.float32).min)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), n)
                               for n, v in initializers])
    return helper.make_model(graph,
                             opset_imports=[helper.make_opsetid("", opset)])


def _reference(model, inputs):
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def _check(tmp_path, compile_model, model, inputs, raised, *flags):
    ir = compile_model(model).ok().ir
    assert raised in ir, ir
    assert "nn.softmax" not in ir and "nn.compare" not in ir, ir
    want = _reference(model, inputs)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    outputs, _ = compile_and_run(tmp_path / "run", path, inputs, *flags)
    np.testing.assert_allclose(outputs["out"], want, rtol=1e-4, atol=1e-5)
    return want


def _sdpa_model(mask_kind, kv_heads=H):
    """torch's scaled_dot_product_attention lowering: q and k^T each times
    sqrt(1/sqrt(d)), the mask, softmax, where(isnan(p), 0, p), times v;
    key/value heads repeated with Unsqueeze/Expand/Reshape (repeat_kv)."""
    c = float(D ** -0.25)
    nodes = [
        helper.make_node("Mul", ["q", "c"], ["qs"]),
        helper.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("Mul", ["kt", "c"], ["kts"]),
        helper.make_node("MatMul", ["qs", "kts"], ["s"]),
    ]
    inits = [("c", np.float32(c)), ("zero", np.zeros(1, np.float32))]
    if kv_heads == H:
        nodes += [helper.make_node("Identity", ["k"], ["kr"]),
                  helper.make_node("Identity", ["v"], ["vr"])]
    else:
        n = H // kv_heads
        inits += [("ax", np.array([2], np.int64)),
                  ("rep", np.array([B, kv_heads, n, S, D], np.int64)),
                  ("merged", np.array([B, H, S, D], np.int64))]
        for x in "kv":
            nodes += [helper.make_node("Unsqueeze", [x, "ax"], [x + "5"]),
                      helper.make_node("Expand", [x + "5", "rep"], [x + "b"]),
                      helper.make_node("Reshape", [x + "b", "merged"],
                                       [x + "r"])]
    if mask_kind == "bool":  # legacy: a boolean attn_mask as where(m, 0, -inf)
        inits.append(("fill", np.full(1, -np.inf, np.float32)))
        nodes.append(helper.make_node("Where", ["m", "zero", "fill"], ["bias"]))
    else:  # dynamo: HF's float mask with finfo.min
        inits.append(("fill", np.full(1, MIN, np.float32)))
        nodes.append(helper.make_node("Where", ["m", "zero", "fill"], ["bias"]))
    nodes += [
        helper.make_node("Add", ["s", "bias"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("Equal", ["p", "p"], ["same"]),
        helper.make_node("Not", ["same"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
        helper.make_node("MatMul", ["pg", "vr"], ["out"]),
    ]
    inputs = [helper.make_tensor_value_info("q", F, [B, H, S, D]),
              helper.make_tensor_value_info("k", F, [B, kv_heads, S, D]),
              helper.make_tensor_value_info("v", F, [B, kv_heads, S, D]),
              helper.make_tensor_value_info("m", TensorProto.BOOL,
                                            [B, 1, S, S])]
    return _model(nodes, inputs,
                  [helper.make_tensor_value_info("out", F, [B, H, S, D])],
                  inits)


def _inputs(kv_heads=H, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, S, D)).astype(np.float32)
    k = rng.standard_normal((B, kv_heads, S, D)).astype(np.float32)
    v = rng.standard_normal((B, kv_heads, S, D)).astype(np.float32)
    return q, k, v


def _causal_left_padded():
    """Causal and left padding: batch row 1's first 3 tokens are padding,
    so its first 3 queries see no key at all."""
    causal = np.tril(np.ones((S, S), bool))
    keep = np.ones((B, S), bool)
    keep[1, :3] = False
    return (causal[None, None] & keep[:, None, None, :]).copy()


@pytest.mark.parametrize("kv_heads", [H, 2])
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_sdpa_lowering(tmp_path, compile_model, mask_kind, kv_heads):
    model = _sdpa_model(mask_kind, kv_heads)
    q, k, v = _inputs(kv_heads)
    m = _causal_left_padded()
    want = _check(tmp_path, compile_model, model,
                  dict(q=q, k=k, v=v, m=m), "nn.attention")
    if mask_kind == "bool":
        # -inf everywhere: torch's NaN rows, zeroed by the guard, and
        # nn.attention's rows that saw no key are the same zeros.
        assert np.all(want[1, :, :3] == 0)
    else:
        # finfo.min is finite: such a row averages all the values, in both.
        assert np.allclose(want[1, :, 0],
                           v[1].repeat(H // kv_heads, 0).mean(axis=1),
                           atol=1e-5)


def test_sdpa_lowering_sharded(tmp_path, compile_model):
    model = _sdpa_model("bool", 2)
    q, k, v = _inputs(2, seed=1)
    m = _causal_left_padded()
    for mesh in ["tp=2", "dp=2"]:
        _check(tmp_path / mesh, compile_model, model,
               dict(q=q, k=k, v=v, m=m), "nn.attention", "--mesh", mesh)


def _multihead_model(batch_first):
    """torch.nn.MultiheadAttention's legacy export with need_weights (the
    default): heads merged with the batch, [b * h, s, d], an attn_mask and a
    key_padding_mask as -inf float masks, baddbmm's alpha and beta of 1."""
    e = H * D
    shape = [B, S, e] if batch_first else [S, B, e]
    nodes = []
    inits = [("split", np.array([S, B * H, D], np.int64)),
             ("scale", np.float32(D ** -0.5)), ("one", np.float32(1.0)),
             ("ninf", np.float32(-np.inf)),
             ("zeros_kpm", np.zeros((B, S), np.float32)),
             ("zeros_am", np.zeros((S, S), np.float32)),
             ("kpm4", np.array([B, 1, 1, S], np.int64)),
             ("kpme", np.array([B, H, 1, S], np.int64)),
             ("kpm3", np.array([B * H, 1, S], np.int64)),
             ("am3", np.array([0], np.int64)),
             ("outshape", np.array([S * B, e], np.int64))]
    for x in "qkv":
        src = x
        if batch_first:
            nodes.append(helper.make_node("Transpose", [x], [x + "_t"],
                                          perm=[1, 0, 2]))
            src = x + "_t"
        nodes.append(helper.make_node("Reshape", [src, "split"], [x + "3"]))
    nodes += [
        helper.make_node("Transpose", ["q3"], ["qh"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["k3"], ["kth"], perm=[1, 2, 0]),
        helper.make_node("Transpose", ["v3"], ["vh"], perm=[1, 0, 2]),
        helper.make_node("Mul", ["qh", "scale"], ["qs"]),
        helper.make_node("MatMul", ["qs", "kth"], ["s"]),
        helper.make_node("Mul", ["s", "one"], ["sa"]),
        helper.make_node("Where", ["am", "ninf", "zeros_am"], ["amf"]),
        helper.make_node("Unsqueeze", ["amf", "am3"], ["am1"]),
        helper.make_node("Where", ["kpm", "ninf", "zeros_kpm"], ["kpmf"]),
        helper.make_node("Reshape", ["kpmf", "kpm4"], ["kpmr"]),
        helper.make_node("Expand", ["kpmr", "kpme"], ["kpmx"]),
        helper.make_node("Reshape", ["kpmx", "kpm3"], ["kpmh"]),
        helper.make_node("Add", ["am1", "kpmh"], ["mask"]),
        helper.make_node("Mul", ["mask", "one"], ["mb"]),
        helper.make_node("Add", ["sa", "mb"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o3"]),
        helper.make_node("Transpose", ["o3"], ["ot"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["ot", "outshape"], ["out"]),
    ]
    inputs = [helper.make_tensor_value_info(x, F, shape) for x in "qkv"]
    inputs += [helper.make_tensor_value_info("kpm", TensorProto.BOOL, [B, S]),
               helper.make_tensor_value_info("am", TensorProto.BOOL, [S, S])]
    return _model(nodes, inputs,
                  [helper.make_tensor_value_info("out", F, [S * B, e])], inits)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(tmp_path, compile_model, batch_first):
    model = _multihead_model(batch_first)
    rng = np.random.default_rng(2)
    shape = (B, S, H * D) if batch_first else (S, B, H * D)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in "qkv")
    kpm = np.zeros((B, S), bool)
    kpm[1, 5:] = True
    am = np.triu(np.ones((S, S), bool), 1)
    ir = compile_model(model).ok().ir
    # The heads are told apart from the batch: [b, h, s, d].
    assert f"tensor<{B}x{H}x{S}x{D}xf32>" in ir.split("nn.attention")[1], ir
    _check(tmp_path, compile_model, model, dict(q=q, k=k, v=v, kpm=kpm, am=am),
           "nn.attention")


def test_t5_relative_bias(tmp_path, compile_model):
    """T5: no scaling, a constant relative position bias [1, h, sq, skv]
    combined with the padding mask as where(padding, bias, finfo.min)."""
    rng = np.random.default_rng(3)
    bias = rng.standard_normal((1, H, S, S)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Where", ["pad", "bias", "min"], ["mask"]),
        helper.make_node("Add", ["s", "mask"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["out"]),
    ]
    inputs = [helper.make_tensor_value_info("q", F, [B, H, S, D]),
              helper.make_tensor_value_info("k", F, [B, S, H, D]),
              helper.make_tensor_value_info("v", F, [B, H, S, D]),
              helper.make_tensor_value_info("pad", TensorProto.BOOL,
                                            [B, 1, 1, S])]
    model = _model(nodes, inputs,
                   [helper.make_tensor_value_info("out", F, [B, H, S, D])],
                   [("bias", bias), ("min", np.float32(MIN))])
    q = rng.standard_normal((B, H, S, D)).astype(np.float32)
    k = rng.standard_normal((B, S, H, D)).astype(np.float32)
    v = rng.standard_normal((B, H, S, D)).astype(np.float32)
    pad = np.ones((B, 1, 1, S), bool)
    pad[1, ..., 6:] = False
    _check(tmp_path, compile_model, model, dict(q=q, k=k, v=v, pad=pad),
           "scale = 1.000000e+00")


_ROTARY_INITS = [("zero", np.array([0], np.int64)),
                 ("half", np.array([D // 2], np.int64)),
                 ("end", np.array([D], np.int64)),
                 ("last", np.array([3], np.int64))]


def _apply_rotary(x, cos, sin, out):
    """HF's `x * cos + rotate_half(x) * sin`, rotate_half(x) =
    concat(-x[..., D/2:], x[..., :D/2]); reads the _ROTARY_INITS bounds."""
    return [
        helper.make_node("Mul", [x, cos], ["xc"]),
        helper.make_node("Slice", [x, "zero", "half", "last"], ["x1"]),
        helper.make_node("Slice", [x, "half", "end", "last"], ["x2"]),
        helper.make_node("Neg", ["x2"], ["n2"]),
        helper.make_node("Concat", ["n2", "x1"], ["rot"], axis=-1),
        helper.make_node("Mul", ["rot", sin], ["rs"]),
        helper.make_node("Add", ["xc", "rs"], [out]),
    ]


def test_rope_from_position_ids(tmp_path, compile_model):
    """HF's rotary embedding with the tables gathered at a position_ids
    input: x * cos + rotate_half(x) * sin."""
    rng = np.random.default_rng(4)
    inv_freq = 1.0 / (10000 ** (np.arange(0, D, 2) / D))
    freqs = np.outer(np.arange(32), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    nodes = [
        helper.make_node("Gather", ["cos_cached", "pos"], ["cg"], axis=0),
        helper.make_node("Unsqueeze", ["cg", "ax"], ["cos"]),
        helper.make_node("Gather", ["sin_cached", "pos"], ["sg"], axis=0),
        helper.make_node("Unsqueeze", ["sg", "ax"], ["sin"]),
        *_apply_rotary("x", "cos", "sin", "out"),
    ]
    inits = [("cos_cached", np.cos(emb).astype(np.float32)),
             ("sin_cached", np.sin(emb).astype(np.float32)),
             ("ax", np.array([1], np.int64)),
             *_ROTARY_INITS]
    inputs = [helper.make_tensor_value_info("x", F, [B, H, S, D]),
              helper.make_tensor_value_info("pos", TensorProto.INT64, [B, S])]
    model = _model(nodes, inputs,
                   [helper.make_tensor_value_info("out", F, [B, H, S, D])],
                   inits)
    x = rng.standard_normal((B, H, S, D)).astype(np.float32)
    pos = np.stack([np.arange(S), np.arange(S) + 5]).astype(np.int64)
    _check(tmp_path, compile_model, model, dict(x=x, pos=pos), "nn.rope")


def test_rope_from_frequencies(tmp_path, compile_model):
    """HF's rotary module on a position_ids input: f = positions x
    inv_freq, tables = g(concat(f, f)) * attention_scaling, unsqueezed on
    the heads; Cos and Sin of a non-constant input are nn.cos/nn.sin."""
    rng = np.random.default_rng(5)
    inv_freq = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32)
    nodes = [
        helper.make_node("Unsqueeze", ["pos", "ax2"], ["pos3"]),
        helper.make_node("Cast", ["pos3"], ["posf"], to=F),
        helper.make_node("Mul", ["posf", "inv_freq"], ["f"]),
        helper.make_node("Concat", ["f", "f"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["c0"]),
        helper.make_node("Sin", ["emb"], ["s0"]),
        helper.make_node("Mul", ["c0", "scaling"], ["c1"]),
        helper.make_node("Mul", ["s0", "scaling"], ["s1"]),
        helper.make_node("Unsqueeze", ["c1", "ax1"], ["cos"]),
        helper.make_node("Unsqueeze", ["s1", "ax1"], ["sin"]),
        *_apply_rotary("x", "cos", "sin", "out"),
    ]
    inits = [("inv_freq", inv_freq), ("scaling", np.float32(0.75)),
             ("ax1", np.array([1], np.int64)),
             ("ax2", np.array([2], np.int64)),
             *_ROTARY_INITS]
    inputs = [helper.make_tensor_value_info("x", F, [B, H, S, D]),
              helper.make_tensor_value_info("pos", TensorProto.INT64, [B, S])]
    model = _model(nodes, inputs,
                   [helper.make_tensor_value_info("out", F, [B, H, S, D])],
                   inits)
    x = rng.standard_normal((B, H, S, D)).astype(np.float32)
    pos = np.stack([np.arange(S), np.arange(S) + 3]).astype(np.int64)
    _check(tmp_path, compile_model, model, dict(x=x, pos=pos), "nn.rope")
