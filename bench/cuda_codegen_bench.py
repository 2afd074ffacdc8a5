"""Cost of --target cuda at compile time, on generated GPT graphs
(bench/gen_gpt.py) of growing depth: the time of code generation alone
(`--emit cuda`, no nvcc), of a whole compile with a cold fatbin cache
(code generation plus nvcc for sm_80 and sm_90a), and of the same compile
with the cache warm; with the number of generated functions and the size
of the source and the fatbin. Kernels are shared by text, so a model's
function count, and nvcc's time, should not grow with its depth.

Usage: cuda_codegen_bench.py [--layers 2,12,48] [--hidden 768]
           [--heads 12] [--seq 128] [--vocab 1024] [--repeat 3]
           [--build-dir build]
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"


def timed(args, env, repeat):
    """The median wall time of `repeat` runs of `args`, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="2,12,48")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    args = parser.parse_args()
    compiler = pathlib.Path(args.build_dir) / "bin" / "partita-compile"

    print(f"GPT, hidden {args.hidden}, {args.heads} heads, sequence "
          f"{args.seq}, vocabulary {args.vocab}, one rank, fp32; median of "
          f"{args.repeat}")
    print("| layers | functions | source (KB) | fatbin (KB) | --emit cuda (s) "
          "| compile, cold cache (s) | compile, warm cache (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for layers in [int(n) for n in args.layers.split(",")]:
            model = work / f"gpt_{layers}.onnx"
            subprocess.run([sys.executable, str(GEN), str(layers), str(model),
                            "--hidden", str(args.hidden), "--heads",
                            str(args.heads), "--seq", str(args.seq),
                            "--vocab", str(args.vocab)],
                           check=True, capture_output=True)
            env = dict(os.environ, PARTITA_CACHE_DIR=str(work / "cache"))
            source = subprocess.run(
                [str(compiler), str(model), "--emit", "cuda"], check=True,
                capture_output=True, text=True, env=env).stdout
            functions = len(re.findall(r'^extern "C" __global__', source,
                                       re.M))
            emit = timed([str(compiler), str(model), "--emit", "cuda", "-o",
                          str(work / "out.cu")], env, args.repeat)
            cold_env = dict(env, PARTITA_CACHE_DIR="-")
            art = work / f"art_{layers}"
            cold = timed([str(compiler), str(model), "--target", "cuda",
                          "-o", str(art)], cold_env, args.repeat)
            subprocess.run([str(compiler), str(model), "--target", "cuda",
                            "-o", str(art)], check=True, capture_output=True,
                           env=env)
            warm = timed([str(compiler), str(model), "--target", "cuda",
                          "-o", str(art)], env, args.repeat)
            fatbin = sum(p.stat().st_size
                         for p in (art / "cuda").glob("*.fatbin"))
            print(f"| {layers} | {functions} | {len(source) / 1024:.1f} | "
                  f"{fatbin / 1024:.0f} | {emit:.2f} | {cold:.2f} | "
                  f"{warm:.2f} |")


if __name__ == "__main__":
    main()
