"""The training fixtures (test/models/train/, issue 35): models exported
with do_constant_folding=False, as training needs them, and torch's own
training of each. Until Partita trains, this checks what can be checked:
each forward runs unsharded and at tp=2 as onnxruntime runs it (every
parameter an initializer of its own, its transposes and reshapes graph
nodes), and the references are what their file says: the step-0 loss is
the cross-entropy (ignore_index -100) of onnxruntime's logits on batch 0,
and the clipped run's step-0 norm is the global norm of the gradients."""

import json

import numpy as np
import onnxruntime as ort
import pytest

from conftest import ROOT, compile_and_run

TRAIN = ROOT / "test" / "models" / "train"
MANIFEST = json.loads((TRAIN / "manifest.json").read_text())
NAMES = sorted(MANIFEST["models"])


def batch(name, step):
    data = np.load(TRAIN / f"{name}.train.npz")
    return {key.split("/", 1)[1]: data[key] for key in data.files
            if key.startswith(f"batch{step}/")}


def cross_entropy(logits, labels):
    """torch's F.cross_entropy(..., ignore_index=-100), mean reduction."""
    logits = logits.reshape(-1, logits.shape[-1]).astype(np.float64)
    labels = labels.reshape(-1)
    keep = labels != -100
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-log_probs[keep, labels[keep]].mean())


@pytest.mark.parametrize("mesh", [None, "tp=2"])
@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_onnxruntime(tmp_path, name, mesh):
    feeds = batch(name, 0)
    feeds.pop("labels")
    model = TRAIN / f"{name}.onnx"
    session = ort.InferenceSession(str(model),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    outputs, _ = compile_and_run(tmp_path, model, feeds,
                                 *(["--mesh", mesh] if mesh else []))
    np.testing.assert_allclose(outputs["logits"], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_references_are_what_they_say(name):
    data = np.load(TRAIN / f"{name}.train.npz")
    feeds = batch(name, 0)
    labels = feeds.pop("labels")
    assert (labels != -100).any()
    session = ort.InferenceSession(str(TRAIN / f"{name}.onnx"),
                                   providers=["CPUExecutionProvider"])
    logits = session.run(None, feeds)[0]
    loss = cross_entropy(logits, labels)
    assert data["sgd/loss"][0] == pytest.approx(loss, rel=1e-5)
    assert data["adamw/loss"][0] == data["sgd/loss"][0]
    grads = [data[k] for k in data.files if k.startswith("grad/")]
    assert len(grads) == MANIFEST["models"][name]["parameters"]
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum())
                       for g in grads))
    assert float(data["clip/norm0"]) == pytest.approx(norm, rel=1e-5)
    assert norm > MANIFEST["optimizers"]["clip"]["clip_grad_norm"]
