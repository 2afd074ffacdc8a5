"""Structured mutations of ONNX models: valid-looking but hostile inputs for
the importer, built with the onnx API.

`seeds(root)` lists the seed models: the committed transformers
(test/models, examples/), the textual models of the lit tests, and one
small single-node graph (two: inputs live and inputs constant) for every op
type the importer registers (lib/Frontend/ONNX/Ops*.cpp).

`Mutator(rng).mutate(seed)` returns a `Case`: a copy of the seed with one to
three mutations applied (arity, empty names, dimensions, element types,
attribute types and values, duplicated and missing attributes, ir_version
and opsets, graph outputs, external data that is missing, short or a FIFO,
initializer sizes), the list of what was done, and the files that must lie
next to the model. Everything is a function of the rng: the same seed and
index give the same case.
"""

import dataclasses
import glob
import hashlib
import os
import pathlib
import random
import re

import numpy as np
import onnx
import onnx.parser
from onnx import AttributeProto, TensorProto, helper, numpy_helper

F, F16, I64, I32, B = (TensorProto.FLOAT, TensorProto.FLOAT16,
                       TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL)

# Values that break arithmetic on dimensions, axes and counts.
INTERESTING_INTS = [0, 1, -1, 2, -2, 3, 7, -7, 255, 2**31 - 1, 2**31, -2**31,
                    2**32, 2**40, 2**62, -2**62, 2**63 - 1, -2**63]
INTERESTING_DIMS = [0, -1, -3, 1, 2**31, 2**31 - 1, 2**32, 2**40, 2**62,
                    2**63 - 1]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-45, 1e30, -1e30,
                      float("inf"), float("-inf"), float("nan")]
# TensorProto data types, with some that do not exist.
ELEMENT_TYPES = [0, F, 2, 3, 4, 5, I32, I64, 8, B, F16, 11, 12, 13, 14, 15,
                 16, 17, 19, 21, 22, 23, 99, -1]
IR_VERSIONS = [-1, 0, 1, 3, 6, 7, 9, 11, 12, 99, 2**40]
OPSETS = [-1, 0, 1, 11, 12, 13, 14, 17, 18, 20, 22, 23, 24, 99, 2**40]


@dataclasses.dataclass
class Case:
    """One model to try. `files` maps a name (relative to the model's
    directory) to its bytes, or to None for a FIFO; `model_fifo`: the model
    itself is given as a FIFO path. `bindings` are --bind values."""
    model: onnx.ModelProto
    seed: str
    mutations: list
    files: dict = dataclasses.field(default_factory=dict)
    bindings: dict = dataclasses.field(default_factory=dict)
    model_fifo: bool = False

    def uses_fifo(self):
        return self.model_fifo or any(v is None for v in self.files.values())

    def digest(self):
        h = hashlib.sha256(self.model.SerializeToString())
        for name in sorted(self.files):
            h.update(name.encode())
            h.update(b"FIFO" if self.files[name] is None else self.files[name])
        h.update(b"fifo" if self.model_fifo else b"")
        return h.hexdigest()[:12]


@dataclasses.dataclass
class Seed:
    name: str
    model: onnx.ModelProto
    bindings: dict = dataclasses.field(default_factory=dict)


# --- Seeds -------------------------------------------------------------------


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="partita-fuzz")
    m.ir_version = 8 if opset <= 17 else 9 if opset <= 20 else 10
    return m


def _rand(shape, dtype, rng):
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 3, shape).astype(dtype)
    return (rng.standard_normal(shape) * 0.5 + 1.0).astype(dtype)


_NP = {F: np.float32, F16: np.float16, I64: np.int64, I32: np.int32,
       B: np.bool_}


