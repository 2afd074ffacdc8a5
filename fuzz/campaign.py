#!/usr/bin/env python3
"""The fuzzing campaign and its oracle (fuzz/README.md).

Targets:
  structured  mutated models (fuzz/mutate.py) through `partita-compile
              --emit nn`; a sample also through `-o ART` with --mesh tp=2
              and --mesh dp=2, then partita-run on onnxruntime's inputs;
  options     partita-compile option combinations, cluster files and JSON
              text, deep nesting and device counts;
  api         the Python and C APIs (fuzz/api.py) with arguments of the
              wrong type, out of range, past int64, NaN, NULL, each case in
              a process of its own;
  runtime     compiled artifacts with tampered programs, manifests and
              safetensors (the files re-hashed), and hostile inputs, through
              partita-run --timeout;
  importer    the libFuzzer target build-fuzz/bin/partita-fuzz-importer
              (scripts/fuzz builds it); without --seconds, one pass over
              fuzz/corpus/importer.

Each case is classified as crash (a signal, an exit >= 128, or LLVM's
fatal-error, assertion or sanitizer text), hang (past the timeout),
empty-diagnostic (a non-zero exit with nothing on stderr), accepted-invalid
(exit 0 on a model that onnxruntime refuses or cannot run, or whose declared
shapes cannot exist), wrong-answer (exit 0 with outputs that differ from
onnxruntime's or from the untampered run, an input file or argument that
should have been refused, or an output type onnxruntime does not produce),
or fine (refused with a message, or accepted and agreed).

Every case is a list of steps (run a tool and what must come of it, tamper
with an artifact, compute onnxruntime's answer). A finding is written as a
reproducer directory: finding.json (the steps, the class, the command line,
stderr) and the files the steps read. `--replay DIR...` runs them again;
fuzz/corpus/findings holds the committed ones.
"""

import argparse
import concurrent.futures
import copy
import hashlib
import json
import os
import pathlib
import random
import re
import resource
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np

FUZZ = pathlib.Path(__file__).resolve().parent
ROOT = FUZZ.parent
sys.path.insert(0, str(FUZZ))

CLASSES = ["crash", "hang", "empty-diagnostic", "accepted-invalid",
           "wrong-answer"]
# What a crash prints when it does not die by a signal.
CRASH_TEXT = re.compile(r"LLVM ERROR:|Assertion .* failed|Stack dump:|"
                        r"PLEASE submit a bug report|AddressSanitizer|"
                        r"runtime error:|terminate called")
MEMORY_LIMIT = 4 << 30  # Address space of every tool and oracle process.
TOOLS = ("partita-compile", "partita-run")


# AddressSanitizer reserves terabytes of shadow address space at start, so
# under `scripts/test --sanitize` (which sets ASAN_OPTIONS) the address-space
# limit would refuse every tool; ASan's own allocator limits stand instead.
SANITIZED = bool(os.environ.get("ASAN_OPTIONS"))


def _limit_memory():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Result:
    def __init__(self, cmd, rc, out, err, timed_out, seconds):
        self.cmd, self.rc, self.out, self.err = cmd, rc, out, err
        self.timed_out, self.seconds = timed_out, seconds

    def classify(self):
        """crash, hang, empty-diagnostic, refused or accepted."""
        if self.timed_out:
            return "hang"
        if self.rc < 0 or self.rc >= 128 or CRASH_TEXT.search(self.err):
            return "crash"
        if self.rc != 0:
            return "refused" if self.err.strip() else "empty-diagnostic"
        return "accepted"


def run_tool(cmd, timeout, cwd=None, env=None):
    start = time.monotonic()
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_limit_memory)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    return Result(cmd, proc.returncode, out.decode(errors="replace"),
                  err.decode(errors="replace"), timed_out,
                  time.monotonic() - start)


# --- onnxruntime, in worker processes ----------------------------------------

_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16",
              "tensor(double)": "float64", "tensor(int64)": "int64",
              "tensor(int32)": "int32", "tensor(int16)": "int16",
              "tensor(int8)": "int8", "tensor(uint8)": "uint8",
              "tensor(uint16)": "uint16", "tensor(uint32)": "uint32",
              "tensor(uint64)": "uint64", "tensor(bool)": "bool"}
MAX_FEED_ELEMENTS = 1 << 22


