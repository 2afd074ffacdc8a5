"""Import + raise speed and peak memory of partita-compile on generated
GPT graphs (bench/gen_gpt.py) of 12 to 96 layers.

For each size it reports the wall time of "ONNX import" and "Pipeline"
(raising) from --mlir-timing, their sum per 1,000 ONNX nodes, and the peak
resident memory of the compiler (ru_maxrss, file-backed pages included)
above what it needs for an empty model (the shared LLVM/MLIR libraries),
against the model's weight bytes. Printing is left out: the IR goes to
/dev/null with --mlir-print-local-scope, which prints no resource blobs.
Models are generated in a separate process so the measured compiler does
not inherit this script's memory.
Usage: import_bench.py [--compiler PATH] [--layers 12,24,48,96] [--repeat 3]
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"


def generate(layers, hidden, path):
    """Writes the model; returns (nodes, weight bytes) as gen_gpt.py prints
    them."""
    out = subprocess.run([sys.executable, str(GEN), str(layers), path,
                          "--hidden", str(hidden)],
                         check=True, capture_output=True, text=True).stdout
    nodes, weights = re.search(r"(\d+) nodes, (\d+) weight bytes", out).groups()
    return int(nodes), int(weights)


def run(compiler, model):
    """Returns (import seconds, pipeline seconds, peak RSS bytes)."""
    cmd = [compiler, model, "--emit", "nn", "-o", os.devnull, "--mlir-timing",
           "--mlir-print-local-scope"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{stderr}")
    times = dict(re.findall(r"^\s+([0-9.]+) \(\s*[0-9.]+%\)\s+(ONNX import|Pipeline)$",
                            stderr, re.M)[i][::-1] for i in range(2))
    return float(times["ONNX import"]), float(times["Pipeline"]), usage.ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compiler", default=str(ROOT / "build/bin/partita-compile"))
    parser.add_argument("--layers", default="12,24,48,96")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty.onnx")
        generate(0, 8, empty)
        baseline = min(run(args.compiler, empty)[2] for _ in range(args.repeat))
        print(f"baseline RSS (libraries, empty model): {baseline / 2**20:.1f} MiB")
        print("| layers | ONNX nodes | weights (MiB) | import (ms) | raise (ms) "
              "| ms / 1000 nodes | peak RSS above baseline (MiB) "
              "| ratio to weights | budget 1.2x + 1 KB/node (MiB) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        first = None
        for layers in [int(n) for n in args.layers.split(",")]:
            path = os.path.join(tmp, f"gpt{layers}.onnx")
            nodes, weights = generate(layers, args.hidden, path)
            runs = [run(args.compiler, path) for _ in range(args.repeat)]
            imp = min(r[0] for r in runs)
            raise_ = min(r[1] for r in runs)
            rss = min(r[2] for r in runs) - baseline
            per1000 = (imp + raise_) * 1000 / nodes * 1000
            budget = 1.2 * weights + 1024 * nodes
            print(f"| {layers} | {nodes} | {weights / 2**20:.1f} | {imp * 1000:.1f} "
                  f"| {raise_ * 1000:.1f} | {per1000:.1f} | {rss / 2**20:.1f} "
                  f"| {rss / weights:.2f} | {budget / 2**20:.1f} |")
            if first is None:
                first = (nodes, imp + raise_)
            else:
                scale = nodes / first[0]
                grow = (imp + raise_) / first[1]
                print(f"|  | {scale:.1f}x nodes | | | | {grow:.2f}x time | | | |")
            os.remove(path)


if __name__ == "__main__":
    main()
