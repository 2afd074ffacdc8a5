"""Edge cases of the ONNX front end, on models built with onnx.helper.

Folded results are compared with onnxruntime; graphs that keep runtime ops
are checked for the nn ops they become (running them needs the host
runtime, which arrives later)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (returned_constants, onnx_model as model,
                      value_info as vi, initializer as const)

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def reference(m, feeds=None):
    sess = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds or {})


# --- Constant folding agrees with onnxruntime -------------------------------

FOLDING_CASES = {
    "range_cast_sqrt": (
        [helper.make_node("Range", ["s", "l", "d"], ["r"]),
         helper.make_node("Cast", ["r"], ["rf"], to=F),
         helper.make_node("Sqrt", ["rf"], ["y"])],
        [const("s", np.int64(1)), const("l", np.int64(11)), const("d", np.int64(3))],
        [vi("y", F, [4])]),
    "trilu_of_constant_of_shape": (
        [helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                          value=helper.make_tensor("v", F, [1], [1.0])),
         helper.make_node("Trilu", ["ones", "k"], ["y"], upper=1)],
        [const("shape", np.array([4, 5], np.int64)), const("k", np.int64(1))],
        [vi("y", F, [4, 5])]),
    "where_equal_expand": (
        [helper.make_node("Equal", ["a", "b"], ["eq"]),
         helper.make_node("Where", ["eq", "a", "c"], ["w"]),
         helper.make_node("Expand", ["w", "shape"], ["y"])],
        [const("a", np.array([1, 2, 3], np.int64)), const("b", np.array([1, 0, 3], np.int64)),
         const("c", np.array([-1], np.int64)), const("shape", np.array([2, 1, 3], np.int64))],
        [vi("y", I64, [2, 1, 3])]),
    "slice_negative_and_strided": (
        [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
        [const("x", np.arange(24, dtype=np.float32).reshape(4, 6)),
         const("st", np.array([-3, 1], np.int64)), const("en", np.array([100, -1], np.int64)),
         const("ax", np.array([0, 1], np.int64)), const("sp", np.array([1, 2], np.int64))],
        [vi("y", F, [3, 2])]),
    "gather_negative_indices": (
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
        [const("x", np.arange(12, dtype=np.int64).reshape(3, 4)),
         const("i", np.array([[-1, 0], [2, -4]], np.int64))],
        [vi("y", I64, [3, 2, 2])]),
    "rotary_tables": (
        [helper.make_node("MatMul", ["pos", "freq"], ["angles"]),
         helper.make_node("Cos", ["angles"], ["c"]),
         helper.make_node("Sin", ["angles"], ["s"]),
         helper.make_node("Concat", ["c", "s"], ["y"], axis=-1)],
        [const("pos", np.arange(6, dtype=np.float32).reshape(6, 1)),
         const("freq", (1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32)[None])],
        [vi("y", F, [6, 8])]),
    "integer_division_and_casts": (
        [helper.make_node("Div", ["a", "b"], ["q"]),
         helper.make_node("Cast", ["f"], ["t"], to=I64),
         helper.make_node("Add", ["q", "t"], ["y"])],
        [const("a", np.array([7, -7, 9], np.int64)), const("b", np.array([2, 2, -4], np.int64)),
         const("f", np.array([2.7, -2.7, 0.5], np.float32))],
        [vi("y", I64, [3])]),
    "shape_arithmetic_split_squeeze": (
        [helper.make_node("Split", ["x", "sizes"], ["p", "q"], axis=0),
         helper.make_node("Squeeze", ["q", "axes"], ["y"])],
        [const("x", np.arange(8, dtype=np.int64).reshape(4, 2)),
         const("sizes", np.array([3, 1], np.int64)), const("axes", np.array([0], np.int64))],
        [vi("y", I64, [2])]),
    # f16 attribute values live in int32_data as bit patterns, bools as 0/1.
    "constant_f16_and_bool_fill": (
        [helper.make_node("Constant", [], ["h"],
                          value=helper.make_tensor("v", TensorProto.FLOAT16, [2],
                                                   [1.5, -2.0])),
         helper.make_node("Cast", ["h"], ["hf"], to=F),
         helper.make_node("ConstantOfShape", ["shape"], ["mask"],
                          value=helper.make_tensor("t", B, [1], [True])),
         helper.make_node("Cast", ["mask"], ["mf"], to=F),
         helper.make_node("Mul", ["hf", "mf"], ["y"])],
        [const("shape", np.array([2], np.int64))],
        [vi("y", F, [2])]),
    "pow_neg_reciprocal": (
        [helper.make_node("Pow", ["x", "e"], ["p"]),
         helper.make_node("Neg", ["p"], ["n"]),
         helper.make_node("Reciprocal", ["n"], ["y"])],
        [const("x", np.array([1.5, 2.0, 4.0], np.float32)), const("e", np.float32(0.5))],
        [vi("y", F, [3])]),
}


@pytest.mark.parametrize("case", sorted(FOLDING_CASES))
def test_constant_subgraph_folds_like_onnxruntime(compile_model, case):
    nodes, inits, outputs = FOLDING_CASES[case]
    m = model(nodes, [], outputs, inits)
    result = compile_model(m).ok()
    assert "nn." in result.ir
    (got,) = returned_constants(result.ir)
    (want,) = reference(m)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=1e-6, atol=1e-6)


# --- Shapes: symbolic dims and shape sub-graphs -----------------------------

def test_shape_subgraph_becomes_static_reshape(compile_model):
    # Reshape(x, concat(shape(x)[0:2], [-1])) as exporters spell a flatten.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "z", "two"], ["bs"]),
             helper.make_node("Concat", ["bs", "m1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [const("z", np.array([0], np.int64)), const("two", np.array([2], np.int64)),
             const("m1", np.array([-1], np.int64))]
    m = model(nodes, [vi("x", F, ["batch", "seq", 4, 8])], [vi("y", F, ["batch", "seq", 32])],
              inits)
    ir = compile_model(m, "--bind", "batch=3,seq=5").ok().ir
    assert "nn.reshape %arg0 : tensor<3x5x4x8xf32> -> tensor<3x5x32xf32>" in ir
    assert "Shape" not in ir and "nn.concat" not in ir


def test_shape_start_end_since_opset_15(compile_model):
    nodes = [helper.make_node("Shape", ["x"], ["y"], start=1, end=-1)]
    m = model(nodes, [vi("x", F, [2, 3, 4, 5])], [vi("y", I64, [2])], opset=15)
    (got,) = returned_constants(compile_model(m).ok().ir)
    np.testing.assert_array_equal(got, [3, 4])


# --- Version differences ------------------------------------------------------

def test_reduce_mean_axes_attribute_then_input(compile_model):
    old = model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)],
                [vi("x", F, [2, 3])], [vi("y", F, [2, 1])], opset=17)
    new = model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=1)],
                [vi("x", F, [2, 3])], [vi("y", F, [2, 1])],
                [const("axes", np.array([-1], np.int64))], opset=18)
    for m in (old, new):
        ir = compile_model(m).ok().ir
        assert "nn.reduce mean %arg0 axes = [1] keepdims" in ir


def test_split_num_outputs_since_opset_18(compile_model):
    m = model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
              [vi("x", F, [2, 7])], [vi("a", F, [2, 3]), vi("b", F, [2, 3]), vi("c", F, [2, 1])],
              opset=18)
    ir = compile_model(m).ok().ir
    assert "nn.split %arg0 axis = 1 : tensor<2x7xf32> -> tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x1xf32>" in ir


def test_reshape_allowzero(compile_model):
    # With allowzero a 0 in the shape is a zero-sized dimension, not a copy.
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)],
              [vi("x", F, [0, 4])], [vi("y", F, [4, 0])],
              [const("s", np.array([4, 0], np.int64))], opset=14)
    assert "tensor<4x0xf32>" in compile_model(m).ok().ir


def test_gelu_op_since_opset_20(compile_model):
    m = model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
              [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], opset=20)
    assert "nn.gelu %arg0 approximation = tanh" in compile_model(m).ok().ir


def test_rms_normalization_since_opset_23(compile_model):
    m = model([helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6)],
              [vi("x", F, [2, 3, 8])], [vi("y", F, [2, 3, 8])],
              [const("w", np.ones(8, np.float32))], opset=23)
    ir = compile_model(m).ok().ir
    assert "nn.rms_norm %arg0 scale(" in ir and "axis = 2 epsilon = 9.99999997E-7" in ir


def test_layer_norm_statistics_outputs(compile_model):
    m = model([helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean", "inv"],
                                axis=1)],
              [vi("x", F, [2, 4, 8])],
              [vi("y", F, [2, 4, 8]), vi("mean", F, [2, 1, 1]), vi("inv", F, [2, 1, 1])],
              [const("g", np.ones((4, 8), np.float32))])
    ir = compile_model(m, "--no-raise").ok().ir
    assert "nn.layer_norm %arg0" in ir
    assert "nn.reduce mean %arg0 axes = [1, 2] keepdims" in ir and "nn.rsqrt" in ir


def test_gemm_transposes_alpha_beta(compile_model):
    m = model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1,
                                alpha=2.0, beta=0.5)],
              [vi("a", F, [4, 2]), vi("b", F, [3, 4]), vi("c", F, [2, 3])], [vi("y", F, [2, 3])])
    ir = compile_model(m).ok().ir
    assert ir.count("nn.transpose") == 2
    assert "nn.matmul" in ir and ir.count("nn.mul") == 2 and "nn.add" in ir


def test_gemm_bias_becomes_epilogue(compile_model):
    m = model([helper.make_node("Gemm", ["a", "w", "bias"], ["y"])],
              [vi("a", F, [2, 4])], [vi("y", F, [2, 3])],
              [const("w", np.ones((4, 3), np.float32)), const("bias", np.ones(3, np.float32))])
    ir = compile_model(m).ok().ir
    assert " bias %" in ir and "nn.add" not in ir


def test_matmul_vector_operands(compile_model):
    m = model([helper.make_node("MatMul", ["v", "m"], ["y"])],
              [vi("v", F, [4]), vi("m", F, [2, 4, 3])], [vi("y", F, [2, 3])])
    ir = compile_model(m).ok().ir
    assert "-> tensor<2x1x3xf32>" in ir and "tensor<2x3xf32>" in ir


# --- Opset 23 transformer ops -----------------------------------------------

def test_attention_4d_causal(compile_model):
    m = model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
              [vi("q", F, [2, 4, 8, 16]), vi("k", F, [2, 2, 8, 16]), vi("v", F, [2, 2, 8, 16])],
              [vi("y", F, [2, 4, 8, 16])], opset=23)
    assert "nn.attention %arg0, %arg1, %arg2 {causal}" in compile_model(m).ok().ir


def test_attention_3d_grouped_heads(compile_model):
    m = model([helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"],
                                q_num_heads=4, kv_num_heads=2, scale=0.5)],
              [vi("q", F, [2, 8, 64]), vi("k", F, [2, 8, 32]), vi("v", F, [2, 8, 32]),
               vi("mask", B, [8, 8])],
              [vi("y", F, [2, 8, 64])], opset=23)
    ir = compile_model(m).ok().ir
    assert ("nn.attention" in ir and "mask" in ir and "scale = 5.000000e-01" in ir
            and "tensor<2x2x8x16xf32>" in ir)


def test_attention_causal_with_different_lengths_is_refused(compile_model):
    m = model([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
              [vi("q", F, [1, 2, 4, 8]), vi("k", F, [1, 2, 6, 8]), vi("v", F, [1, 2, 6, 8])],
              [vi("y", F, [1, 2, 4, 8])], opset=23)
    result = compile_model(m)
    assert result.returncode == 1
    assert "Attention is_causal with query length 4 and key length 6" in result.stderr


def test_rotary_embedding_with_positions(compile_model):
    m = model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"])],
              [vi("x", F, [2, 4, 8, 16]), vi("pos", I64, [2, 8])], [vi("y", F, [2, 4, 8, 16])],
              [const("cos", np.ones((32, 8), np.float32)),
               const("sin", np.zeros((32, 8), np.float32))], opset=23)
    ir = compile_model(m).ok().ir
    assert ir.count("nn.gather") == 2 and "nn.rope" in ir


# --- Errors ------------------------------------------------------------------

def test_unsupported_dtype(compile_model):
    m = model([helper.make_node("Identity", ["x"], ["y"])],
              [vi("x", TensorProto.STRING, [2])], [vi("y", TensorProto.STRING, [2])])
    result = compile_model(m)
    assert result.returncode == 1
    assert "input 'x' has type string, which Partita does not support" in result.stderr


def test_negative_slice_step_is_refused(compile_model):
    m = model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="rev")],
              [vi("x", F, [4])], [vi("y", F, [4])],
              [const("st", np.array([-1], np.int64)), const("en", np.array([-5], np.int64)),
               const("ax", np.array([0], np.int64)), const("sp", np.array([-1], np.int64))])
    result = compile_model(m)
    assert result.returncode == 1
    assert "node 'rev': error: Slice with step -1 is not supported" in result.stderr


def test_dropout_in_training_mode_is_refused(compile_model):
    m = model([helper.make_node("Dropout", ["x", "ratio", "train"], ["y"], name="drop")],
              [vi("x", F, [4]), vi("train", B, [])], [vi("y", F, [4])],
              [const("ratio", np.float32(0.1))])
    result = compile_model(m)
    assert result.returncode == 1
    assert "node 'drop': error: Dropout in training mode is not supported" in result.stderr


def test_output_shape_mismatch_is_reported(compile_model):
    m = model([helper.make_node("Relu", ["x"], ["y"])],
              [vi("x", F, [2, 3])], [vi("y", F, [3, 2])])
    result = compile_model(m)
    assert result.returncode == 1
    assert "graph output 'y' is declared with another shape" in result.stderr


def test_negative_constant_of_shape_is_an_error(compile_model):
    # Found by mutating node tests: a negative dimension used to abort.
    m = model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
              [], [vi("y", F, [2])], [const("s", np.array([2, -3], np.int64))])
    result = compile_model(m)
    assert result.returncode == 1
    assert "node 'fill': error: ConstantOfShape shape has a negative dimension -3" in result.stderr


def test_negative_split_size_is_an_error(compile_model):
    m = model([helper.make_node("Split", ["x", "s"], ["a", "b"], axis=0, name="cut")],
              [vi("x", F, [4])], [vi("a", F, [5]), vi("b", F, [1])],
              [const("s", np.array([5, -1], np.int64))])
    result = compile_model(m)
    assert result.returncode == 1
    assert "node 'cut': error: Split size -1 is negative" in result.stderr


# --- Constant index and shape operands: what onnxruntime refuses ------------

def test_gather_with_constant_indices_out_of_range_is_refused(compile_model):
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], name="pick")],
              [vi("x", F, [4, 3])], [vi("y", F, [2, 3])],
              [const("i", np.array([1, 2**31], np.int64))])
    with pytest.raises(Exception, match="out of data bounds"):
        reference(m, {"x": np.zeros((4, 3), np.float32)})
    result = compile_model(m)
    assert result.returncode == 1
    assert ("node 'pick': error: Gather index 2147483648 at position 1 is out "
            "of range for size 4") in result.stderr


def rotary(positions_input):
    inits = [const("cos", np.ones((4, 4), np.float32)),
             const("sin", np.zeros((4, 4), np.float32))]
    inputs = [vi("x", F, [1, 2, 4, 8])]
    if isinstance(positions_input, np.ndarray):
        inits.append(const("pos", positions_input))
    else:
        inputs.append(vi("pos", I64, [1, 4]))
    return model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"],
                                   ["y"], name="rope")],
                 inputs, [vi("y", F, [1, 2, 4, 8])], inits, opset=23)


def test_rotary_constant_positions_out_of_range_are_refused(compile_model):
    m = rotary(np.array([[0, 1, 2, 4]], np.int64))
    with pytest.raises(Exception, match="out of range"):
        reference(m, {"x": np.zeros((1, 2, 4, 8), np.float32)})
    result = compile_model(m)
    assert result.returncode == 1
    assert ("node 'rope': error: RotaryEmbedding position_ids value 4 at "
            "position 3 is out of range [0, 4)") in result.stderr


def test_rotary_negative_positions_are_refused_at_run_time(tmp_path):
    """Gather counts negative indices from the end; RotaryEmbedding's
    positions may not (onnxruntime refuses them), so neither does Partita."""
    m = rotary(None)
    path = tmp_path / "rope.onnx"
    onnx.save(m, str(path))
    x = np.zeros((1, 2, 4, 8), np.float32)
    good = np.array([[0, 1, 2, 3]], np.int64)
    bad = np.array([[0, 1, -1, 3]], np.int64)
    with pytest.raises(Exception, match="out of range"):
        reference(m, {"x": x, "pos": bad})
    from conftest import compile_and_run
    outputs, _ = compile_and_run(tmp_path / "good", path, {"x": x, "pos": good})
    np.testing.assert_allclose(outputs["y"], reference(m, {"x": x, "pos": good})[0],
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(AssertionError, match="out of range"):
        compile_and_run(tmp_path / "bad", path, {"x": x, "pos": bad})


@pytest.mark.parametrize("op,shape", [("ConstantOfShape", np.int64(3)),
                                      ("Reshape", np.array([[2, 3]], np.int64))])
def test_shape_operands_must_be_vectors(compile_model, op, shape):
    if op == "ConstantOfShape":
        m = model([helper.make_node(op, ["s"], ["y"], name="n")], [],
                  [vi("y", F, None)], [const("s", shape)])
    else:
        m = model([helper.make_node(op, ["x", "s"], ["y"], name="n")],
                  [vi("x", F, [6])], [vi("y", F, None)], [const("s", shape)])
    feeds = {} if op == "ConstantOfShape" else {"x": np.zeros(6, np.float32)}
    with pytest.raises(Exception):
        reference(m, feeds)
    result = compile_model(m)
    assert result.returncode == 1
    assert f"the shape input of {op} must be a 1-D tensor, not rank" \
        in result.stderr


# --- Decomposed ops against onnxruntime, compiled and run on host -------------

def run_both(tmp_path, m, feeds, *flags):
    """Compiles and runs `m` on `feeds` with Partita (partita-compile, then
    partita-run) and with onnxruntime; returns both output lists."""
    from conftest import compile_and_run
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    outputs, _ = compile_and_run(tmp_path / "run", path, feeds, *flags)
    got = [outputs[o.name] for o in m.graph.output]
    return got, reference(m, feeds)


def assert_same(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


def refused_by_both(tmp_path, m, feeds):
    """onnxruntime refuses `feeds`, and partita-run exits non-zero on them."""
    with pytest.raises(Exception):
        reference(m, feeds)
    with pytest.raises(AssertionError, match="out of range"):
        run_both(tmp_path, m, feeds)


RNG = np.random.default_rng(15)
X34 = RNG.standard_normal((3, 4)).astype(np.float32)


def test_isnan_runs_like_onnxruntime(tmp_path):
    m = model([helper.make_node("IsNaN", ["x"], ["y"])], [vi("x", F, [2, 3])],
              [vi("y", B, [2, 3])], opset=20)
    x = np.array([[1, np.nan, -np.inf], [np.nan, 0, np.inf]], np.float32)
    assert_same(*run_both(tmp_path, m, {"x": x}))


@pytest.mark.parametrize("elem,bounds", [(F, "min,max"), (F, "max"), (I64, "min"),
                                         (I64, "min,max")])
def test_clip_runs_like_onnxruntime(tmp_path, elem, bounds):
    names = ["x", "lo" if "min" in bounds else "", "hi" if "max" in bounds else ""]
    while not names[-1]:
        names.pop()
    inputs = [vi("x", elem, [3, 4])] + [vi(n, elem, []) for n in names[1:] if n]
    m = model([helper.make_node("Clip", names, ["y"])], inputs, [vi("y", elem, [3, 4])],
              opset=13)
    dtype = np.float32 if elem == F else np.int64
    x = (X34 * 10).astype(dtype)
    if elem == F:
        x[0, 0] = np.nan
    feeds = {"x": x}
    if "lo" in names:
        feeds["lo"] = np.array(-3, dtype)
    if "hi" in names:
        feeds["hi"] = np.array(4, dtype)
    assert_same(*run_both(tmp_path, m, feeds))


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare",
                                "ReduceLogSumExp"])
@pytest.mark.parametrize("opset,keepdims", [(17, 1), (18, 0)])
def test_reductions_run_like_onnxruntime(tmp_path, op, opset, keepdims):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x[1, 2] += 500  # LogSumExp must shift by the maximum.
    if opset < 18:
        node = helper.make_node(op, ["x"], ["y"], axes=[-1, 0], keepdims=keepdims)
        inits = []
    else:
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
        inits = [const("axes", np.array([-1, 0], np.int64))]
    m = model([node], [vi("x", F, [2, 3, 4])], [vi("y", F, None)], inits, opset=opset)
    assert_same(*run_both(tmp_path, m, {"x": x}))


def test_logsumexp_of_infinities_runs_like_onnxruntime(tmp_path):
    m = model([helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1], keepdims=0)],
              [vi("x", F, [3, 2])], [vi("y", F, [3])])
    x = np.array([[-np.inf, -np.inf], [np.inf, 1], [-np.inf, 2]], np.float32)
    assert_same(*run_both(tmp_path, m, {"x": x}))


def test_integer_sum_square_and_l1_run_like_onnxruntime(tmp_path):
    nodes = [helper.make_node("ReduceSumSquare", ["x"], ["s"], axes=[1]),
             helper.make_node("ReduceL1", ["x"], ["l"], axes=[0], keepdims=0)]
    m = model(nodes, [vi("x", I64, [3, 4])], [vi("s", I64, [3, 1]), vi("l", I64, [4])])
    x = (X34 * 10).astype(np.int64)
    assert_same(*run_both(tmp_path, m, {"x": x}))


def test_reduce_prod_folds_like_onnxruntime(compile_model):
    m = model([helper.make_node("ReduceProd", ["x"], ["y"], axes=[0], keepdims=0)], [],
              [vi("y", F, [4])], [const("x", X34)])
    (got,) = returned_constants(compile_model(m).ok().ir)
    np.testing.assert_allclose(got, reference(m)[0], rtol=1e-6)


@pytest.mark.parametrize("elem,fmod", [(I64, 0), (I64, 1), (TensorProto.INT32, 0),
                                       (F, 1)])
def test_mod_runs_like_onnxruntime(tmp_path, elem, fmod):
    m = model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              [vi("a", elem, [8]), vi("b", elem, [8])], [vi("y", elem, [8])])
    dtype = {I64: np.int64, TensorProto.INT32: np.int32, F: np.float32}[elem]
    a = np.array([7, -7, 7, -7, 6, 0, 13, -1], dtype)
    b = np.array([3, 3, -3, -3, -3, 5, 4, 7], dtype)
    if elem == F:
        a = a * np.float32(1.25)
        b = b * np.float32(0.5)
    assert_same(*run_both(tmp_path, m, {"a": a, "b": b}))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("index_type", [I64, TensorProto.INT32])
def test_gather_elements_runs_like_onnxruntime(tmp_path, axis, index_type):
    m = model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
              [vi("x", F, [3, 4]), vi("i", index_type, [2, 3])], [vi("y", F, [2, 3])])
    size = 3 if axis == 0 else 4
    i = RNG.integers(-size, size, (2, 3)).astype(
        np.int64 if index_type == I64 else np.int32)
    assert_same(*run_both(tmp_path, m, {"x": X34, "i": i}))


@pytest.mark.parametrize("bad", [4, -5])
def test_gather_elements_out_of_range_is_refused_at_run_time(tmp_path, bad):
    m = model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
              [vi("x", F, [3, 4]), vi("i", I64, [2, 2])], [vi("y", F, [2, 2])])
    refused_by_both(tmp_path, m, {"x": X34, "i": np.array([[0, 1], [bad, 2]], np.int64)})


@pytest.mark.parametrize("batch_dims,data,indices", [
    (0, [3, 4, 5], [2, 2]),
    (0, [3, 4, 5], [2, 3, 1]),
    (0, [3, 4], [5, 2]),
    (1, [2, 3, 4], [2, 5, 1]),
    (2, [2, 3, 4, 5], [2, 3, 2])])
def test_gather_nd_runs_like_onnxruntime(tmp_path, batch_dims, data, indices):
    out = indices[:-1] + data[batch_dims + indices[-1]:]
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
              [vi("x", F, data), vi("i", I64, indices)], [vi("y", F, out)])
    x = RNG.standard_normal(data).astype(np.float32)
    sizes = data[batch_dims:batch_dims + indices[-1]]
    i = np.stack([RNG.integers(-s, s, indices[:-1]) for s in sizes], -1).astype(np.int64)
    assert_same(*run_both(tmp_path, m, {"x": x, "i": i}))


@pytest.mark.parametrize("bad", [3, -4])
def test_gather_nd_out_of_range_is_refused_at_run_time(tmp_path, bad):
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
              [vi("x", F, [2, 3, 4]), vi("i", I64, [2, 1, 1])], [vi("y", F, [2, 1, 4])])
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    refused_by_both(tmp_path, m, {"x": x, "i": np.array([[[1]], [[bad]]], np.int64)})


def test_scatter_nd_runs_like_onnxruntime(tmp_path):
    # A mask update as transformers' exports write it: constant indices.
    m = model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
              [vi("x", F, [4, 3, 2]), vi("u", F, [2, 2])], [vi("y", F, [4, 3, 2])],
              [const("i", np.array([[1, -1], [3, 0]], np.int64))])
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
    u = RNG.standard_normal((2, 2)).astype(np.float32)
    assert_same(*run_both(tmp_path, m, {"x": x, "u": u}))


def test_scatter_nd_repeated_indices_take_the_last_update(tmp_path):
    """ONNX leaves repeated indices undefined; Partita writes the last."""
    m = model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
              [vi("x", F, [3]), vi("u", F, [3])], [vi("y", F, [3])],
              [const("i", np.array([[1], [2], [1]], np.int64))])
    from conftest import compile_and_run
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    x = np.array([10, 20, 30], np.float32)
    u = np.array([1, 2, 3], np.float32)
    outputs, _ = compile_and_run(tmp_path / "run", path, {"x": x, "u": u})
    np.testing.assert_array_equal(outputs["y"], [10, 3, 2])


def test_range_and_expand_from_bound_shapes_run_like_onnxruntime(tmp_path):
    """Position ids as dynamic exports compute them: Range up to a length
    read with Shape, expanded to the input's shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "zeros"], ["r2"]),
             helper.make_node("Expand", ["r2", "s"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posf"], to=F),
             helper.make_node("Add", ["x", "posf"], ["y"])]
    inits = [const("zero", np.int64(0)), const("one", np.int64(1)),
             const("zeros", np.array([0], np.int64))]
    m = model(nodes, [vi("x", F, ["batch", "seq"])], [vi("y", F, ["batch", "seq"])], inits)
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    assert_same(*run_both(tmp_path, m, {"x": x}, "--bind", "batch=2,seq=5"))


def test_expression_dimensions_run_like_onnxruntime(tmp_path):
    """A key/value-cache signature as optimum writes it."""
    nodes = [helper.make_node("Concat", ["past", "cur"], ["all"], axis=1),
             helper.make_node("Cast", ["mask"], ["maskf"], to=F),
             helper.make_node("Mul", ["all", "maskf"], ["y"])]
    total = "past_sequence_length + sequence_length"
    m = model(nodes, [vi("past", F, ["batch", "past_sequence_length"]),
                      vi("cur", F, ["batch", "sequence_length"]),
                      vi("mask", I64, ["batch", total])],
              [vi("y", F, ["batch", total])])
    feeds = {"past": RNG.standard_normal((2, 3)).astype(np.float32),
             "cur": RNG.standard_normal((2, 1)).astype(np.float32),
             "mask": np.array([[1, 1, 0, 1], [0, 1, 1, 1]], np.int64)}
    assert_same(*run_both(tmp_path, m, feeds, "--bind",
                          "batch=2,past_sequence_length=3,sequence_length=1"))


@pytest.mark.parametrize("text", ["(" * 5000 + "a" + ")" * 5000,
                                  "-" * 5000 + "a"])
def test_deeply_nested_dimension_text_is_one_symbol(compile_model, text):
    """Nesting beyond 64 levels is no dimension expression (the parser must
    not exhaust the stack on a model's text): the text is one symbol, and
    the unbound-dimension error names it."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    m = model(nodes, [vi("x", F, [text])], [vi("y", F, [text])])
    result = compile_model(m, "--emit", "nn")
    assert result.returncode != 0
    assert "unbound symbolic dimensions: " + text[:50] in result.stderr


# --- If: a branch chosen once dimensions are bound -----------------------------

def if_model(condition_nodes, then_nodes=None, else_outputs=1):
    """y = If(cond) with a then branch giving x * 2 and an else branch
    giving x + 1 (or `else_outputs` outputs), cond from `condition_nodes`
    over the input x [n, 4]."""
    then_nodes = then_nodes or [helper.make_node("Mul", ["x", "two"], ["t"])]
    then = helper.make_graph(then_nodes, "then", [], [vi("t", F, ["n", 4])],
                             [const("two", np.float32(2))])
    outputs = [vi("e", F, ["n", 4])] * else_outputs
    otherwise = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["e"])], "else", [],
        outputs[:else_outputs] if else_outputs != 1 else outputs,
        [const("one", np.float32(1))])
    node = helper.make_node("If", ["cond"], ["y"], name="choose",
                            then_branch=then, else_branch=otherwise)
    return model(condition_nodes + [node], [vi("x", F, ["n", 4])],
                 [vi("y", F, ["n", 4])],
                 [const("limit", np.int64(2)), const("one_i", np.int64(0))],
                 opset=17)


def size_condition():
    # cond = Shape(x)[0] > 2: Phi-3.5's choice of rotary caches by length.
    return [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "one_i"], ["rows"], axis=0),
            helper.make_node("Greater", ["rows", "limit"], ["cond"])]


@pytest.mark.parametrize("rows", [1, 3])
def test_if_takes_the_branch_its_bound_condition_picks(tmp_path, rows):
    m = if_model(size_condition())
    x = RNG.standard_normal((rows, 4)).astype(np.float32)
    assert_same(*run_both(tmp_path, m, {"x": x}, "--bind", f"n={rows}"))


def test_if_on_a_run_time_condition_is_refused(compile_model):
    m = if_model([helper.make_node("ReduceSum", ["x"], ["total"],
                                   keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["cond"])])
    m.graph.initializer.append(const("zero", np.float32(0)))
    result = compile_model(m, "--bind", "n=2")
    assert result.returncode == 1
    assert ("node 'choose': error: If whose condition 'cond' is not a "
            "constant once dimensions are bound is not supported") in \
        result.stderr


def test_if_branches_are_both_checked(compile_model):
    # The branch not taken is checked too: an op Partita does not support,
    # or a branch with another number of outputs, is refused.
    m = if_model(size_condition(),
                 then_nodes=[helper.make_node("Det", ["x"], ["t"])])
    result = compile_model(m, "--bind", "n=1")
    assert result.returncode == 1 and "unsupported ONNX ops" in result.stderr
    assert "Det" in result.stderr
    m = if_model(size_condition(), else_outputs=2)
    result = compile_model(m, "--bind", "n=3")
    assert result.returncode == 1
    assert "If has 1 outputs but its else branch gives 2" in result.stderr


def test_cumsum_axis_read_elsewhere_first(tmp_path):
    # RoBERTa's dynamo export: the initializer that is CumSum's axis is
    # also an operand of Equal, imported first; it is still a constant.
    m = model([helper.make_node("Equal", ["ids", "one"], ["eq"]),
               helper.make_node("Cast", ["eq"], ["mask"], to=I64),
               helper.make_node("CumSum", ["mask", "one"], ["y"])],
              [vi("ids", I64, [2, 5])], [vi("y", I64, [2, 5])],
              [const("one", np.int64(1))], opset=18)
    ids = np.array([[1, 0, 1, 1, 2], [1, 1, 0, 1, 1]], np.int64)
    assert_same(*run_both(tmp_path, m, {"ids": ids}))


@pytest.mark.parametrize("folded", [False, True])
@pytest.mark.parametrize("repeats", [[2, 3], [1, 1], [3, 0]])
def test_tile_runs_like_onnxruntime(tmp_path, folded, repeats):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    inits = [const("r", np.array(repeats, np.int64))]
    inputs = [vi("x", F, [2, 3])]
    if folded:
        inits.append(const("x", x))
        inputs = []
    shape = [2 * repeats[0], 3 * repeats[1]]
    m = model([helper.make_node("Tile", ["x", "r"], ["t"]),
               helper.make_node("Identity", ["t"], ["y"])], inputs,
              [vi("y", F, shape)], inits, opset=17)
    assert_same(*run_both(tmp_path, m, {} if folded else {"x": x}))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(1, 1, 0), (-1, 0, 0),
                                                (0, 0, 1), (1, 1, 1)])
@pytest.mark.parametrize("elem", [F, I64])
def test_arg_extremes_run_like_onnxruntime(tmp_path, op, axis, keepdims,
                                           last, elem):
    # Ties on purpose: the first position holding the extreme (the last
    # with select_last_index).
    x = np.array([[3, 1, 3, 0], [2, 2, 0, 0], [1, 5, 5, 5]])
    x = x.astype(np.float32 if elem == F else np.int64)
    shape = list(x.shape)
    if keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    m = model([helper.make_node(op, ["x"], ["y"], axis=axis,
                                keepdims=keepdims, select_last_index=last)],
              [vi("x", elem, [3, 4])], [vi("y", I64, shape)], opset=13)
    assert_same(*run_both(tmp_path, m, {"x": x}))


def test_tile_repeats_must_match_the_rank(compile_model):
    m = model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
              [vi("x", F, [2, 3])], [vi("y", F, [4, 3])],
              [const("r", np.array([2], np.int64))], opset=17)
    result = compile_model(m)
    assert result.returncode == 1
    assert "Tile has 1 repeats for an input of rank 2" in result.stderr


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extremes_pass_over_nan_as_onnxruntime(tmp_path, op, last):
    # onnxruntime's scan never replaces its best value by a NaN, and keeps
    # a NaN it starts with.
    x = np.array([[1, np.nan, 3, 0], [np.nan, 2, np.nan, 0],
                  [np.inf, 5, -np.inf, 5], [-np.inf, np.nan, -np.inf, np.nan],
                  [2, np.nan, 2, 1]], np.float32)
    m = model([helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0,
                                select_last_index=last)],
              [vi("x", F, [5, 4])], [vi("y", I64, [5])], opset=13)
    assert_same(*run_both(tmp_path, m, {"x": x}))


def test_initializer_declared_as_an_input_must_match(compile_model):
    # IR versions before 4 list initializers among the inputs; a
    # declaration that does not describe the initializer is refused, as
    # onnxruntime refuses it (found by the fuzz campaign).
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])],
              [vi("x", F, [3, 4]), vi("w", F, [4, 1])], [vi("y", F, [3, 2])],
              [const("w", np.ones((4, 2), np.float32))], opset=17)
    result = compile_model(m)
    assert result.returncode == 1
    assert ("initializer 'w' is also a graph input, declared as float [4, 1], "
            "but it holds float [4, 2]") in result.stderr, result.stderr
    # A declaration that matches (or leaves a dimension symbolic) is fine.
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "n"
    assert compile_model(m).returncode == 0


def topk_model(k, elem, shape, axis, largest, sorted_=1, k_input=None):
    out = list(shape)
    out[axis] = k
    return model([helper.make_node("TopK", ["x", k_input or "k"],
                                   ["values", "indices"], axis=axis,
                                   largest=largest, sorted=sorted_)],
                 [vi("x", elem, shape)],
                 [vi("values", elem, out), vi("indices", I64, out)],
                 [] if k_input else [const("k", np.array([k], np.int64))],
                 opset=17)


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis,k", [(-1, 2), (0, 3), (1, 4), (1, 1)])
@pytest.mark.parametrize("elem", [F, I64])
def test_topk_runs_like_onnxruntime(tmp_path, largest, axis, k, elem):
    # A router's top-k, and ties on purpose: equal values come by lower
    # position first, as the specification and onnxruntime order them.
    x = np.array([[3, 1, 3, 0], [2, 2, 0, 0], [1, 5, 5, 5], [7, -1, 7, 7]])
    x = x.astype(np.float32 if elem == F else np.int64)
    m = topk_model(k, elem, [4, 4], axis, largest)
    assert_same(*run_both(tmp_path, m, {"x": x}))


def test_topk_of_a_router_runs_like_onnxruntime_on_every_mesh(tmp_path):
    # Mixtral's router: softmax over 8 experts, the top 2 of 64 tokens.
    x = RNG.standard_normal((2, 32, 8)).astype(np.float32)
    m = model([helper.make_node("Softmax", ["x"], ["p"], axis=-1),
               helper.make_node("TopK", ["p", "k"], ["values", "indices"],
                                axis=-1)],
              [vi("x", F, [2, 32, 8])],
              [vi("values", F, [2, 32, 2]), vi("indices", I64, [2, 32, 2])],
              [const("k", np.array([2], np.int64))], opset=17)
    for flags in ([], ["--mesh", "dp=2"], ["--mesh", "tp=2"]):
        directory = tmp_path / "_".join(flags or ["one"])
        directory.mkdir()
        assert_same(*run_both(directory, m, {"x": x}, *flags))


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_ranks_nan_above_every_number(tmp_path, largest):
    # As torch.topk ranks it (onnxruntime leaves NaN's place unspecified):
    # first with largest, last without; equal values by lower position.
    x = np.array([[1, np.nan, 3, np.inf], [np.nan, 2, np.nan, -np.inf],
                  [-np.inf, -np.inf, 0, 5]], np.float32)
    m = topk_model(3, F, [3, 4], 1, largest)
    values, indices = run_both(tmp_path, m, {"x": x})[0]
    if largest:
        want_indices = [[1, 3, 2], [0, 2, 1], [3, 2, 0]]
    else:
        want_indices = [[0, 2, 3], [3, 1, 0], [0, 1, 2]]
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(
        values, np.take_along_axis(x, np.array(want_indices), 1))


@pytest.mark.parametrize("k,message", [
    (0, "TopK's k is 0, but the axis 1 has 4 elements (k must be between 1 "
        "and that)"),
    (5, "TopK's k is 5, but the axis 1 has 4 elements"),
    (None, "TopK's k must be a constant of one element")])
def test_topk_bad_k_is_refused(compile_model, k, message):
    m = topk_model(2 if k is None else k, F, [3, 4], 1, 1,
                   k_input="kin" if k is None else None)
    if k is None:
        m.graph.input.append(vi("kin", I64, [1]))
    result = compile_model(m)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_onehot_of_constants_with_a_huge_depth_is_refused(compile_model):
    # The folder declines (its result would be too large to fold) and the
    # builder refuses by name, without allocating the result.
    m = model([helper.make_node("OneHot", ["ids", "d", "v"], ["y"])], [],
              [vi("y", F, None)],
              [const("ids", np.array([[0, 1, 2], [1, 0, 2]], np.int64)),
               const("d", np.array([2**62], np.int64)),
               const("v", np.array([0, 1], np.float32))], opset=17)
    result = compile_model(m)
    assert result.returncode == 1
    assert "OneHot over 4611686018427387904 positions is not supported" \
        in result.stderr, result.stderr


@pytest.mark.parametrize("name,hint", [
    ("/model/layers.0/mlp/experts/NonZero", True),
    ("/model/layers.0/block_sparse_moe/NonZero", True),
    ("nonzero_node", False)])
def test_eager_experts_loop_is_refused_with_a_hint(compile_model, name, hint):
    # transformers' eager per-expert loop (legacy exporter) selects each
    # expert's tokens with NonZero: refused, pointing to the exports that
    # import.
    m = model([helper.make_node("NonZero", ["x"], ["y"], name=name)],
              [vi("x", F, [2, 3])], [vi("y", I64, [2, None])], opset=17)
    result = compile_model(m)
    assert result.returncode == 1
    assert "unsupported ONNX ops at opset 17: NonZero" in result.stderr
    assert ('set_experts_implementation("batched_mm")' in result.stderr) \
        == hint, result.stderr


def test_topk_over_too_many_positions_is_refused(compile_model):
    m = topk_model(2, F, [1, 2**25], 1, 1)
    result = compile_model(m)
    assert result.returncode == 1
    assert "TopK over 33554432 positions is not supported (at most " \
        "16777216)" in result.stderr, result.stderr


@pytest.mark.parametrize("folded", [False, True])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("elem", [F, I64])
def test_onehot_runs_like_onnxruntime(tmp_path, folded, axis, elem):
    # A mixture of experts' dispatch mask; negative indices count from the
    # end, and indices outside [-depth, depth) give a row of `off`.
    ids = np.array([[0, 3, -1], [2, -4, 7]], np.int64)
    values = np.array([-1, 5], np.float32 if elem == F else np.int64)
    shape = [2, 3]
    shape.insert(axis % 3, 4)
    inits = [const("depth", np.array([4], np.int64)), const("v", values)]
    inputs = [vi("ids", I64, [2, 3])]
    if folded:
        inits.append(const("ids", ids))
        inputs = []
    m = model([helper.make_node("OneHot", ["ids", "depth", "v"], ["h"],
                                axis=axis),
               helper.make_node("Identity", ["h"], ["y"])], inputs,
              [vi("y", elem, shape)], inits, opset=17)
    assert_same(*run_both(tmp_path, m, {} if folded else {"ids": ids}))


@pytest.mark.parametrize("depth,values,message", [
    (np.array([0], np.int64), [0, 1],
     "OneHot's depth is 0; it must be at least 1"),
    (None, [0, 1], "OneHot's depth must be a constant of one element"),
    (np.array([3], np.int64), [0, 1, 2],
     "OneHot's values must be [off, on] (shape [2]), not of shape [3]"),
    # Found by the fuzz campaign: the positions are a compile-time constant.
    (np.array([2**63 - 1], np.int64), [0, 1],
     "OneHot over 9223372036854775807 positions is not supported (at most "
     "16777216)")])
def test_onehot_bad_operands_are_refused(compile_model, depth, values,
                                         message):
    inits = [const("v", np.array(values, np.float32))]
    inputs = [vi("ids", I64, [2])]
    if depth is None:
        inputs.append(vi("depth", I64, [1]))
    else:
        inits.append(const("depth", depth))
    m = model([helper.make_node("OneHot", ["ids", "depth", "v"], ["y"])],
              inputs, [vi("y", F, None)], inits, opset=17)
    result = compile_model(m)
    assert result.returncode == 1 and message in result.stderr, result.stderr


# --- Conv: patches times the weight ----------------------------------------------

CONV_CASES = {
    # Whisper's encoder: Conv1d k=3, padding 1, stride 1 then 2.
    "conv1d_same": ([2, 4, 10], [6, 4, 3], dict(pads=[1, 1])),
    "conv1d_stride2": ([2, 4, 10], [6, 4, 3], dict(pads=[1, 1], strides=[2])),
    # ViT's patch embedding: kernel == stride, one reshape and transpose.
    "patchify": ([2, 3, 8, 8], [6, 3, 4, 4], dict(strides=[4, 4])),
    "conv2d_dilated": ([1, 3, 7, 6], [4, 3, 3, 2],
                       dict(dilations=[2, 1], pads=[1, 0, 2, 1])),
    "conv2d_groups": ([2, 4, 5, 5], [6, 2, 3, 3],
                      dict(group=2, strides=[2, 1])),
    "conv2d_same_upper": ([1, 2, 5, 6], [4, 2, 2, 3],
                          dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "conv2d_same_lower": ([1, 2, 5, 6], [4, 2, 2, 3],
                          dict(auto_pad="SAME_LOWER")),
    "conv3d": ([1, 2, 4, 4, 4], [4, 2, 2, 2, 2], dict(strides=[2, 1, 2])),
}


@pytest.mark.parametrize("mesh", [None, "tp=2"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_runs_like_onnxruntime(tmp_path, case, mesh):
    x_shape, w_shape, attrs = CONV_CASES[case]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    bias = RNG.standard_normal(w_shape[0]).astype(np.float32)
    probe = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
                  [vi("x", F, x_shape)], [vi("y", F, None)],
                  [const("w", w), const("b", bias)], opset=17)
    out_shape = list(reference(probe, {"x": x})[0].shape)
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
              [vi("x", F, x_shape)], [vi("y", F, out_shape)],
              [const("w", w), const("b", bias)], opset=17)
    flags = ["--mesh", mesh] if mesh else []
    assert_same(*run_both(tmp_path, m, {"x": x}, *flags))


def test_conv_refusals(compile_model):
    def conv(w_shape, **attrs):
        return model([helper.make_node("Conv", ["x", "w"], ["y"],
                                       name="conv", **attrs)],
                     [vi("x", F, [1, 4, 5])], [vi("y", F, [1, 2, 3])],
                     [const("w", np.ones(w_shape, np.float32))], opset=17)
    for m, message in [
        (conv([2, 3, 3], group=2), "Conv group 2 does not fit 4 input "
                                   "channels, 2 outputs and a weight of 3"),
        (conv([2, 4, 9]), "Conv kernel of extent 9 does not fit spatial "
                          "dimension 0 of 5"),
        (conv([2, 4, 3], auto_pad="MIRROR"), "Conv auto_pad 'MIRROR' is not"),
        (conv([2, 4, 3], strides=[1, 1]), "Conv strides has 2 values for 1"),
        (conv([2, 4, 3], dilations=[2**62]),
         "Conv sizes, strides, dilations and pads above 1048576 are not "
         "supported"),
    ]:
        result = compile_model(m)
        assert result.returncode == 1 and message in result.stderr, \
            result.stderr


def test_vocabulary_tp_does_not_divide_is_padded(tmp_path):
    # GPT-2's 50257 tokens at tp=2 were refused ("cannot split weight
    # 'head' (LM head)"), then left whole with remarks: the table and the
    # head are now padded to 128 and split, with no remark.
    from conftest import compile_and_run
    table = RNG.standard_normal((127, 16)).astype(np.float32)
    head = RNG.standard_normal((16, 127)).astype(np.float32)
    m = model([helper.make_node("Gather", ["table", "ids"], ["h"]),
               helper.make_node("MatMul", ["h", "head"], ["logits"])],
              [vi("ids", I64, [2, 5])], [vi("logits", F, [2, 5, 127])],
              [const("table", table), const("head", head)], opset=17)
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    ids = RNG.integers(0, 127, (2, 5)).astype(np.int64)
    ids[0, 0] = 126
    outputs, report = compile_and_run(tmp_path / "run", path, {"ids": ids},
                                      "--mesh", "tp=2")
    np.testing.assert_allclose(outputs["logits"],
                               reference(m, {"ids": ids})[0], rtol=1e-5,
                               atol=1e-5)
    assert not [r for r in report["remarks"] if "vocabulary" in r]
    # Each rank holds 64 rows of the table and 64 columns of the head.
    assert [r["weight_bytes"] for r in report["ranks"]] == [2 * 64 * 16 * 4] * 2


def test_mlp_with_a_norm_inside_is_split(tmp_path):
    # A norm over the MLP's width between its two matmuls (NormFormer's
    # and sub-LN's MLPs) left both weights whole; now the up projection is
    # column-parallel, the norm distributed (its statistics all-reduced)
    # and the down projection row-parallel.
    from conftest import compile_and_run
    w1 = RNG.standard_normal((64, 128)).astype(np.float32)
    w2 = RNG.standard_normal((128, 64)).astype(np.float32)
    g = RNG.standard_normal(128).astype(np.float32)
    b = RNG.standard_normal(128).astype(np.float32)
    m = model([helper.make_node("MatMul", ["x", "w1"], ["h"]),
               helper.make_node("LayerNormalization", ["h", "g", "b"], ["n"],
                                axis=-1, epsilon=1e-5),
               helper.make_node("Relu", ["n"], ["r"]),
               helper.make_node("MatMul", ["r", "w2"], ["y"])],
              [vi("x", F, [2, 4, 64])], [vi("y", F, [2, 4, 64])],
              [const("w1", w1), const("w2", w2), const("g", g),
               const("b", b)], opset=17)
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    x = RNG.standard_normal((2, 4, 64)).astype(np.float32)
    outputs, report = compile_and_run(tmp_path / "run", path, {"x": x},
                                      "--mesh", "tp=2")
    np.testing.assert_allclose(outputs["y"], reference(m, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)
    # Each rank: half of w1 and of w2 (g and b are small enough to be
    # inline constants, not weights).
    assert [r["weight_bytes"] for r in report["ranks"]] == \
        [64 * 128 * 2 * 4 // 2] * 2
    collectives = {c["kind"]: c["count"]
                   for c in report["ranks"][0]["collectives"]}
    # Two for the norm's statistics (the mean, then the variance), one for
    # the down projection's partial sums.
    assert collectives == {"all_reduce": 3}, collectives


def test_if_branch_may_not_redefine_an_outer_value(compile_model):
    m = if_model(size_condition(),
                 then_nodes=[helper.make_node("Mul", ["x", "two"], ["rows"]),
                             helper.make_node("Mul", ["x", "two"], ["t"])])
    result = compile_model(m, "--bind", "n=3")
    assert result.returncode == 1
    assert "value 'rows' is defined more than once (in an If's branch)" in \
        result.stderr


def test_two_nodes_of_one_name_are_refused(compile_model):
    # Found by the fuzz campaign: onnxruntime refuses a graph that repeats
    # a node name, and so does Partita (the second node's output unused).
    m = model([helper.make_node("Relu", ["x"], ["y"], name="same"),
               helper.make_node("Neg", ["x"], ["unused"], name="same")],
              [vi("x", F, [2])], [vi("y", F, [2])], opset=17)
    result = compile_model(m)
    assert result.returncode == 1
    assert "nodes 0 and 1 are both named 'same'; node names must be unique" \
        in result.stderr, result.stderr
