"""int4 weights (onnxruntime's MatMulNBits) on the host backend: a stack of
projections of the size of a 7B model's (4096 x 4096, 4 bits in blocks of
32, the builder's default layout), as one-row (a decode step) and 128-row
(a prompt) products, against the same stack with float32 weights and
against onnxruntime's MatMulNBits at accuracy levels 0 and 4, with the
same number of threads. Also the artifact's weight bytes per weight.
Prints a Markdown table.
Usage: int4_bench.py [--threads 2] [--repeat 10] [--layers 4] [--size 4096]
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "test" / "python"))
from test_matmul_nbits import pack  # noqa: E402

from e2e_bench import onnxruntime  # noqa: E402


def models(layers, size, rows, rng):
    """The int4 stack at accuracy levels 0 and 4, and its float twin (the
    dequantized weights as MatMul initializers)."""
    quantized = [pack(size, size, 4, 32, False, rng) for _ in range(layers)]
    out = {}
    for level in (0, 4):
        nodes, inits, previous = [], [], "x"
        for i, (q, s, _) in enumerate(quantized):
            inits += [numpy_helper.from_array(q, f"q{i}"),
                      numpy_helper.from_array(s, f"s{i}")]
            nodes.append(helper.make_node(
                "MatMulNBits", [previous, f"q{i}", f"s{i}"], [f"h{i}"],
                domain="com.microsoft", K=size, N=size, bits=4, block_size=32,
                accuracy_level=level))
            previous = f"h{i}"
        out[level] = (nodes, inits, previous)
    nodes, inits, previous = [], [], "x"
    for i, (q, s, _) in enumerate(quantized):
        low, high = q & 15, q >> 4
        values = np.stack([low, high], -1).reshape(size, -1, 32)
        w = ((values.astype(np.float32) - 8) * s[..., None]).reshape(size,
                                                                     size)
        inits.append(numpy_helper.from_array(w.T.copy(), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [previous, f"w{i}"],
                                      [f"h{i}"]))
        previous = f"h{i}"
    out["fp32"] = (nodes, inits, previous)
    built = {}
    for key, (nodes, inits, last) in out.items():
        graph = helper.make_graph(
            nodes, "stack",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                           [rows, size])],
            [helper.make_tensor_value_info(last, TensorProto.FLOAT,
                                           [rows, size])], inits)
        m = helper.make_model(graph, opset_imports=[
            helper.make_opsetid("", 21),
            helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 10
        built[key] = (m, last)
    return built


def partita(path, x, work, threads, repeat):
    art = work / "art"
    report = work / "report.json"
    subprocess.run([str(BIN / "partita-compile"), str(path), "-o", str(art),
                    "--report", str(report)], check=True)
    np.save(work / "x.npy", x)
    out = subprocess.run(
        [str(BIN / "partita-run"), str(art), "--input", f"x={work / 'x.npy'}",
         "--output-dir", str(work / "out"), "--threads", str(threads),
         "--repeat", str(repeat), "--warmup", "2"],
        check=True, capture_output=True, text=True).stdout
    mean = float(re.search(r"latency: mean ([0-9.]+) ms", out).group(1))
    result = next((work / "out").glob("*.npy"))
    weight_bytes = json.loads(report.read_text())["ranks"][0]["weight_bytes"]
    return mean, np.load(result), weight_bytes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    weights = args.layers * args.size * args.size
    print("| rows | Partita int4 (ms) | Partita fp32 (ms) | onnxruntime "
          "level 0 (ms) | onnxruntime level 4 (ms) | int4 / fp32 | max rel. "
          "error vs level 0 |")
    print("|---|---|---|---|---|---|---|")
    for rows in (1, 128):
        rng = np.random.default_rng(0)
        built = models(args.layers, args.size, rows, rng)
        # Unit-variance activations after every layer: scale x down.
        x = (rng.standard_normal((rows, args.size)) * 0.05).astype(
            np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            times, results = {}, {}
            for key, (m, _) in built.items():
                path = tmp / f"{key}.onnx"
                onnx.save(m, path, save_as_external_data=True,
                          location=f"{key}.data")
                times[f"ort{key}"], results[f"ort{key}"] = onnxruntime(
                    path, {"x": x}, args.threads, args.repeat)
                if key == 4:
                    continue
                work = tmp / f"work{key}"
                work.mkdir()
                times[key], results[key], wbytes = partita(
                    path, x, work, args.threads, args.repeat)
                if key == 0:
                    int4_bytes = wbytes
            reference = results["ort0"]
            error = (np.abs(results[0] - reference).max() /
                     np.abs(reference).max())
            print(f"| {rows} | {times[0]:.2f} | {times['fp32']:.2f} | "
                  f"{times['ort0']:.2f} | {times['ort4']:.2f} | "
                  f"{times[0] / times['fp32']:.2f} | {error:.1e} |")
    print(f"\nweight bytes per weight in the artifact: "
          f"{int4_bytes / weights:.4f} (int4, f32 scales per 32) vs 4 (fp32);"
          f" {int4_bytes * 8 / weights:.2f} bits")


if __name__ == "__main__":
    main()
