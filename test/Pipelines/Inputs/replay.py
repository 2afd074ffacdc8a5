"""Replays what `partita-compile MODEL FLAGS --dump-pipeline` prints: each
stage's pipeline, run by partita-opt with --pass-pipeline on the previous
stage's output (printed with locations, which passes read), must print
exactly what `partita-compile MODEL FLAGS --emit STAGE` prints; each rank's
exec pipeline, then partita-translate --exec-to-proto, prints that rank's
program of `--emit exec`. With --mesh auto, the plan stage (partita-plan-mesh)
has no --emit of its own: its replayed output is the input the dist stage
replays on, which must then print what `--emit dist` prints. Prints
`STAGE: same` per stage, or where the two differ.

usage: replay.py MODEL WORKDIR [partita-compile flags, no --emit]"""

import pathlib
import re
import subprocess
import sys


def run(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


def compare(stage, expected, replayed):
    if replayed == expected:
        print(f"{stage}: same")
        return
    for number, (a, b) in enumerate(
            zip(expected.splitlines(), replayed.splitlines()), 1):
        if a != b:
            print(f"{stage}: line {number} differs:\n  {a}\n  {b}")
            break
    else:
        print(f"{stage}: {len(expected)} and {len(replayed)} characters")


def rank_programs(text):
    """`--emit exec`'s programs by rank (one rank prints no `# rank` line)."""
    parts = re.split(r"^# rank (\d+)\n", text, flags=re.M)
    if len(parts) == 1:
        return {0: text}
    return {int(rank): program for rank, program in zip(parts[1::2], parts[2::2])}


model, work, flags = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]
lines = run("partita-compile", model, *flags, "--dump-pipeline").splitlines()
programs = None
for comment, pipeline in zip(lines[::2], lines[1::2]):
    # `// --emit local, on --emit dist's output`,
    # `// plan, on --emit nn's output`, `// --emit dist, on plan's output`, or
    # `// --emit exec of rank 1, on --emit local's output, then ...`
    match = re.match(
        r"// (?:--emit )?(\w+)(?: of rank (\d+))?, on (?:--emit )?(\w+)'s",
        comment)
    stage, rank, previous = match.group(1), match.group(2), match.group(3)
    before = work / f"{previous}.mlir"
    if previous != "plan":
        run("partita-compile", model, *flags, "--emit", previous,
            "--mlir-print-debuginfo", "-o", str(before))
    if stage == "plan":
        run("partita-opt", str(before), f"--pass-pipeline={pipeline}",
            "--mlir-print-debuginfo", "-o", str(work / "plan.mlir"))
        continue
    if rank is None:
        expected = run("partita-compile", model, *flags, "--emit", stage)
        replayed = run("partita-opt", str(before), f"--pass-pipeline={pipeline}")
        compare(stage, expected, replayed)
        continue
    if programs is None:
        programs = rank_programs(
            run("partita-compile", model, *flags, "--emit", "exec"))
    planned = work / f"exec{rank}.mlir"
    run("partita-opt", str(before), f"--pass-pipeline={pipeline}",
        "--mlir-print-debuginfo", "-o", str(planned))
    replayed = run("partita-translate", "--exec-to-proto", str(planned))
    compare(f"exec rank {rank}", programs[int(rank)], replayed)
