"""--dtype bf16 and fp16: weights, activations and transfers stored in 16
bits, arithmetic accumulated in fp32. On host ranks every committed
transformer, unsharded and on tp=2 and dp=2×tp=2, equals onnxruntime's
fp32 run compared in fp32 (rtol 2e-2, DESIGN.md), and the report's bytes
(weights, activations, all-reduce traffic) halve against fp32."""

import numpy as np
import onnx
import pytest

from conftest import BUILD, ROOT, compile_and_run

MODELS = ROOT / "test" / "models"
NAMES = ["gpt2", "llama", "bert"]


def close(actual, expected, what):
    """bf16 keeps 8 bits of mantissa: rtol 2e-2 of the output's scale."""
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual.astype(np.float32), expected,
                               rtol=2e-2, atol=2e-2 * scale, err_msg=what)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mesh", [None, "tp=2", "dp=2,tp=2"])
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_matches_onnxruntime(tmp_path, name, mesh, dtype):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    flags = ["--dtype", dtype] + (["--mesh", mesh] if mesh else [])
    outputs, _ = compile_and_run(tmp_path, MODELS / f"{name}.onnx", inputs,
                                 *flags)
    assert set(outputs) == set(expected)
    for key, want in expected.items():
        # The artifact keeps the model's interface: fp32 in, fp32 out.
        assert outputs[key].dtype == want.dtype
        close(outputs[key], want, f"{name} {mesh} {dtype}")


def test_bf16_halves_bytes(tmp_path):
    inputs = dict(np.load(MODELS / "gpt2.inputs.npz"))
    _, full = compile_and_run(tmp_path / "fp32", MODELS / "gpt2.onnx", inputs,
                              "--mesh", "tp=2")
    _, half = compile_and_run(tmp_path / "bf16", MODELS / "gpt2.onnx", inputs,
                              "--mesh", "tp=2", "--dtype", "bf16")

    def all_reduce_bytes(report):
        return sum(c["bytes"] for c in report["ranks"][0]["collectives"]
                   if c["kind"] == "all_reduce")

    assert all_reduce_bytes(half) * 2 == all_reduce_bytes(full)
    weights = [r["weight_bytes"] for r in (full, half)
               for r in [r["ranks"][0]]]
    # Integer weights (position ids, if any) stay as they are.
    assert weights[1] * 2 == pytest.approx(weights[0], rel=0.01)
    assert (half["ranks"][0]["peak_activation_bytes"]
            < full["ranks"][0]["peak_activation_bytes"])
