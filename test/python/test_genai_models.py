"""onnxruntime-genai's model builder exports of test/models/genai (fp32
Llama, Mistral, Qwen2, Qwen3, Phi-3 and Phi-3.5 with its long-rope If; int4
Llama and Qwen3; make_genai.py): each compiles from its builder directory
(genai_config.json naming the model file and the head size) and runs on
host ranks equal to onnxruntime (rtol 1e-4) on every mesh, for a prompt (an
empty past, bound to 0) and for decode steps after a cached past."""

import json

import numpy as np
import pytest

from conftest import ROOT, compile_and_run

GENAI = ROOT / "test" / "models" / "genai"
MANIFEST = json.loads((GENAI / "manifest.json").read_text())
MODELS = sorted(name for name, entry in MANIFEST["models"].items()
                if "error" not in entry)

# The prompt: batch 2, 6 tokens, no past. A decode step: 1 token after 5,
# which sequence parallelism cannot split.
PROMPT_MESHES = ["1", "tp=2", "tp=4", "dp=2", "dp=2,tp=2", "pp=2",
                 "sp=2 --sp-mode ulysses", "sp=2 --sp-mode ring",
                 "tp=2 --sp-mode megatron"]
DECODE_MESHES = ["1", "tp=2", "dp=2", "dp=2,tp=2", "pp=2"]
# One token after 39 (batch 1): past Phi-3.5's 32 original positions, where
# its If picks the long-rope caches.
LONG_MESHES = ["1", "tp=2", "pp=2"]


def cases():
    for name in MODELS:
        for step, meshes in (("prompt", PROMPT_MESHES),
                             ("decode", DECODE_MESHES),
                             ("long", LONG_MESHES)):
            for mesh in meshes:
                label = mesh.replace(" --sp-mode ", "-")
                yield pytest.param(name, step, mesh,
                                   id=f"{name}-{step}-{label}")


def directory(name):
    return GENAI / MANIFEST["models"][name]["directory"]


def step_arrays(name, step, prefix=""):
    arrays = np.load(f"{directory(name)}.outputs.npz")
    prefix += step + "/"
    return {key[len(prefix):]: arrays[key] for key in arrays.files
            if key.startswith(prefix)}


@pytest.mark.parametrize("name,step,mesh", list(cases()))
def test_genai_export_matches_onnxruntime(tmp_path, name, step, mesh):
    arrays = step_arrays(name, step)
    model_inputs = MANIFEST["models"][name]["inputs"]
    inputs = {key: arrays[key] for key in model_inputs}
    expected = {key: value for key, value in arrays.items()
                if key not in inputs}
    batch, seq = inputs["input_ids"].shape
    past = inputs["attention_mask"].shape[1] - seq
    # kv_cache_dim comes from genai_config.json's head_size.
    flags = ["--bind", f"batch_size={batch},sequence_length={seq},"
             f"past_sequence_length={past},total_sequence_length={past + seq}"]
    if mesh != "1":
        flags += ["--mesh", *mesh.split()]
    outputs, _ = compile_and_run(tmp_path, directory(name), inputs, *flags)
    assert set(outputs) == set(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} {step} {mesh}: {key}")
    # The int4 exports' expected outputs are onnxruntime's at accuracy
    # level 0; the builder's level 4 (activations quantized to int8) is
    # within the gap between the two levels.
    built = step_arrays(name, step, "accuracy4/")
    if built:
        gap = np.abs(built["logits"] - expected["logits"]).max()
        assert np.abs(outputs["logits"] - built["logits"]).max() <= \
            1.01 * gap + 1e-6


@pytest.mark.parametrize("config,message", [
    ("{", "genai_config.json is not JSON"),
    ('{"model": {}}', "names no model.decoder.filename"),
    ('{"model": {"decoder": {"filename": "../model.onnx"}}}',
     "model.decoder.filename '../model.onnx' is not a file name in the "
     "directory"),
    ('{"model": {"decoder": {"filename": "other.onnx"}}}',
     "names the model file 'other.onnx', which the directory does not hold"),
    ('{"model": {"decoder": {"filename": "model.onnx", "head_size": 0}}}',
     "model.decoder.head_size 0 is not positive"),
])
def test_genai_config_refusals(tmp_path, config, message):
    import shutil
    import subprocess
    from conftest import BUILD
    directory = tmp_path / "export"
    shutil.copytree(GENAI / "llama.fp32", directory)
    (directory / "genai_config.json").write_text(config)
    result = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(directory), "--emit",
         "nn", "--bind", "batch_size=1,sequence_length=2,"
         "past_sequence_length=0,total_sequence_length=2"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and message in result.stderr, result.stderr


def test_genai_model_file_named_by_the_config(tmp_path):
    # Hub repositories name the model file after the build (int4, block 32).
    import shutil
    directory = tmp_path / "export"
    shutil.copytree(GENAI / "llama.fp32", directory)
    (directory / "model.onnx").rename(directory / "llama-cpu-fp32.onnx")
    config = json.loads((directory / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "llama-cpu-fp32.onnx"
    (directory / "genai_config.json").write_text(json.dumps(config))
    arrays = step_arrays("llama", "prompt")
    inputs = {key: arrays[key] for key in MANIFEST["models"]["llama"]["inputs"]}
    outputs, _ = compile_and_run(
        tmp_path / "run", directory, inputs, "--bind",
        "batch_size=2,sequence_length=6,past_sequence_length=0,"
        "total_sequence_length=6")
    np.testing.assert_allclose(outputs["logits"], arrays["logits"],
                               rtol=1e-4, atol=1e-5)


def test_genai_serving_is_refused_by_name(tmp_path):
    # --max-seq binds the cached and the total lengths itself, then refuses
    # GroupQueryAttention, whose cache rows are addressed by seqlens_k.
    import subprocess
    from conftest import BUILD
    result = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(GENAI / "llama.fp32"),
         "--bind", "batch_size=1,sequence_length=6", "--max-seq", "32",
         "-o", str(tmp_path / "art")], capture_output=True, text=True,
        timeout=60)
    assert result.returncode == 1
    assert ("node '/model/layers.0/attn/GroupQueryAttention': error: "
            "--max-seq does not serve GroupQueryAttention yet") in result.stderr


def test_planner_counts_int4_bytes(tmp_path):
    # --mesh auto plans with a rank's packed bytes: the projections it
    # splits over tp count their int4 blocks and scales, not float weights.
    # (A fused query/key/value projection is left out of the split bytes,
    # int4 or not: the planner does not see its segments yet.)
    import subprocess
    from conftest import BUILD
    import onnx
    from onnx import numpy_helper
    directory = GENAI / "llama.int4"
    report = tmp_path / "report.json"
    result = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(directory), "--bind",
         "batch_size=2,sequence_length=6,past_sequence_length=0,"
         "total_sequence_length=6", "--mesh", "auto", "--devices", "2",
         "-o", str(tmp_path / "art"), "--report", str(report)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    shape = json.loads(report.read_text())["plan"]["shape"]
    model = onnx.load(directory / "model.onnx")
    split = sum(numpy_helper.to_array(i).nbytes
                for i in model.graph.initializer
                if i.name.startswith(("lm_head.", "model.embed_tokens.",
                                      "model.layers.0.mlp.",
                                      "model.layers.0.attn.o_proj.")))
    assert shape["tensor_split_weight_bytes"] == split
