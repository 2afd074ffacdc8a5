"""onnxruntime's contrib ops, which onnxruntime-genai's model builder
writes (SimplifiedLayerNormalization, com.microsoft's skip norms,
RotaryEmbedding and GroupQueryAttention), on models built with onnx.helper,
compiled and run on host ranks against onnxruntime's CPU kernels."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (compile_and_run, onnx_model, value_info as vi,
                      initializer as const)

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
MS = "com.microsoft"
RNG = np.random.default_rng(36)


def model(nodes, inputs, outputs, inits=()):
    return onnx_model(nodes, inputs, outputs, inits, opset=22,
                      domains=[(MS, 1)])


def normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def run_both(tmp_path, m, feeds, *flags, mesh=None):
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    extra = list(flags) + (["--mesh", *mesh.split()] if mesh else [])
    outputs, _ = compile_and_run(tmp_path / "run", path, feeds, *extra)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    for o, w in zip(m.graph.output, want):
        got = outputs[o.name]
        assert got.shape == w.shape, o.name
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5,
                                   err_msg=o.name)


def compile_error(compile_model, m, *flags):
    result = compile_model(m, *flags)
    assert result.returncode == 1
    return result.stderr


def test_simplified_layer_normalization(tmp_path):
    m = model([helper.make_node("SimplifiedLayerNormalization", ["x", "w"],
                                ["y"], axis=-1, epsilon=1e-6, stash_type=1)],
              [vi("x", F, [2, 3, 16])], [vi("y", F, [2, 3, 16])],
              [const("w", normal(16))])
    run_both(tmp_path, m, {"x": normal(2, 3, 16)})


@pytest.mark.parametrize("op,extra", [
    ("SkipSimplifiedLayerNormalization", ["", "bias"]),
    ("SkipSimplifiedLayerNormalization", []),
    ("SkipLayerNormalization", ["beta", "bias"]),
    ("SkipLayerNormalization", ["beta"]),
])
def test_skip_norms_return_the_residual(tmp_path, op, extra):
    inputs = ["x", "skip", "gamma"] + extra
    if op == "SkipSimplifiedLayerNormalization" and extra:
        inputs = ["x", "skip", "gamma", "bias"]
    m = model([helper.make_node(op, inputs, ["y", "", "", "sum"], domain=MS,
                                epsilon=1e-5)],
              [vi("x", F, [2, 3, 16]), vi("skip", F, [2, 3, 16])],
              [vi("y", F, [2, 3, 16]), vi("sum", F, [2, 3, 16])],
              [const("gamma", normal(16)), const("beta", normal(16)),
               const("bias", normal(16))])
    run_both(tmp_path, m, {"x": normal(2, 3, 16), "skip": normal(2, 3, 16)})


def test_skip_of_one_sequence_broadcasts(tmp_path):
    m = model([helper.make_node("SkipLayerNormalization",
                                ["x", "skip", "gamma"], ["y"], domain=MS)],
              [vi("x", F, [2, 3, 16]), vi("skip", F, [3, 16])],
              [vi("y", F, [2, 3, 16])], [const("gamma", normal(16))])
    run_both(tmp_path, m, {"x": normal(2, 3, 16), "skip": normal(3, 16)})


def test_skip_norm_statistics_are_refused(compile_model):
    m = model([helper.make_node("SkipSimplifiedLayerNormalization",
                                ["x", "skip", "gamma"], ["y", "mean"],
                                domain=MS)],
              [vi("x", F, [2, 3, 16]), vi("skip", F, [2, 3, 16])],
              [vi("y", F, [2, 3, 16]), vi("mean", F, [2, 3, 1])],
              [const("gamma", normal(16))])
    assert ("SkipSimplifiedLayerNormalization mean and inv_std_var outputs "
            "are not supported") in compile_error(compile_model, m)


def cache(rows, half):
    angles = np.arange(rows)[:, None] / 10000 ** (np.arange(half) / half)
    return (const("cos", np.cos(angles).astype(np.float32)),
            const("sin", np.sin(angles).astype(np.float32)))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["first", "each"])
def test_contrib_rotary_embedding(tmp_path, interleaved, positions):
    # [2, 5, 4 heads x 16]: a first position for every token after it, or
    # one per token; the caches' width (8) rotates only half of each head.
    shape = [1] if positions == "first" else [2, 5]
    m = model([helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"],
                                ["y"], domain=MS, num_heads=4,
                                rotary_embedding_dim=8,
                                interleaved=interleaved)],
              [vi("x", F, [2, 5, 64]), vi("pos", I64, shape)],
              [vi("y", F, [2, 5, 64])], cache(16, 4))
    pos = (np.array([3], np.int64) if positions == "first"
           else RNG.integers(0, 16, (2, 5)).astype(np.int64))
    run_both(tmp_path, m, {"x": normal(2, 5, 64), "pos": pos})


def gqa(past, seq, packed=True, norms=False, batch=1, bias=None, sink=False,
        **attrs):
    """A GroupQueryAttention of 4 query heads and 2 key/value heads of 16
    (onnxruntime wants a multiple of 16), with rotary embedding."""
    heads, kv, d = 4, 2, 16
    width = (heads + 2 * kv) * d if packed else heads * d
    inputs = [vi("q", F, [batch, seq, width])]
    names = ["q", "", ""]
    if not packed:
        inputs += [vi("k", F, [batch, seq, kv * d]),
                   vi("v", F, [batch, seq, kv * d])]
        names = ["q", "k", "v"]
    inputs += [vi("past_k", F, [batch, kv, "past", d]),
               vi("past_v", F, [batch, kv, "past", d]),
               vi("seqlens", I32, [batch]), vi("total", I32, [])]
    names += ["past_k", "past_v", "seqlens", "total", "cos", "sin"]
    inits = list(cache(32, d // 2))
    if bias:
        # attention_bias, input 10, [batch or 1, heads or 1, seq, total].
        names += ["", "bias"]
        inputs.append(vi("bias", F, bias))
    if sink:
        # head_sink, input 11, [heads].
        names += ([] if bias else ["", ""]) + ["sink"]
        inits.append(const("sink", normal(heads)))
    if norms:
        names += ["", "", "", "", "", "qn", "kn"]
        inits += [const("qn", normal(d)), const("kn", normal(d))]
    node = helper.make_node(
        "GroupQueryAttention", names, ["out", "present_k", "present_v"],
        domain=MS, num_heads=heads, kv_num_heads=kv, do_rotary=1, **attrs)
    present = [batch, kv, past + seq, d]
    m = model([node], inputs,
              [vi("out", F, [batch, seq, heads * d]),
               vi("present_k", F, present), vi("present_v", F, present)],
              inits)
    feeds = {"q": normal(batch, seq, width),
             "past_k": normal(batch, kv, past, d),
             "past_v": normal(batch, kv, past, d),
             "seqlens": np.full(batch, past + seq - 1, np.int32),
             "total": np.array(past + seq, np.int32)}
    if bias:
        feeds["bias"] = normal(*bias)
    if not packed:
        feeds["k"] = normal(batch, seq, kv * d)
        feeds["v"] = normal(batch, seq, kv * d)
    return m, feeds


@pytest.mark.parametrize("past,seq,batch", [(0, 6, 2), (5, 1, 2), (4, 3, 1)])
@pytest.mark.parametrize("packed", [True, False])
def test_group_query_attention(tmp_path, past, seq, batch, packed):
    m, feeds = gqa(past, seq, packed, batch=batch)
    run_both(tmp_path, m, feeds, "--bind", f"past={past}")


@pytest.mark.parametrize("mesh", ["tp=2", "dp=2", "sp=2 --sp-mode ulysses",
                                  "sp=2 --sp-mode ring"])
@pytest.mark.parametrize("window", [-1, 2])
def test_group_query_attention_shards(tmp_path, mesh, window):
    m, feeds = gqa(0, 6, batch=2, scale=0.2, rotary_interleaved=1,
                   local_window_size=window)
    run_both(tmp_path, m, feeds, "--bind", "past=0", mesh=mesh)


def test_group_query_attention_per_head_norms(tmp_path):
    # Qwen3: RMS norms of each query and key head before the rotation.
    # onnxruntime's CPU kernel has no such norms: its reference is the
    # same attention without them on a query whose heads numpy normalized.
    m, feeds = gqa(3, 1, norms=True, qk_norm_epsilon=1e-5)
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    got, _ = compile_and_run(tmp_path / "run", path, feeds, "--bind",
                             "past=3")
    weights = {i.name: onnx.numpy_helper.to_array(i)
               for i in m.graph.initializer}
    packed = feeds["q"].reshape(1, 1, 8, 16).copy()
    for heads, weight in ((slice(0, 4), "qn"), (slice(4, 6), "kn")):
        x = packed[:, :, heads]
        rms = np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True)
                      + 1e-5)
        packed[:, :, heads] = (x / rms * weights[weight]).astype(np.float32)
    plain, _ = gqa(3, 1)
    sess = ort.InferenceSession(plain.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, dict(feeds, q=packed.reshape(1, 1, 128)))
    for o, w in zip(m.graph.output, want):
        np.testing.assert_allclose(got[o.name], w, rtol=1e-4, atol=1e-5,
                                   err_msg=o.name)


@pytest.mark.parametrize("past,seq,batch,window", [
    (4, 3, 1, 2), (0, 6, 2, 2), (5, 1, 2, 3), (0, 6, 2, 1), (0, 6, 2, 6)])
def test_group_query_attention_sliding_window(tmp_path, past, seq, batch,
                                              window):
    # local_window_size w: each query attends its last w positions (a
    # window as long as the step cuts nothing).
    m, feeds = gqa(past, seq, batch=batch, local_window_size=window)
    run_both(tmp_path, m, feeds, "--bind", f"past={past}")


@pytest.mark.parametrize("past,seq,batch,bias", [
    (0, 6, 2, [2, 1, 6, 6]), (0, 6, 2, [1, 4, 6, 6]), (3, 1, 2, [2, 4, 1, 4])])
@pytest.mark.parametrize("mesh", [None, "tp=2", "dp=2"])
def test_group_query_attention_bias(tmp_path, past, seq, batch, bias, mesh):
    # attention_bias is added to the scores (an ALiBi or relative-position
    # bias computed outside the op).
    m, feeds = gqa(past, seq, batch=batch, bias=bias)
    if mesh == "dp=2" and bias[0] == 1:
        # Every input is split on its batch over dp; one of batch 1 is
        # refused with the reason.
        with pytest.raises(AssertionError,
                           match="cannot split input 'bias' over dp=2"):
            run_both(tmp_path, m, feeds, "--bind", f"past={past}", mesh=mesh)
        return
    run_both(tmp_path, m, feeds, "--bind", f"past={past}", mesh=mesh)


@pytest.mark.parametrize("past,seq,batch,extra", [
    (0, 6, 2, {"sink": True}), (5, 1, 2, {"sink": True}),
    (0, 6, 2, {"smooth_softmax": 1}), (0, 6, 2, {"sink": True, "softcap": 0.0,
                                                  "bias": [2, 4, 6, 6]})])
@pytest.mark.parametrize("mesh", [None, "tp=2", "sp=2 --sp-mode ring"])
def test_group_query_attention_sinks(tmp_path, past, seq, batch, extra,
                                     mesh):
    # gpt-oss's attention sinks: a logit per head in every row's softmax
    # denominator (head_sink), or one of 0 (smooth_softmax).
    m, feeds = gqa(past, seq, batch=batch, **extra)
    run_both(tmp_path, m, feeds, "--bind", f"past={past}", mesh=mesh)


@pytest.mark.parametrize("past,seq,batch,extra", [
    (0, 6, 2, {}), (4, 3, 1, {}), (5, 1, 2, {}),
    (0, 6, 2, {"local_window_size": 2}), (0, 6, 2, {"bias": [2, 4, 6, 6]})])
@pytest.mark.parametrize("mesh", [None, "tp=2", "sp=2 --sp-mode ring",
                                  "tp=2 --sp-mode megatron"])
def test_group_query_attention_softcap(tmp_path, past, seq, batch, extra,
                                       mesh):
    # Gemma2's tanh softcapping of the scores (a small cap, so that it
    # changes them): nn.attention's softcap, which ring attention keeps in
    # every step. A step after a cached past is not self-attention over the
    # whole sequence, which ring refuses, as for any KV-cache step.
    m, feeds = gqa(past, seq, batch=batch, softcap=2.0, **extra)
    if past and mesh == "sp=2 --sp-mode ring":
        with pytest.raises(AssertionError,
                           match="--sp-mode ring needs self-attention over "
                                 "the whole sequence"):
            run_both(tmp_path, m, feeds, "--bind", f"past={past}", mesh=mesh)
        return
    run_both(tmp_path, m, feeds, "--bind", f"past={past}", mesh=mesh)


def test_group_query_attention_right_padded_prompt(tmp_path):
    # A first prompt whose rows end early: keys past seqlens_k are not
    # attended (the padded rows' own outputs are onnxruntime's too).
    m, feeds = gqa(0, 6, batch=2)
    feeds["seqlens"] = np.array([5, 2], np.int32)
    run_both(tmp_path, m, feeds, "--bind", "past=0")


def test_group_query_attention_noncontiguous_cache_is_refused(tmp_path):
    # After a first prompt, the new tokens must follow the whole past: a
    # shorter row needs onnxruntime's shared-buffer cache, which Partita
    # replaces with its own (--max-seq); it is refused at run time.
    m, feeds = gqa(5, 1, batch=2)
    feeds["seqlens"] = np.array([5, 3], np.int32)
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    with pytest.raises(AssertionError, match="GroupQueryAttention seqlens_k"):
        compile_and_run(tmp_path / "run", path, feeds, "--bind", "past=5")


@pytest.mark.parametrize("attrs,message", [
    ({"softcap": -1.0},
     "GroupQueryAttention softcap -1.000000e+00 is neither 0 nor positive"),
    ({"local_window_size": 0},
     "GroupQueryAttention local_window_size 0 is neither -1 nor positive"),
    ({"sliding_window_cache": 1},
     "GroupQueryAttention sliding_window_cache (a window-sized cache) is "
     "not supported"),
])
def test_group_query_attention_refusals(compile_model, attrs, message):
    m, _ = gqa(0, 6, **attrs)
    result = compile_model(m, "--bind", "past=0")
    assert result.returncode == 1 and message in result.stderr


@pytest.mark.parametrize("past,lengths,total,message", [
    (5, [5, 3], 6, "GroupQueryAttention seqlens_k[1] is 3, but it must be "
     "past + sequence - 1 = 5 (a contiguous cache of 6 positions)"),
    (0, [5, 6], 6, "GroupQueryAttention seqlens_k[1] is 6, but it must be "
     "between 0 and 5 (a contiguous cache of 6 positions)"),
    (5, [5, 5], 0, "GroupQueryAttention total_sequence_length is 0, but "
     "past + sequence is 6")])
def test_group_query_attention_constant_lengths_are_checked(
        compile_model, past, lengths, total, message):
    # Lengths given as initializers (found by the fuzz campaign: accepted,
    # and onnxruntime refuses them) are checked at compile time by the
    # rule the run-time check applies.
    m, _ = gqa(past, 6 if past == 0 else 1, batch=2)
    m.graph.input.remove(next(i for i in m.graph.input
                              if i.name == "seqlens"))
    m.graph.input.remove(next(i for i in m.graph.input if i.name == "total"))
    m.graph.initializer.extend([
        const("seqlens", np.array(lengths, np.int32)),
        const("total", np.array(total, np.int32))])
    result = compile_model(m, "--bind", f"past={past}")
    assert result.returncode == 1 and message in result.stderr, \
        result.stderr