def _op_specs():
    """(op, opset, data inputs [(name, elem, shape)], constant operands
    {name: array}, attributes, outputs [(name, elem, shape)]). Data inputs
    become graph inputs in the live seed and initializers in the folded
    one; constant operands (shapes, axes, indices) are initializers in
    both."""
    x23, x3 = ("x", F, [2, 3]), ("y", F, [3])
    specs = []
    for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"]:
        specs.append((op, 17, [x23, x3], {}, {}, [("z", F, [2, 3])]))
    for op in ["And", "Or", "Xor"]:
        specs.append((op, 17, [("x", B, [2, 3]), ("y", B, [2, 3])], {}, {},
                      [("z", B, [2, 3])]))
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        specs.append((op, 17, [x23, x3], {}, {}, [("z", B, [2, 3])]))
    for op in ["Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Erf",
               "Sigmoid", "Relu", "Cos", "Sin", "Floor", "Ceil", "Identity"]:
        specs.append((op, 17, [x23], {}, {}, [("z", F, [2, 3])]))
    specs.append(("Not", 17, [("x", B, [2, 3])], {}, {}, [("z", B, [2, 3])]))
    specs.append(("Dropout", 17, [x23], {}, {}, [("z", F, [2, 3])]))
    specs.append(("Cast", 17, [x23], {}, {"to": I64}, [("z", I64, [2, 3])]))
    specs.append(("Where", 17, [("c", B, [2, 3]), x23, x3], {}, {},
                  [("z", F, [2, 3])]))
    specs.append(("Shape", 17, [x23], {}, {"start": 0}, [("z", I64, [2])]))
    specs.append(("Size", 17, [x23], {}, {}, [("z", I64, [])]))
    specs.append(("ConstantOfShape", 17, [],
                  {"s": np.array([2, 3], np.int64)},
                  {"value": helper.make_tensor("v", F, [1], [1.5])},
                  [("z", F, [2, 3])]))
    specs.append(("Range", 17, [],
                  {"a": np.array(1, np.int64), "b": np.array(9, np.int64),
                   "d": np.array(3, np.int64)}, {}, [("z", I64, [3])]))
    specs.append(("Constant", 17, [], {},
                  {"value": helper.make_tensor("v", F, [2], [1.0, 2.0])},
                  [("z", F, [2])]))
    specs.append(("Reshape", 17, [x23], {"s": np.array([3, -1], np.int64)},
                  {}, [("z", F, [3, 2])]))
    specs.append(("Flatten", 17, [("x", F, [2, 3, 4])], {}, {"axis": 1},
                  [("z", F, [2, 12])]))
    specs.append(("Squeeze", 17, [("x", F, [2, 1, 3])],
                  {"a": np.array([1], np.int64)}, {}, [("z", F, [2, 3])]))
    specs.append(("Unsqueeze", 17, [x23], {"a": np.array([0], np.int64)}, {},
                  [("z", F, [1, 2, 3])]))
    specs.append(("Concat", 17, [x23, ("w", F, [1, 3])], {}, {"axis": 0},
                  [("z", F, [3, 3])]))
    specs.append(("Split", 17, [("x", F, [2, 4])],
                  {"s": np.array([1, 3], np.int64)}, {"axis": 1},
                  [("z", F, [2, 1]), ("z2", F, [2, 3])]))
    specs.append(("Slice", 17, [("x", F, [4, 6])],
                  {"st": np.array([1, 0], np.int64),
                   "en": np.array([3, 6], np.int64),
                   "ax": np.array([0, 1], np.int64),
                   "sp": np.array([1, 2], np.int64)}, {},
                  [("z", F, [2, 3])]))
    specs.append(("Gather", 17, [("x", F, [4, 3])],
                  {"i": np.array([[0, 3], [-1, 1]], np.int64)}, {"axis": 0},
                  [("z", F, [2, 2, 3])]))
    specs.append(("Expand", 17, [("x", F, [1, 3])],
                  {"s": np.array([2, 3], np.int64)}, {}, [("z", F, [2, 3])]))
    specs.append(("Transpose", 17, [x23], {}, {"perm": [1, 0]},
                  [("z", F, [3, 2])]))
    specs.append(("Trilu", 17, [("x", F, [3, 4])],
                  {"k": np.array(1, np.int64)}, {"upper": 1},
                  [("z", F, [3, 4])]))
    specs.append(("MatMul", 17, [("x", F, [2, 4]), ("w", F, [4, 3])], {}, {},
                  [("z", F, [2, 3])]))
    specs.append(("Gemm", 17, [("a", F, [2, 4]), ("b", F, [3, 4]),
                               ("c", F, [3])], {},
                  {"alpha": 0.5, "beta": 2.0, "transB": 1},
                  [("z", F, [2, 3])]))
    specs.append(("Softmax", 17, [x23], {}, {"axis": -1}, [("z", F, [2, 3])]))
    specs.append(("LogSoftmax", 17, [x23], {}, {"axis": 1},
                  [("z", F, [2, 3])]))
    specs.append(("LayerNormalization", 17,
                  [("x", F, [2, 4]), ("s", F, [4]), ("b", F, [4])], {},
                  {"axis": -1, "epsilon": 1e-5}, [("z", F, [2, 4])]))
    specs.append(("RMSNormalization", 23, [("x", F, [2, 4]), ("s", F, [4])],
                  {}, {"axis": -1, "epsilon": 1e-6}, [("z", F, [2, 4])]))
    specs.append(("Gelu", 20, [x23], {}, {"approximate": "tanh"},
                  [("z", F, [2, 3])]))
    qkv = [(n, F, [1, 2, 4, 8]) for n in "qkv"]
    specs.append(("Attention", 23, qkv, {}, {"is_causal": 1},
                  [("z", F, [1, 2, 4, 8])]))
    specs.append(("RotaryEmbedding", 23,
                  [("x", F, [1, 2, 4, 8]), ("c", F, [4, 4]), ("s", F, [4, 4])],
                  {"p": np.array([[0, 1, 2, 3]], np.int64)}, {},
                  [("z", F, [1, 2, 4, 8])]))
    for op in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
               "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp",
               "ReduceProd"]:
        specs.append((op, 18, [("x", F, [2, 3, 4])],
                      {"a": np.array([1], np.int64)}, {"keepdims": 1},
                      [("z", F, [2, 1, 4])]))
    # The ops real exporters write (issue 15).
    specs.append(("IsNaN", 17, [x23], {}, {}, [("z", B, [2, 3])]))
    specs.append(("Clip", 13, [x23],
                  {"lo": np.array(0.5, np.float32),
                   "hi": np.array(1.25, np.float32)}, {}, [("z", F, [2, 3])]))
    # Constant divisors: ONNX leaves an integer Mod by zero undefined.
    specs.append(("Mod", 13, [("x", I64, [2, 3])],
                  {"d": np.array([2, -3, 5], np.int64)}, {"fmod": 0},
                  [("z", I64, [2, 3])]))
    specs.append(("Mod", 13, [x23], {"d": np.array([0.75, -1.5, 2.0],
                                                   np.float32)}, {"fmod": 1},
                  [("z", F, [2, 3])], "Mod.fmod"))
    specs.append(("GatherElements", 13, [("x", F, [3, 4])],
                  {"i": np.array([[0, 2, -1, 1], [2, 0, 1, -3]], np.int64)},
                  {"axis": 0}, [("z", F, [2, 4])]))
    # Indices computed at run time (values 0..2 of _rand are in range).
    specs.append(("GatherElements", 13, [("x", F, [3, 4]),
                                         ("i", I64, [3, 2])], {}, {"axis": 1},
                  [("z", F, [3, 2])], "GatherElements.live"))
    specs.append(("GatherND", 13, [("x", F, [3, 3, 4])],
                  {"i": np.array([[0, 1], [2, -1]], np.int64)}, {},
                  [("z", F, [2, 4])]))
    specs.append(("GatherND", 13, [("x", F, [3, 3, 4]), ("i", I64, [2, 2])],
                  {}, {}, [("z", F, [2, 4])], "GatherND.live"))
    specs.append(("GatherND", 13, [("x", F, [2, 3, 4]), ("i", I64, [2, 1])],
                  {}, {"batch_dims": 1}, [("z", F, [2, 4])],
                  "GatherND.batch"))
    specs.append(("ScatterND", 16, [("x", F, [4, 3]), ("u", F, [2, 3])],
                  {"i": np.array([[1], [-1]], np.int64)}, {},
                  [("z", F, [4, 3])], "ScatterND", ["x", "i", "u"]))
    specs.append(("CumSum", 14, [x23], {"a": np.array(1, np.int64)}, {},
                  [("z", F, [2, 3])]))
    specs.append(("CumSum", 14, [("x", I64, [2, 3])],
                  {"a": np.array([-2], np.int64)},
                  {"exclusive": 1, "reverse": 1}, [("z", I64, [2, 3])],
                  "CumSum.int64"))
    # Issue 36's: GPT-J's Tile, CLIP's pooler.
    specs.append(("Tile", 17, [x23], {"r": np.array([2, 1], np.int64)}, {},
                  [("z", F, [4, 3])]))
    for op in ["ArgMax", "ArgMin"]:
        specs.append((op, 13, [x23], {}, {"axis": 1}, [("z", I64, [2, 1])]))
    # Issue 37's: a mixture of experts' router.
    specs.append(("TopK", 17, [x23], {"k": np.array([2], np.int64)},
                  {"axis": 1}, [("z", F, [2, 2]), ("i", I64, [2, 2])]))
    specs.append(("OneHot", 17, [("x", I64, [2, 3])],
                  {"d": np.array([4], np.int64),
                   "v": np.array([0, 1], np.float32)}, {},
                  [("z", F, [2, 3, 4])]))
    specs.append(("Conv", 17, [("x", F, [1, 2, 6])],
                  {"w": np.ones([4, 2, 3], np.float32)},
                  {"pads": [1, 1], "strides": [2]}, [("z", F, [1, 4, 3])]))
    return specs


