"""Start-up of an artifact: opening it and creating every rank's executor.

Times `partita.load(ART)` plus the session it creates on first use (the
manifest and programs read and hashed, every weights file mapped and its
safetensors header and bounds checked, one executor per rank bound to the
mapped weights), in a fresh process each time, and reads that process's
RssAnon (its own memory) and RssFile (mapped pages it has touched) after.
With --verify it also times the same with `verify=True`, which hashes every
weight byte once.

The page cache is warmed first (every weights file read once), so the
figures are those of a warm start; the artifact's weight bytes are printed
beside them. Prints a Markdown table.
Usage: startup_bench.py ART [--repeat 3] [--verify] [--build-dir build]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import partita
start = time.perf_counter()
artifact = partita.load(sys.argv[1], verify=sys.argv[2] == "1")
artifact._get_session()
wall = time.perf_counter() - start
fields = {}
with open("/proc/self/status") as f:
    for line in f:
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
print(json.dumps({"wall": wall, **fields}))
"""


def start(art, verify, env):
    out = subprocess.run([sys.executable, "-c", CHILD, str(art), "1" if verify else "0"],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifact", type=pathlib.Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--verify", action="store_true",
                        help="also time a start that hashes every weight byte")
    parser.add_argument("--build-dir", default="build")
    args = parser.parse_args()

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / args.build_dir / "python"), env.get("PYTHONPATH", "")])
    weights = sorted((args.artifact / "weights").glob("*.safetensors"))
    total = sum(p.stat().st_size for p in weights)
    for path in weights:
        subprocess.run(["cat", str(path)], check=True, stdout=subprocess.DEVNULL)

    modes = [False, True] if args.verify else [False]
    print(f"artifact: {args.artifact.name}, {len(weights)} weights files, "
          f"{total / 1e9:.2f} GB\n")
    print("| verify | start-up (best of runs) | all runs | RssAnon after | RssFile after |")
    print("| --- | --- | --- | --- | --- |")
    for verify in modes:
        runs = [start(args.artifact, verify, env) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["wall"])
        walls = ", ".join(f"{r['wall']:.2f}" for r in runs)
        print(f"| {'yes' if verify else 'no'} | {best['wall']:.3f} s | {walls} s | "
              f"{best['RssAnon'] / 2**20:.0f} MiB | {best['RssFile'] / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()
