"""transformers' eager expert loop (the legacy exporter's trace of a Python
loop over the experts the example input reached) imports as one nn.moe per
layer (lib/Frontend/ONNX/ExpertLoops.cpp). The fixtures are Mixtral with 4
experts, top 2 (every expert reached: 4 bodies), and with 64 experts, top 1
(18 and 13 bodies), from test/models/hf/make_hf.py, and optimum's export
of the 4-expert Mixtral through transformers 4.57 (each body an expert
module's own weights). The runs on every mesh against onnxruntime are
test_hf_models.py's; here: what the fold makes, inputs other than the
export's own, and the loops it must not fold."""

import re
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from conftest import BUILD, ROOT, onnx_model, value_info

HF = ROOT / "test" / "models" / "hf"
COMPILE = str(BUILD / "bin" / "partita-compile")
RUN = str(BUILD / "bin" / "partita-run")


def compile_nn(path):
    return subprocess.run([COMPILE, str(path), "--emit", "nn"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name,bodies,experts", [
    ("mixtral_eager", [4, 4], 4), ("mixtral_eager64", [18, 13], 64),
    ("qwen2_moe_eager", [3, 3], 4), ("qwen3_moe_eager", [4, 4], 4)])
def test_each_loop_folds_into_one_moe(name, bodies, experts):
    proc = compile_nn(HF / f"{name}.legacy.onnx")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("nn.moe swiglu") == 2, proc.stdout
    assert "NonZero" not in proc.stdout
    warnings = re.findall(r"eager expert loop holds (\d+) of (\d+) experts",
                          proc.stderr)
    want = [(str(b), str(experts)) for b in bodies if b < experts]
    assert warnings == want, proc.stderr


