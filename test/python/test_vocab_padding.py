"""Vocabularies that tp does not divide are padded as Megatron-LM pads them
(--make-vocab-size-divisible-by): the embedding table and the LM head are
split over tp, the padded logits never reach the outputs, and every mesh
refuses the token ids one device refuses. The reference is onnxruntime.
The Hugging Face fixtures gpt2_vocab (131, tied) and bert_vocab (130) run
the whole mesh matrix in test_hf_models.py."""

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import BUILD, ROOT, compile_and_run

VOCAB = 1001


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A GPT-2-style model of 2 layers with an odd vocabulary."""
    path = tmp_path_factory.mktemp("vocab") / "gpt.onnx"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_gpt.py"), "2",
                    str(path), "--hidden", "64", "--heads", "4", "--vocab",
                    str(VOCAB), "--seq", "8", "--batch", "2"],
                   check=True, capture_output=True)
    return path


def ids(*edits):
    """Token ids [2, 8] with (row, column, id) edits."""
    values = np.random.default_rng(1001).integers(0, VOCAB, (2, 8))
    for row, column, value in edits:
        values[row, column] = value
    return {"input_ids": values.astype(np.int64)}


def onnxruntime_logits(model, feeds):
    session = ort.InferenceSession(str(model),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def explain(model, tmp_path, *flags):
    """The weights' (name, type, sharding) of --explain, by name."""
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o",
         str(tmp_path / "explained"), "--explain", *flags],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {line.split()[0]: " ".join(line.split()[1:])
            for line in proc.stdout.splitlines()
            if line.startswith("  ") and "tensor<" in line}


@pytest.mark.parametrize("mesh,by,padded", [
    ("tp=2", 1, 1002), ("tp=4", 1, 1004), ("tp=2", 64, 1024),
    ("dp=2,tp=2", 1, 1002)])
def test_padded_vocabulary_is_split_and_equals_onnxruntime(tmp_path, model,
                                                           mesh, by, padded):
    flags = ["--mesh", mesh, "--make-vocab-size-divisible-by", str(by)]
    weights = explain(model, tmp_path, *flags)
    assert weights[f"head.vocab{padded}"] == \
        f"tensor<64x{padded}xf32> [{{}}, {{tp}}]"
    assert weights[f"wte.vocab{padded}"] == \
        f"tensor<{padded}x64xf32> [{{tp}}, {{}}]"
    feeds = ids((0, 0, VOCAB - 1), (1, 7, -1), (1, 2, -VOCAB))
    outputs, report = compile_and_run(tmp_path / "run", model, feeds, *flags)
    assert outputs["logits"].shape == (2, 8, VOCAB)
    np.testing.assert_allclose(outputs["logits"],
                               onnxruntime_logits(model, feeds),
                               rtol=1e-4, atol=1e-5)
    # The head and the table are split: a rank holds about 1/tp of the
    # model's weight bytes (norms and biases stay whole).
    tp = int(mesh.split("tp=")[1])
    single = 4 * sum(int(np.prod(t.dims)) for t in
                     onnx.load(str(model)).graph.initializer)
    held = max(rank["weight_bytes"] for rank in report["ranks"])
    assert held / single < 1 / tp + 0.02, (held, single)


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 1, 2000, -VOCAB - 1,
                                 -VOCAB - 3])
def test_every_mesh_refuses_an_id_outside_the_vocabulary(tmp_path, model,
                                                         bad):
    """An id in the padding ([1001, 1004) at tp=4) or beyond it is refused
    by every rank count, as onnxruntime refuses it."""
    feeds = ids((1, 3, bad))
    with pytest.raises(Exception):
        onnxruntime_logits(model, feeds)
    np.save(tmp_path / "ids.npy", feeds["input_ids"])
    for mesh in ("tp=1", "tp=4"):
        art = tmp_path / mesh
        subprocess.run([str(BUILD / "bin" / "partita-compile"), str(model),
                        "-o", str(art), "--mesh", mesh], check=True,
                       capture_output=True, timeout=300)
        run = subprocess.run(
            [str(BUILD / "bin" / "partita-run"), str(art), "--input",
             f"input_ids={tmp_path / 'ids.npy'}", "--output-dir",
             str(tmp_path / f"out-{mesh}")],
            capture_output=True, text=True, timeout=300)
        assert run.returncode != 0, (mesh, bad)
        assert "out of range" in run.stderr, run.stderr
        assert not (tmp_path / f"out-{mesh}" / "logits.npy").exists()


@pytest.mark.parametrize("train", [False, True])
def test_report_remarks_a_vocabulary_left_whole(tmp_path, model, train):
    """Inference pads, with no remark; a training step's table is a
    trained parameter, which is not padded: it stays whole, and the
    report's remarks say why."""
    report = tmp_path / "report.json"
    flags = ["--train", "--loss", "cross_entropy:logits", "--optimizer",
             "sgd:lr=0.1"] if train else []
    subprocess.run([str(BUILD / "bin" / "partita-compile"), str(model), "-o",
                    str(tmp_path / "art"), "--mesh", "tp=4", "--report",
                    str(report), *flags], check=True, capture_output=True,
                   timeout=300)
    remarks = [r for r in json.loads(report.read_text())["remarks"]
               if "vocabulary" in r]
    if not train:
        assert remarks == []
        return
    assert remarks == [
        "embedding '/Gather_0': a vocabulary of 1001 is not a multiple of 4 "
        "and cannot be padded (its table is not a constant: a trained "
        "parameter); it is replicated over tp=4"]


def test_divisible_by_must_be_positive(tmp_path, model):
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o",
         str(tmp_path / "art"), "--mesh", "tp=2",
         "--make-vocab-size-divisible-by", "0"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "--make-vocab-size-divisible-by must be positive, got 0" in \
        proc.stderr
    assert not (tmp_path / "art").exists()


def test_auto_mesh_of_gpt2_vocabulary_compiles_and_runs(tmp_path):
    """GPT-2's real vocabulary (50257) on 8 devices: the planner's choice
    compiles and runs equal to onnxruntime."""
    path = tmp_path / "gpt50257.onnx"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_gpt.py"), "2",
                    str(path), "--hidden", "64", "--heads", "4", "--vocab",
                    "50257", "--seq", "8", "--batch", "2"],
                   check=True, capture_output=True)
    feeds = {"input_ids": np.random.default_rng(50257).integers(
        0, 50257, (2, 8)).astype(np.int64)}
    feeds["input_ids"][0, 0] = 50256
    for flags in (["--mesh", "tp=8"], ["--mesh", "auto", "--devices", "8"]):
        outputs, report = compile_and_run(tmp_path / flags[1], path, feeds,
                                          *flags)
        assert report["mesh"]["world_size"] == 8
        np.testing.assert_allclose(outputs["logits"],
                                   onnxruntime_logits(path, feeds),
                                   rtol=1e-4, atol=1e-5, err_msg=flags[1])


def test_python_keyword(model):
    """The option is the Python API's keyword too, recorded in the
    manifest."""
    import partita
    feeds = ids((0, 0, VOCAB - 1))
    artifact = partita.compile(str(model), mesh={"tp": 2},
                               make_vocab_size_divisible_by=64)
    assert artifact.manifest["compile_options"][
        "make-vocab-size-divisible-by"] == "64"
    np.testing.assert_allclose(artifact.run(feeds)["logits"],
                               onnxruntime_logits(model, feeds),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(partita.OptionError):
        partita.compile(str(model), mesh={"tp": 2},
                        make_vocab_size_divisible_by=0)
