"""Pipeline parallelism: the committed GPT-2, Llama and BERT on pp=2, pp=4,
pp=2 x tp=2 and dp=2 x pp=2 x tp=2 (8 host ranks), with M = 1, P and 2P
microbatches, equal the unsharded run and onnxruntime (fp32 rtol 1e-4).
M = P and 2P need a batch of 8: those runs bind the dynamic exports to it
and compare against onnxruntime on the same inputs."""

import numpy as np
import onnxruntime as ort
import pytest

from conftest import ROOT, compile_and_run

MODELS = ROOT / "test" / "models"
NAMES = ["gpt2", "llama", "bert"]
# (mesh, stages, data-parallel replicas)
MESHES = [("pp=2", 2, 1), ("pp=4", 4, 1), ("pp=2,tp=2", 2, 1),
          ("dp=2,pp=2,tp=2", 2, 2)]
BATCH, SEQ = 8, 16


def batch_inputs(name):
    rng = np.random.default_rng(5)
    inputs = {"input_ids": rng.integers(0, 128, (BATCH, SEQ), dtype=np.int64)}
    if name == "bert":
        mask = np.ones((BATCH, SEQ), dtype=np.int64)
        mask[1, 11:] = 0
        mask[6, 5:] = 0
        inputs["attention_mask"] = mask
    return inputs


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """name -> (onnxruntime outputs, one-rank outputs) at batch 8."""
    out = {}
    for name in NAMES:
        model = MODELS / f"{name}_dynamic.onnx"
        inputs = batch_inputs(name)
        session = ort.InferenceSession(str(model),
                                       providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        expected = dict(zip(names, session.run(None, inputs)))
        single, _ = compile_and_run(tmp_path_factory.mktemp(name), model,
                                    inputs, "--bind", f"batch={BATCH},seq={SEQ}")
        out[name] = (expected, single)
    return out


def cases():
    for mesh, stages, dp in MESHES:
        for m in sorted({1, stages, 2 * stages}):
            if (BATCH // dp) % m == 0:
                yield mesh, stages, m, 1
    # Interleaved: two chunks per rank (the 2-layer models have 7 cut
    # points, enough for 4 chunks).
    for mesh, m in [("pp=2", 2), ("pp=2", 4), ("pp=2,tp=2", 4),
                    ("dp=2,pp=2,tp=2", 2)]:
        yield mesh, 2, m, 2


@pytest.mark.parametrize("mesh,stages,microbatches,chunks", list(cases()))
@pytest.mark.parametrize("name", NAMES)
def test_pipeline_matches(tmp_path, references, name, mesh, stages,
                          microbatches, chunks):
    expected, single = references[name]
    outputs, report = compile_and_run(
        tmp_path, MODELS / f"{name}_dynamic.onnx", batch_inputs(name),
        "--bind", f"batch={BATCH},seq={SEQ}", "--mesh", mesh,
        "--microbatches", str(microbatches), "--virtual-stages", str(chunks))
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], single[key], rtol=1e-4,
                                   atol=1e-5, err_msg=f"{name} {mesh} M={microbatches}")
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} {mesh} M={microbatches} vs ort")
    plan = report["pipeline"]
    assert plan["stages"] == stages and plan["microbatches"] == microbatches
    if chunks > 1:
        assert plan["schedule"] == "interleaved"
        return
    # GPipe's bubble, with the cost model's (nearly equal) stage times.
    ideal = (stages - 1) / (microbatches + stages - 1)
    assert abs(plan["bubble_fraction"] - ideal) < 0.1
    for rank in report["ranks"]:
        stage = rank["stage"]
        sends = sum(t["count"] for t in rank["p2p"] if t["kind"] == "send")
        recvs = sum(t["count"] for t in rank["p2p"] if t["kind"] == "recv")
        assert sends == (microbatches if stage < stages - 1 else 0)
        assert recvs == (microbatches if stage > 0 else 0)


@pytest.mark.parametrize("mesh,stages,dp", MESHES)
@pytest.mark.parametrize("name", NAMES)
def test_committed_model_on_pipeline(tmp_path, name, mesh, stages, dp):
    """The static exports (batch 2) against their onnxruntime references."""
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    outputs, _ = compile_and_run(tmp_path, MODELS / f"{name}.onnx", inputs,
                                 "--mesh", mesh)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} {mesh}")
