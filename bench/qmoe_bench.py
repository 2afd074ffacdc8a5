"""The mixture-of-experts layer of moe_bench.py (Mixtral's shape ratio:
hidden 1024, 8 experts, top 2, FFN 3584, SwiGLU interleaved; 2048 tokens)
with int4 experts (com.microsoft.QMoE, blocks of 32, symmetric), on one
host rank against onnxruntime's CPU QMoE kernel with the same number of
threads, and against Partita's float layer of the same (dequantized)
weights. Partita dequantizes each layer's stacked experts whole before
its grouped products (docs/frontend.md): this measures what that costs.
Prints a Markdown table.
Usage: qmoe_bench.py [--threads 2] [--repeat 3] [--tokens 2048]
"""

import argparse
import pathlib
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "test" / "python"))
from test_qmoe_import import qmoe_model  # noqa: E402

from e2e_bench import onnxruntime  # noqa: E402
from moe_bench import partita  # noqa: E402


def float_model(model, floats):
    """The same layer as com.microsoft.MoE over the dequantized weights."""
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name in ("k", "activation_type", "swiglu_fusion",
                           "normalize_routing_weights", "activation_alpha",
                           "activation_beta")}
    moe = helper.make_node("MoE", ["x", "r", "fc1", "", "fc2"], ["y"],
                           domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [moe], "moe", list(model.graph.input), list(model.graph.output),
        [numpy_helper.from_array(floats[n].astype(np.float32), n)
         for n in ("fc1", "fc2")])
    return helper.make_model(graph, opset_imports=list(model.opset_import))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    model, feeds, floats = qmoe_model(
        tokens=args.tokens, hidden=1024, inter=3584, experts=8, k=2,
        activation="swiglu", fusion=1, bits=4, block=32, normalize=1,
        attrs=dict(activation_alpha=1.702, activation_beta=1.0))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for name, m in (("QMoE int4", model),
                        ("MoE fp32", float_model(model, floats))):
            path = tmp / f"{name.split()[0]}.onnx"
            onnx.save(m, str(path), save_as_external_data=True,
                      location=path.stem + ".data")
            ort_ms, want = onnxruntime(path, feeds, args.threads,
                                       args.repeat)
            work = tmp / f"work_{path.stem}"
            work.mkdir()
            ms, got, report, _ = partita(path, feeds, work, args.threads,
                                         args.repeat)
            error = np.abs(got - want).max() / np.abs(want).max()
            weight_mb = max(r["weight_bytes"] for r in report["ranks"]) / 1e6
            rows.append((name, ms, ort_ms, weight_mb, error))
    print("| layer | Partita (ms) | onnxruntime (ms) | Partita / onnxruntime "
          "| weight MB per rank | max rel. error vs onnxruntime |")
    print("|---|---|---|---|---|---|")
    for name, ms, ort_ms, weight_mb, error in rows:
        print(f"| {name} | {ms:.1f} | {ort_ms:.1f} | {ms / ort_ms:.2f} | "
              f"{weight_mb:.1f} | {error:.1e} |")


if __name__ == "__main__":
    main()
