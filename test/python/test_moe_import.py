"""onnxruntime's fused mixture of experts (com.microsoft.MoE) imports and
runs like onnxruntime's CPU kernel; the forms its CPU kernel refuses
(SwiGLU unfused with fc3, or concatenated) against a NumPy reference."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import compile_and_run
from moe_reference import moe_reference

F32 = TensorProto.FLOAT


def moe_model(tokens=6, hidden=8, inter=12, experts=4, k=2,
              activation="relu", normalize=0, fusion=0, bias=False,
              fc3=False, attrs=None, input_shape=None, seed=0):
    """A graph of one MoE node with random expert weights (initializers),
    inputs x and router logits r."""
    rng = np.random.default_rng(seed)
    fused = 2 * inter if activation == "swiglu" and fusion else inter
    arrays = {"w1": rng.standard_normal((experts, fused, hidden)) * 0.3,
              "w2": rng.standard_normal((experts, hidden, inter)) * 0.3}
    inputs = ["x", "r", "w1", "b1" if bias else "", "w2", "b2" if bias else ""]
    if bias:
        arrays["b1"] = rng.standard_normal((experts, fused)) * 0.1
        arrays["b2"] = rng.standard_normal((experts, hidden)) * 0.1
    if fc3:
        arrays["w3"] = rng.standard_normal((experts, inter, hidden)) * 0.3
        inputs.append("w3")
        if bias:
            arrays["b3"] = rng.standard_normal((experts, inter)) * 0.1
            inputs.append("b3")
    node = helper.make_node("MoE", inputs, ["y"], domain="com.microsoft",
                            k=k, activation_type=activation,
                            normalize_routing_weights=normalize,
                            swiglu_fusion=fusion, **(attrs or {}))
    shape = input_shape or [tokens, hidden]
    graph = helper.make_graph(
        [node], "moe",
        [helper.make_tensor_value_info("x", F32, shape),
         helper.make_tensor_value_info("r", F32, [tokens, experts])],
        [helper.make_tensor_value_info("y", F32, shape)],
        [numpy_helper.from_array(a.astype(np.float32), n)
         for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "r": rng.standard_normal((tokens, experts)).astype(np.float32)}
    return model, feeds, {n: a.astype(np.float32) for n, a in arrays.items()}


def partita(tmp_path, model, feeds, *flags):
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    outputs, _ = compile_and_run(tmp_path / "run", path, feeds, *flags)
    return outputs["y"]


def onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


CPU_CASES = {
    "relu": {},
    "renormalized": dict(normalize=1),
    "gelu": dict(activation="gelu"),
    "silu": dict(activation="silu"),
    "identity": dict(activation="identity"),
    "top1": dict(k=1),
    "all_experts": dict(k=4, normalize=1),
    "biases": dict(bias=True),
    "swiglu_interleaved": dict(activation="swiglu", fusion=1),
    # gpt-oss's: alpha 1.702, beta 1, limit 7 (here 0.5, so it clamps).
    "swiglu_gpt_oss": dict(activation="swiglu", fusion=1, bias=True,
                           normalize=1,
                           attrs=dict(activation_alpha=1.702,
                                      activation_beta=1.0,
                                      swiglu_limit=0.5)),
    "three_d_input": dict(input_shape=[2, 3, 8]),
}


@pytest.mark.parametrize("case", sorted(CPU_CASES))
def test_moe_runs_like_onnxruntime(tmp_path, case):
    model, feeds, _ = moe_model(**CPU_CASES[case])
    np.testing.assert_allclose(partita(tmp_path, model, feeds),
                               onnxruntime(model, feeds), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("case,mesh", [
    ("swiglu_gpt_oss", "dp=2"), ("swiglu_gpt_oss", "tp=2"),
    ("swiglu_gpt_oss", "pp=2"),
    # Experts over ep: alone, beside dp, and with tp, which splits each
    # expert's features where the activation allows (interleaved, no fc2
    # bias) and leaves them whole where not (gpt-oss's biases).
    ("swiglu_gpt_oss", "ep=2"), ("swiglu_gpt_oss", "dp=2,ep=2"),
    ("swiglu_gpt_oss", "ep=2,tp=2"), ("swiglu_interleaved", "ep=2,tp=2"),
    ("relu", "ep=4"), ("biases", "ep=2,tp=2")])
def test_moe_runs_like_onnxruntime_on_meshes(tmp_path, case, mesh):
    model, feeds, _ = moe_model(**CPU_CASES[case])
    np.testing.assert_allclose(partita(tmp_path, model, feeds, "--mesh",
                                       mesh),
                               onnxruntime(model, feeds), rtol=1e-4,
                               atol=1e-5)


def reference(feeds, arrays, k, normalize, fusion, alpha=1.0, beta=0.0):
    """The MoE schema's SwiGLU mixture, token by token, in float64."""
    names = {"w1": "fc1", "w2": "fc2", "w3": "fc3", "b1": "fc1_b",
             "b2": "fc2_b", "b3": "fc3_b"}
    weights = {names[n]: a.astype(np.float64) for n, a in arrays.items()}
    return moe_reference(feeds["x"], feeds["r"], weights, k, normalize,
                         "swiglu", fusion, alpha, beta)