def test_transformers4_modules_stack_into_one_moe(tmp_path):
    # optimum's export (transformers 4.57): each body multiplies by its
    # expert module's w1, w3 and w2 constants, which nn.moe reads stacked
    # ([E, F, H] for w1 and w3 as fc1 and fc3, [E, H, F] for w2).
    path = HF / "mixtral.optimum.onnx"
    proc = subprocess.run([COMPILE, str(path), "--emit", "nn", "--bind",
                           "batch_size=2,sequence_length=16"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("nn.moe swiglu") == 2
    assert "tensor<4x48x32xf32>, tensor<4x32x48xf32>, tensor<4x48x32xf32>" \
        in proc.stdout
    assert "warning" not in proc.stderr


def test_transformers4_experts_the_loop_lacks_add_nothing(tmp_path):
    # The same export with a one-hot of 6 classes: a model of 6 experts
    # whose loop holds the 4 its example reached. The router never picks
    # 4 or 5 here, so the outputs are onnxruntime's; the import names the
    # experts it has no weights for.
    model = onnx.load(str(HF / "mixtral.optimum.onnx"))
    for node in model.graph.node:
        if node.output[0] == "/model/Constant_8_output_0":
            node.attribute[0].t.CopyFrom(
                onnx.numpy_helper.from_array(np.array(6, np.int64)))
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    artifact = tmp_path / "art"
    proc = subprocess.run([COMPILE, str(path), "-o", str(artifact), "--bind",
                           "batch_size=2,sequence_length=16"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(
        "eager expert loop holds 4 of 6 experts (the export's example input "
        "reached only those): the graph has no weights for experts 4, 5, "
        "which add nothing here") == 2, proc.stderr
    feeds = dict(np.load(HF / "mixtral.inputs.npz"))
    feeds = {k: feeds[k] for k in ("input_ids", "attention_mask",
                                   "position_ids")}
    run = tmp_path / "run"
    run.mkdir()
    np.testing.assert_allclose(partita_outputs(run, artifact, feeds),
                               ort_outputs(path, feeds), rtol=1e-4,
                               atol=1e-5)


def ort_outputs(path, feeds):
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def partita_outputs(tmp_path, artifact, feeds):
    args = [RUN, str(artifact), "--output-dir", str(tmp_path / "out")]
    for key, value in feeds.items():
        np.save(tmp_path / f"{key}.npy", value)
        args += ["--input", f"{key}={tmp_path / key}.npy"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.load(tmp_path / "out" / "logits.npy")


def other_feeds(name, rng):
    """The fixture's input with one token changed (which keeps most of its
    routing, so that some reach as many experts as the example did)."""
    feeds = dict(np.load(HF / f"{name}.inputs.npz"))
    ids = feeds["input_ids"].copy()
    ids[rng.integers(0, 2), rng.integers(0, 16)] = rng.integers(0, 128)
    return {"input_ids": ids, "attention_mask": feeds["attention_mask"]}


@pytest.mark.parametrize("name", ["mixtral_eager", "mixtral_eager64"])
def test_other_inputs_run_like_onnxruntime_where_it_accepts_them(tmp_path,
                                                                   name):
    # The expert ids of a body are values (the loop's rows of NonZero), so
    # onnxruntime computes any input that reaches as many experts per layer
    # as the example did, and refuses the others (Split's sizes no longer
    # fit). Where it accepts, the folded mixture equals it; where it
    # refuses, Partita computes the router's experts all the same.
    path = HF / f"{name}.legacy.onnx"
    artifact = tmp_path / "art"
    proc = subprocess.run([COMPILE, str(path), "-o", str(artifact)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rng = np.random.default_rng(37)
    accepted = refused = 0
    for attempt in range(60):
        feeds = other_feeds(name, rng)
        try:
            want = ort_outputs(path, feeds)
        except Exception as error:  # noqa: BLE001 - onnxruntime refuses
            assert "Split" in str(error) or "split" in str(error), error
            if refused < 1:
                run = tmp_path / f"refused{attempt}"
                run.mkdir()
                got = partita_outputs(run, artifact, feeds)
                assert np.isfinite(got).all()
            refused += 1
            continue
        run = tmp_path / f"accepted{attempt}"
        run.mkdir()
        np.testing.assert_allclose(partita_outputs(run, artifact, feeds),
                                   want, rtol=1e-4, atol=1e-5)
        accepted += 1
        if accepted == 2 and (refused or name == "mixtral_eager"):
            break
    assert accepted == 2, (accepted, refused)
    # Four experts, top 2 of 32 tokens: every input reaches all four.
    assert (refused == 0) == (name == "mixtral_eager"), refused


def mutated(change):
    """The 4-expert fixture with `change(node)` applied to the first
    node it returns True for."""
    model = onnx.load(str(HF / "mixtral_eager.legacy.onnx"))
    for node in model.graph.node:
        if change(node):
            break
    return model


def sigmoid_to_tanh(node):
    if node.op_type == "Sigmoid" and "experts/act_fn/" in node.name:
        node.op_type = "Tanh"
        return True
    return False


def first_body_weight_from_down_proj(node):
    # The first body's gate_up_proj read from down_proj's rows instead.
    if node.op_type == "Gather" and node.input[0].endswith(
            "layers.0.mlp.experts.gate_up_proj"):
        node.input[0] = node.input[0].replace("gate_up_proj", "down_proj")
        return True
    return False


@pytest.mark.parametrize("change", [sigmoid_to_tanh,
                                    first_body_weight_from_down_proj])
def test_a_loop_that_computes_something_else_is_not_folded(tmp_path, change):
    path = tmp_path / "model.onnx"
    onnx.save(mutated(change), str(path))
    proc = compile_nn(path)
    assert proc.returncode == 1, proc.stdout
    assert "unsupported ONNX ops at opset 17: NonZero" in proc.stderr
    assert "not one Partita recognizes" in proc.stderr, proc.stderr


def reshape_attribute_mistyped(node):
    # Found by the fuzz campaign: a node the fold removes must still be
    # checked (onnxruntime refuses the model).
    if node.op_type == "Reshape" and "mlp/experts/" in node.name:
        for attribute in node.attribute:
            if attribute.name == "allowzero":
                attribute.type = onnx.AttributeProto.STRING
                attribute.s = b"0"
                return True
    return False


def scatter_axis_mistyped(node):
    # ScatterElements has no schema in the import's table: the matcher
    # reads its axis typed, and a mistyped one does not match.
    if node.op_type == "ScatterElements":
        node.attribute[0].type = onnx.AttributeProto.FLOAT
        node.attribute[0].f = 0.0
        return True
    return False


def cast_without_outputs(node):
    # Found by the fuzz campaign (a crash): the matcher read outputs and
    # inputs a node of the loop no longer had.
    if node.op_type == "Cast" and "mlp/experts/" in node.name:
        del node.output[:]
        return True
    return False


def mul_without_inputs(node):
    if node.op_type == "Mul" and "mlp/experts/" in node.name:
        del node.input[:]
        return True
    return False


def constant_of_no_elements(node):
    # Found by the fuzz campaign: a Constant the fold removes whose tensor
    # holds bytes its shape does not have.
    if node.op_type == "Constant" and node.name.endswith(
            "layers.0/mlp/experts/Constant_34"):
        tensor = node.attribute[0].t
        del tensor.dims[:]
        tensor.dims.append(0)
        tensor.raw_data = b"\0" * 8
        return True
    return False


def nonzero_with_two_inputs(node):
    # Found by the fuzz campaign: NonZero has no schema in the import's
    # table, so the matcher checks its signature itself.
    if node.op_type == "NonZero" and "mlp/experts/" in node.name:
        node.input.append(node.input[0])
        return True
    return False


@pytest.mark.parametrize("change,message", [
    (nonzero_with_two_inputs, "unsupported ONNX ops at opset 17: NonZero"),
    (constant_of_no_elements, "holds 8 bytes; its shape and type need 0"),
    (reshape_attribute_mistyped,
     "error: attribute 'allowzero' of Reshape must be INT"),
    (scatter_axis_mistyped, "unsupported ONNX ops at opset 17: NonZero"),
    (cast_without_outputs, "error: "),
    (mul_without_inputs, "error: ")])
def test_a_malformed_loop_is_refused_not_folded_away(tmp_path, change,
                                                      message):
    path = tmp_path / "model.onnx"
    onnx.save(mutated(change), str(path))
    proc = compile_nn(path)
    assert proc.returncode == 1, proc.stdout
    assert message in proc.stderr, proc.stderr


def test_a_one_hot_of_too_many_classes_is_not_folded(tmp_path):
    # transformers 4's form builds a weight per expert: a one-hot of 2^40
    # classes must not make 2^40 of them (the loop is left to the import,
    # which refuses it).
    model = onnx.load(str(HF / "mixtral.optimum.onnx"))
    for node in model.graph.node:
        if node.output[0] == "/model/Constant_8_output_0":
            node.attribute[0].t.CopyFrom(
                onnx.numpy_helper.from_array(np.array(2**40, np.int64)))
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    proc = subprocess.run([COMPILE, str(path), "--emit", "nn", "--bind",
                           "batch_size=2,sequence_length=16"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "unsupported ONNX ops at opset 18: NonZero" in proc.stderr


def test_the_internal_domain_is_refused(compile_model):
    m = onnx_model([helper.make_node("ExpertLoop", ["x"], ["y"],
                                     domain="ai.partita.internal",
                                     name="mine")],
                   [value_info("x", onnx.TensorProto.FLOAT, [2])],
                   [value_info("y", onnx.TensorProto.FLOAT, [2])],
                   domains=[("ai.partita.internal", 1)])
    result = compile_model(m)
    assert result.returncode == 1
    assert "node 'mine' uses the domain ai.partita.internal, which is " \
        "Partita's own; a model may not" in result.stderr, result.stderr