def op_seeds():
    """Two seeds per supported op: `<op>` (data inputs are graph inputs) and
    `<op>.folded` (every input is an initializer, so the importer folds or
    refuses)."""
    out = []
    for i, spec in enumerate(_op_specs()):
        op, opset, data, consts, attrs, outs = spec[:6]
        # An optional seventh and eighth: the seed's name (for a second
        # seed of one op) and the node's input order.
        seed_name = spec[6] if len(spec) > 6 else op
        rng = np.random.default_rng(i)
        # Node inputs in the op's order: data first, constant operands after.
        names = spec[7] if len(spec) > 7 else \
            [d[0] for d in data] + list(consts)
        for folded in (False, True):
            inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
            inputs = []
            for name, elem, shape in data:
                if folded:
                    inits.append(numpy_helper.from_array(
                        _rand(shape, _NP[elem], rng), name))
                else:
                    inputs.append(_vi(name, elem, shape))
            node = helper.make_node(op, names, [o[0] for o in outs],
                                    name=f"{op.lower()}_node", **attrs)
            m = _model([node], inputs, [_vi(*o) for o in outs], inits, opset)
            out.append(Seed(seed_name + (".folded" if folded else ""), m))
    return out + contrib_seeds() + dim_expr_seeds()


def contrib_seeds():
    """onnxruntime's ops that onnxruntime-genai's builder writes (its
    com.microsoft domain at version 1, beside the default one at 22): a
    SimplifiedLayerNormalization, the skip norms, RotaryEmbedding,
    GroupQueryAttention over a past of `past`, bound with --bind,
    MatMulNBits (int4 weights) and the fused mixture of experts (MoE)."""
    ms = "com.microsoft"

    def contrib(name, nodes, inputs, outputs, inits=()):
        m = _model(nodes, inputs, outputs, inits, 22)
        m.opset_import.append(helper.make_opsetid(ms, 1))
        return Seed(name, m)

    rng = np.random.default_rng(36)
    x, w = _vi("x", F, [2, 3, 16]), numpy_helper.from_array(
        _rand([16], np.float32, rng), "w")
    cos = numpy_helper.from_array(_rand([16, 8], np.float32, rng), "cos")
    sin = numpy_helper.from_array(_rand([16, 8], np.float32, rng), "sin")
    seeds = [
        contrib("SimplifiedLayerNormalization",
                [helper.make_node("SimplifiedLayerNormalization", ["x", "w"],
                                  ["z"], name="sln_node", axis=-1)],
                [x], [_vi("z", F, [2, 3, 16])], [w]),
        contrib("SkipSimplifiedLayerNormalization",
                [helper.make_node("SkipSimplifiedLayerNormalization",
                                  ["x", "y", "w"], ["z", "", "", "sum"],
                                  name="ssln_node", domain=ms)],
                [x, _vi("y", F, [2, 3, 16])],
                [_vi("z", F, [2, 3, 16]), _vi("sum", F, [2, 3, 16])], [w]),
        contrib("SkipLayerNormalization",
                [helper.make_node("SkipLayerNormalization",
                                  ["x", "y", "w", "w"], ["z"],
                                  name="sln_node", domain=ms)],
                [x, _vi("y", F, [3, 16])], [_vi("z", F, [2, 3, 16])], [w]),
        contrib("com.microsoft.RotaryEmbedding",
                [helper.make_node("RotaryEmbedding", ["x", "p", "cos", "sin"],
                                  ["z"], name="rope_node", domain=ms,
                                  num_heads=1)],
                [x, _vi("p", I64, [1])], [_vi("z", F, [2, 3, 16])],
                [cos, sin]),
    ]
    gqa = helper.make_node(
        "GroupQueryAttention",
        ["q", "", "", "pk", "pv", "lens", "total", "cos", "sin"],
        ["z", "k", "v"], name="gqa_node", domain=ms, num_heads=2,
        kv_num_heads=1, do_rotary=1)
    seeds.append(contrib(
        "GroupQueryAttention", [gqa],
        [_vi("q", F, [1, 3, 64]), _vi("pk", F, [1, 1, "past", 16]),
         _vi("pv", F, [1, 1, "past", 16])],
        [_vi("z", F, [1, 3, 32]), _vi("k", F, [1, 1, "past + 3", 16]),
         _vi("v", F, [1, 1, "past + 3", 16])],
        # The lengths of a past of 2 and 3 new tokens, so that the
        # oracle's run (zeros for every input) is a valid one.
        [cos, sin, numpy_helper.from_array(np.array([4], np.int32), "lens"),
         numpy_helper.from_array(np.array(5, np.int32), "total")]))
    seeds[-1].bindings["past"] = 2
    # An If whose condition folds once n is bound (Phi-3.5's choice of
    # rotary caches by length).
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"], name="then_node")],
        "then", [], [_vi("t", F, [2, 3, 16])])
    otherwise = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["e"], name="else_node")],
        "else", [], [_vi("e", F, [2, 3, 16])])
    condition = [
        helper.make_node("Shape", ["x"], ["s"], name="shape_node"),
        helper.make_node("Gather", ["s", "one"], ["rows"], name="gather_node",
                         axis=0),
        helper.make_node("Greater", ["rows", "limit"], ["c"],
                         name="greater_node"),
        helper.make_node("If", ["c"], ["z"], name="if_node", then_branch=then,
                         else_branch=otherwise)]
    seeds.append(contrib(
        "If", condition, [x], [_vi("z", F, [2, 3, 16])],
        [w, numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array(2, np.int64), "limit")]))
    # int4 weights: 32 rows in two blocks of 16 (zero points one byte per
    # column) by 8 columns, and a bias.
    seeds.append(contrib(
        "com.microsoft.MatMulNBits",
        [helper.make_node("MatMulNBits", ["x32", "q4", "s4", "z4", "", "b4"],
                          ["z"], name="mmnb_node", domain=ms, K=32, N=8,
                          bits=4, block_size=16, accuracy_level=4)],
        [_vi("x32", F, [2, 3, 32])], [_vi("z", F, [2, 3, 8])],
        [numpy_helper.from_array(
            rng.integers(0, 256, (8, 2, 8)).astype(np.uint8), "q4"),
         numpy_helper.from_array(_rand([8, 2], np.float32, rng), "s4"),
         numpy_helper.from_array(
             rng.integers(0, 256, (8, 1)).astype(np.uint8), "z4"),
         numpy_helper.from_array(_rand([8], np.float32, rng), "b4")]))
    # Issue 37's fused mixture of experts: 4 experts, top 2, SwiGLU
    # interleaved (gpt-oss's layout), biases, over 6 tokens.
    seeds.append(contrib(
        "com.microsoft.MoE",
        [helper.make_node("MoE", ["t", "r", "w1", "b1", "w2", "b2"], ["z"],
                          name="moe_node", domain=ms, k=2,
                          activation_type="swiglu", swiglu_fusion=1,
                          normalize_routing_weights=1, activation_alpha=1.702,
                          activation_beta=1.0, swiglu_limit=7.0)],
        [_vi("t", F, [6, 8]), _vi("r", F, [6, 4])], [_vi("z", F, [6, 8])],
        [numpy_helper.from_array(_rand([4, 12, 8], np.float32, rng), "w1"),
         numpy_helper.from_array(_rand([4, 12], np.float32, rng), "b1"),
         numpy_helper.from_array(_rand([4, 8, 6], np.float32, rng), "w2"),
         numpy_helper.from_array(_rand([4, 8], np.float32, rng), "b2")]))
    # int4 experts (QMoE): hidden 32 and FFN 16 in blocks of 16, zero
    # points, the same routing.
    seeds.append(contrib(
        "com.microsoft.QMoE",
        [helper.make_node("QMoE", ["t32", "r", "qw1", "qs1", "", "qw2", "qs2",
                                   "", "", "", "", "qz1", "qz2"], ["z"],
                          name="qmoe_node", domain=ms, k=2,
                          activation_type="swiglu", swiglu_fusion=1,
                          normalize_routing_weights=1, expert_weight_bits=4,
                          block_size=16)],
        [_vi("t32", F, [6, 32]), _vi("r", F, [6, 4])],
        [_vi("z", F, [6, 32])],
        [numpy_helper.from_array(
            rng.integers(0, 256, (4, 32, 16)).astype(np.uint8), "qw1"),
         numpy_helper.from_array(_rand([4, 32, 2], np.float32, rng), "qs1"),
         numpy_helper.from_array(
             rng.integers(0, 256, (4, 32, 1)).astype(np.uint8), "qz1"),
         numpy_helper.from_array(
             rng.integers(0, 256, (4, 32, 8)).astype(np.uint8), "qw2"),
         numpy_helper.from_array(_rand([4, 32, 1], np.float32, rng), "qs2"),
         numpy_helper.from_array(
             rng.integers(0, 256, (4, 32, 1)).astype(np.uint8), "qz2")]))
    return seeds