@pytest.mark.parametrize("fusion,fc3,bias", [(0, True, False),
                                             (0, True, True),
                                             (2, False, True),
                                             (1, False, True)])
def test_moe_swiglu_forms_match_the_schema(tmp_path, fusion, fc3, bias):
    # onnxruntime's CPU kernel takes only the interleaved form (1); the
    # unfused (fc3) and concatenated (2) forms are CUDA's. Checked against
    # the schema's formula, the interleaved form too.
    model, feeds, arrays = moe_model(activation="swiglu", fusion=fusion,
                                     fc3=fc3, bias=bias, normalize=1,
                                     attrs=dict(activation_alpha=1.702,
                                                activation_beta=1.0))
    np.testing.assert_allclose(
        partita(tmp_path, model, feeds),
        reference(feeds, arrays, 2, 1, fusion, alpha=1.702, beta=1.0),
        rtol=1e-4, atol=1e-5)


def test_an_unrouted_expert_cannot_poison_the_result(tmp_path):
    # Expert 3 overflows to inf on every token but no token is routed to
    # it: the dense form must not let its inf (times a zero weight) in.
    model, feeds, _ = moe_model()
    w1 = numpy_helper.to_array(model.graph.initializer[0]).copy()
    w1[3] = 1e30
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w1, "w1"))
    feeds["r"][:, 3] = -1e9
    got = partita(tmp_path, model, feeds)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, onnxruntime(model, feeds), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("change,message", [
    (dict(attrs=dict(use_sparse_mixer=1)),
     "MoE's sparse mixer is not supported"),
    (dict(activation="relu2"),
     "MoE's activation_type 'relu2' is not supported"),
    (dict(k=5), "MoE's k is 5, but there are 4 experts"),
    (dict(activation="swiglu"),
     "MoE's swiglu_fusion is 0 with activation_type 'swiglu' and no "
     "fc3_experts_weights"),
    (dict(activation="swiglu", fusion=1, fc3=True),
     "MoE's fc3_experts_weights is used only by an unfused swiglu "
     "(swiglu_fusion 0), not with activation_type 'swiglu' and "
     "swiglu_fusion 1"),
    (dict(fc3=True),
     "MoE's fc3_experts_weights is used only by an unfused swiglu"),
    (dict(attrs=dict(swiglu_limit_after_activation=1)),
     "MoE's swiglu_limit_after_activation (CUDA only in onnxruntime) is not "
     "supported")])
def test_moe_refusals(compile_model, change, message):
    model, _, _ = moe_model(**change)
    result = compile_model(model)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_moe_weight_of_the_wrong_shape_is_refused(compile_model):
    model, _, _ = moe_model()
    w2 = np.zeros((4, 8, 10), np.float32)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(w2, "w2"))
    result = compile_model(model)
    assert result.returncode == 1
    assert "MoE's fc2_experts_weights has shape [4, 8, 10], not [4, 8, 12]" \
        in result.stderr


# A 50-TFLOPS device (the default links): where the routed work of 8
# experts of FFN 1024 over 1024 tokens takes longer than an all-reduce of
# the output, as Mixtral's widths do on the default H100-class device.
SLOW_DEVICE = '{"device": {"flops_per_second": 5e13}}'


