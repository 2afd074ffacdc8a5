"""Shared fixtures for the Python tests: where the built tools are, and a
helper that compiles an onnx.helper model and returns the printed IR."""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The build tree whose tools (bin/) and Python package (python/) the tests
# use: build/, or PARTITA_BUILD_DIR (scripts/test --sanitize sets
# build-sanitize/). Its package comes first on sys.path, so that `import
# partita` loads the extension of the same tree as the tools.
BUILD = pathlib.Path(os.environ.get("PARTITA_BUILD_DIR", ROOT / "build"))
if (BUILD / "python" / "partita").is_dir():
    sys.path.insert(0, str(BUILD / "python"))


def _sanitizer_preload(build):
    """The LD_PRELOAD a sanitized build's extension needs, or ''."""
    try:
        cache = (build / "CMakeCache.txt").read_text()
    except OSError:
        return ""
    m = re.search(r"^PARTITA_SANITIZER_PRELOAD:INTERNAL=(.*)$", cache, re.M)
    return m.group(1).strip() if m else ""


def pytest_configure(config):
    # A sanitized extension cannot load into an interpreter that did not
    # preload the sanitizer runtimes: say so once instead of failing every
    # test module that imports partita.
    preload = _sanitizer_preload(BUILD)
    loaded = os.environ.get("LD_PRELOAD", "")
    missing = [p for p in preload.split(":") if p and p not in loaded]
    if missing:
        raise pytest.UsageError(
            f"{BUILD} is a sanitized build (PARTITA_SANITIZE=ON): run pytest "
            f"with LD_PRELOAD={preload} (scripts/test --sanitize does)")
    if preload:
        # This interpreter has them; the processes it starts must not: the
        # tools link the runtimes themselves, and nvcc (which partita-compile
        # runs for --target cuda) crashes with them preloaded. They are
        # checked for leaks, which only the interpreter is not (Python never
        # frees its own objects at exit).
        kept = [p for p in loaded.split(":")
                if p and p not in preload.split(":")]
        if kept:
            os.environ["LD_PRELOAD"] = ":".join(kept)
        else:
            del os.environ["LD_PRELOAD"]
        lsan = [o for o in os.environ.get("LSAN_OPTIONS", "").split(":")
                if o and o != "detect_leaks=0"]
        if lsan:
            os.environ["LSAN_OPTIONS"] = ":".join(lsan)
        else:
            os.environ.pop("LSAN_OPTIONS", None)


def onnx_model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    """A one-graph model of the default domain at `opset` built with
    onnx.helper (IR 8 up to opset 17, IR 10 above), importing also each
    (domain, version) of `domains`."""
    graph = onnx.helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", opset)] +
        [onnx.helper.make_opsetid(d, v) for d, v in domains])
    m.ir_version = 8 if opset <= 17 else 10
    return m


def value_info(name, elem, shape):
    return onnx.helper.make_tensor_value_info(name, elem, shape)


def initializer(name, array):
    return onnx.numpy_helper.from_array(np.asarray(array), name)


def serving_prompt():
    """The serving tests' prompts: two rows of 6 token ids (1 to 127), the
    second left-padded by 2 (id 0, mask 0), as a tokenizer pads a batch."""
    rng = np.random.default_rng(19)
    ids = rng.integers(1, 128, size=(2, 6)).astype(np.int64)
    mask = np.ones((2, 6), np.int64)
    ids[1, :2] = 0
    mask[1, :2] = 0
    return ids, mask


def check_greedy_generation(tokens, logits, want_tokens, want_logits):
    """A generation (tokens [batch, steps], logits [steps, batch, vocab])
    against a float reference's greedy one: every step's logits within
    rtol 1e-4 (atol 1e-5), every choice of the reference decided by a
    top-two margin above twice the logits' difference at that step (so
    that no other CPU's rounding could pick another token: a near tie
    fails here, by name, rather than as a token), and then the tokens
    equal."""
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    top2 = np.sort(want_logits, -1)[..., -2:]
    margin = top2[..., 1] - top2[..., 0]
    difference = np.abs(logits - want_logits).max(-1)
    step, row = np.unravel_index(np.argmin(margin - 2 * difference),
                                 margin.shape)
    assert margin[step, row] > 2 * difference[step, row], (
        f"step {step}, row {row}: the reference's top-two margin "
        f"{margin[step, row]:.3g} is under twice the logits' difference "
        f"{difference[step, row]:.3g}, a near tie")
    np.testing.assert_array_equal(tokens, want_tokens)


