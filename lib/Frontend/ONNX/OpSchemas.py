#!/usr/bin/env python3
"""Writes OpSchemas.inc: the ONNX signature of every op the importer
supports, at every schema version in force at opsets 13 to 23, from the
`onnx` package's schemas (the ones onnxruntime checks models against).

Usage: OpSchemas.py > OpSchemas.inc
test/Frontend/ONNX/op-schemas-current.test fails when the committed file
differs from what this script writes; run it again after adding an op.

Each entry: op type, since-version, input and output counts, each formal
input and output (single, optional or variadic; its type constraint and the
data types the constraint allows), and each attribute (ONNX type, whether it
is required, whether it is a boolean held in an INT).
"""

import sys

import onnx
from onnx import TensorProto, defs

MIN_OPSET, MAX_OPSET = 13, 23

# The op types OpRegistry has entries for (OpsElementwise.cpp, OpsShape.cpp,
# OpsTransformer.cpp, OpsIndexing.cpp, OpsScan.cpp). An op missing here is
# reported as an internal error by every import, so the list cannot silently
# fall behind.
OPS = """
Add Sub Mul Div Max Min And Or Xor Pow Equal Less Greater LessOrEqual
GreaterOrEqual Neg Abs Sqrt Reciprocal Exp Log Tanh Erf Sigmoid Relu Not Cos
Sin Floor Ceil Cast Where Identity Dropout
Shape Size ConstantOfShape Range Constant Reshape Flatten Squeeze Unsqueeze
Concat Split Slice Gather Expand Transpose Trilu
MatMul Gemm Softmax LogSoftmax LayerNormalization RMSNormalization Gelu
Attention RotaryEmbedding ReduceMean ReduceSum ReduceMax ReduceMin
IsNaN Clip Mod ReduceProd ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSumExp
GatherElements GatherND ScatterND
CumSum
If
Tile ArgMax ArgMin Conv TopK OneHot
""".split()

# Ops of onnxruntime's contrib domain (keyed "com.microsoft.<op type>") and
# onnxruntime's own ops of the default domain, which onnxruntime-genai's
# model builder writes, from the schemas of the installed onnxruntime
# (OpsContrib.cpp; docs/frontend.md).
ORT_OPS = [
    ("", "SimplifiedLayerNormalization"),
    ("com.microsoft", "GroupQueryAttention"),
    ("com.microsoft", "MatMulNBits"),
    ("com.microsoft", "MoE"),
    ("com.microsoft", "QMoE"),
    ("com.microsoft", "RotaryEmbedding"),
    ("com.microsoft", "SkipLayerNormalization"),
    ("com.microsoft", "SkipSimplifiedLayerNormalization"),
]

# INT attributes that ONNX defines as booleans: 0 or 1, nothing else.
BOOLEAN_ATTRS = {"keepdims", "noop_with_empty_axes", "allowzero", "upper",
                 "transA", "transB", "saturate", "is_causal", "interleaved",
                 "exclusive", "reverse", "fmod", "do_rotary",
                 "rotary_interleaved", "is_packed_batching", "smooth_softmax",
                 "causal", "select_last_index", "largest", "sorted"}

OPTION = {
    defs.OpSchema.FormalParameterOption.Single: "Single",
    defs.OpSchema.FormalParameterOption.Optional: "Optional",
    defs.OpSchema.FormalParameterOption.Variadic: "Variadic",
}
DATA_TYPES = {name.lower(): value
              for name, value in TensorProto.DataType.items()}


def type_mask(type_strs):
    """Bit `t` set for each tensor data type `t` in the list (sequence,
    optional and sparse types are not tensors the importer can see)."""
    mask = 0
    for s in type_strs:
        if s.startswith("tensor(") and s.endswith(")"):
            mask |= 1 << DATA_TYPES[s[len("tensor("):-1]]
    return mask