def test_moe_experts_are_split_over_tp_by_cost(tmp_path):
    """Where halving the routed work pays for one all-reduce, the split
    search gives each tp rank half of the experts (nn.moe's expert
    dimension, of both stacked weights): half the weight bytes, one
    all-reduce of the output, and the result equals onnxruntime's. On the
    default device the same layer is faster whole, and stays whole."""
    import subprocess
    from conftest import BUILD
    model, feeds, arrays = moe_model(
        tokens=1024, hidden=256, inter=1024, experts=8, k=2,
        activation="swiglu", fusion=1, normalize=1)
    want = onnxruntime(model, feeds)
    path = tmp_path / "moe.onnx"
    # Saving moves the weights out of `model` into moe.data.
    onnx.save(model, str(path), save_as_external_data=True,
              location="moe.data")
    def chosen(*flags):
        proc = subprocess.run(
            [str(BUILD / "bin" / "partita-compile"), str(path), "-o",
             str(tmp_path / "explained"), "--mesh", "tp=2", "--explain",
             *flags], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return {line.split()[0]: line.split()[1]
                for line in proc.stdout.splitlines()
                if "{chosen by the estimated step" in line}
    assert chosen() == {"w1": "whole", "w2": "whole"}
    assert chosen("--cluster", SLOW_DEVICE) == {"w1": "experts",
                                                "w2": "experts"}
    outputs, report = compile_and_run(tmp_path / "run", path, feeds,
                                      "--mesh", "tp=2", "--cluster",
                                      SLOW_DEVICE)
    # Outputs reach a few hundred (sums of 256 and 1024 products): the
    # error is held to 1e-5 of their scale, as fp32 sums in another order
    # allow.
    error = np.abs(outputs["y"] - want).max()
    assert error <= 1e-5 * np.abs(want).max(), (error, np.abs(want).max())
    # Half of the experts' weights, and the router's small constants.
    whole = sum(a.nbytes for a in arrays.values())
    for rank in report["ranks"]:
        assert whole // 2 <= rank["weight_bytes"] < whole // 2 + whole // 100, \
            (rank["weight_bytes"], whole)
        assert [c["kind"] for c in rank["collectives"]] == ["all_reduce"]


def test_moe_swiglu_limit_must_be_positive(compile_model):
    model, _, _ = moe_model(activation="swiglu", fusion=1,
                            attrs=dict(swiglu_limit=0.0))
    result = compile_model(model)
    assert result.returncode == 1
    assert "MoE's swiglu_limit must be positive, got 0" in result.stderr


def test_moe_computes_only_the_routed_experts(tmp_path):
    """nn.moe computes each token's k experts, not all E: the report's
    flops are the routed products (k/E of computing every expert on every
    token) plus the router's few, and the run still equals onnxruntime."""
    tokens, hidden, inter, experts, k = 64, 32, 48, 8, 2
    model, feeds, _ = moe_model(tokens=tokens, hidden=hidden, inter=inter,
                                experts=experts, k=k, activation="swiglu",
                                fusion=1)
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    outputs, report = compile_and_run(tmp_path / "run", path, feeds)
    np.testing.assert_allclose(outputs["y"], onnxruntime(model, feeds),
                               rtol=1e-4, atol=1e-5)
    per_token_expert = 2 * hidden * (2 * inter + inter)
    dense = tokens * experts * per_token_expert
    routed = tokens * k * per_token_expert
    flops = report["model"]["flops"]
    assert routed <= flops <= 1.1 * routed, (flops, routed)
    assert flops <= 1.1 * dense * k / experts



def test_ep_splits_the_experts(tmp_path):
    """--mesh ep=2 gives each rank half of the experts (half the expert
    weight bytes) and half of the tokens, which travel to their experts'
    ranks and back (dist.dispatch, dist.dispatch_return); with tp=2
    beside it, each expert's features are split too (a quarter of the
    bytes), and their partial sums are all-reduced over tp once the tokens
    are back."""
    model, feeds, arrays = moe_model(tokens=8, hidden=16, inter=32,
                                     experts=4, activation="swiglu",
                                     fusion=1)
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    whole = sum(a.nbytes for a in arrays.values())
    for mesh, share, kinds in (
            ("ep=2", 2, ["dispatch", "dispatch_return"]),
            ("dp=2,ep=2", 2, ["dispatch", "dispatch_return"]),
            ("ep=2,tp=2", 4, ["dispatch", "dispatch_return", "all_reduce"])):
        outputs, report = compile_and_run(tmp_path / mesh, path, feeds,
                                          "--mesh", mesh)
        np.testing.assert_allclose(outputs["y"], onnxruntime(model, feeds),
                                   rtol=1e-4, atol=1e-5)
        for rank in report["ranks"]:
            assert whole // share <= rank["weight_bytes"] \
                < whole // share + whole // 20, (mesh, rank["weight_bytes"])
            collectives = {c["kind"]: c for c in rank["collectives"]}
            assert list(collectives) == kinds, (mesh, rank["collectives"])
            # Each rank sends a row of 16 floats per (token, expert) pair
            # of its tokens (4, or 2 beside dp=2), and their ids: half
            # leave the rank when routing spreads them evenly.
            rows = (2 if mesh.startswith("dp") else 4) * 2
            dispatch = collectives["dispatch"]
            assert dispatch["count"] == 2
            assert dispatch["payload"] == rows * 16 * 4 + rows * 8
            assert dispatch["bytes"] == dispatch["payload"] // 2
            assert collectives["dispatch_return"]["payload"] == rows * 16 * 4
            if "all_reduce" in collectives:
                # The tp partial sums of the combined tokens, not of the
                # dispatched rows.
                assert collectives["all_reduce"]["payload"] == 4 * 16 * 4


def test_ep_keeps_tokens_whole_where_the_batch_does_not_split(tmp_path):
    """Three tokens do not split over ep=2: each ep rank runs all of them
    with its half of the experts, the outputs are all-reduced, and the
    report's remarks say why."""
    model, feeds, _ = moe_model(tokens=3, hidden=16, inter=32, experts=4,
                                activation="swiglu", fusion=1)
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    outputs, report = compile_and_run(tmp_path / "run", path, feeds,
                                      "--mesh", "ep=2")
    np.testing.assert_allclose(outputs["y"], onnxruntime(model, feeds),
                               rtol=1e-4, atol=1e-5)
    for rank in report["ranks"]:
        assert [c["kind"] for c in rank["collectives"]] == ["all_reduce"]
    assert any("is not a multiple of ep = 2" in remark
               for remark in report["remarks"]), report["remarks"]


def test_ep_axis_without_experts_is_refused(tmp_path):
    """An ep axis on a model without a mixture of experts would only
    replicate it: refused with the axis named."""
    x = helper.make_tensor_value_info("x", F32, [2, 4])
    y = helper.make_tensor_value_info("y", F32, [2, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [x], [y])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    import subprocess
    from conftest import BUILD
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(path), "-o",
         str(tmp_path / "art"), "--mesh", "ep=2"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert ("axis 'ep' (size 2) splits the experts of a mixture of experts "
            "(nn.moe), and the model has none" in proc.stderr), proc.stderr
    assert not (tmp_path / "art").exists()



def test_mesh_auto_considers_ep(tmp_path):
    """--mesh auto plans the experts over ep: on 2 devices a model of a
    mixture of experts alone (no attention layer for tp, pp or sp, one
    sequence for dp) is planned as ep=2, each rank with half of the expert
    weights, and runs equal to onnxruntime."""
    model, feeds, arrays = moe_model(**CPU_CASES["swiglu_gpt_oss"])
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    outputs, report = compile_and_run(tmp_path / "run", path, feeds,
                                      "--mesh", "auto", "--devices", "2")
    assert report["plan"]["chosen"]["mesh"] == {"ep": 2}, report["plan"]
    np.testing.assert_allclose(outputs["y"], onnxruntime(model, feeds),
                               rtol=1e-4, atol=1e-5)
    whole = sum(a.nbytes for a in arrays.values())
    for rank in report["ranks"]:
        assert rank["weight_bytes"] < 0.6 * whole, rank["weight_bytes"]


def test_mesh_auto_refuses_an_ep_that_does_not_divide_the_experts(tmp_path):
    """3 devices for 4 experts: ep=3 is refused for divisibility, and with
    no other plan (one sequence, no attention layer) no plan fits."""
    import subprocess
    from conftest import BUILD
    model, _, _ = moe_model()
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(path), "--mesh", "auto",
         "--devices", "3", "--emit", "plan"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ep: divisibility: 4 experts over ep=3" in proc.stdout, proc.stdout
    compiled = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(path), "--mesh", "auto",
         "--devices", "3", "-o", str(tmp_path / "art")],
        capture_output=True, text=True, timeout=60)
    assert compiled.returncode == 1
    assert "ep: divisibility: 4 experts over ep=3" in compiled.stderr, \
        compiled.stderr