def check_bf16_steps(artifact, ids, mask, want_tokens, want_logits,
                     min_clear, steps=8):
    """bf16 keeps 8 bits of mantissa: a serving artifact's prefill and
    first `steps - 1` decode steps, teacher-forced with an fp32 reference's
    tokens, give logits within 2e-2 of their scale, and the greedy token
    wherever the reference's top-two margin exceeds twice that (at least
    `min_clear` of them)."""
    logits = [artifact.prefill(ids, attention_mask=mask)]
    for step in range(steps - 1):
        logits.append(artifact.step(want_tokens[:, step]))
    logits = np.stack(logits)
    scale = float(np.abs(want_logits[:steps]).max())
    np.testing.assert_allclose(logits, want_logits[:steps], rtol=2e-2,
                               atol=2e-2 * scale)
    top2 = np.sort(want_logits[:steps], -1)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > 4e-2 * scale
    assert clear.sum() >= min_clear
    np.testing.assert_array_equal(logits.argmax(-1)[clear],
                                  want_tokens.T[:steps][clear])


def compile_and_run(directory, model, inputs, *flags):
    """Compiles `model` into an artifact under `directory` (with a report),
    runs it with partita-run on `inputs` (name -> array), and returns
    (outputs by name, report dict)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    art = directory / "art"
    report = directory / "report.json"
    compiled = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o", str(art),
         "--report", str(report), *flags],
        capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, compiled.stderr
    args = [str(BUILD / "bin" / "partita-run"), str(art),
            "--output-dir", str(directory / "out")]
    for name, value in inputs.items():
        path = directory / f"{name}.npy"
        np.save(path, value)
        args += ["--input", f"{name}={path}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    outputs = {p.stem: np.load(p) for p in (directory / "out").glob("*.npy")}
    return outputs, json.loads(report.read_text())


class CompileResult:
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.ir = proc.stdout
        self.stderr = proc.stderr

    def ok(self):
        assert self.returncode == 0, self.stderr
        return self


@pytest.fixture
def compile_model(tmp_path):
    """compile_model(model, *flags) -> CompileResult."""
    compiler = BUILD / "bin" / "partita-compile"
    if not compiler.exists():
        pytest.fail(f"{compiler} is missing; build first (scripts/build)")

    def run(model, *flags):
        path = tmp_path / "model.onnx"
        onnx.save(model, path)
        proc = subprocess.run([str(compiler), str(path), "--emit", "nn", *flags],
                              capture_output=True, text=True, timeout=60)
        return CompileResult(proc)

    return run


_TYPES = {"f32": np.float32, "f16": np.float16, "i64": np.int64,
          "i32": np.int32, "i8": np.int8, "i1": np.bool_}


def returned_constants(ir):
    """The values a fully folded `func.func @main` returns, as numpy arrays
    decoded from their inline `nn.constant dense<...>`."""
    ret = re.search(r"return (.*?) :", ir)
    assert ret, ir
    values = []
    for name in [v.strip() for v in ret.group(1).split(",")]:
        m = re.search(re.escape(name) + r" = nn.constant dense<(.*?)> : tensor<(.*?)>\n", ir)
        assert m, f"{name} is not a folded constant:\n{ir}"
        body, type_ = m.groups()
        *dims, elem = type_.split("x") if "x" in type_ else [type_]
        shape = [int(d) for d in dims]
        dtype = _TYPES[elem]
        if body.startswith('"0x'):
            raw = bytes.fromhex(body[3:-1])
            arr = np.frombuffer(raw, dtype=dtype)
        else:
            text = body.replace("true", "1").replace("false", "0")
            flat = [float(x) for x in re.findall(r"[-+0-9.eEinf]+", text)]
            arr = np.array(flat, dtype=np.float64).astype(dtype)
        if arr.size == 1 and np.prod(shape, dtype=int) != 1:
            arr = np.full(shape, arr.reshape(()), dtype=dtype)
        values.append(arr.reshape(shape))
    return values
