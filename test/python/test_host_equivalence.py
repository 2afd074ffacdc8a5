"""The committed torch exports, compiled for the host and run on one rank,
match onnxruntime's CPU results (fp32: rtol 1e-4, atol 1e-5).

Reference inputs and outputs are test/models/<name>.{inputs,outputs}.npz,
made by test/models/make_reference.py with onnxruntime."""

import numpy as np
import pytest

from conftest import ROOT, compile_and_run

MODELS = ROOT / "test" / "models"


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("variant", ["", "_dynamic"])
def test_model_matches_onnxruntime(tmp_path, name, variant):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    flags = ["--bind", "batch=2,seq=16"] if variant else []
    outputs, _ = compile_and_run(tmp_path, MODELS / f"{name}{variant}.onnx", inputs, *flags)
    assert set(outputs) == set(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name}{variant}: output {key}")
