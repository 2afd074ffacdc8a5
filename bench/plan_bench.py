"""Planning time and memory at real sizes (issue 18: under 2 s and 1 GB).

Writes Llama-3-shaped models whose weights are sparse files (bench/gen_gpt.py
--llama --sparse: the bytes are never written, planning reads shapes only)
and times `partita-compile MODEL --mesh auto --emit plan` on each: import,
the nn stage and the search, nothing compiled. Prints, per case, the wall
time (best of --repeat), ru_maxrss of the process, the candidates searched
and the chosen plan.

Usage: plan_bench.py [--build-dir build] [--repeat 3] [--work DIR]
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"

# name, layers, hidden, heads, kv heads, ffn, sequence, batch
SHAPES = {
    "llama3-8b": (32, 4096, 32, 8, 14336, 2048, 8),
    "llama3-70b": (80, 8192, 64, 8, 28672, 4096, 1),
    "llama3-405b": (126, 16384, 128, 8, 53248, 4096, 1),
}

# shape, devices, cluster, dtype, objective
CASES = [
    ("llama3-8b", 8, "h100-80g", "bf16", "throughput"),
    ("llama3-70b", 8, "h100-80g:1x8", "bf16", "latency"),
    ("llama3-70b", 2, "h100-80g", "fp32", "latency"),
    ("llama3-405b", 16, "h100-80g:2x8", "bf16", "latency"),
]


def generate(work, name):
    path = work / f"{name}.onnx"
    if not path.exists():
        layers, hidden, heads, kv, ffn, seq, batch = SHAPES[name]
        subprocess.run([sys.executable, str(GEN), str(layers), str(path),
                        "--llama", "--hidden", str(hidden), "--heads",
                        str(heads), "--kv-heads", str(kv), "--ffn", str(ffn),
                        "--vocab", "128256", "--seq", str(seq), "--batch",
                        str(batch), "--sparse"], check=True,
                       capture_output=True)
    return path


def plan_once(compiler, model, devices, cluster, dtype, objective):
    """(wall seconds, ru_maxrss bytes, the printed plan) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [str(compiler), str(model), "--mesh", "auto", "--devices",
         str(devices), "--cluster", cluster, "--dtype", dtype, "--objective",
         objective, "--emit", "plan"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    # wait4, not communicate: the child's own rusage, not the sum of all.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{model.name}: partita-compile failed")
    return wall, usage.ru_maxrss * 1024, out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work")
    args = parser.parse_args()
    compiler = pathlib.Path(args.build_dir) / "bin" / "partita-compile"
    with tempfile.TemporaryDirectory() as scratch:
        work = pathlib.Path(args.work or scratch)
        work.mkdir(parents=True, exist_ok=True)
        print("| model | devices | cluster | dtype | objective | weights "
              "| plan wall (s) | ru_maxrss (MiB) | chosen |")
        print("|---|---:|---|---|---|---:|---:|---:|---|")
        for name, devices, cluster, dtype, objective in CASES:
            model = generate(work, name)
            weights = (model.parent / (model.name + ".data")).stat().st_size
            best, peak, table = None, 0, ""
            for _ in range(args.repeat):
                wall, rss, table = plan_once(compiler, model, devices,
                                             cluster, dtype, objective)
                best = wall if best is None else min(best, wall)
                peak = max(peak, rss)
            lines = table.splitlines()
            chosen = lines[2].split()[0] if len(lines) > 2 and not lines[
                2].startswith("(") else "none fits"
            if chosen != "none fits":
                fields = re.split(r"\s+", lines[2].strip())
                chosen = (f"{fields[0]} {fields[1]} mb={fields[2]} "
                          f"vs={fields[3]} cmm={fields[4]}")
            print(f"| {name} | {devices} | {cluster} | {dtype} | {objective} "
                  f"| {weights / 1e9:.0f} GB (fp32, sparse) | {best:.2f} "
                  f"| {peak / 2**20:.0f} | {chosen} |")


if __name__ == "__main__":
    main()