def _ort_request(req):
    """Loads req['model'] in onnxruntime and runs it on req['feeds'] (name
    -> .npy path) or on random inputs (seeded); saves inputs and outputs
    under req['save'] when given."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    opts.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(req["model"], opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 (any refusal is the answer)
        if "Cannot parse data from external tensors" not in str(e):
            return {"status": "rejected", "error": str(e)[:500]}
        # onnxruntime's shape inference does not read external data: give
        # it the model with its data inline.
        import onnx
        try:
            inline = onnx.load(req["model"]).SerializeToString()
            sess = ort.InferenceSession(inline, opts,
                                        providers=["CPUExecutionProvider"])
        except Exception as e2:  # noqa: BLE001
            return {"status": "rejected", "error": str(e2)[:500]}
    rng = np.random.default_rng(req.get("seed", 0))
    feeds = {}
    given = req.get("feeds") or {}
    for i in sess.get_inputs():
        if i.name in given:
            try:
                feeds[i.name] = np.load(given[i.name])
            except Exception as e:  # noqa: BLE001
                return {"status": "bad-input", "error": str(e)[:300]}
            continue
        dtype = _ORT_TYPES.get(i.type)
        if dtype is None:
            return {"status": "unverifiable", "error": f"input type {i.type}"}
        shape = [d if isinstance(d, int) else
                 _dim_value(d, req.get("bindings", {})) for d in i.shape]
        if any(not isinstance(d, int) or d < 0 for d in shape):
            return {"status": "rejected", "error": f"input shape {i.shape}"}
        if int(np.prod(shape, dtype=object)) > MAX_FEED_ELEMENTS:
            return {"status": "unverifiable", "error": f"input of {shape}"}
        if dtype == "bool":
            feeds[i.name] = rng.random(shape) > 0.5
        elif dtype.startswith(("int", "uint")):
            feeds[i.name] = rng.integers(0, 3, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    try:
        outputs = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return {"status": "run-failed", "error": str(e)[:500]}
    names = [o.name for o in sess.get_outputs()]
    if req.get("save"):
        save = pathlib.Path(req["save"])
        save.mkdir(parents=True, exist_ok=True)
        index = {"inputs": {}, "outputs": {}}
        for k, (name, value) in enumerate(feeds.items()):
            np.save(save / f"in{k}.npy", value)
            index["inputs"][name] = f"in{k}.npy"
        for k, (name, value) in enumerate(zip(names, outputs)):
            np.save(save / f"out{k}.npy", np.asarray(value))
            index["outputs"][name] = f"out{k}.npy"
        (save / "index.json").write_text(json.dumps(index))
    return {"status": "ok",
            "outputs": {n: [str(np.asarray(v).dtype), list(np.shape(v))]
                        for n, v in zip(names, outputs)}}


def _dim_value(text, bindings):
    """A symbolic input dimension's value for onnxruntime's feeds: its
    binding, or the expression it spells (`a + b`, `(s - 1)//2`, `/` as
    floor division) over the bound symbols (an unbound one is 1, as a plain
    unbound symbol is); None where it has none (division by zero, not an
    expression)."""
    if text is None:
        return 1
    if text in bindings:
        return bindings[text]
    if not re.fullmatch(r"[\w\s+\-*/()]+", text) or "**" in text:
        return 1 if re.fullmatch(r"[A-Za-z_]\w*", text or "") else None
    if any(int(n) >= 2**63 for n in re.findall(r"\b\d+\b", text)):
        return None  # Partita reads it as a name, not an expression.
    expr = re.sub(r"(?<!/)/(?!/)", "//", text)
    expr = re.sub(r"[A-Za-z_]\w*",
                  lambda m: str(bindings.get(m.group(0), 1)), expr)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `f(n)` is no call.
            value = eval(expr, {"__builtins__": {}}, {})  # noqa: S307
    except Exception:  # noqa: BLE001
        return None
    return value if isinstance(value, int) else None


def ort_worker_main():
    _limit_memory()
    for line in sys.stdin:
        try:
            reply = _ort_request(json.loads(line))
        except Exception as e:  # noqa: BLE001
            reply = {"status": "unverifiable", "error": repr(e)[:500]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class OrtWorker:
    """One onnxruntime process, restarted when it dies or stalls, so that
    onnxruntime's own failures on hostile models never end the campaign."""

    def __init__(self):
        self.proc = None

    def _start(self):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(FUZZ / "campaign.py"), "--ort-worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=env)

    def check(self, request, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.close()
            return {"status": "unverifiable", "error": "onnxruntime died"}
        return json.loads(line)

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_local = threading.local()
_all_workers = []
_workers_lock = threading.Lock()


def ort_check(request):
    if not hasattr(_local, "ort"):
        _local.ort = OrtWorker()
        with _workers_lock:
            _all_workers.append(_local.ort)
    return _local.ort.check(request)


def close_workers():
    with _workers_lock:
        for w in _all_workers:
            w.close()


# --- Comparing outputs -------------------------------------------------------


def compare(ref, got):
    """None when `got` matches `ref` (floats within 1e-3 of the largest
    magnitude; NaN where NaN), else why not."""
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        return f"shape {list(got.shape)}, expected {list(ref.shape)}"
    if ref.dtype.kind in "biu" and got.dtype.kind in "biu":
        if not np.array_equal(ref.astype(np.int64), got.astype(np.int64)):
            return f"{int(np.sum(ref != got))} elements differ"
        return None
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    nan = np.isnan(ref) != np.isnan(got)
    if nan.any():
        return f"NaN in {int(nan.sum())} other places"
    inf = np.isinf(ref) | np.isinf(got)
    if not np.array_equal(ref[inf], got[inf]):
        return "infinities differ"
    finite = np.isfinite(ref) & np.isfinite(got)
    scale = max(1.0, float(np.max(np.abs(ref[finite]), initial=0.0)))
    diff = np.abs(ref[finite] - got[finite])
    if diff.size and float(diff.max()) > 1e-3 * scale:
        return f"max abs diff {float(diff.max()):.3g}"
    return None


def compare_dirs(refs, outdir):
    """refs: {name: array}. None when outdir holds the same outputs."""
    outdir = pathlib.Path(outdir)
    for name, ref in refs.items():
        path = outdir / f"{name}.npy"
        if not path.exists():
            return f"output '{name}' was not written"
        why = compare(ref, np.load(path))
        if why:
            return f"output '{name}': {why}"
    return None


# --- Partita's view of an accepted model -------------------------------------

_ELEM = {"f32": "float32", "f16": "float16", "f64": "float64",
         "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8",
         "ui8": "uint8", "i1": "bool"}


def result_types(ir):
    """{onnx name: (numpy dtype or None, shape)} of @main's results."""
    line = next((l for l in ir.splitlines() if "func.func @main" in l), "")
    _, _, results = line.partition("->")
    out = {}
    for m in re.finditer(r'tensor<([^>]*)>\s*\{onnx\.name = "((?:[^"\\]|\\.)*)"',
                         results):
        *dims, elem = m.group(1).split("x")
        try:
            out[m.group(2)] = (_ELEM.get(elem), [int(d) for d in dims])
        except ValueError:
            out[m.group(2)] = (None, None)
    return out


def impossible_shapes(model, bindings=None):
    """Why the model cannot exist, from its declared shapes alone: a
    negative dimension, or more elements than int64 counts. Symbolic
    dimensions count with their bound (or computed) values: one that is 0
    makes any count possible."""
    g = model.graph
    for v in list(g.input) + list(g.output):
        if not v.type.HasField("tensor_type"):
            continue
        dims = []
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.HasField("dim_param") and bindings:
                value = _dim_value(d.dim_param, bindings)
                if value is not None:
                    dims.append(value)
        if any(d < 0 for d in dims):
            return f"'{v.name}' has a negative dimension {dims}"
        count = 1
        for d in dims:
            count *= d
        if count >= 2**63:
            return f"'{v.name}' has {count} elements (int64 overflows)"
    for t in g.initializer:
        count = 1
        for d in t.dims:
            count *= d
        if any(d < 0 for d in t.dims) or count >= 2**63:
            return f"initializer '{t.name}' has dims {list(t.dims)}"
    return None


# --- Steps ---------------------------------------------------------------------


class Tools:
    def __init__(self, build):
        self.build = pathlib.Path(build).resolve()
        self.paths = {t: self.build / "bin" / t for t in TOOLS}
        for tool in self.paths.values():
            if not tool.exists():
                raise SystemExit(f"{tool} is missing: build first "
                                 "(scripts/build partita-compile partita-run)")

    def resolve(self, cmd):
        return [str(self.paths.get(cmd[0], cmd[0])), *cmd[1:]]


class Verdict:
    """How a case ended: cls is a finding class, or 'fine' (refused with a
    message, or accepted and agreed), or 'setup' (a step that must succeed
    did not: the case says nothing)."""

    def __init__(self, cls, detail="", res=None, step=None):
        self.cls, self.detail, self.res, self.step = cls, detail, res, step

    def finding(self):
        return self.cls in CLASSES


def execute(steps, work, tools, state=None):
    """Runs `steps` in directory `work`. Steps:
      {"run": [tool, args...], "timeout": s, "expect": E, ...}, E one of
        accepted          must exit 0 (else the case is void);
        refused           must be refused with a message (exit 0 is a
                          finding of class step["if_accepted"]);
        no-crash          anything but a crash, hang or silent exit;
        valid-model:M     refused, or M (the step's model) is valid for
                          onnxruntime and runs; its inputs and outputs are
                          saved under ort/; with "types", the printed
                          result types must be onnxruntime's;
        equal:REF:OUT     refused, or OUT/*.npy equal REF/*.npy (REF from
                          a reference step or an earlier run);
      {"tamper": spec}   Tamper.apply on the artifact spec["art"];
      {"reference": {"model", "inputs": {name: file}, "save": DIR}}
                          onnxruntime's outputs into DIR (or a note that
                          it refuses those inputs).
    A refusal ends the case (fine). Returns a Verdict."""
    work = pathlib.Path(work)
    state = {} if state is None else state
    for k, step in enumerate(steps):
        if "tamper" in step:
            Tamper(program_class(work)).apply(work / step["tamper"]["art"],
                                              step["tamper"])
            continue
        if "reference" in step:
            r = step["reference"]
            try:
                ref = ort_reference(work / r["model"],
                                    {n: work / f for n, f in
                                     r["inputs"].items()})
            except OrtUnavailable as e:
                return Verdict("setup", str(e), None, k)
            state[r["save"]] = ref
            if ref is not None:
                (work / r["save"]).mkdir(parents=True, exist_ok=True)
                for name, value in ref.items():
                    if _file_name(name):
                        np.save(work / r["save"] / f"{name}.npy", value)
            continue
        res = run_tool(tools.resolve(step["run"]), step.get("timeout", 30),
                       cwd=work)
        cls = res.classify()
        expect = step.get("expect", "no-crash")
        if cls in CLASSES:
            return Verdict(cls, cls, res, k)
        if cls == "refused":
            if expect == "accepted":
                return Verdict("setup", res.err.strip()[-500:], res, k)
            return Verdict("fine", "refused", res, k)
        # Accepted (exit 0).
        if expect == "refused":
            return Verdict(step.get("if_accepted", "wrong-answer"),
                           step.get("why", "accepted (exit 0)"), res, k)
        if expect.startswith("valid-model:"):
            v = _check_valid(step, expect.split(":", 1)[1], work, res, state)
            if v is not None:
                v.step = k
                return v
        elif expect.startswith("equal:"):
            ref, out = expect.split(":")[1:3]
            if ref in state and state[ref] is None:
                return Verdict("wrong-answer", "exit 0 on inputs that "
                               "onnxruntime refuses", res, k)
            refs = {p.stem: np.load(p) for p in (work / ref).glob("*.npy")}
            if not refs:
                return Verdict("setup", f"no reference in {ref}", res, k)
            why = compare_dirs(refs, work / out)
            if why:
                return Verdict("wrong-answer", why, res, k)
    return Verdict("fine", "accepted and agreed")


# Where onnxruntime fails a model that ONNX defines, and Partita follows the
# definition: an accepted model is then no finding. Squeeze's axes input is
# optional ("if axes is not provided, all the single dimensions are
# removed"), but onnxruntime's kernel fails when the input is given with an
# empty name.
ORT_DEVIATIONS = [
    re.compile(r"Squeeze.*Axes input is null", re.S),
    # An eager expert loop's traced Split of the experts its example
    # reached: onnxruntime refuses an input that reaches another number,
    # Partita computes the model (docs/frontend.md, "eager experts").
    re.compile(r"Split node\. Name:'[^']*(experts|block_sparse_moe)/Split'"),
]


def _check_valid(step, model_name, work, res, state):
    import onnx
    path = work / model_name
    if path.is_fifo():
        return Verdict("accepted-invalid", "exit 0 on a FIFO model", res)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001
        return Verdict("accepted-invalid", f"onnx cannot load it: {e}", res)
    why = impossible_shapes(model, step.get("bindings", {}))
    if why:
        return Verdict("accepted-invalid", why, res)
    if any(_is_fifo_external(t, path.parent) for t in model.graph.initializer):
        return Verdict("accepted-invalid", "exit 0 with external data in a "
                       "FIFO (which was never read)", res)
    ort = ort_check({"model": str(path), "bindings": step.get("bindings", {}),
                     "seed": step.get("seed", 0), "save": str(work / "ort")})
    state["ort"] = ort
    if ort["status"] == "run-failed" and any(
            d.search(ort["error"]) for d in ORT_DEVIATIONS):
        return Verdict("fine", "onnxruntime deviates from ONNX here", res)
    if ort["status"] == "rejected" and "NOT_IMPLEMENTED" in ort["error"]:
        # onnxruntime lacks a kernel for these types (Pow with an unsigned
        # exponent): not a refusal of the model, when ONNX accepts it.
        try:
            onnx.checker.check_model(model, full_check=True)
            return Verdict("fine", "onnxruntime has no kernel for it; "
                           "ONNX's checker accepts the model", res)
        except Exception:  # noqa: BLE001 - the checker refuses it too
            pass
    if ort["status"] in ("rejected", "run-failed"):
        return Verdict("accepted-invalid",
                       f"onnxruntime {ort['status']}: {ort['error']}", res)
    if ort["status"] == "ok":
        # onnxruntime's outputs under their names, for a later equal: step.
        index = json.loads((work / "ort" / "index.json").read_text())
        (work / "ort-ref").mkdir(exist_ok=True)
        for name, f in index["outputs"].items():
            if _file_name(name):  # partita-run writes DIR/NAME.npy.
                shutil.copy(work / "ort" / f, work / "ort-ref" / f"{name}.npy")
    if ort["status"] == "ok" and step.get("types"):
        mine = result_types(res.out)
        for name, (dtype, shape) in ort["outputs"].items():
            got = mine.get(name)
            if got and got[0] and got[1] is not None and \
                    (got[0] != dtype or got[1] != shape):
                return Verdict("wrong-answer",
                               f"output '{name}' is {got[0]}{got[1]}, "
                               f"onnxruntime gives {dtype}{shape}", res)
    return None


def _file_name(name):
    return bool(name) and "/" not in name and not name.startswith(".") \
        and "\0" not in name


def _is_fifo_external(t, directory):
    for e in t.external_data:
        if e.key == "location":
            p = directory / e.value
            try:
                return p.is_fifo()
            except OSError:
                return False
    return False


class OrtUnavailable(Exception):
    """onnxruntime gave no answer (it died, stalled, or cannot represent
    the inputs): the case says nothing."""


def ort_reference(model, paths):
    """{output: array} of onnxruntime on the .npy inputs; None if it
    refuses them (or numpy cannot read them)."""
    save = pathlib.Path(tempfile.mkdtemp(prefix="partita-ortref-"))
    try:
        reply = ort_check({"model": str(model),
                           "feeds": {k: str(p) for k, p in paths.items()},
                           "save": str(save)})
        if reply["status"] == "unverifiable":
            raise OrtUnavailable(reply.get("error", "onnxruntime"))
        if reply["status"] != "ok":
            return None
        index = json.loads((save / "index.json").read_text())
        return {k: np.load(save / f) for k, f in index["outputs"].items()}
    finally:
        shutil.rmtree(save, ignore_errors=True)


# --- Findings ----------------------------------------------------------------


class Findings:
    """Counts findings by class and signature and writes the first few
    reproducers of each signature."""

    def __init__(self, directory, keep_per_signature=2):
        self.dir = pathlib.Path(directory) if directory else None
        self.lock = threading.Lock()
        self.counts = {c: 0 for c in CLASSES}
        self.signatures = {}
        self.cases = 0
        self.oracle_errors = 0
        self.keep = keep_per_signature
        self.written = []

    def add(self, cls, signature, record, files):
        """files(path) copies the reproducer's files into path."""
        with self.lock:
            self.counts[cls] += 1
            key = (cls, signature)
            n = self.signatures.get(key, 0)
            self.signatures[key] = n + 1
            if not self.dir or n >= self.keep:
                return None
            slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", signature)[:60]
            path = self.dir / f"{cls}-{slug}-{record['digest']}"
            self.written.append(path)
        path.mkdir(parents=True, exist_ok=True)
        files(path)
        record = {k: v for k, v in record.items() if k != "digest"}
        record = {"class": cls, "signature": signature, **record}
        (path / "finding.json").write_text(json.dumps(record, indent=1) + "\n")
        return path

    def will_write(self, cls, signature):
        with self.lock:
            return bool(self.dir) and \
                self.signatures.get((cls, signature), 0) < self.keep

    def total(self):
        return sum(self.counts.values())

    def summary(self):
        lines = [f"{self.cases} cases, {self.total()} findings: " +
                 ", ".join(f"{c} {n}" for c, n in self.counts.items()) +
                 (f"; {self.oracle_errors} oracle errors"
                  if self.oracle_errors else "")]
        for (cls, sig), n in sorted(self.signatures.items()):
            lines.append(f"  {cls:17} {n:4}  {sig}")
        return "\n".join(lines)


def finding_record(verdict, steps, case, **extra):
    """`case`: what makes the case unique (its index and seed)."""
    res = verdict.res
    digest = hashlib.sha256(json.dumps(
        [case, steps, extra.get("mutations"), verdict.cls, verdict.detail],
        default=str).encode()).hexdigest()[:10]
    return {"detail": verdict.detail,
            "command": shlex.join(steps[verdict.step]["run"])
            if verdict.step is not None else "",
            "returncode": res.rc if res else None,
            "stderr": res.err[-1500:] if res else "",
            **extra, "steps": steps, "digest": digest}


def copy_files(source, exclude=()):
    """A files() callback that copies the plain files of `source` (FIFOs
    and directories stay behind; finding.json lists the FIFOs)."""
    def files(path):
        for item in pathlib.Path(source).iterdir():
            if item.name in exclude or item.is_dir() or item.is_fifo():
                continue
            shutil.copy(item, path / item.name)
    return files


# --- Tampering with artifacts -------------------------------------------------


_program_lock = threading.Lock()
_program = []


def program_class(_unused=None):
    """partita.program.Program, from proto/program.proto through protoc's
    descriptor set (no generated Python to go stale)."""
    with _program_lock:
        if _program:
            return _program[0]
        from google.protobuf import descriptor_pb2, descriptor_pool
        from google.protobuf import message_factory
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "program.desc"
            subprocess.run(["protoc", f"-I{ROOT / 'proto'}",
                            f"--descriptor_set_out={out}", "program.proto"],
                           check=True)
            fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            pool.Add(f)
        _program.append(message_factory.GetMessageClass(
            pool.FindMessageTypeByName("partita.program.Program")))
        return _program[0]


def manifest_digest(manifest):
    """The manifest's own `manifest_sha256` as the writer computes it
    (docs/artifact.md): SHA-256 of the canonical JSON without that field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def rehash(art):
    """Rewrites manifest.json's digests (every file's and the manifest's
    own) after a tamper, so that the hash checks are not what refuses it."""
    manifest_path = art / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (ValueError, UnicodeDecodeError):
        return
    files = manifest.get("files")
    if not isinstance(files, dict):
        return
    for rel in files:
        path = art / rel
        if path.is_file():
            files[rel] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    manifest["manifest_sha256"] = manifest_digest(manifest)
    manifest_path.write_text(json.dumps(manifest, indent=2))


def _read_safetensors(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def _write_safetensors(path, header, body, pad=True):
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)


class Tamper:
    """Deterministic artifact mutations. `apply(art, spec)`; `random(art,
    rng)` picks a spec. A spec's `detectable`: the loader can tell (by
    verifying the program, the manifest and the weights) that the result
    would be wrong, so exit 0 with a different answer is a finding; for
    blind byte flips only crashes, hangs and silent exits are."""

    # Blind byte-level tampers: only a crash, hang or silent exit counts.
    BLIND = ("flip", "truncate", "st-flip")

    def __init__(self, program_cls):
        self.Program = program_cls

    def _programs(self, art):
        return sorted(str(p.relative_to(art))
                      for p in (art / "programs").glob("*.pb"))

    def _weights(self, art):
        return sorted(str(p.relative_to(art))
                      for p in (art / "weights").glob("*.safetensors"))

    def random(self, art, rng):
        progs, weights = self._programs(art), self._weights(art)
        kinds = ["flip", "truncate", "instruction", "p2p", "operand",
                 "buffer", "binding", "header", "manifest", "dispatch"]
        if weights:
            kinds += ["safetensors", "safetensors", "st-flip"]
        kind = rng.choice(kinds)
        spec = {"kind": kind}
        if kind in ("flip", "truncate", "instruction", "p2p", "operand",
                    "buffer", "binding", "header", "dispatch"):
            spec["file"] = rng.choice(progs)
        if kind == "flip":
            spec["positions"] = [rng.randrange(1 << 30) for _ in
                                 range(rng.choice([1, 2, 8]))]
            spec["bits"] = [rng.randrange(8) for _ in spec["positions"]]
        elif kind == "truncate":
            spec["fraction"] = rng.random()
        elif kind == "instruction":
            spec["op"] = rng.choice(["delete", "swap", "swap-adjacent",
                                     "duplicate", "delete-last"])
            spec["i"], spec["j"] = rng.randrange(1 << 20), rng.randrange(1 << 20)
        elif kind == "p2p":
            spec["op"] = rng.choice(["flip-kind", "peer", "tag", "delete"])
            spec["i"] = rng.randrange(1 << 20)
            spec["value"] = rng.choice([0, 1, 2, 7, -1, 2**31 - 1])
        elif kind == "dispatch":
            spec["i"] = rng.randrange(1 << 20)
            spec["op"] = rng.choice(["destinations", "counts", "swap",
                                     "kind", "async", "result"])
            spec["value"] = rng.choice([-1, 0, 1, 2, 10**6])
        elif kind == "operand":
            spec["i"], spec["j"] = rng.randrange(1 << 20), rng.randrange(8)
            spec["value"] = rng.choice([-1, -2, 10**6, 2**31 - 1])
        elif kind == "buffer":
            spec["i"] = rng.randrange(1 << 20)
            spec["op"] = rng.choice(["offset", "grow", "dtype", "rank",
                                     "arena", "alias"])
            spec["value"] = rng.choice([2**40, 2**63, 1 << 20, 3, 0])
        elif kind == "binding":
            spec["op"] = rng.choice(["drop-input", "drop-output",
                                     "output-buffer", "rename",
                                     "input-buffer"])
            spec["value"] = rng.choice([-1, 10**6])
        elif kind == "header":
            spec["op"] = rng.choice(["rank", "world_size", "format_version"])
            spec["value"] = rng.choice([-1, 1, 2, 99, 2**31 - 1])
        elif kind == "manifest":
            spec["op"] = rng.choice(["outputs-empty", "inputs-empty",
                                     "swap-programs", "swap-coords",
                                     "swap-stages",
                                     "stage", "input-shape", "input-dtype",
                                     "output-shape", "world_size",
                                     "drop-file-hash", "format_version",
                                     "weights-missing", "mesh-size",
                                     "ranks-empty", "program-path"])
        elif kind == "safetensors":
            spec["file"] = rng.choice(weights)
            spec["op"] = rng.choice(["overlap", "beyond", "dtype", "shape",
                                     "drop", "header-length", "reverse",
                                     "unaligned"])
            spec["i"], spec["j"] = rng.randrange(1 << 20), rng.randrange(1 << 20)
        elif kind == "st-flip":
            spec["file"] = rng.choice(weights)
            spec["position"] = rng.randrange(1 << 30)
        return spec

    def apply(self, art, spec):
        """Applies `spec`; False when it changed nothing that matters (a
        manifest edit that does not apply to this artifact)."""
        changed = getattr(self, "_" + spec["kind"].replace("-", "_"))(art, spec)
        rehash(art)
        return changed is not False

    # Byte level (not detectable: a flip may land in a constant's data).
    def _flip(self, art, spec):
        path = art / spec["file"]
        data = bytearray(path.read_bytes())
        for pos, bit in zip(spec["positions"], spec["bits"]):
            data[pos % len(data)] ^= 1 << bit
        path.write_bytes(bytes(data))

    def _truncate(self, art, spec):
        path = art / spec["file"]
        data = path.read_bytes()
        path.write_bytes(data[:int(len(data) * spec["fraction"])])

    def _st_flip(self, art, spec):
        # Only inside the header: data bytes are weights, any value valid.
        path = art / spec["file"]
        data = bytearray(path.read_bytes())
        n = struct.unpack("<Q", bytes(data[:8]))[0]
        data[spec["position"] % (8 + n)] ^= 0x20
        path.write_bytes(bytes(data))

    # Programs, through the schema.
    def _load(self, art, spec):
        return self.Program.FromString((art / spec["file"]).read_bytes())

    def _save(self, art, spec, prog):
        (art / spec["file"]).write_bytes(prog.SerializeToString())

    def _instruction(self, art, spec):
        prog = self._load(art, spec)
        ins = prog.instructions
        if not ins:
            return
        i, j = spec["i"] % len(ins), spec["j"] % len(ins)
        op = spec["op"]
        items = [copy.deepcopy(x) for x in ins]
        if op == "delete":
            del items[i]
        elif op == "delete-last":
            del items[-1]
        elif op == "swap":
            items[i], items[j] = items[j], items[i]
        elif op == "swap-adjacent" and len(items) > 1:
            i = min(i, len(items) - 2)
            items[i], items[i + 1] = items[i + 1], items[i]
        elif op == "duplicate":
            items.insert(i, copy.deepcopy(items[i]))
        del prog.instructions[:]
        prog.instructions.extend(items)
        self._save(art, spec, prog)

    def _p2p(self, art, spec):
        prog = self._load(art, spec)
        p2p = [k for k, x in enumerate(prog.instructions)
               if x.WhichOneof("op") == "p2p"]
        coll = [k for k, x in enumerate(prog.instructions)
                if x.WhichOneof("op") == "collective"]
        if p2p:
            k = p2p[spec["i"] % len(p2p)]
            x = prog.instructions[k].p2p
            if spec["op"] == "flip-kind":
                x.kind = 1 if x.kind == 2 else 2
            elif spec["op"] == "peer":
                x.peer = spec["value"]
            elif spec["op"] == "tag":
                x.tag = x.tag + 1
            else:
                del prog.instructions[k]
        elif coll:
            k = coll[spec["i"] % len(coll)]
            x = prog.instructions[k].collective
            if spec["op"] == "flip-kind":
                x.kind = 1 + (x.kind % 7)
            elif spec["op"] == "peer":
                x.group.append(spec["value"])
            elif spec["op"] == "tag":
                x.dim = x.dim + 1
            else:
                del prog.instructions[k]
        else:
            return
        self._save(art, spec, prog)

    def _dispatch(self, art, spec):
        """A dist.dispatch's or dispatch_return's own fields: its
        destinations and counts buffers elsewhere or out of range, the two
        swapped, the kind flipped between the pair, an asynchronous form
        it does not have, its result elsewhere. Programs without one are
        left alone."""
        prog = self._load(art, spec)
        found = [x.collective for x in prog.instructions
                 if x.WhichOneof("op") == "collective"
                 and x.collective.kind in (6, 7)]
        if not found:
            return
        x = found[spec["i"] % len(found)]
        value = spec["value"]
        if spec["op"] == "destinations":
            x.destinations = value
        elif spec["op"] == "counts":
            x.counts = value
        elif spec["op"] == "swap":
            x.destinations, x.counts = x.counts, x.destinations
        elif spec["op"] == "kind":
            x.kind = 13 - x.kind
        elif spec["op"] == "async":
            setattr(x, "async", True)
            x.token = value
        else:
            x.result = value
        self._save(art, spec, prog)

    def _operand(self, art, spec):
        prog = self._load(art, spec)
        kernels = [x.kernel for x in prog.instructions
                   if x.WhichOneof("op") == "kernel"]
        if not kernels:
            return
        k = kernels[spec["i"] % len(kernels)]
        slots = list(k.operands) + list(k.results)
        if not slots:
            return
        j = spec["j"] % len(slots)
        if j < len(k.operands):
            k.operands[j] = spec["value"]
        else:
            k.results[j - len(k.operands)] = spec["value"]
        self._save(art, spec, prog)

    def _buffer(self, art, spec):
        prog = self._load(art, spec)
        if spec["op"] == "arena":
            prog.arena_bytes = spec["value"] % (prog.arena_bytes or 1)
            self._save(art, spec, prog)
            return
        if not prog.buffers:
            return
        b = prog.buffers[spec["i"] % len(prog.buffers)]
        if spec["op"] == "offset":
            b.arena_offset = spec["value"] % 2**64
        elif spec["op"] == "grow" and b.type.shape:
            b.type.shape[0] = b.type.shape[0] * 2 + 1
        elif spec["op"] == "dtype":
            b.type.dtype = 1 + (b.type.dtype % 7)
        elif spec["op"] == "rank":
            b.type.shape.append(2)
        elif spec["op"] == "alias":
            b.kind = 6
            b.alias_of = b.id
        self._save(art, spec, prog)

    def _binding(self, art, spec):
        prog = self._load(art, spec)
        op, value = spec["op"], spec["value"]
        if op == "drop-input" and prog.inputs:
            del prog.inputs[0]
        elif op == "drop-output" and prog.outputs:
            del prog.outputs[0]
        elif op == "output-buffer" and prog.outputs:
            prog.outputs[0].buffer = value
        elif op == "input-buffer" and prog.inputs:
            prog.inputs[0].buffer = value
        elif op == "rename" and (prog.inputs or prog.outputs):
            (prog.inputs or prog.outputs)[0].name += "_x"
        self._save(art, spec, prog)

    def _header(self, art, spec):
        prog = self._load(art, spec)
        setattr(prog, spec["op"], spec["value"] % 2**32
                if spec["op"] == "format_version" else spec["value"])
        self._save(art, spec, prog)

    def _manifest(self, art, spec):
        path = art / "manifest.json"
        m = json.loads(path.read_text())
        before = copy.deepcopy(m)
        op = spec["op"]
        ranks = m.get("ranks", [])
        if op == "outputs-empty":
            m["outputs"] = []
        elif op == "inputs-empty":
            m["inputs"] = []
        elif op == "swap-programs" and len(ranks) > 1:
            ranks[0]["program"], ranks[1]["program"] = \
                ranks[1]["program"], ranks[0]["program"]
        elif op == "swap-coords" and len(ranks) > 1:
            ranks[0]["coords"], ranks[1]["coords"] = \
                ranks[1]["coords"], ranks[0]["coords"]
        elif op == "swap-stages" and len(ranks) > 1:
            ranks[0]["stage"], ranks[1]["stage"] = \
                ranks[1].get("stage", 0), ranks[0].get("stage", 0)
        elif op == "stage" and ranks:
            ranks[-1]["stage"] = ranks[-1].get("stage", 0) + 1
        elif op == "input-shape" and m.get("inputs"):
            m["inputs"][0]["shape"] = m["inputs"][0]["shape"][::-1] + [1]
        elif op == "input-dtype" and m.get("inputs"):
            m["inputs"][0]["dtype"] = "f16" \
                if m["inputs"][0]["dtype"] != "f16" else "i64"
        elif op == "output-shape" and m.get("outputs"):
            m["outputs"][0]["shape"][0] += 1
        elif op == "world_size":
            m["mesh"]["world_size"] = m["mesh"].get("world_size", 1) + 1
        elif op == "drop-file-hash" and m.get("files"):
            del m["files"][sorted(m["files"])[0]]
        elif op == "format_version":
            m["format_version"] = 2
        elif op == "weights-missing":
            m["weights"] = m.get("weights", []) + ["weights/missing.safetensors"]
        elif op == "mesh-size" and m["mesh"].get("axes"):
            m["mesh"]["axes"][0]["size"] += 1
        elif op == "ranks-empty":
            m["ranks"] = []
        elif op == "program-path" and ranks:
            ranks[0]["program"] = "../../manifest.json"
        path.write_text(json.dumps(m, indent=2))
        return m != before

    def _safetensors(self, art, spec):
        path = art / spec["file"]
        header, body = _read_safetensors(path)
        names = sorted(k for k in header if k != "__metadata__")
        if not names:
            return
        a = names[spec["i"] % len(names)]
        b = names[spec["j"] % len(names)]
        op = spec["op"]
        if op == "overlap":
            if a == b and len(names) > 1:
                b = names[(names.index(a) + 1) % len(names)]
            begin = header[a]["data_offsets"][0]
            size = header[b]["data_offsets"][1] - header[b]["data_offsets"][0]
            if begin + size > len(body):
                begin = max(0, len(body) - size)
            header[b]["data_offsets"] = [begin, begin + size]
        elif op == "beyond":
            o = header[a]["data_offsets"]
            header[a]["data_offsets"] = [o[0] + len(body), o[1] + len(body)]
        elif op == "dtype":
            header[a]["dtype"] = "F16" if header[a]["dtype"] != "F16" else "F32"
        elif op == "shape":
            header[a]["shape"] = header[a]["shape"][::-1] + [1]
            if header[a]["shape"][0] > 1:
                header[a]["shape"][0] -= 1
        elif op == "drop":
            del header[a]
        elif op == "reverse":
            o = header[a]["data_offsets"]
            header[a]["data_offsets"] = [o[1], o[0]]
        elif op == "unaligned":
            o = header[a]["data_offsets"]
            if o[1] + 1 <= len(body):
                header[a]["data_offsets"] = [o[0] + 1, o[1] + 1]
        elif op == "header-length":
            text = json.dumps(header).encode()
            path.write_bytes(struct.pack("<Q", 2**62) + text + body)
            return
        _write_safetensors(path, header, body)




# --- Structured campaign -----------------------------------------------------


def bind_flags(bindings):
    if not bindings:
        return []
    return ["--bind", ",".join(f"{k}={v}" for k, v in sorted(bindings.items()))]


def write_case(case, directory):
    """The model (or a FIFO in its place, with its bytes beside it) and its
    side files. Returns the FIFOs' names."""
    import onnx
    directory.mkdir(parents=True, exist_ok=True)
    fifos = []
    if case.model_fifo:
        os.mkfifo(directory / "model.onnx")
        fifos.append("model.onnx")
        onnx.save(case.model, directory / "model.bytes.onnx")
    else:
        onnx.save(case.model, directory / "model.onnx")
    for name, data in case.files.items():
        if data is None:
            os.mkfifo(directory / name)
            fifos.append(name)
        else:
            (directory / name).write_bytes(data)
    return fifos


