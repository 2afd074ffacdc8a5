"""The committed torch exports, compiled for the host and run on one rank,
match onnxruntime's CPU results (fp32: rtol 1e-4, atol 1e-5).

Reference inputs and outputs are test/models/<name>.{inputs,outputs}.npz,
made by test/models/make_reference.py with onnxruntime."""

import subprocess

import numpy as np
import pytest

from conftest import BUILD, ROOT

MODELS = ROOT / "test" / "models"


def compile_and_run(tmp_path, model, inputs, *flags):
    art = tmp_path / "art"
    compile_ = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o", str(art), *flags],
        capture_output=True, text=True, timeout=300)
    assert compile_.returncode == 0, compile_.stderr
    args = [str(BUILD / "bin" / "partita-run"), str(art),
            "--output-dir", str(tmp_path / "out")]
    for name, value in inputs.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, value)
        args += ["--input", f"{name}={path}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return {p.stem: np.load(p) for p in (tmp_path / "out").glob("*.npy")}


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("variant", ["", "_dynamic"])
def test_model_matches_onnxruntime(tmp_path, name, variant):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    flags = ["--bind", "batch=2,seq=16"] if variant else []
    outputs = compile_and_run(tmp_path, MODELS / f"{name}{variant}.onnx", inputs, *flags)
    assert set(outputs) == set(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name}{variant}: output {key}")
