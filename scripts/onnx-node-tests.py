#!/usr/bin/env python3
"""Runs the ONNX backend node tests through partita-compile and partita-run
and classifies them.

Every node test whose model uses a covered op (in any default-domain node,
subgraphs included) is compiled for the host and run on one rank with each
of its data sets; outputs are compared with the test's reference outputs
(floats: rtol 1e-4, atol 1e-5; f16/bf16: rtol 1e-2; others exactly):
  passed         every data set matches;
  mismatch       an output differs (the largest error is reported);
  run-failed     the model compiled but partita-run failed;
  refused-opset  the model's default-domain opset is outside 13-23, and the
                 compiler refused it for that reason;
  unsupported    the compiler reported an op, type, attribute or input form
                 that it does not support;
  failed         any other compiler error (a front-end bug);
  crashed        a tool was killed by a signal or by the timeout (a bug).
Tests whose ops are all outside the coverage list are skipped.
"""

import argparse
import concurrent.futures
import dataclasses
import datetime
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_DATA = pathlib.Path("/usr/share/libonnx-testdata/data/node")
COVERED = """
Add Sub Mul Div Pow Neg Abs Sqrt Reciprocal Exp Log Tanh Erf Sigmoid Relu
Gelu Softmax LogSoftmax LayerNormalization RMSNormalization MatMul Gemm
Transpose Reshape Flatten Squeeze Unsqueeze Concat Split Slice Gather Expand
Where Equal Less Greater Not And Or Cast Constant ConstantOfShape Shape
Range Identity Dropout Trilu ReduceMean ReduceSum ReduceMax Max Min
Attention RotaryEmbedding Sin Cos CumSum IsNaN Clip Mod ReduceProd ReduceL1
ReduceL2 ReduceSumSquare ReduceLogSumExp GatherElements GatherND
ScatterND TopK OneHot""".split()
MIN_OPSET, MAX_OPSET = 13, 23
TIMEOUT_S = 20
STATUSES = ["passed", "mismatch", "run-failed", "refused-opset", "unsupported",
            "failed", "crashed"]
# Higher is better: a change to a higher rank is an improvement.
RANK = {"crashed": 0, "failed": 1, "run-failed": 1, "mismatch": 1,
        "unsupported": 2, "refused-opset": 2, "passed": 3}
UNSUPPORTED = re.compile(r"unsupported ONNX ops|not supported|does not "
                         r"support|supported only|must be a constant|"
                         r"is not a tensor")
LOCATION = re.compile(r"^.*?: (?:node '[^']*': )?error: ")
# Abbreviations of diagnostics for the coverage table, tried in order.
SHORT = [
    (re.compile(r"unsupported ONNX ops at opset \d+: (.*)"),
     lambda m: "op " + re.sub(r" \([^)]*\)", "", m[1]).replace(";", ",")),
    (re.compile(r"has type (\w+), which"), lambda m: f"type {m[1]}"),
    (re.compile(r"is not a tensor"), lambda m: "non-tensor input"),
    (re.compile(r"the (\w+) input of \w+ must be a constant"),
     lambda m: f"non-constant {m[1]}"),
]
SHORT_LENGTH = 50
# Tests whose data disagrees with the ONNX spec Partita follows; the table
# shows why next to their status.
KNOWN = {
    "test_cast_FLOAT_to_BFLOAT16":
        "test data truncates to bfloat16; Partita rounds to nearest even "
        "as ONNX 1.13+ specifies",
    "test_castlike_BFLOAT16_to_FLOAT_expanded":
        "test data's 'like' input is [1], the model declares [3, 4]",
    "test_castlike_FLOAT_to_BFLOAT16_expanded":
        "test data's 'like' input is [1], the model declares [3, 4]",
}


@dataclasses.dataclass
class NodeTest:
    """One node-test directory and what its model declares."""
    name: str
    model: pathlib.Path
    ops: set
    opset: int | None
    status: str = ""
    message: str = ""


def summary(tests):
    """One line counting `tests` by status."""
    return f"{len(tests)} node tests use a covered op: " + ", ".join(
        f"{sum(t.status == s for t in tests)} {s}" for s in STATUSES)


def default_domain_ops(graph):
    """Op types of the default-domain nodes of `graph` and its subgraphs."""
    ops = set()
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            ops.add(node.op_type)
        for attr in node.attribute:
            subgraphs = list(attr.graphs)
            if attr.type == onnx.AttributeProto.GRAPH:
                subgraphs.append(attr.g)
            for subgraph in subgraphs:
                ops |= default_domain_ops(subgraph)
    return ops