def _op_of(case):
    """The op type a case is about: the seed's, or the mutated node's."""
    if not case.seed.endswith(".onnx"):
        return case.seed.split("/")[-1].split(".")[0]
    for m in case.mutations:
        found = re.search(r"\(([A-Z][A-Za-z]+)\)| of ([A-Z][A-Za-z]+)", m)
        if found:
            return case.seed.split("/")[-1] + ":" + (found.group(1) or
                                                     found.group(2))
    return case.seed.split("/")[-1]


class Structured:
    def __init__(self, tools, findings, work, seed, sample_every=6,
                 timeout=20.0, fifo_timeout=3.0, big=True, minimize=0):
        import mutate
        self.mutate = mutate
        self.tools, self.findings, self.work = tools, findings, work
        self.seed = seed
        self.sample_every = sample_every
        self.timeout, self.fifo_timeout = timeout, fifo_timeout
        self.minimize = minimize
        self.seeds = mutate.seeds(ROOT, big=big)
        # The committed transformers are slow to compile and to check; they
        # get a fifth of the cases between them.
        small = sum(1 for s in self.seeds if not s.name.endswith(".onnx"))
        bigs = len(self.seeds) - small
        self.weights = [1.0 if not s.name.endswith(".onnx") else
                        0.25 * small / max(bigs, 1) for s in self.seeds]

    def make_case(self, index):
        rng = random.Random(f"{self.seed}:{index}")
        seed = rng.choices(self.seeds, self.weights)[0]
        return self.mutate.Mutator(rng).mutate(seed), rng

    def compile_step(self, case, fifo, seed):
        return {"run": ["partita-compile", "model.onnx", "--emit", "nn",
                        *bind_flags(case.bindings)],
                "timeout": self.fifo_timeout if fifo else self.timeout,
                "expect": "valid-model:model.onnx", "types": True,
                "bindings": case.bindings, "seed": seed}

    def run_case(self, index):
        case, rng = self.make_case(index)
        directory = self.work / f"s{index}"
        try:
            self._run(case, rng, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _run(self, case, rng, directory):
        fifos = write_case(case, directory)
        first = [self.compile_step(case, bool(fifos), rng.randrange(2**31))]
        state = {}
        v = execute(first, directory, self.tools, state)
        if v.finding():
            self._record(v, first, case, fifos, directory)
            return
        ort = state.get("ort")
        if v.cls != "fine" or v.detail == "refused" or fifos or \
                rng.randrange(self.sample_every):
            return
        for mesh in ("tp=2", "dp=2"):
            art, out = f"art-{mesh[:2]}", f"out-{mesh[:2]}"
            steps = [{"run": ["partita-compile", "model.onnx", "-o", art,
                              "--mesh", mesh, *bind_flags(case.bindings)],
                      "timeout": self.timeout, "expect": "no-crash"}]
            if ort and ort["status"] == "ok":
                index = json.loads((directory / "ort" / "index.json")
                                   .read_text())
                run = ["partita-run", art, "--output-dir", out,
                       "--timeout", "10"]
                for name, f in index["inputs"].items():
                    run += ["--input", f"{name}=ort/{f}"]
                steps.append({"run": run, "timeout": 60,
                              "expect": f"equal:ort-ref:{out}"})
            v = execute(steps, directory, self.tools, dict(state))
            if v.finding():
                self._record(v, first + steps, case, fifos, directory,
                             f"--mesh {mesh}: ")
                return

    def _record(self, v, steps, case, fifos, directory, prefix=""):
        kinds = sorted({m.split(":")[0] for m in case.mutations} -
                       {"minimized to"})
        sig = f"{_op_of(case)}/" + ("+".join(kinds) or "seed")
        if prefix:
            sig += " " + prefix.strip(": ")
        if self.minimize and not fifos and len(case.model.graph.node) > 1 \
                and self.findings.will_write(v.cls, sig):
            case = minimize(case, steps, v.cls, self.tools,
                            directory.parent / (directory.name + "-min"),
                            self.minimize)
            write_case(case, directory)
        v.detail = prefix + v.detail
        record = finding_record(v, steps, [self.seed, directory.name],
                                target="structured", seed=case.seed,
                                mutations=case.mutations, fifos=fifos)
        self.findings.add(v.cls, sig, record,
                          copy_files(directory, exclude=fifos))


# --- Minimizing a model ----------------------------------------------------------


def _subgraph(model, keep):
    """The model with only the nodes at indices `keep`; values they read
    that no kept node makes become graph inputs (typed from shape
    inference where it knows them), and lost outputs are replaced by the
    kept nodes' unused results."""
    import onnx
    from onnx import helper
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v for v in list(inferred.graph.value_info) +
                 list(inferred.graph.input) + list(inferred.graph.output)}
    except Exception:  # noqa: BLE001 (hostile models often do not infer)
        types = {v.name: v for v in list(model.graph.input) +
                 list(model.graph.output)}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    nodes = [copy.deepcopy(g.node[i]) for i in keep]
    del g.node[:]
    g.node.extend(nodes)
    made = {o for n in nodes for o in n.output if o}
    have = made | {t.name for t in g.initializer} | {i.name for i in g.input}
    for n in nodes:
        for name in n.input:
            if name and name not in have:
                g.input.append(types.get(name) or helper.make_tensor_value_info(
                    name, onnx.TensorProto.FLOAT, [2]))
                have.add(name)
    read = {i for n in nodes for i in n.input}
    outputs = [o for o in g.output if o.name in have]
    if g.output and not outputs:
        outputs = [types.get(o) or helper.make_tensor_value_info(
            o, onnx.TensorProto.FLOAT, None)
            for n in nodes for o in n.output if o and o not in read][:1]
    del g.output[:]
    g.output.extend(outputs)
    used = read | {o.name for o in g.output}
    inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    ins = [i for i in g.input if i.name in used]
    del g.input[:]
    g.input.extend(ins)
    return m