def dim_expr_seeds():
    """Models whose dimensions are expressions over symbols (`a + b`,
    `(s - 1)//2 + 1`), as optimum and torch's dynamo exporter declare
    them, with --bind values of the symbols."""
    concat = helper.make_node("Concat", ["past", "cur"], ["z"], axis=1,
                              name="concat_node")
    m1 = _model([concat], [_vi("past", F, [1, "past", 4]),
                           _vi("cur", F, [1, "seq", 4])],
                [_vi("z", F, [1, "past + seq", 4])])
    relu = helper.make_node("Relu", ["x"], ["z"], name="relu_node")
    m2 = _model([relu], [_vi("x", F, ["n * 2", "(s - 1)//2 + 1"])],
                [_vi("z", F, ["n * 2", "(s - 1)//2 + 1"])])
    add = helper.make_node("Add", ["x", "y"], ["z"], name="add_node")
    m3 = _model([add], [_vi("x", F, ["b", "a + b - a"]), _vi("y", F, ["b"])],
                [_vi("z", F, ["b", "b"])])
    return [Seed("DimExpr.concat", m1, {"past": 3, "seq": 2}),
            Seed("DimExpr.relu", m2, {"n": 2, "s": 5}),
            Seed("DimExpr.add", m3, {"a": 4, "b": 3})]


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dim_symbols(text):
    """The symbols a dim_param reads: itself when it is one identifier (or
    not an expression), else the identifiers in it."""
    if _SYMBOL.fullmatch(text) or not re.fullmatch(r"[\w\s+\-*/()]+", text):
        return [text]
    return _SYMBOL.findall(text)