def collect(data):
    """The node tests under `data` that use a covered op, sorted by name."""
    tests = []
    for model in sorted(data.glob("*/model.onnx")):
        proto = onnx.load(model, load_external_data=False)
        ops = default_domain_ops(proto.graph)
        if not ops & set(COVERED):
            continue
        opsets = [o.version for o in proto.opset_import
                  if o.domain in ("", "ai.onnx")]
        tests.append(NodeTest(model.parent.name, model, ops,
                              opsets[0] if opsets else None))
    return tests


def run_tool(argv):
    """(status, first diagnostic line) of a tool run, or a crash status."""
    try:
        proc = subprocess.run(argv, text=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, errors="replace",
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT_S} s"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    first = LOCATION.sub("", lines[0]) if lines else "(no diagnostic)"
    if proc.returncode < 0:
        return -1, f"killed by {signal.Signals(-proc.returncode).name}: {first}"
    return proc.returncode, first


def compare(got, want):
    """None when `got` matches the reference `want`, else a description."""
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype.kind == "f":
        loose = want.dtype == np.float16 or got.dtype != want.dtype
        rtol, atol = (1e-2, 1e-3) if loose else (1e-4, 1e-5)
        if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            return None
        with np.errstate(invalid="ignore"):
            error = np.nanmax(np.abs(got - want.astype(got.dtype)))
        return f"max abs error {error:.3g}"
    if np.array_equal(got, want.astype(got.dtype)):
        return None
    return "values differ"


def run_data_sets(test, compiler, runner, work):
    """Compiles `test` into an artifact and runs each of its data sets."""
    art = work / "art"
    code, first = run_tool([str(compiler), str(test.model), "-o", str(art)])
    if code:
        return ("crashed" if code < 0 else "failed"), "artifact: " + first
    model = onnx.load(test.model, load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in initializers]
    outputs = [o.name for o in model.graph.output]
    bf16 = {o.name for o in model.graph.output
            if o.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16}
    for data_set in sorted(test.model.parent.glob("test_data_set_*")):
        argv = [str(runner), str(art), "--output-dir", str(work / "out")]
        for k, name in enumerate(inputs):
            argv += ["--input", f"{name}={data_set / f'input_{k}.pb'}"]
        code, first = run_tool(argv)
        if code:
            return ("crashed" if code < 0 else "run-failed"), first
        for k, name in enumerate(outputs):
            want = numpy_helper.to_array(
                onnx.load_tensor(str(data_set / f"output_{k}.pb")))
            if name in bf16 and want.dtype == np.uint16:
                # Old test data holds bfloat16 as bit patterns; partita-run
                # writes bf16 outputs as float32.
                want = (want.astype(np.uint32) << 16).view(np.float32)
            got = np.load(work / "out" / (re.sub(r"[/\\:]", "_", name) + ".npy"))
            if (problem := compare(got, want)) is not None:
                return "mismatch", f"{data_set.name} output {name}: {problem}"
    return "passed", ""


def classify(test, compiler, runner):
    """Runs the compiler (and the runtime) on `test`: status and message."""
    code, first = run_tool([str(compiler), str(test.model), "--emit", "nn"])
    if code < 0:
        return "crashed", first
    if test.opset is not None and not MIN_OPSET <= test.opset <= MAX_OPSET:
        if code and first.startswith(f"the model uses opset {test.opset} "):
            return "refused-opset", f"opset {test.opset}"
        return "failed", f"opset {test.opset} not refused: " + (
            first if code else "exit status 0")
    if code:
        return "unsupported" if UNSUPPORTED.search(first) else "failed", first
    with tempfile.TemporaryDirectory() as work:
        return run_data_sets(test, compiler, runner, pathlib.Path(work))


def short(message):
    """An abbreviation of a diagnostic for the coverage table."""
    for pattern, abbreviate in SHORT:
        if match := pattern.search(message):
            return abbreviate(match)
    if len(message) <= SHORT_LENGTH:
        return message
    return message[:SHORT_LENGTH].rsplit(" ", 1)[0] + "…"