def params(constraints, formals):
    """`formals` as (name, option, type string, homogeneous) tuples, the
    option one of Single, Optional and Variadic."""
    out = []
    for name, option, type_str, homogeneous in formals:
        if type_str in constraints:
            group, mask = type_str, type_mask(constraints[type_str])
        else:
            group, mask = "", type_mask([type_str])
        if option == "Variadic" and not homogeneous:
            group = ""  # Each element may have its own type.
        out.append(f'{{"{name}", ParamKind::{option}, '
                   f'"{group}", 0x{mask:x}u}}')
    return "{" + ", ".join(out) + "}"


def attributes(attrs):
    """`attrs` as {name: (ONNX attribute type name, required)}."""
    out = []
    for name in sorted(attrs):
        kind, required = attrs[name]
        out.append(f'{{"{name}", onnx::AttributeProto::{kind}, '
                   f'{"true" if required else "false"}, '
                   f'{"true" if name in BOOLEAN_ATTRS else "false"}}}')
    return "{" + ", ".join(out) + "}"


def entry(key, since, s, constraints, inputs, outputs, attrs):
    return (f'{{"{key}", {since}, {s.min_input}, {count(s.max_input)}, '
            f'{s.min_output}, {count(s.max_output)},\n'
            f' {params(constraints, inputs)},\n'
            f' {params(constraints, outputs)},\n'
            f' {attributes(attrs)}}},')


def onnx_entry(op, since, s):
    constraints = {c.type_param_str: c.allowed_type_strs
                   for c in s.type_constraints}
    formals = [[(p.name, OPTION[p.option], p.type_str, p.is_homogeneous)
                for p in ps] for ps in (s.inputs, s.outputs)]
    attrs = {name: (onnx.AttributeProto.AttributeType.Name(
        int(a.type.value)), a.required) for name, a in s.attributes.items()}
    return entry(op, since, s, constraints, *formals, attrs)


def ort_entries():
    from onnxruntime.capi import onnxruntime_pybind11_state as ort
    schemas = {}
    for s in ort.get_all_operator_schema():
        if (s.domain, s.name) in ORT_OPS:
            schemas.setdefault((s.domain, s.name), []).append(s)
    lines = []
    for domain, op in sorted(ORT_OPS, key=lambda d: (d[0], d[1])):
        if (domain, op) not in schemas:
            sys.exit(f"no onnxruntime schema for {domain}.{op}")
        key = f"{domain}.{op}" if domain else op
        for s in sorted(schemas[(domain, op)], key=lambda s: s.since_version):
            constraints = {c.type_param_str: c.allowed_type_strs
                           for c in s.type_constraints}
            formals = [[(p.name, p.option.name, p.typeStr, p.isHomogeneous)
                        for p in ps] for ps in (s.inputs, s.outputs)]
            attrs = {name: (a.type.name, a.required)
                     for name, a in s.attributes.items()}
            lines.append(entry(key, s.since_version, s, constraints,
                               *formals, attrs))
    return lines


def count(n):
    return "kUnbounded" if n >= 2**31 - 1 else str(n)


def ort_version():
    import onnxruntime
    return onnxruntime.__version__


def main():
    lines = [
        "// Generated by OpSchemas.py from the schemas of onnx "
        f"{onnx.__version__},",
        f"// opsets {MIN_OPSET} to {MAX_OPSET}. Do not edit; run "
        "OpSchemas.py > OpSchemas.inc.",
        "// {op type, since-version, inputs min/max, outputs min/max,",
        "//  inputs {name, kind, type constraint, allowed types}, outputs,",
        "//  attributes {name, type, required, boolean}}",
        "// clang-format off",
    ]
    for op in sorted(OPS):
        versions = {}
        for opset in range(MIN_OPSET, MAX_OPSET + 1):
            try:
                schema = defs.get_schema(op, opset, "")
            except defs.SchemaError:
                continue
            versions[schema.since_version] = schema
        if not versions:
            sys.exit(f"no ONNX schema for {op} at opsets {MIN_OPSET}-"
                     f"{MAX_OPSET}")
        for since, s in sorted(versions.items()):
            lines.append(onnx_entry(op, since, s))
    lines.append("// onnxruntime's ops, from the schemas of onnxruntime "
                 f"{ort_version()}.")
    lines.extend(ort_entries())
    lines.append("// clang-format on")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
