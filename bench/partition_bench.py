"""Compile time of the sharding passes on generated GPT graphs
(bench/gen_gpt.py) of 12 to 96 layers, on meshes of 2 to 1,024 ranks.

For each model and mesh it runs `partita-compile --emit local` and reads the
"Sharding plan" (annotate, propagate) and "Partition" (partition, cancel
collectives, CSE, canonicalize) scopes of --mlir-timing (0.1 ms steps),
keeping the best of --repeat runs for each scope and pass; the runs go round
the meshes. Time is given per 1,000 nn ops (the raised graph without
nn.constant, counted once per model from --emit nn) and as a ratio to the
smallest mesh: SPMD partitioning writes one program whatever the mesh size,
so the time should not grow with the number of ranks. A second table splits
the time of the smallest and the largest mesh by pass. The models have small
tensors (hidden 64), since what matters is the number of ops; printing the IR
is not timed.
Usage: partition_bench.py [--layers 12,24,48,96]
           [--meshes "tp=2;dp=2,tp=4;dp=8,tp=8;dp=64,tp=4;dp=128,tp=8"]
           [--repeat 20] [--build-dir build] [--quick]
"""

import argparse
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEN = ROOT / "bench" / "gen_gpt.py"
SCOPES = ("Sharding plan", "Partition")
# The passes under each scope, in pipeline order, as the breakdown shows them.
PASSES = (("Sharding plan", "AnnotatePass", "annotate"),
          ("Sharding plan", "Canonicalizer", "canonicalize"),
          ("Sharding plan", "PropagateShardingPass", "propagate"),
          ("Partition", "PartitionPass", "partition"),
          ("Partition", "CancelCollectivesPass", "cancel"),
          ("Partition", "CSE", "CSE"),
          ("Partition", "Canonicalizer", "canonicalize"))
TIMING = re.compile(r"^\s+([0-9.]+) \(\s*[0-9.]+%\)  ( *)(\S.*)$", re.M)


def parse_mesh(text):
    """'dp=2,tp=4' -> {'dp': 2, 'tp': 4}."""
    return {axis: int(size) for axis, size in
            (item.split("=") for item in text.split(","))}


def generate(layers, args, path):
    subprocess.run([sys.executable, str(GEN), str(layers), path,
                    "--hidden", str(args.hidden), "--heads", str(args.heads),
                    "--seq", str(args.seq), "--vocab", str(args.vocab),
                    "--batch", str(args.batch)],
                   check=True, capture_output=True)


def compile_(compiler, model, extra):
    cmd = [compiler, model, "--mlir-print-local-scope", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return proc


def count_nn_ops(compiler, model):
    out = compile_(compiler, model, ["--emit", "nn"]).stdout
    return sum(1 for line in out.splitlines()
               if " = nn." in line and " = nn.constant " not in line)


def timing(compiler, model, mesh):
    """Returns {path: seconds}, path being the scope names from the root,
    e.g. ('Partition', 'CSE'). Passes that run in a nested func.func pipeline
    are folded into their top-level scope."""
    stderr = compile_(compiler, model, ["--mesh", mesh, "--emit", "local",
                                        "-o", os.devnull, "--mlir-timing"]).stderr
    times, stack = {}, []
    for seconds, indent, name in TIMING.findall(stderr):
        depth = len(indent) // 2
        stack[depth:] = [name]
        if name.startswith(("'", "(A)")):
            continue
        path = tuple(n for n in stack if not n.startswith(("'", "(A)")))
        times[path] = times.get(path, 0.0) + float(seconds)
    missing = [s for s in SCOPES if (s,) not in times]
    if missing:
        sys.exit(f"no {missing} in the --mlir-timing report of {model} --mesh {mesh}:\n"
                 f"{stderr}")
    return times


def ranks(mesh):
    return math.prod(parse_mesh(mesh).values())


def best(runs):
    """The minimum of each scope over the runs, taken separately: the noise
    of a shared machine hits the scopes of one run independently."""
    return {path: min(times.get(path, 0.0) for times in runs) for path in runs[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", default="12,24,48,96")
    parser.add_argument("--meshes", default="tp=2;dp=2,tp=4;dp=8,tp=8;dp=64,tp=4;dp=128,tp=8",
                        help="';'-separated --mesh values")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--quick", action="store_true",
                        help="the first model, the smallest and the largest mesh, one run "
                        "each: checks that the script runs")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()

    layers = [int(n) for n in args.layers.split(",")]
    meshes = sorted(args.meshes.split(";"), key=ranks)
    if args.quick:
        layers, meshes, args.repeat = layers[:1], [meshes[0], meshes[-1]], 1
    for mesh in meshes:
        sizes = parse_mesh(mesh)
        tp, dp = sizes.get("tp", 1), sizes.get("dp", 1)
        if args.heads % tp or args.vocab % tp or args.batch % dp:
            sys.exit(f"--mesh {mesh}: tp must divide heads ({args.heads}) and vocab "
                     f"({args.vocab}), dp the batch ({args.batch})")
    compiler = str(pathlib.Path(args.build_dir) / "bin" / "partita-compile")

    print("| layers | nn ops | mesh | ranks | plan (ms) | partition (ms) "
          "| ms / 1000 ops | vs smallest mesh |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    breakdowns = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in layers:
            path = os.path.join(tmp, f"gpt{n}.onnx")
            generate(n, args, path)
            ops = count_nn_ops(compiler, path)
            # Rounds over all meshes rather than repeats of one mesh, so that a
            # slow spell of a shared machine does not land on a single mesh.
            runs = {mesh: [] for mesh in meshes}
            for _ in range(args.repeat):
                for mesh in meshes:
                    runs[mesh].append(timing(compiler, path, mesh))
            first = None
            for mesh in meshes:
                times = best(runs[mesh])
                plan, part = times[("Sharding plan",)], times[("Partition",)]
                first = first or plan + part
                print(f"| {n} | {ops} | {mesh} | {ranks(mesh)} | {plan * 1000:.1f} "
                      f"| {part * 1000:.1f} | {(plan + part) * 1e6 / ops:.1f} "
                      f"| {(plan + part) / first:.2f} |", flush=True)
            for mesh in dict.fromkeys([meshes[0], meshes[-1]]):
                breakdowns.append((n, mesh, best(runs[mesh])))
            os.remove(path)

    print()
    print("| layers | mesh | " + " | ".join(f"{label} (ms)" for *_, label in PASSES) + " |")
    print("|---:|---|" + "---:|" * len(PASSES))
    for n, mesh, times in breakdowns:
        cells = [f"{times.get((scope, name), 0.0) * 1000:.1f}" for scope, name, _ in PASSES]
        print(f"| {n} | {mesh} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