def revision():
    """The source tree's git revision, or None outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args],
                              capture_output=True, text=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except OSError:
        return None
    return head and head + (" (with uncommitted changes)" if dirty else "")


def markdown(tests, data, argv):
    """The coverage table as Markdown."""
    command = shlex.join(["scripts/onnx-node-tests.py", *argv])
    rev = revision()
    out = [
        "# ONNX node-test coverage", "",
        f"Generated by `{command}` on {datetime.date.today()}"
        + (f" at source revision {rev}" if rev else "") + ". "
        f"It compiles the model of every ONNX backend node test in `{data}` "
        "(the default is Debian's libonnx-testdata) that uses an op of the "
        "front end's coverage list for the host, runs it on one rank with "
        "each of the test's data sets, and compares the outputs with the "
        "test's reference outputs (rtol 1e-4, atol 1e-5 for f32).", "",
        summary(tests) + ". A test counts in the row of every covered op it "
        "uses; an op with no test has none in this version of the test data.",
        "",
        "| Op | Tests | Passed | Mismatch | Run failed | Refused (opset) "
        "| Unsupported | Failed | Crashed | Not passed |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for op in COVERED:
        using = [t for t in tests if op in t.ops]
        reasons = {}
        for t in using:
            if t.status != "passed":
                bug = t.status in ("failed", "crashed", "mismatch", "run-failed")
                reason = (f"**{t.status}** " if bug else "") + short(t.message)
                if t.name in KNOWN:
                    reason = f"{t.status} ({KNOWN[t.name]})"
                reasons.setdefault(reason, []).append(t.name)
        cell = "; ".join(f"{reason}: {', '.join(names)}"
                         for reason, names in sorted(reasons.items()))
        row = [op, len(using), *(sum(t.status == s for t in using)
                                 for s in STATUSES), cell.replace("|", "\\|")]
        out.append("| " + " | ".join(map(str, row)) + " |")
    return "\n".join(out) + "\n"


def check(tests, path):
    """Differences from the expectations in `path`, and crashes, as lines."""
    expected = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, status = line.split()
            expected[name] = status
    found = {t.name: t for t in tests}
    problems = []
    for name in sorted(expected.keys() | found.keys()):
        old, test = expected.get(name), found.get(name)
        if test is None:
            problems.append(f"{name}: expected {old}, but the test data has "
                            "no such test using a covered op")
        elif old is None:
            problems.append(f"{name}: new test, now {test.status}")
        elif old != test.status:
            rank, old_rank = RANK[test.status], RANK[old]
            kind = ("regression" if rank < old_rank else
                    "improvement" if rank > old_rank else "change")
            detail = f": {test.message}" if test.message else ""
            problems.append(f"{kind}: {name}: expected {old}, now "
                            f"{test.status}{detail}")
        elif test.status == "crashed":
            problems.append(f"{name}: crashed, never acceptable: "
                            f"{test.message}")
    if problems:
        problems.append("Fix the regressions; for improvements and new "
                        f"tests, regenerate {path} with --write-expected.")
    return problems


def main():
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    path = pathlib.Path
    parser.add_argument("--compiler", type=path,
                        default=ROOT / "build/bin/partita-compile",
                        help="partita-compile (default: %(default)s)")
    parser.add_argument("--runner", type=path,
                        default=ROOT / "build/bin/partita-run",
                        help="partita-run (default: %(default)s)")
    parser.add_argument("--data", type=path, default=DEFAULT_DATA,
                        help="directory of node-test directories")
    parser.add_argument("--markdown", type=path, help="write the table here")
    parser.add_argument("--check", type=path,
                        help="fail unless the statuses match this file")
    parser.add_argument("--write-expected", type=path,
                        help="write the statuses here (for --check)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="compilers to run at once")
    args = parser.parse_args()
    for tool in (args.compiler, args.runner):
        if not os.access(tool, os.X_OK):
            parser.error(f"no executable at {tool}")
    if not args.data.is_dir():
        parser.error(f"no node tests at {args.data}")

    tests = collect(args.data)
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        results = pool.map(
            lambda t: classify(t, args.compiler, args.runner), tests)
        for test, (status, message) in zip(tests, results):
            test.status, test.message = status, message
    print(summary(tests))
    for test in tests:
        if test.status in ("failed", "crashed", "mismatch", "run-failed"):
            print(f"{test.status}: {test.name}: {test.message}")
    if args.markdown:
        args.markdown.write_text(markdown(tests, args.data, sys.argv[1:]))
    if args.write_expected:
        args.write_expected.write_text(
            "# Expected status of each ONNX node test using a covered op;\n"
            "# regenerate with scripts/onnx-node-tests.py --write-expected.\n"
            + "".join(f"{t.name} {t.status}\n" for t in tests))
    problems = check(tests, args.check) if args.check else []
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems or any(t.status == "crashed" for t in tests) else 0


if __name__ == "__main__":
    sys.exit(main())
