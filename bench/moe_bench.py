"""A mixture-of-experts layer of Mixtral's shape ratio (hidden 1024, 8
experts, top 2, FFN 3584, SwiGLU; 2048 tokens) as onnxruntime's fused
com.microsoft.MoE, on one host rank against onnxruntime's CPU kernel with
the same number of threads. Also the flops each computes: the routed
work is k/E of the dense work (every expert on every token).
Prints a Markdown table.
Usage: moe_bench.py [--threads 2] [--repeat 3] [--tokens 2048]
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

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "test" / "python"))
from test_moe_import import moe_model  # noqa: E402

from e2e_bench import onnxruntime  # noqa: E402


def partita(path, feeds, work, threads, repeat, *flags):
    """Partita's mean latency in ms, its output `y`, its report and what
    partita-run printed, compiled with `flags`."""
    art, report = work / "art", work / "report.json"
    subprocess.run([str(BIN / "partita-compile"), str(path), "-o", str(art),
                    "--report", str(report), *flags], check=True)
    args = [str(BIN / "partita-run"), str(art), "--output-dir",
            str(work / "out"), "--threads", str(threads), "--repeat",
            str(repeat), "--warmup", "1"]
    for name, value in feeds.items():
        np.save(work / f"{name}.npy", value)
        args += ["--input", f"{name}={work / f'{name}.npy'}"]
    out = subprocess.run(args, check=True, capture_output=True,
                         text=True).stdout
    mean = float(re.search(r"latency: mean ([0-9.]+) ms", out).group(1))
    return (mean, np.load(work / "out" / "y.npy"),
            json.loads(report.read_text()), out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    hidden, inter, experts, k = 1024, 3584, 8, 2
    model, feeds, _ = moe_model(
        tokens=args.tokens, hidden=hidden, inter=inter, experts=experts, k=k,
        activation="swiglu", fusion=1, normalize=1,
        attrs=dict(activation_alpha=1.702, activation_beta=1.0))
    # Three products of [tokens, hidden] x [hidden, inter] per expert.
    routed = 2.0 * args.tokens * k * 3 * hidden * inter
    dense = routed * experts / k
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        path = tmp / "moe.onnx"
        onnx.save(model, str(path), save_as_external_data=True,
                  location="moe.data")
        ort_ms, want = onnxruntime(path, feeds, args.threads, args.repeat)
        work = tmp / "work"
        work.mkdir()
        ms, got, report, _ = partita(path, feeds, work, args.threads,
                                     args.repeat)
        flops = report["model"]["flops"]
    error = np.abs(got - want).max() / np.abs(want).max()
    print("| tokens | Partita (ms) | onnxruntime (ms) | Partita / "
          "onnxruntime | routed GFLOP | Partita's GFLOP (report) | "
          "max rel. error |")
    print("|---|---|---|---|---|---|---|")
    reported = f"{flops / 1e9:.1f}"
    print(f"| {args.tokens} | {ms:.1f} | {ort_ms:.1f} | {ms / ort_ms:.2f} | "
          f"{routed / 1e9:.1f} | {reported} | {error:.1e} |")
    print(f"\nthe dense form computes {dense / routed:.0f}x the routed "
          f"flops ({dense / 1e9:.1f} GFLOP)")


if __name__ == "__main__":
    main()
