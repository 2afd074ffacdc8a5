"""Replays what `partita-compile MODEL FLAGS --dump-pipeline` prints: each
stage's pipeline, run by partita-opt with --pass-pipeline on the previous
stage's output (printed with locations, which passes read), must print
exactly what `partita-compile MODEL FLAGS --emit STAGE` prints. Prints
`STAGE: same` per stage, or where the two differ.

usage: replay.py MODEL WORKDIR [partita-compile flags, no --emit]"""

import pathlib
import subprocess
import sys


def run(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


model, work, flags = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]
lines = run("partita-compile", model, *flags, "--dump-pipeline").splitlines()
for comment, pipeline in zip(lines[::2], lines[1::2]):
    # `// --emit local, on --emit dist's output`
    stage = comment.split()[2].rstrip(",")
    previous = comment.split()[5][:-len("'s")]
    before = work / f"{previous}.mlir"
    run("partita-compile", model, *flags, "--emit", previous,
        "--mlir-print-debuginfo", "-o", str(before))
    expected = run("partita-compile", model, *flags, "--emit", stage)
    replayed = run("partita-opt", str(before), f"--pass-pipeline={pipeline}")
    if replayed == expected:
        print(f"{stage}: same")
        continue
    for number, (a, b) in enumerate(
            zip(expected.splitlines(), replayed.splitlines()), 1):
        if a != b:
            print(f"{stage}: line {number} differs:\n  {a}\n  {b}")
            break
    else:
        print(f"{stage}: {len(expected)} and {len(replayed)} characters")