def minimize(case, steps, cls, tools, scratch, budget):
    """Removes nodes (ddmin over chunks) while the first step still ends in
    `cls`; at most `budget` compiles."""
    import dataclasses
    nodes = list(range(len(case.model.graph.node)))
    tries = 0

    def same(keep):
        nonlocal tries
        tries += 1
        trial = dataclasses.replace(case, model=_subgraph(case.model, keep))
        shutil.rmtree(scratch, ignore_errors=True)
        write_case(trial, scratch)
        v = execute(steps, scratch, tools, {})
        shutil.rmtree(scratch, ignore_errors=True)
        return v.cls == cls

    chunks = 2
    while len(nodes) > 1 and tries < budget:
        size = max(1, len(nodes) // chunks)
        reduced = False
        for start in range(0, len(nodes), size):
            keep = nodes[:start] + nodes[start + size:]
            if keep and tries < budget and same(keep):
                nodes, reduced = keep, True
                chunks = max(chunks - 1, 2)
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(nodes), chunks * 2)
    if len(nodes) == len(case.model.graph.node):
        return case
    return dataclasses.replace(case, model=_subgraph(case.model, nodes),
                               mutations=case.mutations +
                               [f"minimized to {len(nodes)} nodes"])


# --- Runtime campaign ---------------------------------------------------------