def capacity_reference(feeds, arrays, k, capacity):
    """A relu mixture (softmax router, top k, not renormalized) in float64,
    each expert keeping the first `capacity` tokens routed to it in token
    order and dropping the rest (Megatron-Core's position policy)."""
    x = feeds["x"].astype(np.float64)
    logits = feeds["r"].astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    taken = {}
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e in np.argsort(-probs[t], kind="stable")[:k]:
            taken[e] = taken.get(e, 0) + 1
            if taken[e] > capacity:
                continue
            h = np.maximum(arrays["w1"][e].astype(np.float64) @ x[t], 0)
            y[t] += probs[t, e] * (arrays["w2"][e].astype(np.float64) @ h)
    return y


@pytest.mark.parametrize("mesh", [None, "ep=2", "dp=2", "tp=2",
                                  "dp=2,ep=2", "ep=2,tp=2"])
def test_moe_capacity_factor_drops_tokens_past_each_experts_capacity(
        tmp_path, mesh):
    """--moe-capacity-factor 0.5 over 16 tokens, top 2 of 4 experts: each
    expert takes its first ceil(0.5 * 16 * 2 / 4) = 4 tokens and drops the
    rest, the same on every mesh (the bound is the batch's, not a rank's),
    equal to a float64 reference that drops them; without the option
    nothing is dropped (onnxruntime's result)."""
    model, feeds, arrays = moe_model(tokens=16, hidden=8, inter=12,
                                     experts=4, k=2, seed=3)
    flags = ["--moe-capacity-factor", "0.5"]
    if mesh:
        flags += ["--mesh", mesh]
    (tmp_path / "bounded").mkdir()
    bounded = partita(tmp_path / "bounded", model, feeds, *flags)
    expected = capacity_reference(feeds, arrays, 2, 4)
    np.testing.assert_allclose(bounded, expected, rtol=1e-4, atol=1e-5)
    # The capacity matters: some expert had more than 4 of the 32 pairs.
    dropless = capacity_reference(feeds, arrays, 2, 16)
    assert np.abs(expected - dropless).max() > 1e-2
    np.testing.assert_allclose(dropless, onnxruntime(model, feeds),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_moe_capacity_factor_must_be_a_nonnegative_number(compile_model,
                                                          value):
    model, _, _ = moe_model()
    result = compile_model(model, "--moe-capacity-factor", value)
    assert result.returncode == 1, result.stderr
    assert "--moe-capacity-factor" in result.stderr, result.stderr


def test_run_reports_the_rows_each_expert_rank_received(tmp_path):
    """partita-run says what the token dispatch moved: the (token, expert)
    pairs each ep rank's experts received and the bytes sent between ranks
    (a hidden row and its expert id there, the output row back), as the
    router's own top 2 gives them."""
    import subprocess
    from conftest import BUILD
    tokens, hidden, experts = 16, 8, 4
    model, feeds, _ = moe_model(tokens=tokens, hidden=hidden, experts=experts,
                                k=2, seed=5)
    path = tmp_path / "moe.onnx"
    onnx.save(model, str(path))
    art = tmp_path / "art"
    compiled = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(path), "--mesh", "ep=2",
         "-o", str(art)], capture_output=True, text=True, timeout=60)
    assert compiled.returncode == 0, compiled.stderr
    args = [str(BUILD / "bin" / "partita-run"), str(art)]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    top = np.argsort(-feeds["r"], axis=1, kind="stable")[:, :2]
    owner = top // (experts // 2)          # the rank holding each expert
    source = np.arange(tokens)[:, None] // (tokens // 2)  # the token's rank
    received = [int((owner == r).sum()) for r in range(2)]
    leaving = int((owner != source).sum())
    sent = leaving * (hidden * 4 + 8) + leaving * hidden * 4
    mean = sum(received) / 2
    line = (f"dispatch: rows received per rank: rank 0 {received[0]}, "
            f"rank 1 {received[1]} (max/mean {max(received) / mean:.2f}) "
            f"over 1 exchange; {sent} bytes sent between ranks")
    assert line in run.stdout, run.stdout