def _text_models(root):
    """The textual models of the lit tests (split-file sections too)."""
    out = []
    for path in sorted(glob.glob(str(root / "test" / "**" / "*.onnxtxt"),
                                 recursive=True)):
        text = pathlib.Path(path).read_text()
        parts = re.split(r"^(?:#|//)--- (\S+)\s*$", text, flags=re.M)
        sections = [("", parts[0])] + list(zip(parts[1::2], parts[2::2]))
        rel = os.path.relpath(path, root)
        for name, body in sections:
            if "<" not in body:
                continue
            try:
                m = onnx.parser.parse_model(body)
            except Exception:  # The syntax-error cases of errors.onnxtxt.
                continue
            bindings = {}
            for vi in list(m.graph.input) + list(m.graph.output):
                for d in vi.type.tensor_type.shape.dim:
                    for symbol in dim_symbols(d.dim_param) \
                            if d.dim_param else []:
                        bindings[symbol] = 2
            out.append(Seed(f"{rel}{':' + name if name else ''}", m, bindings))
    return out


def seeds(root, big=True):
    """Every seed, in a fixed order. `big`: include the committed
    transformers (about 0.5 MB each)."""
    root = pathlib.Path(root)
    out = op_seeds() + _text_models(root)
    if big:
        seen = set()
        paths = sorted(glob.glob(str(root / "test" / "models" / "*.onnx")))
        paths += sorted(glob.glob(str(root / "examples" / "**" / "*.onnx"),
                                  recursive=True))
        # transformers' eager expert loops (folded into nn.moe by the
        # importer's graph matcher, ExpertLoops.cpp): transformers 5's and
        # 4's (optimum's).
        paths += [str(root / "test" / "models" / "hf" / name) for name in
                  ("mixtral_eager.legacy.onnx", "mixtral.optimum.onnx")]
        for path in paths:
            data = pathlib.Path(path).read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            m = onnx.load_from_string(data)
            bindings = {"batch": 2, "seq": 16} if "dynamic" in path else {}
            if "optimum" in path:
                bindings = {"batch_size": 2, "sequence_length": 16}
            out.append(Seed(os.path.relpath(path, root), m, bindings))
    return out


# --- Mutations ---------------------------------------------------------------


def _value_names(g):
    names = [i.name for i in g.input] + [i.name for i in g.initializer]
    for n in g.node:
        names += [o for o in n.output if o]
    return names


def _typed_values(g):
    """ValueInfoProtos with a tensor type: graph inputs, outputs and
    value_info."""
    return [v for v in list(g.input) + list(g.output) + list(g.value_info)
            if v.type.HasField("tensor_type")]


def _int_initializers(g):
    return [t for t in g.initializer
            if t.data_type in (I64, I32) and
            t.data_location != TensorProto.EXTERNAL and
            0 <= int(np.prod(t.dims, dtype=object)) <= 64]


