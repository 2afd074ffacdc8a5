"""A sharded program equals the unsharded one on every input, valid or not:
token ids outside the vocabulary are refused by every mesh (the unsharded
embedding refuses them, so a vocabulary-parallel one must too, on every
rank), and negative ids count from the end of the vocabulary on every mesh,
as ONNX's Gather defines and onnxruntime computes."""

import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from conftest import BUILD, ROOT

MODELS = ROOT / "test" / "models"
VOCAB = 128  # test/models/export.py
MESHES = ["", "tp=2", "tp=4", "dp=2,tp=2", "pp=2,tp=2"]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """mesh -> artifact directory of gpt2 compiled for it."""
    built = {}
    for mesh in MESHES:
        art = tmp_path_factory.mktemp("art") / "gpt2"
        flags = ["--mesh", mesh] if mesh else []
        compiled = subprocess.run(
            [str(BUILD / "bin" / "partita-compile"),
             str(MODELS / "gpt2.onnx"), "-o", str(art), *flags],
            capture_output=True, text=True, timeout=300)
        assert compiled.returncode == 0, compiled.stderr
        built[mesh] = art
    return built


def run(art, ids, directory):
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "input_ids.npy", ids)
    return subprocess.run(
        [str(BUILD / "bin" / "partita-run"), str(art), "--input",
         f"input_ids={directory / 'input_ids.npy'}", "--output-dir",
         str(directory / "out")], capture_output=True, text=True, timeout=300)


def with_id(value):
    ids = dict(np.load(MODELS / "gpt2.inputs.npz"))["input_ids"].copy()
    ids[0, 3] = value
    ids[1, 0] = value
    return ids


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 7, 2**62, -VOCAB - 1, -2**62])
def test_out_of_vocabulary_is_refused(tmp_path, artifacts, mesh, bad):
    result = run(artifacts[mesh], with_id(bad), tmp_path)
    assert result.returncode == 1, (mesh, bad, result.stderr)
    assert f"index {bad} at position" in result.stderr
    assert "out of range" in result.stderr
    assert not (tmp_path / "out" / "logits.npy").exists()


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("negative", [-1, -5, -VOCAB])
def test_negative_ids_count_from_the_end(tmp_path, artifacts, mesh, negative):
    result = run(artifacts[mesh], with_id(negative), tmp_path / "negative")
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "negative" / "out" / "logits.npy")
    session = ort.InferenceSession(str(MODELS / "gpt2.onnx"),
                                   providers=["CPUExecutionProvider"])
    [want] = session.run(None, {"input_ids": with_id(negative)})
    [same] = session.run(None, {"input_ids": with_id(VOCAB + negative)})
    np.testing.assert_allclose(want, same, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                               err_msg=f"{mesh or '1 rank'} id {negative}")
