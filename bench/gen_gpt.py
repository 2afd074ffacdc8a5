"""Writes a GPT-2 style ONNX model of N layers, spelled the way torch.onnx
exports it (decomposed GELU, where-masked softmax attention), for the
import, compile and planning benchmarks and tests.

Usage: gen_gpt.py LAYERS OUT.onnx [--hidden H] [--heads N] [--ffn F]
                  [--seq S] [--vocab V] [--batch B] [--window W]
                  [--llama [--kv-heads K]] [--external | --sparse]

--window W makes every layer's attention a sliding window of W keys (query
i sees keys i - W < j <= i), as Mistral's, in the causal mask constant.

--llama gives Llama's layer instead (no biases; separate query, key and
value projections with K key/value heads repeated to N as Hugging Face's
repeat_kv does, a SwiGLU MLP), so that a Llama-3-70B-shaped model is
`gen_gpt.py 80 m.onnx --llama --hidden 8192 --heads 64 --kv-heads 8
--ffn 28672 --vocab 128256 --sparse`.

--external writes the weights to OUT.onnx.data as ONNX external data, one
tensor at a time (memory holds one tensor, so models larger than memory can
be written); --sparse lays the same file out without writing it (a sparse
file of the right size, `truncate -s`), for planning at sizes no disk
holds: the compiler reads shapes only until it writes an artifact.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ExternalData:
    """Appends each weight to one external data file (or, sparse, only
    reserves its bytes) and returns the initializer that points at it."""

    def __init__(self, path, sparse):
        self.path = path
        self.location = os.path.basename(path)
        self.sparse = sparse
        self.offset = 0
        self.file = open(path, "wb")

    def add(self, name, shape, make):
        count = int(np.prod(shape))
        tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT,
                                  dims=list(shape))
        length = 4 * count
        if not self.sparse:
            # A piece at a time: a 4096 x 14336 tensor is 235 MB.
            self.file.seek(self.offset)
            step = 1 << 24
            for start in range(0, count, step):
                make(min(step, count - start)).tofile(self.file)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location),
                           ("offset", str(self.offset)),
                           ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        # 64-byte aligned, as onnx's own external-data writer can be told.
        self.offset += (length + 63) // 64 * 64
        return tensor

    def close(self):
        self.file.truncate(self.offset)
        self.file.close()


def build(layers, hidden, heads, seq, vocab, batch=1, ffn=None, external=None,
          llama=False, kv_heads=None, window=0):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    head = hidden // heads
    ffn = ffn or 4 * hidden
    kv_heads = kv_heads or heads

    def weight(name, shape, scale=0.02):
        if external is not None:
            def make(count):
                return (rng.random(count, dtype=np.float32) - 0.5) * (2 * scale)
            if scale == 1.0:
                def make(count):
                    return np.ones(count, np.float32)
            inits.append(external.add(name, shape, make))
        else:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def node(op, inputs, outputs=None, **attrs):
        outputs = outputs or [f"{op.lower()}_{len(nodes)}"]
        nodes.append(helper.make_node(op, inputs, outputs,
                                      name=f"/{op}_{len(nodes)}", **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    const("split_shape", [batch, seq, heads, head], np.int64)
    const("merge_shape", [batch, seq, hidden], np.int64)
    const("scale", float(np.sqrt(head)))
    const("neg", float(np.finfo(np.float32).min))
    const("half", 0.5)
    const("one", 1.0)
    const("three", 3.0)
    const("c1", 0.044715)
    const("c2", float(np.sqrt(2 / np.pi)))
    keep = np.tril(np.ones((seq, seq), bool))
    if window:
        keep &= ~np.tril(np.ones((seq, seq), bool), -window)
    const("causal", keep[None, None], bool)
    x = node("Gather", [weight("wte", [vocab, hidden]), "input_ids"])
    if llama:
        const("kv_shape", [batch, seq, kv_heads, head], np.int64)
        const("repeat_shape", [batch, kv_heads, heads // kv_heads, seq, head], np.int64)
        const("heads_shape", [batch, heads, seq, head], np.int64)
        const("axis2", [2], np.int64)

        def heads_of(t, count):
            shape = "split_shape" if count == heads else "kv_shape"
            return node("Transpose", [node("Reshape", [t, shape])], perm=[0, 2, 1, 3])

        def repeat(t):  # Hugging Face's repeat_kv
            if kv_heads == heads:
                return t
            wide = node("Expand", [node("Unsqueeze", [t, "axis2"]), "repeat_shape"])
            return node("Reshape", [wide, "heads_shape"])

        for i in range(layers):
            p = f"h{i}."
            ln = node("LayerNormalization",
                      [x, weight(p + "ln1.g", [hidden], 1.0), weight(p + "ln1.b", [hidden])],
                      axis=-1, epsilon=1e-5)
            qh = heads_of(node("MatMul", [ln, weight(p + "q.w", [hidden, hidden])]), heads)
            kh = repeat(heads_of(node("MatMul", [ln, weight(p + "k.w", [hidden, kv_heads * head])]),
                                 kv_heads))
            vh = repeat(heads_of(node("MatMul", [ln, weight(p + "v.w", [hidden, kv_heads * head])]),
                                 kv_heads))
            kt = node("Transpose", [kh], perm=[0, 1, 3, 2])
            scores = node("Div", [node("MatMul", [qh, kt]), "scale"])
            probs = node("Softmax", [node("Where", ["causal", scores, "neg"])], axis=-1)
            ctx = node("Transpose", [node("MatMul", [probs, vh])], perm=[0, 2, 1, 3])
            merged = node("Reshape", [ctx, "merge_shape"])
            x = node("Add", [x, node("MatMul", [merged, weight(p + "o.w", [hidden, hidden])])])
            ln2 = node("LayerNormalization",
                       [x, weight(p + "ln2.g", [hidden], 1.0), weight(p + "ln2.b", [hidden])],
                       axis=-1, epsilon=1e-5)
            gate = node("MatMul", [ln2, weight(p + "gate.w", [hidden, ffn])])
            up = node("MatMul", [ln2, weight(p + "up.w", [hidden, ffn])])
            act = node("Mul", [node("Mul", [gate, node("Sigmoid", [gate])]), up])
            x = node("Add", [x, node("MatMul", [act, weight(p + "down.w", [ffn, hidden])])])
    else:
        for i in range(layers):
            p = f"h{i}."
            ln = node("LayerNormalization",
                      [x, weight(p + "ln1.g", [hidden], 1.0), weight(p + "ln1.b", [hidden])],
                      axis=-1, epsilon=1e-5)
            qkv = node("Add", [node("MatMul", [ln, weight(p + "qkv.w", [hidden, 3 * hidden])]),
                               weight(p + "qkv.b", [3 * hidden])])
            sizes = const(p + "sizes", [hidden] * 3, np.int64)
            q, k, v = node("Split", [qkv, sizes], [p + "q", p + "k", p + "v"], axis=2)
            qh = node("Transpose", [node("Reshape", [q, "split_shape"])], perm=[0, 2, 1, 3])
            kt = node("Transpose", [node("Reshape", [k, "split_shape"])], perm=[0, 2, 3, 1])
            vh = node("Transpose", [node("Reshape", [v, "split_shape"])], perm=[0, 2, 1, 3])
            scores = node("Div", [node("MatMul", [qh, kt]), "scale"])
            masked = node("Where", ["causal", scores, "neg"])
            probs = node("Softmax", [masked], axis=-1)
            ctx = node("Transpose", [node("MatMul", [probs, vh])], perm=[0, 2, 1, 3])
            merged = node("Reshape", [ctx, "merge_shape"])
            attn = node("Add", [node("MatMul", [merged, weight(p + "o.w", [hidden, hidden])]),
                                weight(p + "o.b", [hidden])])
            x = node("Add", [x, attn])
            ln2 = node("LayerNormalization",
                       [x, weight(p + "ln2.g", [hidden], 1.0), weight(p + "ln2.b", [hidden])],
                       axis=-1, epsilon=1e-5)
            up = node("Add", [node("MatMul", [ln2, weight(p + "up.w", [hidden, ffn])]),
                              weight(p + "up.b", [ffn])])
            cube = node("Mul", [node("Pow", [up, "three"]), "c1"])
            inner = node("Mul", [node("Add", [up, cube]), "c2"])
            gelu = node("Mul", [node("Mul", [up, "half"]),
                                node("Add", [node("Tanh", [inner]), "one"])])
            down = node("Add", [node("MatMul", [gelu, weight(p + "down.w", [ffn, hidden])]),
                                weight(p + "down.b", [hidden])])
            x = node("Add", [x, down])
    logits = node("MatMul", [x, weight("head", [hidden, vocab])], ["logits"])
    graph = helper.make_graph(
        nodes, "gpt", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [batch, seq, vocab])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("layers", type=int)
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--window", type=int, default=0,
                        help="a sliding window of this many keys (0: none)")
    parser.add_argument("--ffn", type=int, default=0,
                        help="the MLP's width (default 4 * hidden)")
    parser.add_argument("--llama", action="store_true",
                        help="Llama's layer: GQA attention, SwiGLU MLP, no biases")
    parser.add_argument("--kv-heads", type=int, default=0,
                        help="with --llama: key/value heads (default: --heads)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--external", action="store_true",
                       help="weights in OUT.data, written a tensor at a time")
    where.add_argument("--sparse", action="store_true",
                       help="weights in OUT.data, a sparse file never written")
    args = parser.parse_args()
    if args.kv_heads and not args.llama:
        parser.error("--kv-heads needs --llama")
    if args.heads % (args.kv_heads or args.heads) or args.hidden % args.heads:
        parser.error("--heads must divide --hidden, and --kv-heads --heads")
    external = None
    if args.external or args.sparse:
        external = ExternalData(args.out + ".data", args.sparse)
    model = build(args.layers, args.hidden, args.heads, args.seq, args.vocab,
                  args.batch, args.ffn, external, args.llama, args.kv_heads,
                  args.window)
    if external is not None:
        external.close()
        weights = sum(4 * int(np.prod(t.dims)) for t in model.graph.initializer
                      if t.data_location == TensorProto.EXTERNAL)
        weights += sum(t.ByteSize() for t in model.graph.initializer
                       if t.data_location != TensorProto.EXTERNAL)
    else:
        weights = sum(t.ByteSize() for t in model.graph.initializer)
    with open(args.out, "wb") as f:
        f.write(model.SerializeToString())
    print(f"{args.out}: {len(model.graph.node)} nodes, {weights} weight bytes")


if __name__ == "__main__":
    main()
