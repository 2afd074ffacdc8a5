"""Communication hidden behind compute, two ways.

1. Planned (the report's timeline, under the default cluster model: an
   H100-class device, NVLink within a node): the GPT-2 shape scaled to
   hidden 4096 (32 heads), sequence 4096, one layer, on tp=8 with
   Megatron-SP, compiled three ways: synchronous collectives
   (--no-overlap), async start/wait with the latency-hiding schedule but no
   collective matmul, and with collective matmul. It prints rank 0's
   compute, communication and exposed (not hidden) communication time and
   the exposed fraction of the step, in fp32 and with --dtype bf16.

2. Measured on this machine's host backend: a smaller model (hidden 512,
   sequence 512) on tp=2 (two host ranks as threads), run with
   partita-run --repeat, synchronous against overlapped; the wall-time
   ratio is what overlap buys on the host (the communicator copies through
   memory, so expect little).

Usage: overlap_bench.py [--build-dir build] [--repeat 20] [--skip-large]
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"


def generate(path, layers, hidden, heads, seq, vocab, batch=1):
    subprocess.run([sys.executable, str(GEN), str(layers), str(path),
                    "--hidden", str(hidden), "--heads", str(heads),
                    "--seq", str(seq), "--vocab", str(vocab),
                    "--batch", str(batch)],
                   check=True, capture_output=True)


def report(compiler, model, work, *flags):
    out = work / "report.json"
    subprocess.run([str(compiler), str(model), "--emit", "exec", "-o",
                    "/dev/null", "--report", str(out), *flags],
                   check=True, capture_output=True)
    return json.loads(out.read_text())


def planned(build, work):
    model = work / "gpt_h4096_s4096.onnx"
    generate(model, 1, 4096, 32, 4096, 512)
    compiler = build / "bin" / "partita-compile"
    rows = []
    for dtype in ["fp32", "bf16"]:
        for label, flags in [
                ("synchronous (--no-overlap)", ["--no-overlap"]),
                ("async + schedule", ["--collective-matmul", "never"]),
                ("async + schedule + collective matmul",
                 ["--collective-matmul", "always"])]:
            r = report(compiler, model, work, "--mesh", "tp=8", "--sp-mode",
                       "megatron", "--dtype", dtype, *flags)
            t = r["ranks"][0]["time"]
            rows.append((f"{dtype}: {label}", t))
    print("| program (tp=8, Megatron-SP, h=4096, s=4096, 1 layer) | compute (ms) "
          "| communication (ms) | exposed (ms) | step (ms) | exposed / step |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, t in rows:
        print(f"| {label} | {t['compute_seconds'] * 1e3:.3f} | "
              f"{t['communication_seconds'] * 1e3:.3f} | "
              f"{t['exposed_communication_seconds'] * 1e3:.3f} | "
              f"{t['step_seconds'] * 1e3:.3f} | {t['exposed_fraction']:.3f} |")


def measured(build, work, repeat):
    model = work / "gpt_h512_s512.onnx"
    generate(model, 2, 512, 8, 512, 512)
    ids = work / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(0, 512, (1, 512),
                                                    dtype=np.int64))
    compiler = build / "bin" / "partita-compile"
    runner = build / "bin" / "partita-run"
    rows = []
    for label, flags in [("synchronous", ["--no-overlap"]),
                         ("overlapped", ["--collective-matmul", "always"])]:
        art = work / label
        subprocess.run([str(compiler), str(model), "--mesh", "tp=2",
                        "--sp-mode", "megatron", "-o", str(art), *flags],
                       check=True, capture_output=True)
        run = subprocess.run([str(runner), str(art), "--input",
                              f"input_ids={ids}", "--repeat", str(repeat),
                              "--warmup", "3"],
                             check=True, capture_output=True, text=True)
        m = re.search(r"latency: mean ([0-9.]+) ms, min ([0-9.]+) ms",
                      run.stdout)
        rows.append((label, float(m.group(1)), float(m.group(2))))
    print()
    print("| host, tp=2 (2 ranks), h=512, s=512, 2 layers | mean (ms) | "
          "min (ms) |")
    print("|---|---:|---:|")
    for label, mean, best in rows:
        print(f"| {label} | {mean:.2f} | {best:.2f} |")
    print(f"\noverlapped / synchronous (min): {rows[1][2] / rows[0][2]:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--skip-large", action="store_true",
                        help="only the host measurement")
    args = parser.parse_args()
    build = pathlib.Path(args.build_dir)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        if not args.skip_large:
            planned(build, work)
        measured(build, work, args.repeat)


if __name__ == "__main__":
    main()
