"""Writes models the ONNX textual syntax cannot express, each invalid in one
way: empty input or output names where a tensor is required (the parser
only leaves trailing names empty) and attributes whose type field or value
fields are wrong. Usage: make_invalid_models.py DIR
"""

import os
import sys

import onnx
from onnx import AttributeProto, TensorProto, helper


def write(root, name, nodes, inputs=None, outputs=None):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                      [2, 3])]
    outputs = outputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                        [2, 3])]
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(os.path.join(root, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())


def node(op, inputs, outputs, name, **attrs):
    return helper.make_node(op, inputs, outputs, name=name, **attrs)


def softmax_with(name, fill):
    """A Softmax whose `axis` attribute `fill` sets up by hand."""
    n = node("Softmax", ["x"], ["y"], name)
    attr = n.attribute.add()
    attr.name = "axis"
    fill(attr)
    return n


def main(root):
    os.makedirs(root, exist_ok=True)
    i64 = [helper.make_tensor_value_info("i", TensorProto.INT64, [1])]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    write(root, "concat_first_empty",
          [node("Concat", ["", "x"], ["y"], "cat", axis=0)])
    write(root, "split_empty", [node("Split", [""], ["y"], "split")])
    write(root, "gather_data_empty",
          [node("Gather", ["", "i"], ["y"], "gather")], inputs=x + i64)
    write(root, "output_empty", [node("Relu", ["x"], [""], "relu")])

    def undefined(a):
        a.i = 1  # type left UNDEFINED

    def int_holding_float(a):
        a.type = AttributeProto.INT
        a.f = 1.0

    def int_and_ints(a):
        a.type = AttributeProto.INT
        a.i = 1
        a.ints.extend([0])

    for name, fill in [("attr_no_type", undefined),
                       ("attr_wrong_field", int_holding_float),
                       ("attr_two_fields", int_and_ints)]:
        write(root, name, [softmax_with("softmax", fill)])
    # A TENSOR attribute with no tensor in it.
    constant = node("Constant", [], ["c"], "constant")
    value = constant.attribute.add()
    value.name = "value"
    value.type = AttributeProto.TENSOR
    write(root, "attr_no_tensor", [constant])


if __name__ == "__main__":
    main(sys.argv[1])
