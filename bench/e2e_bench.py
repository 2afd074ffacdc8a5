"""One-rank forward latency of a GPT-2-small shaped model (12 layers, hidden
768, 12 heads, vocabulary 50257, sequence 128) on the host backend against
onnxruntime's CPU provider with the same number of threads, batch 1 and 8.

The model comes from bench/gen_gpt.py (random weights, spelled as torch.onnx
exports GPT-2). Both runtimes get the same input; the script checks their
outputs agree before timing. Prints a Markdown table.
Usage: e2e_bench.py [--threads 2] [--repeat 10] [--batches 1,8]
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"


def generate(path, batch, layers, seq):
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_gpt.py"), str(layers),
                    str(path), "--hidden", "768", "--heads", "12", "--seq", str(seq),
                    "--vocab", "50257", "--batch", str(batch)],
                   check=True, capture_output=True)


def partita(model, ids, work, threads, repeat):
    art = work / "art"
    subprocess.run([str(BIN / "partita-compile"), str(model), "-o", str(art)], check=True)
    np.save(work / "ids.npy", ids)
    out = subprocess.run(
        [str(BIN / "partita-run"), str(art), "--input", f"input_ids={work / 'ids.npy'}",
         "--output-dir", str(work / "out"), "--threads", str(threads),
         "--repeat", str(repeat), "--warmup", "2"],
        check=True, capture_output=True, text=True).stdout
    mean = float(re.search(r"latency: mean ([0-9.]+) ms", out).group(1))
    return mean, np.load(work / "out" / "logits.npy")


def onnxruntime(model, feeds, threads, repeat):
    """onnxruntime's mean time of one run of `model` on `feeds` in ms
    (two warm-up runs first), and its first output."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    for _ in range(2):
        result = session.run(None, feeds)[0]
    start = time.perf_counter()
    for _ in range(repeat):
        session.run(None, feeds)
    return (time.perf_counter() - start) / repeat * 1000, result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    print(f"| batch | tokens | Partita (ms) | onnxruntime (ms) | Partita tokens/s "
          f"| onnxruntime tokens/s | throughput ratio | max abs diff |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for batch in [int(b) for b in args.batches.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            work = pathlib.Path(tmp)
            model = work / "gpt2s.onnx"
            generate(model, batch, args.layers, args.seq)
            ids = np.random.default_rng(0).integers(0, 50257, (batch, args.seq),
                                                    dtype=np.int64)
            ours, got = partita(model, ids, work, args.threads, args.repeat)
            theirs, want = onnxruntime(model, {"input_ids": ids}, args.threads,
                                           args.repeat)
            tokens = batch * args.seq
            diff = float(np.abs(got - want).max())
            print(f"| {batch} | {tokens} | {ours:.1f} | {theirs:.1f} | "
                  f"{tokens / ours * 1000:.0f} | {tokens / theirs * 1000:.0f} | "
                  f"{theirs / ours:.2f} | {diff:.2g} |")


if __name__ == "__main__":
    main()