def write_mlp(path):
    """A small float-input model (LayerNorm, MatMul, Relu, MatMul, Softmax)
    for NaN and infinity inputs under tensor parallelism."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(
        rng.standard_normal([8, 16]).astype(np.float32), "w1"),
        numpy_helper.from_array(
        rng.standard_normal([16, 8]).astype(np.float32), "w2"),
        numpy_helper.from_array(np.ones([8], np.float32), "s"),
        numpy_helper.from_array(np.zeros([8], np.float32), "b")]
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["n"],
                              axis=-1, name="norm"),
             helper.make_node("MatMul", ["n", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="fc2"),
             helper.make_node("Softmax", ["o"], ["y"], axis=-1, name="sm")]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def write_windowed_attention(path):
    """Token embedding, LayerNorm and one attention block whose additive
    mask is a constant [1, 1, s, s] sliding window (it varies along the
    query dimension, as the [b, 1, s, s] masks of Hugging Face exports do),
    for --sp-mode ring. Input `ids` int64 [2, 8], vocabulary 32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    b, s, hidden, heads = 2, 8, 16, 2
    d = hidden // heads
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    band = np.abs(np.arange(s)[:, None] - np.arange(s)[None, :]) <= 2
    inits = [w("emb", [32, hidden]), w("wq", [hidden, hidden]),
             w("wk", [hidden, hidden]), w("wv", [hidden, hidden]),
             w("wo", [hidden, hidden]),
             numpy_helper.from_array(np.ones([hidden], np.float32), "ln_s"),
             numpy_helper.from_array(np.zeros([hidden], np.float32), "ln_b"),
             numpy_helper.from_array(np.array([b, s, heads, d]), "heads"),
             numpy_helper.from_array(np.array([b, s, hidden]), "merged"),
             numpy_helper.from_array(np.float32(1 / np.sqrt(d)), "scale"),
             numpy_helper.from_array(
                 np.where(band, 0, -1e9).astype(np.float32)[None, None],
                 "mask")]
    n = helper.make_node
    nodes = [n("Gather", ["emb", "ids"], ["x0"], name="embed"),
             n("LayerNormalization", ["x0", "ln_s", "ln_b"], ["x"], axis=-1,
               name="norm")]
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}0"], name=f"{p}_proj"),
                  n("Reshape", [f"{p}0", "heads"], [f"{p}1"])]
    nodes += [n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
              n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
              n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
              n("MatMul", ["q", "kt"], ["s0"], name="scores"),
              n("Mul", ["s0", "scale"], ["s1"]),
              n("Add", ["s1", "mask"], ["s2"], name="masked"),
              n("Softmax", ["s2"], ["p"], axis=-1),
              n("MatMul", ["p", "v"], ["o0"], name="context"),
              n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
              n("Reshape", ["o1", "merged"], ["o2"]),
              n("MatMul", ["o2", "wo"], ["y"], name="out_proj")]
    g = helper.make_graph(
        nodes, "windowed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [b, s])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, hidden])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def runtime_artifacts(work):
    """(name, model path, compile flags, inputs, vocabulary size)."""
    models = ROOT / "test" / "models"
    mlp = pathlib.Path(work) / "mlp.onnx"
    write_mlp(mlp)
    window = pathlib.Path(work) / "window.onnx"
    write_windowed_attention(window)
    window_ids = np.random.default_rng(2).integers(0, 32, [2, 8])
    ids = {"input_ids": np.load(models / "gpt2.inputs.npz")["input_ids"]}
    bert = dict(np.load(models / "bert.inputs.npz"))
    # GPT-2 with a vocabulary of 131 at tp=4: padded to 132, so that the
    # ids at and past the vocabulary's end probe the padding's remap.
    odd = dict(np.load(models / "hf" / "gpt2_vocab.inputs.npz"))
    odd = {k: odd[k] for k in ("input_ids", "attention_mask")}
    x = np.random.default_rng(0).standard_normal([4, 8]).astype(np.float32)
    # A mixture of experts (nn.moe): its experts split over ep, whole
    # within tp (a fused swiglu's halves).
    moe = dict(np.load(models / "hf" / "mixtral.inputs.npz"))
    moe = {k: moe[k] for k in ("input_ids", "attention_mask")}
    return [
        ("gpt2", models / "gpt2.onnx", [], ids, 128),
        ("gpt2-tp2", models / "gpt2.onnx", ["--mesh", "tp=2"], ids, 128),
        ("gpt2-pp2", models / "gpt2.onnx",
         ["--mesh", "pp=2", "--microbatches", "2"], ids, 128),
        ("gpt2-ring", models / "gpt2.onnx",
         ["--mesh", "sp=2", "--sp-mode", "ring"], ids, 128),
        ("bert-dp2", models / "bert.onnx", ["--mesh", "dp=2"], bert, 128),
        ("gpt2-vocab131-tp4", models / "hf" / "gpt2_vocab.legacy.onnx",
         ["--mesh", "tp=4"], odd, 131),
        ("mlp-tp2", mlp, ["--mesh", "tp=2"], {"x": x}, None),
        ("window-ring", window, ["--mesh", "sp=2", "--sp-mode", "ring"],
         {"ids": window_ids}, 32),
        ("mixtral-ep2-tp2", models / "hf" / "mixtral.legacy.onnx",
         ["--mesh", "ep=2,tp=2"], moe, 128),
    ]


def _run_step(paths, expect, extra=(), out="out", timeout=30):
    cmd = ["partita-run", "art", "--output-dir", out, "--timeout", "5"]
    for k, p in paths.items():
        cmd += ["--input", f"{k}={p}"]
    return {"run": cmd + list(extra), "timeout": timeout, "expect": expect}


class Runtime:
    """Artifacts compiled once per campaign, and cases that tamper with one
    artifact or with the inputs of one run."""

    def __init__(self, tools, findings, work, seed, fifo_timeout=3.0):
        self.tools, self.findings, self.work = tools, findings, work
        self.seed, self.fifo_timeout = seed, fifo_timeout
        self.tamper = Tamper(program_class())
        self.artifacts = {}

    def _compile_step(self, flags):
        return {"run": ["partita-compile", "model.onnx", "-o", "art", *flags],
                "timeout": 120, "expect": "accepted"}

    def _case_dir(self, name, directory, copy_art):
        """A case directory holding model.onnx, the inputs and art (a copy
        when the case tampers with it, else a link)."""
        a = self.artifacts[name]
        directory.mkdir(parents=True)
        os.symlink(a["model"], directory / "model.onnx")
        for k, v in a["inputs"].items():
            np.save(directory / f"{k}.npy", v)
        if copy_art:
            shutil.copytree(a["dir"] / "art", directory / "art")
        else:
            os.symlink(a["dir"] / "art", directory / "art")
        return {k: f"{k}.npy" for k in a["inputs"]}

    def prepare(self):
        """Compiles each artifact; its untampered run must equal
        onnxruntime's answer (the ring and embedding cases are findings
        here already)."""
        for name, model, flags, inputs, vocab in runtime_artifacts(self.work):
            d = self.work / "artifacts" / name
            d.mkdir(parents=True)
            os.symlink(model, d / "model.onnx")
            paths = {}
            for k, v in inputs.items():
                np.save(d / f"{k}.npy", v)
                paths[k] = f"{k}.npy"
            steps = [self._compile_step(flags),
                     {"reference": {"model": "model.onnx", "inputs": paths,
                                    "save": "ref"}},
                     _run_step(paths, "equal:ref:out0", out="out0")]
            v = execute(steps, d, self.tools)
            self.artifacts[name] = {"dir": d, "model": model, "flags": flags,
                                    "inputs": inputs, "vocab": vocab}
            if v.cls == "setup" and v.step == 0:
                print(f"runtime: {name} does not compile: {v.detail}",
                      file=sys.stderr)
                del self.artifacts[name]
                continue
            if v.finding():
                self._record(v, steps, f"{name}/untampered", d, [])
            # Tampered runs are compared with the untampered one; input
            # cases with onnxruntime, where the untampered run agrees.
            self.artifacts[name]["baseline"] = (d / "out0").is_dir()
            self.artifacts[name]["agrees"] = v.cls == "fine" and \
                v.detail != "refused"

    def _record(self, v, steps, sig, directory, fifos):
        record = finding_record(v, steps, [self.seed, str(directory)],
                                target="runtime", fifos=fifos)

        def files(path):
            for item in pathlib.Path(directory).iterdir():
                if item.name in fifos or item.name == "art":
                    continue
                if item.is_file():  # Follows links (model.onnx).
                    shutil.copy(item, path / item.name)
        self.findings.add(v.cls, sig, record, files)

    def run_case(self, index):
        if not self.artifacts:
            return
        rng = random.Random(f"{self.seed}:runtime:{index}")
        name = rng.choice(sorted(self.artifacts))
        directory = self.work / f"r{index}"
        try:
            if rng.random() < 0.55:
                self._tamper_case(name, rng, directory)
            else:
                self._input_case(name, rng, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _tamper_case(self, name, rng, directory):
        a = self.artifacts[name]
        paths = self._case_dir(name, directory, copy_art=True)
        spec = dict(self.tamper.random(directory / "art", rng), art="art")
        probe = directory / "probe"
        shutil.copytree(directory / "art", probe)
        if not self.tamper.apply(probe, spec):
            return  # The edit does not apply to this artifact.
        shutil.rmtree(probe)
        detectable = spec["kind"] not in Tamper.BLIND
        if spec["kind"] == "manifest":
            # The manifest is to be hashed with the rest: any edit is
            # refused, whether or not the answer changes.
            last = dict(_run_step(paths, "refused"), if_accepted="wrong-answer",
                        why="an edited manifest is accepted")
        elif detectable and a["baseline"]:
            os.symlink(a["dir"] / "out0", directory / "out0")
            last = _run_step(paths, "equal:out0:out")
        else:
            last = _run_step(paths, "no-crash")
        steps = [self._compile_step(a["flags"]),
                 _run_step(paths, "accepted", out="out0"),
                 {"tamper": spec}, last]
        v = execute(steps[2:], directory, self.tools)
        if v.finding():
            v.step += 2
            if v.cls == "wrong-answer":
                v.detail = "tampered artifact ran to exit 0: " + v.detail
            sig = f"{name}/{spec['kind']}" + (f":{spec['op']}" if "op" in spec
                                              else "")
            self._record(v, steps, sig, directory, [])

    def _input_case(self, name, rng, directory):
        a = self.artifacts[name]
        paths = self._case_dir(name, directory, copy_art=False)
        inputs = {k: v.copy() for k, v in a["inputs"].items()}
        target = rng.choice(sorted(inputs))
        value = inputs[target]
        kind = rng.choice(["dtype", "shape", "values", "values", "values",
                           "file", "file", "args"])
        extra, fifos, what, must_refuse = [], [], kind, False
        if kind == "dtype":
            to = rng.choice(["int32", "float32", "float64", "uint8", "bool",
                             "float16", "int64"])
            inputs[target] = value.astype(to)
            what = f"{target} as {to}"
        elif kind == "shape":
            op = rng.choice(["extra", "fewer", "longer", "empty", "scalar"])
            if op == "extra":
                inputs[target] = value[..., None]
            elif op == "fewer":
                inputs[target] = value.reshape(-1)
            elif op == "longer":
                inputs[target] = np.concatenate([value, value], axis=-1)
            elif op == "empty":
                inputs[target] = value[:0]
            else:
                inputs[target] = value.reshape(-1)[:1].reshape(())
            what = f"{target} {op}: {list(inputs[target].shape)}"
        elif kind == "values":
            flat = inputs[target].reshape(-1)
            i = rng.randrange(flat.size)
            if value.dtype.kind == "f":
                flat[i] = rng.choice([np.nan, np.inf, -np.inf])
                bucket = "special"
            else:
                vocab = a["vocab"] or 8
                flat[i] = rng.choice([vocab, vocab + 5, 2**31, 2**62, -1,
                                      -vocab, -vocab - 1, -2**63, 2**63 - 1])
                bucket = "negative" if -vocab <= flat[i] < 0 else \
                    "out-of-range"
            what = f"{target}[{i}] = {flat[i]}"
        for k, v in inputs.items():
            np.save(directory / f"{k}.npy", v)
        if kind == "file":
            op = rng.choice(["truncate", "garbage", "fortran", "bigendian",
                             "fifo", "directory", "missing", "pickle",
                             "header", "pb-short"])
            p = directory / paths[target]
            data = p.read_bytes()
            must_refuse = op not in ("fortran", "bigendian")
            if op == "truncate":
                p.write_bytes(data[:rng.randrange(1, len(data))])
            elif op == "garbage":
                p.write_bytes(bytes(rng.randrange(256) for _ in range(64)))
            elif op == "fortran":
                np.save(p, np.asfortranarray(value))
            elif op == "bigendian":
                np.save(p, value.astype(value.dtype.newbyteorder(">")))
            elif op == "fifo":
                p.unlink()
                os.mkfifo(p)
                fifos.append(p.name)
            elif op == "directory":
                p.unlink()
                p.mkdir()
            elif op == "missing":
                p.unlink()
            elif op == "pickle":
                np.save(p, np.array([{"a": 1}], dtype=object),
                        allow_pickle=True)
            elif op == "header":
                p.write_bytes(data.replace(b"'shape': (", b"'shape': (99999, ",
                                           1))
            elif op == "pb-short":
                from onnx import numpy_helper
                t = numpy_helper.from_array(value, target)
                t.raw_data = t.raw_data[:-8]
                p.unlink()
                p = p.with_suffix(".pb")
                p.write_bytes(t.SerializeToString())
                paths = dict(paths, **{target: p.name})
            what = f"{target} file: {op}"
        elif kind == "args":
            op = rng.choice(["drop", "duplicate", "unknown", "noname"])
            must_refuse = op != "duplicate"
            if op == "drop":
                paths = {k: v for k, v in paths.items() if k != target}
            elif op == "duplicate":
                extra = ["--input", f"{target}={paths[target]}"]
            elif op == "unknown":
                extra = ["--input", f"nosuch={paths[target]}"]
            else:
                extra = ["--input", paths[target]]
            what = f"--input {op} ({target})"
        timeout = self.fifo_timeout if fifos else 30
        steps = [self._compile_step(a["flags"])]
        if not must_refuse and not a["agrees"]:
            return  # Its untampered run is a finding already.
        if must_refuse:
            steps.append(dict(_run_step(paths, "refused", extra,
                                        timeout=timeout),
                              why=f"{what}: accepted (exit 0)"))
        else:
            steps.append({"reference": {
                "model": "model.onnx", "save": "ref",
                "inputs": {k: f"{k}.npy" for k in a["inputs"]}}})
            steps.append(_run_step(paths, "equal:ref:out", extra,
                                   timeout=timeout))
        v = execute(steps[1:], directory, self.tools)
        if v.finding():
            v.step += 1
            v.detail = f"{what}: {v.detail}"
            sig = f"{name}/input-{kind}"
            if kind in ("file", "args"):
                sig += ":" + what.split(": ")[-1].split(" ")[0]
            elif kind == "values":
                sig += ":" + bucket
            self._record(v, steps, sig, directory, fifos)


# --- libFuzzer -----------------------------------------------------------------


# --- Options, clusters and device counts -----------------------------------


def _deep_json(depth):
    return "[" * depth + "]" * depth


class Options:
    """partita-compile option combinations, as a hostile user writes them
    (on GPT-2, and one case in four on Mixtral's mixture of experts):
    each declared option (partita/Options/CompilerOptions.def) with values
    of its kind, out of range, of the wrong kind, past int64, empty; cluster
    files and JSON text with known and unknown fields, values of every JSON
    type, non-finite numbers and deep nesting; device counts up to 2^63.
    Each compile must be refused with a message or succeed with a report
    that is valid JSON: never a crash, a hang or a silent exit."""

    # Values each flag takes, and values it must refuse; a case gives one
    # flag at most a bad value, so that the others reach the checks past
    # the option parser.
    GOOD_INTS = ["1", "2", "4", "8"]
    BAD_INTS = ["0", "-1", "2.5", "x", "", "1e3", str(2**31), str(2**40),
                str(2**63 - 1), str(2**64)]
    GOOD = {
        "--mesh": ["tp=2", "dp=2", "pp=2", "sp=2", "dp=2,tp=2", "pp=2,tp=2",
                   "model=2:tp", "auto", "auto", "tp=4", "pp=2,dp=2",
                   "ep=2", "dp=2,ep=2", "ep=2,tp=2", "ep=2,pp=2"],
        "--microbatches": GOOD_INTS, "--virtual-stages": GOOD_INTS,
        "--devices": GOOD_INTS + ["16", "64"], "--max-seq": ["0", "16"],
        "--sp-mode": ["none", "megatron", "ulysses", "ring"],
        "--strategy": ["megatron", "none"],
        "--dtype": ["fp32", "bf16", "fp16"],
        "--collective-matmul": ["auto", "always", "never"],
        "--objective": ["latency", "throughput", "decode-latency"],
        "--device-memory": ["80GB", "1GB", "80GiB", "1e9", "1e6"],
        "--bind": ["batch=2", "seq=16"],
        "--moe-capacity-factor": ["0", "0.5", "1.25", "1e-9", "1e300"],
    }
    BAD = {
        "--mesh": ["", "tp=0", "tp=x", "tp=2,tp=2", "model=2:ep", "tp=3",
                   ",,", "tp=4611686018427387904,dp=4", "a=2:tp,b=2:tp",
                   "tp=2:", str(2**20 + 1) + "=2"],
        "--microbatches": BAD_INTS, "--virtual-stages": BAD_INTS,
        "--devices": BAD_INTS, "--max-seq": BAD_INTS,
        "--sp-mode": ["zigzag", ""], "--strategy": ["alpa"],
        "--dtype": ["fp8"], "--collective-matmul": ["sometimes"],
        "--objective": ["fast"],
        "--device-memory": ["0", "-1", "x", "1e400", "12zb"],
        "--bind": ["batch=two", "=2", "a=1,a=2"],
        "--moe-capacity-factor": ["-1", "nan", "inf", "x", "", "1e400"],
    }
    FLAGS = ["--no-overlap", "--no-raise", "--explain", "--explain-plan",
             "--time-phases"]
    CLUSTER_FIELDS = {
        None: ["preset", "name", "nodes", "devices_per_node", "device",
               "intra_node", "inter_node", "axes", "bogus"],
        "device": ["flops_per_second", "bytes_per_second", "memory_bytes",
                   "flops"],
        "link": ["latency_us", "bandwidth_gb_per_s", "bandwidth"],
    }

    def __init__(self, tools, findings, work, seed, timeout=30.0):
        self.tools, self.findings, self.work = tools, findings, work
        self.seed, self.timeout = seed, timeout

    def _number(self, rng):
        return rng.choice([0, 1, -1, 2, 1e15, 1e400, 2**63, 1.5, "fast",
                           None, True, [], {}])

    def _link(self, rng):
        return {rng.choice(self.CLUSTER_FIELDS["link"]): self._number(rng)
                for _ in range(rng.randrange(3))}

    def _cluster(self, rng):
        """A cluster as JSON text: fields known and not, values of every
        type; now and then nested deep."""
        if rng.randrange(8) == 0:
            return '{"preset":' + _deep_json(rng.choice([300, 50000])) + "}"
        cluster = {}
        for _ in range(rng.randrange(4)):
            key = rng.choice(self.CLUSTER_FIELDS[None])
            if key == "preset":
                cluster[key] = rng.choice(["h100-80g", "a100-80g:2x8",
                                           "default:0x8", "tpu", 3])
            elif key == "device":
                cluster[key] = {rng.choice(self.CLUSTER_FIELDS["device"]):
                                self._number(rng)
                                for _ in range(rng.randrange(3))}
            elif key in ("intra_node", "inter_node"):
                cluster[key] = self._link(rng)
            elif key == "axes":
                cluster[key] = rng.choice([[], {"tp": self._link(rng)},
                                           {"dp": 3}])
            else:
                cluster[key] = self._number(rng)
        # JSON has no infinity: Python writes 1e400 as Infinity, which is
        # not JSON; the literal keeps it a number that overflows.
        return json.dumps(cluster).replace("Infinity", "1e400")

    def make_case(self, index):
        rng = random.Random(f"{self.seed}:options:{index}")
        # Planned (--mesh auto, with the flags only it reads) or a given
        # mesh (with the schedule's flags), so that most cases pass the
        # rules between options and reach the compiler.
        auto = rng.randrange(3) == 0
        pool = (["--devices", "--objective", "--device-memory", "--dtype",
                 "--bind"] if auto else
                ["--microbatches", "--virtual-stages", "--sp-mode",
                 "--strategy", "--dtype", "--collective-matmul", "--bind"])
        chosen = ["--mesh"] + rng.sample(pool, rng.randrange(0, 4))
        bad = rng.choice(chosen) if rng.randrange(3) == 0 else None
        flags = []
        for flag in chosen:
            if flag == bad:
                value = rng.choice(self.BAD[flag])
            elif flag == "--mesh":
                value = "auto" if auto else rng.choice(
                    [m for m in self.GOOD[flag] if m != "auto"])
            else:
                value = rng.choice(self.GOOD[flag])
            flags += [flag, value]
        flags += rng.sample([f for f in self.FLAGS
                             if auto or f != "--explain-plan"],
                            rng.randrange(3))
        files = {}
        if rng.randrange(3) == 0:
            text = self._cluster(rng)
            if rng.randrange(2):
                files["cluster.json"] = text
                flags += ["--cluster", "cluster.json"]
            else:
                flags += ["--cluster", text]
        mode = rng.choice(["artifact", "artifact", "dump"] +
                          (["plan"] if auto else []))
        if mode == "plan":
            flags += ["--emit", "plan"]
        elif mode == "dump":
            flags += ["--dump-pipeline"]
        else:
            flags += ["-o", "art", "--report", "report.json"]
        return flags, files

    def run_case(self, index):
        flags, files = self.make_case(index)
        directory = self.work / f"o{index}"
        directory.mkdir(parents=True)
        try:
            # One case in four on a mixture of experts (Mixtral), where
            # ep meshes and the capacity factor are more than refused.
            model = ("hf/mixtral.legacy.onnx" if index % 4 == 0
                     else "gpt2.onnx")
            os.symlink(ROOT / "test" / "models" / model,
                       directory / "model.onnx")
            for name, text in files.items():
                (directory / name).write_text(text)
            steps = [{"run": ["partita-compile", "model.onnx", *flags],
                      "timeout": self.timeout, "expect": "no-crash"}]
            v = execute(steps, directory, self.tools)
            report = directory / "report.json"
            if v.cls == "fine" and v.detail != "refused" and report.exists():
                def refuse(constant):
                    raise ValueError(f"non-finite number {constant}")
                try:
                    # NaN and Infinity are no JSON (C's -nan is no token).
                    json.loads(report.read_text(), parse_constant=refuse)
                except ValueError as e:
                    v = Verdict("wrong-answer",
                                f"the report is not valid JSON: {e}", v.res, 0)
            if v.finding():
                sig = " ".join(f for f in flags if f.startswith("--"))
                record = finding_record(v, steps, [self.seed, index],
                                        target="options")
                self.findings.add(v.cls, f"options {sig}", record,
                                  copy_files(directory))
        finally:
            shutil.rmtree(directory, ignore_errors=True)


class Api:
    """The Python and C APIs called with hostile arguments (fuzz/api.py):
    each case runs in a process of its own, so that a crash is seen as one,
    on a plain and a serving GPT-2 and a serving onnxruntime-genai Llama
    export, compiled once."""

    def __init__(self, tools, findings, work, seed, timeout=60.0):
        self.tools, self.findings = tools, findings
        self.work, self.seed, self.timeout = work / "api", seed, timeout

    def prepare(self):
        self.work.mkdir(parents=True, exist_ok=True)
        models = ROOT / "test" / "models"
        shutil.copyfile(models / "gpt2.onnx", self.work / "gpt2.onnx")
        shutil.copyfile(models / "hf" / "gpt2_kv.optimum.onnx",
                        self.work / "gpt2_kv.onnx")
        for cmd in (["partita-compile", "gpt2.onnx", "-o", "plain"],
                    ["partita-compile", "gpt2_kv.onnx", "--bind",
                     "batch_size=2,sequence_length=8", "--max-seq", "16",
                     "-o", "serving"],
                    ["partita-compile", str(models / "genai" / "llama.fp32"),
                     "--bind", "batch_size=2,sequence_length=8",
                     "--max-seq", "16", "-o", "serving_genai"]):
            subprocess.run(self.tools.resolve(cmd), cwd=self.work, check=True,
                           capture_output=True)

    def environment(self):
        """The worker's environment: a sanitized build's extension and
        libpartita load only into an interpreter that preloads the
        sanitizer runtimes (scripts/test --sanitize), whose own objects
        LeakSanitizer must not count; the C calls stay checked."""
        env = dict(os.environ)
        try:
            cache = (self.tools.build / "CMakeCache.txt").read_text()
        except OSError:
            return env
        m = re.search(r"^PARTITA_SANITIZER_PRELOAD:INTERNAL=(.*)$", cache,
                      re.M)
        if m and m.group(1).strip():
            env["LD_PRELOAD"] = m.group(1).strip()
            env["LSAN_OPTIONS"] = "detect_leaks=0"
        return env

    def run_case(self, index):
        cmd = [sys.executable, str(FUZZ / "api.py"), "--seed", self.seed,
               "--index", str(index), "--work", str(self.work), "--build",
               str(self.tools.build)]
        res = run_tool(cmd, self.timeout, env=self.environment())
        lines = [json.loads(line) for line in res.out.splitlines()
                 if line.startswith("{")]
        done = [line for line in lines if "outcome" in line]
        last = lines[-1]["call"] if lines else "(before the first call)"
        verdicts = []
        if res.timed_out:
            verdicts.append(("hang", last, "past the timeout"))
        elif res.rc < 0 or res.rc >= 128 or CRASH_TEXT.search(res.err):
            verdicts.append(("crash", last, f"exit {res.rc}"))
        elif res.rc != 0:
            verdicts.append(("crash", last, f"the case itself failed "
                             f"(exit {res.rc}): {res.err[-300:]}"))
        for line in done:
            message, call = line["message"], line["call"]
            if line["outcome"] == "unexpected":
                verdicts.append(("empty-diagnostic", call,
                                 f"{line['type']}: {message}"))
            elif line["outcome"] == "error" and (
                    not message.strip() or
                    "incompatible function arguments" in message):
                verdicts.append(("empty-diagnostic", call,
                                 f"{line['type']}: {message!r}"))
            elif line["outcome"] == "ok" and line["invalid"]:
                verdicts.append(("accepted-invalid", call, "accepted"))
        for cls, call, detail in verdicts:
            signature = f"api {re.sub(r'[(=].*', '', call)}"
            record = {"detail": f"{call}: {detail}",
                      "command": shlex.join(cmd), "returncode": res.rc,
                      "stderr": res.err[-2000:], "target": "api",
                      "case": [self.seed, index], "digest": hashlib.sha256(
                          f"{self.seed}:{index}:{call}".encode()
                      ).hexdigest()[:10]}
            self.findings.add(cls, signature, record, lambda path: None)


class Training:
    """Training inputs (issue 35): --data batches and --load checkpoints,
    tampered one way per case, on a GPT-2 training step compiled for one
    rank and for dp=2. A run must end in a step or a message, never a
    crash or a hang; an input known to be invalid (a label out of range,
    a checkpoint whose bytes no longer match its hash) must be refused;
    and both meshes must give the same outcome (the same loss, or both a
    refusal), as every mesh must for every input."""

    MESHES = {"one": [], "dp2": ["--mesh", "dp=2"]}

    def __init__(self, tools, findings, work, seed, timeout=60.0):
        self.tools, self.findings = tools, findings
        self.work, self.seed, self.timeout = work / "training", seed, timeout

    def prepare(self):
        self.work.mkdir(parents=True, exist_ok=True)
        train = ROOT / "test" / "models" / "train"
        shutil.copyfile(train / "gpt2.onnx", self.work / "gpt2.onnx")
        data = np.load(train / "gpt2.train.npz")
        self.batch = {key.split("/", 1)[1]: data[key] for key in data.files
                      if key.startswith("batch0/")}
        (self.work / "data").mkdir(exist_ok=True)
        np.savez(self.work / "data" / "batch0.npz", **self.batch)
        for name, flags in self.MESHES.items():
            subprocess.run(self.tools.resolve(
                ["partita-compile", "gpt2.onnx", "--train", "--loss",
                 "cross_entropy:logits", "--optimizer",
                 "adamw:lr=0.01", *flags, "-o", f"art-{name}"]),
                cwd=self.work, check=True, capture_output=True)
            subprocess.run(self.tools.resolve(
                ["partita-run", f"art-{name}", "--train-steps", "1",
                 "--data", "data", "--save", f"ckpt-{name}"]),
                cwd=self.work, check=True, capture_output=True)

    # Each returns (files to write into the case's data folder, the
    # checkpoint tamper or None, whether the input is invalid).
    def _batch_case(self, rng):
        batch = {k: v.copy() for k, v in self.batch.items()}
        kind = rng.randrange(9)
        if kind == 0:
            batch["labels"].flat[rng.randrange(batch["labels"].size)] = \
                rng.choice([128, -1, -101, 2**62, -2**63])
            return {"b.npz": ("npz", batch)}, None, True
        if kind == 1:
            del batch[rng.choice(sorted(batch))]
            return {"b.npz": ("npz", batch)}, None, True
        if kind == 2:
            name = rng.choice(sorted(batch))
            batch[name] = batch[name].astype(rng.choice(
                [np.int32, np.float32, np.float64, np.uint8, np.bool_]))
            return {"b.npz": ("npz", batch)}, None, True
        if kind == 3:
            name = rng.choice(sorted(batch))
            batch[name] = batch[name].reshape(-1)[:rng.randrange(1, 40)]
            return {"b.npz": ("npz", batch)}, None, True
        if kind == 4:
            batch["extra"] = np.zeros(3)
            return {"b.npz": ("npz", batch)}, None, True
        if kind == 5:
            raw = bytearray(self._npz_bytes(batch))
            for _ in range(rng.randrange(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            cut = rng.choice([len(raw), rng.randrange(len(raw))])
            return {"b.npz": ("raw", bytes(raw[:cut]))}, None, None
        if kind == 6:
            batch["input_ids"].flat[rng.randrange(32)] = rng.choice(
                [128, -129, 2**40, -2**63])
            return {"b.npz": ("npz", batch)}, None, None
        if kind == 7:
            return {"b.npz": ("raw", rng.choice(
                [b"", b"PK", b"PK\x05\x06" + bytes(18), b"\x93NUMPY"]))}, \
                None, True
        # A valid batch, compressed: must train as the stored one does.
        return {"b.npz": ("npz-compressed", batch)}, None, False

    def _npz_bytes(self, batch):
        import io
        buffer = io.BytesIO()
        np.savez(buffer, **batch)
        return buffer.getvalue()

    def _checkpoint_case(self, rng):
        kind = rng.randrange(6)
        data = {"b.npz": ("npz", self.batch)}
        if kind == 0:
            return data, ("flip", rng.randrange(1 << 16)), True
        if kind == 1:
            return data, ("truncate", rng.randrange(1 << 16)), True
        if kind == 2:
            field = rng.choice(["step", "format", "mesh", "optimizer",
                                "parameters", "ranks"])
            value = rng.choice([None, -1, 2**70, "x", [], {}, 1e400 if False
                                else 1.5, [[[[]]]]])
            return data, ("json", field, value), True
        if kind == 3:
            return data, ("slice", rng.randrange(1 << 16)), None
        if kind == 4:
            return data, ("remove", "rank0.safetensors"), True
        return data, ("json-text", rng.choice(
            ["", "{", "[]", "null", '{"format": "partita-checkpoint/1"}',
             "[" * 50000])), True

    def _tamper(self, ckpt, tamper):
        import json as _json
        what = tamper[0]
        if what in ("flip", "truncate"):
            files = sorted(ckpt.glob("*.safetensors"))
            path = files[tamper[1] % len(files)]
            raw = bytearray(path.read_bytes())
            if what == "flip":
                raw[tamper[1] % len(raw)] ^= 0x40
            else:
                raw = raw[:tamper[1] % len(raw)]
            path.write_bytes(bytes(raw))
        elif what == "json":
            meta = _json.loads((ckpt / "checkpoint.json").read_text())
            meta[tamper[1]] = tamper[2]
            (ckpt / "checkpoint.json").write_text(_json.dumps(meta))
        elif what == "slice":
            meta = _json.loads((ckpt / "checkpoint.json").read_text())
            shard = meta["ranks"][0]
            name = sorted(shard["slices"])[tamper[1] % len(shard["slices"])]
            shard["slices"][name] = [[0, 10**9]]
            (ckpt / "checkpoint.json").write_text(_json.dumps(meta))
        elif what == "remove":
            (ckpt / tamper[1]).unlink()
        elif what == "json-text":
            (ckpt / "checkpoint.json").write_text(tamper[1])

    def run_case(self, index):
        import random
        rng = random.Random(f"{self.seed}:training:{index}")
        checkpoint = rng.randrange(3) == 0
        files, tamper, invalid = (self._checkpoint_case(rng) if checkpoint
                                  else self._batch_case(rng))
        outcomes = {}
        for mesh in self.MESHES:
            case = self.work / f"case{index}-{mesh}"
            (case / "data").mkdir(parents=True)
            for name, (kind, value) in files.items():
                path = case / "data" / name
                if kind == "raw":
                    path.write_bytes(value)
                elif kind == "npz-compressed":
                    np.savez_compressed(path, **value)
                else:
                    np.savez(path, **value)
            cmd = ["partita-run", str(self.work / f"art-{mesh}"),
                   "--train-steps", "2" if checkpoint else "1", "--data",
                   str(case / "data"), "--output-dir", str(case / "out"),
                   "--timeout", "20"]
            if checkpoint:
                shutil.copytree(self.work / f"ckpt-{mesh}", case / "ckpt")
                self._tamper(case / "ckpt", tamper)
                cmd += ["--load", str(case / "ckpt")]
            res = run_tool(self.tools.resolve(cmd), self.timeout)
            cls = res.classify()
            loss = None
            if cls == "accepted":
                loss = np.load(case / "out" / "loss.npy").tobytes()
            outcomes[mesh] = (cls, loss, res)
            shutil.rmtree(case, ignore_errors=True)
        verdicts = []
        for mesh, (cls, _, res) in outcomes.items():
            if cls in ("crash", "hang", "empty-diagnostic"):
                verdicts.append((cls, mesh, res))
            elif cls == "accepted" and invalid:
                verdicts.append(("accepted-invalid", mesh, res))
        (one, loss_one, res), (dp2, loss_dp2, _) = outcomes.values()
        # A mesh's loss may differ in the last bits from another's (the
        # reduction order); a refusal on one and a step on the other is
        # a difference no rounding explains.
        if (one == "accepted") != (dp2 == "accepted") or (
                loss_one is not None and loss_dp2 is not None and not
                np.allclose(np.frombuffer(loss_one, np.float32),
                            np.frombuffer(loss_dp2, np.float32),
                            rtol=1e-4, equal_nan=True)):
            verdicts.append(("mesh-mismatch", "one vs dp2", res))
        for cls, where, res in verdicts:
            detail = (f"{'checkpoint ' + repr(tamper) if checkpoint else 'batch'}"
                      f" on {where}: {res.err.strip()[-300:]}")
            record = {"detail": detail, "command": shlex.join(
                          str(c) for c in res.cmd),
                      "returncode": res.rc, "stderr": res.err[-2000:],
                      "target": "training", "case": [self.seed, index],
                      "digest": hashlib.sha256(
                          f"{self.seed}:{index}".encode()).hexdigest()[:10]}
            signature = f"training {cls} {'checkpoint' if checkpoint else 'batch'}"
            self.findings.add(cls, signature, record, lambda path: None)


def fuzz_build_dir():
    return pathlib.Path(os.environ.get("PARTITA_FUZZ_BUILD_DIR",
                                       ROOT / "build-fuzz"))


def libfuzzer_binary():
    return fuzz_build_dir() / "bin" / "partita-fuzz-importer"


_SANITIZERS = {"ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=0",
               "UBSAN_OPTIONS": "print_stacktrace=1"}


def _headline(report):
    """The line of a sanitizer or libFuzzer report that says what failed."""
    for pattern in (r"ERROR: AddressSanitizer.*", r".*runtime error:.*",
                    r".*Assertion .* failed.*", r"partita-fuzz-importer: .*",
                    r"==\d+== ERROR: .*", r"LLVM ERROR: .*"):
        m = re.search(pattern, report)
        if m:
            # Where: the first frame in Partita's own code.
            frame = re.search(r"#\d+ 0x[0-9a-f]+ in (\S+).* \S*?((?:lib|fuzz)/"
                              r"(?:Frontend|Dialect|Pipelines|importer)/"
                              r"\S+:\d+)", report)
            where = f" at {frame.group(1)[:80]} {frame.group(2)}" if frame \
                else ""
            return m.group(0).strip() + where
    return "(no report)"


def libfuzzer_regression(corpus=None, timeout=600):
    """The importer target once over every file of `corpus` (default
    fuzz/corpus/importer), as libFuzzer's -runs=0. Returns [(file, the
    end of its report)] for the files that crashed or reported."""
    corpus = pathlib.Path(corpus or FUZZ / "corpus" / "importer")
    files = sorted(str(p) for p in corpus.iterdir() if p.is_file())
    env = dict(os.environ, **_SANITIZERS)
    failed, deadline = [], time.monotonic() + timeout
    # One process for all files; after a failure, again past that file.
    while files and time.monotonic() < deadline:
        proc = subprocess.run([str(libfuzzer_binary()), "-runs=0",
                               "-timeout=20", "-rss_limit_mb=4096", *files],
                              capture_output=True, text=True, env=env,
                              timeout=timeout)
        if proc.returncode == 0:
            break
        ran = re.findall(r"^Running: (.*)$", proc.stderr, re.M)
        if not ran or ran[-1] not in files:
            failed.append(("?", proc.stderr[-3000:]))
            break
        failed.append((pathlib.Path(ran[-1]).name,
                       _headline(proc.stderr.split(f"Running: {ran[-1]}")[-1])
                       + "\n" + proc.stderr[-3000:]))
        files = files[files.index(ran[-1]) + 1:]
    return failed


def run_libfuzzer(seconds, findings_dir, jobs):
    """libFuzzer for `seconds` from fuzz/corpus/importer (new inputs go to a
    scratch corpus); crashing inputs land in findings_dir/importer/."""
    out = pathlib.Path(findings_dir) / "importer"
    out.mkdir(parents=True, exist_ok=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="partita-libfuzzer-"))
    cmd = [str(libfuzzer_binary()), str(scratch),
           str(FUZZ / "corpus" / "importer"),
           f"-max_total_time={max(1, int(seconds))}", "-timeout=20",
           "-rss_limit_mb=4096", f"-dict={FUZZ / 'importer' / 'onnx.dict'}",
           f"-artifact_prefix={out}/", f"-fork={max(1, jobs)}",
           "-ignore_crashes=1", "-ignore_timeouts=1", "-ignore_ooms=1"]
    print("importer:", shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, env=dict(os.environ, **_SANITIZERS),
                          capture_output=True, text=True)
    shutil.rmtree(scratch, ignore_errors=True)
    kinds = {}
    for p in sorted(out.iterdir()):
        kinds.setdefault(p.name.split("-")[0], []).append(p.name)
    stats = [l for l in proc.stderr.splitlines() if "exiting" in l or
             "stat::" in l or "DONE" in l][-3:]
    print("importer:", {k: len(v) for k, v in kinds.items()}, "in", out,
          *stats, sep="\n  ")
    return kinds


# --- Replaying reproducers ------------------------------------------------------


def replay(path, tools):
    """Runs a reproducer directory's steps in a scratch copy. A fixed
    reproducer ends 'fine': refused with a message, or accepted and
    agreeing; anything else is returned as it ended."""
    path = pathlib.Path(path)
    spec = json.loads((path / "finding.json").read_text())
    with tempfile.TemporaryDirectory(prefix="partita-replay-") as tmp:
        work = pathlib.Path(tmp)
        for item in path.iterdir():
            if item.name != "finding.json" and item.is_file():
                shutil.copy(item, work / item.name)
        for name in spec.get("fifos", []):
            (work / name).unlink(missing_ok=True)
            os.mkfifo(work / name)
        # Committed models that a reproducer reads in place.
        for name, rel in spec.get("links", {}).items():
            os.symlink(ROOT / rel, work / name)
        return execute(spec["steps"], work, tools)


def corpus_findings():
    return sorted(p.parent for p in
                  (FUZZ / "corpus" / "findings").glob("*/finding.json"))


# --- Driver ------------------------------------------------------------------------


def _guarded(target, index):
    """One case; a failure of the oracle itself is reported, and the
    campaign goes on."""
    try:
        target.run_case(index)
        return None
    except Exception as e:  # noqa: BLE001
        import traceback
        return f"case {index}: {e!r}\n{traceback.format_exc(limit=4)}"


def _run_target(target, count, deadline, jobs, findings, label, start):
    """Cases 0, 1, ... of `target` on `jobs` threads: `count` of them, or as
    many as fit before `deadline`."""
    futures, index = set(), 0
    errors = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        while (index < count) if deadline is None else \
                (time.monotonic() < deadline):
            while len(futures) >= 2 * jobs:
                done, futures = concurrent.futures.wait(
                    futures, return_when=concurrent.futures.FIRST_COMPLETED)
                errors += [f.result() for f in done if f.result()]
            futures.add(pool.submit(_guarded, target, index))
            index += 1
        errors += [f.result() for f in futures if f.result()]
    for e in errors:
        print(f"{label}: oracle error in {e}", file=sys.stderr)
    findings.oracle_errors += len(errors)
    findings.cases += index
    print(f"{label}: {index} cases, {time.monotonic() - start:.1f} s",
          flush=True)


def campaign(build, targets, findings_dir, seed="0", cases=300,
             runtime_cases=80, seconds=0, jobs=2, minimize=0,
             option_cases=100, api_cases=60, training_cases=40):
    """Runs the campaign; returns (Findings, seconds)."""
    tools = Tools(build)
    findings = Findings(findings_dir)
    work = pathlib.Path(tempfile.mkdtemp(prefix="partita-fuzz-"))
    start = time.monotonic()
    share = seconds / len(targets) if seconds else 0
    try:
        if "importer" in targets and libfuzzer_binary().exists():
            if seconds:
                kinds = run_libfuzzer(share, findings_dir, jobs)
            else:
                failed = libfuzzer_regression()
                kinds = {"crash": [name for name, _ in failed]}
                for name, tail in failed:
                    print(f"importer: {name}:\n{tail[-1200:]}")
            for kind, names in kinds.items():
                cls = "hang" if kind == "timeout" else "crash"
                findings.counts[cls] += len(names)
                for name in names:
                    findings.signatures[(cls, f"libfuzzer/{name}")] = 1
        elif "importer" in targets:
            print(f"importer: {libfuzzer_binary()} is not built; skipped")
        if "structured" in targets:
            s = Structured(tools, findings, work, seed, minimize=minimize)
            _run_target(s, cases, time.monotonic() + share if seconds
                        else None, jobs, findings, "structured", start)
        if "options" in targets:
            o = Options(tools, findings, work, seed)
            _run_target(o, option_cases, time.monotonic() + share if seconds
                        else None, jobs, findings, "options", start)
        if "api" in targets:
            a = Api(tools, findings, work, seed)
            a.prepare()
            _run_target(a, api_cases, time.monotonic() + share if seconds
                        else None, jobs, findings, "api", start)
        if "training" in targets:
            t = Training(tools, findings, work, seed)
            t.prepare()
            _run_target(t, training_cases, time.monotonic() + share
                        if seconds else None, jobs, findings, "training",
                        start)
        if "runtime" in targets:
            r = Runtime(tools, findings, work, seed)
            r.prepare()
            _run_target(r, runtime_cases, time.monotonic() + share if seconds
                        else None, jobs, findings, "runtime", start)
    finally:
        close_workers()
        shutil.rmtree(work, ignore_errors=True)
    return findings, time.monotonic() - start


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="all",
                   choices=["importer", "structured", "options", "api",
                            "training", "runtime", "all"])
    p.add_argument("--seconds", type=float, default=0,
                   help="run this long, split between the targets "
                        "(0: the fixed case counts)")
    p.add_argument("--seed", default="0")
    p.add_argument("--cases", type=int, default=300,
                   help="structured cases (without --seconds)")
    p.add_argument("--runtime-cases", type=int, default=80)
    p.add_argument("--option-cases", type=int, default=100)
    p.add_argument("--api-cases", type=int, default=60)
    p.add_argument("--training-cases", type=int, default=40)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--minimize", type=int, default=0, metavar="N",
                   help="minimize each written model finding with up to N "
                        "compiles")
    p.add_argument("--build", default=str(ROOT / "build"))
    p.add_argument("--findings", default=None,
                   help="write reproducers here (default: a temp dir)")
    p.add_argument("--replay", nargs="*", metavar="DIR",
                   help="replay reproducer directories (none given: "
                        "fuzz/corpus/findings)")
    p.add_argument("--ort-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ort_worker:
        ort_worker_main()
        return 0
    if args.replay is not None:
        tools = Tools(args.build)
        bad = 0
        try:
            for d in args.replay or corpus_findings():
                v = replay(d, tools)
                print(f"{'ok  ' if v.cls == 'fine' else 'FAIL'} {d}: "
                      f"{v.cls}: {v.detail}")
                bad += v.cls != "fine"
        finally:
            close_workers()
        return 1 if bad else 0
    findings_dir = args.findings or tempfile.mkdtemp(prefix="partita-findings-")
    targets = (["importer", "structured", "options", "api", "training",
                "runtime"] if args.target == "all" else [args.target])
    findings, seconds = campaign(args.build, targets, findings_dir,
                                 seed=args.seed, cases=args.cases,
                                 runtime_cases=args.runtime_cases,
                                 option_cases=args.option_cases,
                                 api_cases=args.api_cases,
                                 training_cases=args.training_cases,
                                 seconds=args.seconds, jobs=args.jobs,
                                 minimize=args.minimize)
    print(findings.summary())
    print(f"reproducers in {findings_dir}; {seconds:.1f} s")
    return 1 if findings.total() else 0


if __name__ == "__main__":
    sys.exit(main())