def test_a_dropped_slot_adds_nothing_whatever_its_weight(tmp_path):
    """An infinite router logit makes its token's routing weights NaN; where
    the capacity drops that token's slots, they add nothing on one rank
    (the kernel skips them), and the dispatched ep=2 run must agree: its
    returned rows are zeros that a NaN weight must not multiply."""
    model, feeds, _ = moe_model(tokens=16, hidden=8, inter=12, experts=4,
                                k=2, seed=3)
    feeds["r"][15] = [np.inf, 0, 0, 0]
    flags = ["--moe-capacity-factor", "0.25"]
    (tmp_path / "one").mkdir()
    (tmp_path / "ep").mkdir()
    one = partita(tmp_path / "one", model, feeds, *flags)
    ep = partita(tmp_path / "ep", model, feeds, *flags, "--mesh", "ep=2")
    np.testing.assert_array_equal(np.isnan(one), np.isnan(ep))
    np.testing.assert_allclose(ep, one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flags", [["--mesh", "dp=2,ep=2"],
                                   ["--mesh", "ep=2,pp=2",
                                    "--microbatches", "2"]])
def test_mixtral_dispatches_at_batch_4(tmp_path, flags):
    """Transformers' Mixtral at batch 4 (its dynamic export bound): the
    batch splits over dp×ep (the fixture matrix's batch of 2 does not), and
    inside a pipeline's microbatches each microbatch dispatches its own
    tokens; both equal onnxruntime."""
    from conftest import ROOT
    path = ROOT / "test" / "models" / "hf" / "mixtral.legacy.dynamic.onnx"
    rng = np.random.default_rng(4)
    feeds = {"input_ids": rng.integers(0, 128, (4, 16)).astype(np.int64),
             "attention_mask": np.ones((4, 16), np.int64)}
    feeds["attention_mask"][1, :5] = 0
    outputs, report = compile_and_run(tmp_path, path, feeds, "--bind",
                                      "batch=4,sequence=16", *flags)
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    want = session.run(["logits"], feeds)[0]
    np.testing.assert_allclose(outputs["logits"], want, rtol=1e-4,
                               atol=1e-5)
    kinds = {c["kind"] for rank in report["ranks"]
             for c in rank["collectives"]}
    assert "dispatch" in kinds, kinds