class Mutator:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def mutate(self, seed: Seed, count=None):
        m = onnx.ModelProto()
        m.CopyFrom(seed.model)
        case = Case(m, seed.name, [], bindings=dict(seed.bindings))
        count = count or self.rng.choice([1, 1, 1, 2, 2, 3])
        ops = [name for name in dir(self) if name.startswith("m_")]
        weights = [getattr(self, name).weight for name in ops]
        tries = 0
        while len(case.mutations) < count and tries < 20:
            tries += 1
            name = self.rng.choices(ops, weights)[0]
            try:
                what = getattr(self, name)(case)
            except Exception:  # noqa: BLE001
                # A tensor an earlier mutation made unreadable (onnx's
                # errors are of several kinds); each mutation reads before
                # it writes, so nothing changed.
                what = None
            if what:
                case.mutations.append(f"{name[2:]}: {what}")
        return case

    # Helpers.
    def _node(self, case, pred=lambda n: True):
        nodes = [n for n in case.model.graph.node if pred(n)]
        return self.rng.choice(nodes) if nodes else None

    def _int(self):
        return self.rng.choice(INTERESTING_INTS)

    # Each mutation returns what it did, or None when it does not apply.

    def m_drop_input(self, case):
        n = self._node(case, lambda n: len(n.input) > 0)
        if not n:
            return None
        if self.rng.random() < 0.3:
            del n.input[:]
            return f"node '{n.name or n.op_type}' ({n.op_type}) has no inputs"
        i = self.rng.randrange(len(n.input))
        del n.input[i]
        return f"input {i} of '{n.name or n.op_type}' ({n.op_type}) removed"
    m_drop_input.weight = 3

    def m_add_input(self, case):
        n = self._node(case)
        if not n:
            return None
        g = case.model.graph
        name = self.rng.choice(_value_names(g) + ["", "ghost"])
        n.input.append(name)
        return f"'{n.name or n.op_type}' ({n.op_type}) gets input '{name}'"
    m_add_input.weight = 2

    def m_drop_output(self, case):
        n = self._node(case, lambda n: len(n.output) > 0)
        if not n:
            return None
        if self.rng.random() < 0.3:
            del n.output[:]
            return f"node '{n.name or n.op_type}' ({n.op_type}) has no outputs"
        del n.output[-1]
        return f"last output of '{n.name or n.op_type}' ({n.op_type}) removed"
    m_drop_output.weight = 2

    def m_add_output(self, case):
        n = self._node(case)
        if not n:
            return None
        name = self.rng.choice(["extra", "", n.output[0] if n.output else "x"])
        n.output.append(name)
        return f"'{n.name or n.op_type}' ({n.op_type}) gets output '{name}'"
    m_add_output.weight = 1

    def m_empty_name(self, case):
        n = self._node(case, lambda n: len(n.input) > 0)
        if not n:
            return None
        i = self.rng.randrange(len(n.input))
        n.input[i] = ""
        return f"input {i} of '{n.name or n.op_type}' ({n.op_type}) named ''"
    m_empty_name.weight = 3

    def m_dims(self, case):
        values = _typed_values(case.model.graph)
        values = [v for v in values if v.type.tensor_type.HasField("shape")]
        if not values:
            return None
        v = self.rng.choice(values)
        dims = v.type.tensor_type.shape.dim
        r = self.rng.random()
        if r < 0.1:
            for d in dims:
                d.dim_value = 2**40
            while len(dims) < 3:
                dims.add().dim_value = 2**40
            return f"'{v.name}' has shape [2^40 x {len(dims)}]"
        if r < 0.2 or not dims:
            dims.add().dim_value = self.rng.choice([1, 2, 2**62])
            return f"'{v.name}' gets a dimension"
        if r < 0.3:
            del dims[self.rng.randrange(len(dims))]
            return f"'{v.name}' loses a dimension"
        i = self.rng.randrange(len(dims))
        if r < 0.35:
            dims[i].dim_param = self.rng.choice(["n", ""])
            case.bindings.setdefault("n", 2)
            return f"dim {i} of '{v.name}' is symbolic"
        value = self.rng.choice(INTERESTING_DIMS)
        dims[i].dim_value = value
        return f"dim {i} of '{v.name}' is {value}"
    m_dims.weight = 4

    def m_dim_expr(self, case):
        """A dimension becomes an expression over bound symbols (`n`, `m`):
        valid ones, negative, overflowing, dividing by zero, naming an
        unbound symbol, nested deeply, or not quite an expression."""
        values = _typed_values(case.model.graph)
        values = [v for v in values if v.type.tensor_type.HasField("shape")
                  and v.type.tensor_type.shape.dim]
        if not values:
            return None
        v = self.rng.choice(values)
        dims = v.type.tensor_type.shape.dim
        i = self.rng.randrange(len(dims))
        text = self.rng.choice([
            "n + m", "n * m - 1", "(n - 1)//2 + 1", "n / m", "-n + 3",
            "n - 9", "m // (n - 2)", "9223372036854775807 + n",
            "n * 4611686018427387904", "-9223372036854775807 - 1 - n",
            "n // -1 * -1", "unbound_symbol + n", "n +", "n ** 2", "f(n)",
            "(" * 100000 + "n" + ")" * 100000, "-" * 100000 + "n",
            "n" + " + n" * 100, "99999999999999999999 + n"])
        case.bindings.setdefault("n", 2)
        case.bindings.setdefault("m", 3)
        dims[i].dim_param = text
        return f"dim {i} of '{v.name}' is '{text[:40]}'"
    m_dim_expr.weight = 2

    def m_shape_tensor(self, case):
        """An element of a small integer initializer (shapes, axes, indices,
        split sizes, k) becomes a hostile value, or the tensor changes
        length."""
        ts = _int_initializers(case.model.graph)
        if not ts:
            return None
        t = self.rng.choice(ts)
        a = numpy_helper.to_array(t).copy()
        r = self.rng.random()
        if r < 0.15:
            a = a.reshape(-1)[:-1] if a.size else np.array([1], a.dtype)
            what = "loses an element"
        elif r < 0.3:
            a = np.append(a.reshape(-1), self._int()).astype(a.dtype)
            what = "gains an element"
        elif r < 0.4:
            a = np.zeros([0], a.dtype)
            what = "is empty"
        else:
            if a.size == 0:
                return None
            flat = a.reshape(-1)
            i = self.rng.randrange(flat.size)
            value = self._int()
            info = np.iinfo(a.dtype)
            flat[i] = min(max(value, info.min), info.max)
            what = f"element {i} is {flat[i]}"
        t.CopyFrom(numpy_helper.from_array(a, t.name))
        return f"initializer '{t.name}' {what}"
    m_shape_tensor.weight = 4

    def m_elem_type(self, case):
        g = case.model.graph
        r = self.rng.random()
        if r < 0.6:
            values = _typed_values(g)
            if not values:
                return None
            v = self.rng.choice(values)
            t = self.rng.choice(ELEMENT_TYPES)
            v.type.tensor_type.elem_type = t
            return f"'{v.name}' has element type {t}"
        if not g.initializer:
            return None
        t = self.rng.choice(g.initializer)
        value = self.rng.choice(ELEMENT_TYPES)
        t.data_type = value
        return f"initializer '{t.name}' has data_type {value}"
    m_elem_type.weight = 3

    def m_attr_type(self, case):
        """An attribute becomes another kind (INT, INTS, FLOAT, FLOATS,
        STRING, TENSOR), keeps its value under the wrong tag, or loses it."""
        n = self._node(case, lambda n: len(n.attribute) > 0)
        if not n:
            return None
        a = self.rng.choice(n.attribute)
        old = AttributeProto.AttributeType.Name(a.type)
        r = self.rng.random()
        if r < 0.15:
            # Tag and field disagree: the value stays where it was.
            a.type = self.rng.choice([AttributeProto.INT, AttributeProto.INTS,
                                      AttributeProto.FLOAT,
                                      AttributeProto.STRING,
                                      AttributeProto.TENSOR])
            return (f"attribute '{a.name}' of {n.op_type} is tagged "
                    f"{AttributeProto.AttributeType.Name(a.type)}, holds {old}")
        if r < 0.22:
            a.type = AttributeProto.UNDEFINED
            return f"attribute '{a.name}' of {n.op_type} has type UNDEFINED"
        num = (a.i if a.type == AttributeProto.INT else
               a.f if a.type == AttributeProto.FLOAT else
               a.ints[0] if a.ints else a.floats[0] if a.floats else 1)
        kind = self.rng.choice(["INT", "INTS", "FLOAT", "FLOATS", "STRING",
                                "TENSOR", "EMPTY"])
        name = a.name
        a.Clear()
        a.name = name
        if kind == "INT":
            a.type, a.i = AttributeProto.INT, int(num)
        elif kind == "INTS":
            a.type = AttributeProto.INTS
            a.ints.extend([int(num)] * self.rng.choice([1, 2]))
        elif kind == "FLOAT":
            a.type, a.f = AttributeProto.FLOAT, float(num) + 0.5
        elif kind == "FLOATS":
            a.type = AttributeProto.FLOATS
            a.floats.extend([float(num)])
        elif kind == "STRING":
            a.type, a.s = AttributeProto.STRING, str(num).encode()
        elif kind == "TENSOR":
            a.type = AttributeProto.TENSOR
            a.t.CopyFrom(helper.make_tensor("t", I64, [], [int(num)]))
        else:  # A tag with no value at all.
            a.type = self.rng.choice([AttributeProto.INT, AttributeProto.INTS,
                                      AttributeProto.STRING])
        return f"attribute '{name}' of {n.op_type}: {old} -> {kind}"
    m_attr_type.weight = 4

    def m_attr_value(self, case):
        n = self._node(case, lambda n: len(n.attribute) > 0)
        if not n:
            return None
        a = self.rng.choice(n.attribute)
        if a.type == AttributeProto.INT:
            a.i = self._int()
            value = a.i
        elif a.type == AttributeProto.INTS and a.ints:
            i = self.rng.randrange(len(a.ints))
            a.ints[i] = self._int()
            value = list(a.ints)
        elif a.type == AttributeProto.FLOAT:
            a.f = self.rng.choice(INTERESTING_FLOATS)
            value = a.f
        elif a.type == AttributeProto.STRING:
            a.s = self.rng.choice([b"", b"none", b"\xff\xfe", b"x" * 300])
            value = a.s[:8]
        elif a.type == AttributeProto.TENSOR:
            a.t.dims[:] = [self.rng.choice([0, 2, 2**62])]
            value = f"dims {list(a.t.dims)}"
        else:
            return None
        return f"attribute '{a.name}' of {n.op_type} is {value}"
    m_attr_value.weight = 4

    def m_attr_duplicate(self, case):
        n = self._node(case, lambda n: len(n.attribute) > 0)
        if not n:
            return None
        a = self.rng.choice(n.attribute)
        b = n.attribute.add()
        b.CopyFrom(a)
        if b.type == AttributeProto.INT:
            b.i = b.i + 1 if b.i != 2**63 - 1 else 0
        elif b.type == AttributeProto.FLOAT:
            b.f = b.f + 1.0
        elif b.type == AttributeProto.INTS and b.ints:
            b.ints[0] = b.ints[0] ^ 1
        if self.rng.random() < 0.5:  # The different value comes first.
            n.attribute[-1].CopyFrom(a)
            a.CopyFrom(b)
        return f"attribute '{a.name}' of {n.op_type} given twice"
    m_attr_duplicate.weight = 2

    def m_attr_missing(self, case):
        n = self._node(case, lambda n: len(n.attribute) > 0)
        if not n:
            return None
        i = self.rng.randrange(len(n.attribute))
        name = n.attribute[i].name
        del n.attribute[i]
        return f"attribute '{name}' of {n.op_type} removed"
    m_attr_missing.weight = 2

    def m_attr_foreign(self, case):
        """An attribute the op does not have, or another op's."""
        n = self._node(case)
        if not n:
            return None
        name = self.rng.choice(["axis", "axes", "perm", "to", "keepdims",
                                "bogus", "", "epsilon", "k", "upper"])
        n.attribute.append(helper.make_attribute(
            name, self.rng.choice([self._int(), [self._int()], 0.5, "s"])))
        return f"{n.op_type} gets attribute '{name}'"
    m_attr_foreign.weight = 1

    def m_ir_version(self, case):
        case.model.ir_version = self.rng.choice(IR_VERSIONS)
        return f"ir_version {case.model.ir_version}"
    m_ir_version.weight = 1

    def m_opset(self, case):
        m = case.model
        r = self.rng.random()
        if r < 0.15:
            del m.opset_import[:]
            return "no opset_import"
        if r < 0.3:
            m.opset_import.append(helper.make_opsetid(
                self.rng.choice(["", "ai.onnx"]), self.rng.choice(OPSETS)))
            return f"second default opset {m.opset_import[-1].version}"
        if r < 0.4:
            n = self._node(case)
            if not n:
                return None
            n.domain = self.rng.choice(["com.microsoft", "ai.onnx.ml",
                                        "ai.onnx", "x"])
            return f"{n.op_type} in domain '{n.domain}'"
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = self.rng.choice(OPSETS)
                return f"opset {o.version}"
        return None
    m_opset.weight = 1

    def m_graph_outputs(self, case):
        g = case.model.graph
        r = self.rng.random()
        if r < 0.3:
            del g.output[:]
            return "the graph has no outputs"
        if r < 0.45 and g.output:
            g.output.append(g.output[0])
            return f"output '{g.output[0].name}' listed twice"
        if r < 0.6 and g.output:
            g.output[0].name = self.rng.choice(["nowhere", ""])
            return f"graph output named '{g.output[0].name}'"
        if r < 0.75 and g.input:
            g.output.append(g.input[0])
            return f"graph input '{g.input[0].name}' is also an output"
        if r < 0.9 and g.initializer:
            t = g.initializer[0]
            g.output.append(_vi(t.name, t.data_type, list(t.dims)))
            return f"initializer '{t.name}' is an output"
        if g.output:
            g.output[0].type.ClearField("tensor_type")
            return f"output '{g.output[0].name}' has no type"
        return None
    m_graph_outputs.weight = 2

    def m_graph_structure(self, case):
        g = case.model.graph
        r = self.rng.random()
        n = self._node(case, lambda n: len(n.output) > 0)
        if r < 0.2 and g.input:
            del g.input[self.rng.randrange(len(g.input))]
            return "a graph input removed"
        if r < 0.35 and g.input and g.initializer:
            t = g.initializer[0]
            g.input.append(_vi(t.name, t.data_type, list(t.dims)))
            return f"initializer '{t.name}' is also a graph input"
        if r < 0.5 and n:
            d = g.node.add()
            d.CopyFrom(n)
            return f"node '{n.name}' ({n.op_type}) duplicated"
        if r < 0.65 and n and n.input:
            n.input[0] = n.output[0]
            return f"'{n.name}' ({n.op_type}) reads its own output"
        if r < 0.8 and n:
            n.op_type = self.rng.choice(["", "Conv", "Loop", "If", "Scan",
                                         n.op_type.lower()])
            return f"node '{n.name}' has op_type '{n.op_type}'"
        if g.initializer:
            d = g.initializer.add()
            d.CopyFrom(g.initializer[0])
            return f"initializer '{d.name}' defined twice"
        return None
    m_graph_structure.weight = 2

    def m_initializer_size(self, case):
        g = case.model.graph
        if not g.initializer:
            return None
        t = self.rng.choice(g.initializer)
        if t.data_location == TensorProto.EXTERNAL:
            return None
        raw = numpy_helper.to_array(t).tobytes() if not t.raw_data \
            else t.raw_data
        r = self.rng.random()
        for field in ("float_data", "int32_data", "int64_data", "double_data",
                      "string_data", "uint64_data"):
            t.ClearField(field)
        if r < 0.3:
            t.raw_data = raw[:max(0, len(raw) - self.rng.choice([1, 4, 8]))]
            what = f"raw_data {len(t.raw_data)} of {len(raw)} bytes"
        elif r < 0.45:
            t.raw_data = raw + b"\x00" * self.rng.choice([1, 4, 64])
            what = f"raw_data {len(t.raw_data)} of {len(raw)} bytes"
        elif r < 0.6:
            t.raw_data = raw
            t.dims.append(self.rng.choice([0, 2, 2**62]))
            what = f"dims {list(t.dims)} over {len(raw)} bytes"
        elif r < 0.75:
            t.ClearField("raw_data")
            t.float_data.extend([1.0] * self.rng.choice([0, 1, 3]))
            what = f"{len(t.float_data)} float_data values"
        elif r < 0.9:
            t.raw_data = raw
            t.int64_data.extend([1, 2])
            what = "both raw_data and int64_data"
        else:
            t.ClearField("raw_data")
            what = "no data at all"
        return f"initializer '{t.name}': {what}"
    m_initializer_size.weight = 3

    def m_external_data(self, case):
        """An initializer moves to an external file that is missing, short,
        a FIFO, outside the model directory, or read at a bad offset."""
        g = case.model.graph
        ts = [t for t in g.initializer
              if t.data_location != TensorProto.EXTERNAL]
        if not ts:
            return None
        t = self.rng.choice(ts)
        raw = numpy_helper.to_array(t).tobytes()
        for field in ("raw_data", "float_data", "int32_data", "int64_data",
                      "double_data", "uint64_data"):
            t.ClearField(field)
        t.data_location = TensorProto.EXTERNAL
        kind = self.rng.choice(["missing", "short", "fifo", "offset", "length",
                                "negative", "outside", "absolute", "directory",
                                "nolocation", "exact"])
        entries = {"location": "weights.bin"}
        if kind == "missing":
            entries["location"] = "missing.bin"
        elif kind == "short":
            case.files["weights.bin"] = raw[:len(raw) // 2]
        elif kind == "fifo":
            case.files["weights.bin"] = None
        elif kind == "offset":
            case.files["weights.bin"] = raw
            entries["offset"] = str(self.rng.choice([len(raw), 2**62, 1]))
        elif kind == "length":
            case.files["weights.bin"] = raw
            entries["length"] = str(self.rng.choice([len(raw) + 4, 0, 2**63 - 1,
                                                     "12x"]))
        elif kind == "negative":
            case.files["weights.bin"] = raw
            entries[self.rng.choice(["offset", "length"])] = "-8"
        elif kind == "outside":
            entries["location"] = "../../../../etc/hostname"
        elif kind == "absolute":
            entries["location"] = "/proc/self/mem"
        elif kind == "directory":
            entries["location"] = "."
        elif kind == "nolocation":
            del entries["location"]
            entries["offset"] = "0"
        else:  # A correct file: the control case.
            case.files["weights.bin"] = raw
        for k, v in entries.items():
            e = t.external_data.add()
            e.key, e.value = k, str(v)
        return f"initializer '{t.name}' in external data ({kind})"
    m_external_data.weight = 2

    def m_model_fifo(self, case):
        if self.rng.random() > 0.1:
            return None
        case.model_fifo = True
        return "the model path is a FIFO"
    m_model_fifo.weight = 1