def test_mesh_auto_plans_ep_as_it_is_built(tmp_path):
    """--mesh auto models ep as the compiler builds it: Mixtral's batch of
    2 splits over ep=2, so its ep candidate dispatches the tokens
    (expert_dispatch in the plan) and is costed with the dispatch's
    traffic instead of an all-reduce."""
    import json
    import subprocess
    from conftest import BUILD, ROOT
    report = tmp_path / "report.json"
    compiled = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"),
         str(ROOT / "test" / "models" / "hf" / "mixtral.legacy.onnx"),
         "--mesh", "auto", "--devices", "2", "-o", str(tmp_path / "art"),
         "--report", str(report)], capture_output=True, text=True,
        timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    candidates = json.loads(report.read_text())["plan"]["candidates"]
    ep = [c for c in candidates if c["mesh"] == {"ep": 2}]
    assert ep and all(c["expert_dispatch"] for c in ep), ep
    assert all("expert_dispatch" not in c for c in candidates
               if "ep" not in c["mesh"])


def test_planned_ep_candidates_compile_as_planned(tmp_path):
    """Every plan --mesh auto lists for Mixtral at batch 4 on 4 devices
    (pipelines and ep among them) compiles with its own mesh and
    microbatches: a dispatching ep splits the batch as dp does, so the
    planner counts it before the microbatches, as the compiler does."""
    import json
    import subprocess
    from conftest import BUILD, ROOT
    path = ROOT / "test" / "models" / "hf" / "mixtral.legacy.dynamic.onnx"
    compiler = str(BUILD / "bin" / "partita-compile")
    report = tmp_path / "report.json"
    common = [str(path), "--bind", "batch=4,sequence=16"]
    planned = subprocess.run(
        [compiler, *common, "--mesh", "auto", "--devices", "4",
         "--objective", "throughput", "--cluster",
         '{"device": {"flops_per_second": 1e9}}', "-o",
         str(tmp_path / "auto"), "--report", str(report)],
        capture_output=True, text=True, timeout=120)
    assert planned.returncode == 0, planned.stderr
    candidates = json.loads(report.read_text())["plan"]["candidates"]
    assert any("ep" in c["mesh"] for c in candidates), candidates
    for i, c in enumerate(candidates):
        mesh = ",".join(f"{axis}={size}" for axis, size in c["mesh"].items())
        flags = ["--mesh", mesh, "--microbatches", str(c["microbatches"])]
        if c["sp_mode"] != "none":
            flags += ["--sp-mode", c["sp_mode"]]
        compiled = subprocess.run(
            [compiler, *common, *flags, "-o", str(tmp_path / str(i))],
            capture_output=True, text=True, timeout=120)
        assert compiled.returncode == 0, (c, compiled.stderr)
