"""onnxruntime-genai's model builder exports of test/models/genai (fp32
Llama, Mistral, Qwen2, Qwen3, Phi-3 and Phi-3.5 with its long-rope If; int4
Llama and Qwen3; make_genai.py): each compiles from its builder directory
(genai_config.json naming the model file and the head size) and runs on
host ranks equal to onnxruntime (rtol 1e-4) on every mesh, for a prompt (an
empty past, bound to 0) and for decode steps after a cached past."""

import json

import numpy as np
import pytest

from conftest import (ROOT, check_bf16_steps, check_greedy_generation,
                      compile_and_run, serving_prompt)

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


# Serving: two prompts of 6 and 4 tokens (the second given left-padded,
# as a Hugging Face tokenizer pads it) in a prefill of 8, then greedy
# decode steps, against a greedy loop over the export in onnxruntime fed
# as onnxruntime-genai feeds it (each row's tokens from position 0, the
# padding after them, the mask [batch, past + 1] over each row's tokens),
# and against onnxruntime-genai's own tokens where make_genai.py recorded
# them.
SERVE_PROMPT, SERVE_MAX_SEQ, SERVE_TOKENS = 8, 32, 24  # make_genai's GENERATE


def exact_model(name, tmp_path):
    """The export's model file, at accuracy level 0 for an int4 one (the
    builder's level 4 quantizes activations, which Partita does not)."""
    path = directory(name) / "model.onnx"
    if "int4" not in name:
        return path
    import onnx
    model = onnx.load(path, load_external_data=False)
    for node in model.graph.node:
        for attribute in node.attribute:
            if node.op_type == "MatMulNBits" and \
                    attribute.name == "accuracy_level":
                attribute.i = 0
    out = tmp_path / "level0"
    out.mkdir()
    import shutil
    for data in directory(name).glob("*.data"):
        shutil.copy(data, out / data.name)
    onnx.save(model, out / "model.onnx")
    return out / "model.onnx"


_GREEDY = {}


def ort_greedy(name, tmp_path):
    """(tokens [batch, steps], each step's logits [steps, batch, vocab])."""
    if name not in _GREEDY:
        config = json.loads(
            (directory(name) / "genai_config.json").read_text())
        _GREEDY[name] = greedy_loop(exact_model(name, tmp_path),
                                    config["model"]["decoder"]["head_size"])
    return _GREEDY[name]


def greedy_loop(path, head_size):
    """The serving prompts' greedy generation over the export at `path` in
    onnxruntime, fed as onnxruntime-genai feeds it."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options,
                                   providers=["CPUExecutionProvider"])
    ids, mask = serving_prompt()
    lengths = mask.sum(1)
    batch = ids.shape[0]
    padded = np.zeros((batch, SERVE_PROMPT), np.int64)
    for b in range(batch):
        padded[b, :lengths[b]] = ids[b][mask[b] == 1]
    feeds = {"input_ids": padded,
             "attention_mask": (np.arange(SERVE_PROMPT) <
                                lengths[:, None]).astype(np.int64)}
    present, tokens, logits = {}, [], []
    for step in range(SERVE_TOKENS):
        for value in session.get_inputs():
            if value.name.startswith("past_key_values"):
                feeds[value.name] = present.get(
                    value.name.replace("past_key_values", "present"),
                    np.zeros((batch, value.shape[1], 0, head_size),
                             np.float32))
        names = [o.name for o in session.get_outputs()]
        present = dict(zip(names, session.run(None, feeds)))
        last = present["logits"][np.arange(batch),
                                 lengths - 1 if step == 0 else 0]
        token = last.argmax(-1).astype(np.int64)
        tokens.append(token)
        logits.append(last)
        total = SERVE_PROMPT + step + 1
        feeds = {"input_ids": token[:, None],
                 "attention_mask": (np.arange(total) <=
                                    lengths[:, None]).astype(np.int64)}
        lengths = lengths + 1
    return np.stack(tokens, 1), np.stack(logits)


SERVE_MESHES = {name: ["1", "tp=2"] for name in MODELS}
SERVE_MESHES["llama"] = ["1", "tp=2", "tp=4", "dp=2",
                         "pp=2 --microbatches 2"]


def partita_generate(tmp_path, model, mesh):
    """The serving prompts' greedy generation by Partita (--max-seq,
    partita-run --generate): (tokens, logits)."""
    import subprocess
    from conftest import BUILD
    tmp_path.mkdir(parents=True, exist_ok=True)
    ids, mask = serving_prompt()
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "mask.npy", mask)
    flags = ["--mesh", *mesh.split()] if mesh != "1" else []
    subprocess.run(
        [BUILD / "bin" / "partita-compile", model, "-o", tmp_path / "art",
         "--bind", f"batch_size=2,sequence_length={SERVE_PROMPT}",
         "--max-seq", str(SERVE_MAX_SEQ), *flags],
        check=True, capture_output=True, text=True, timeout=300)
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["serving"]["padding"] == "right"
    subprocess.run(
        [BUILD / "bin" / "partita-run", tmp_path / "art", "--generate",
         str(SERVE_TOKENS), "--input", f"input_ids={tmp_path / 'ids.npy'}",
         "--input", f"attention_mask={tmp_path / 'mask.npy'}",
         "--dump-logits", "--output-dir", tmp_path / "out"],
        check=True, capture_output=True, text=True, timeout=300)
    return (np.load(tmp_path / "out" / "tokens.npy"),
            np.load(tmp_path / "out" / "logits.npy"))


@pytest.mark.parametrize("name,mesh", [
    pytest.param(name, mesh, id=f"{name}-{mesh.replace(' --', '-')}")
    for name in MODELS for mesh in SERVE_MESHES[name]])
def test_genai_generation_matches_onnxruntime(tmp_path, name, mesh):
    want_tokens, want_logits = ort_greedy(name, tmp_path)
    tokens, logits = partita_generate(tmp_path, directory(name), mesh)
    check_greedy_generation(tokens, logits, want_tokens, want_logits)
    ids, _ = serving_prompt()
    # onnxruntime-genai's own greedy generation (make_genai.py), each row up
    # to its end-of-sequence token, where it stops: decided choices too,
    # the margins above being onnxruntime's on the same model.
    made = step_arrays(name, "generate")
    if made:
        np.testing.assert_array_equal(made["prompt"][1, :4], ids[1, 2:])
        for b, length in enumerate(made["lengths"]):
            np.testing.assert_array_equal(tokens[b, :length],
                                          made["tokens"][b, :length])


@pytest.mark.parametrize("mesh", ["1", "tp=2"])
def test_genai_generation_with_a_window_and_a_softcap(tmp_path, mesh):
    """The Llama export with each GroupQueryAttention given a local window
    of 3 keys (what gpt-oss's local layers set) and a softcap of 2: a
    decode step's window follows each row's own position."""
    import onnx
    import shutil
    model = onnx.load(directory("llama") / "model.onnx",
                      load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            for attribute in node.attribute:
                if attribute.name == "local_window_size":
                    attribute.i = 3
                elif attribute.name == "softcap":
                    attribute.f = 2.0
    export = tmp_path / "export"
    export.mkdir()
    for source in directory("llama").iterdir():
        if source.name != "model.onnx":
            shutil.copy(source, export / source.name)
    onnx.save(model, export / "model.onnx")
    want_tokens, want_logits = greedy_loop(export / "model.onnx", 16)
    tokens, logits = partita_generate(tmp_path / "run", export, mesh)
    check_greedy_generation(tokens, logits, want_tokens, want_logits)


def test_genai_serving_refuses_an_if_that_changes_with_the_length(tmp_path):
    # Phi-3.5 picks its long rotary tables past 32 positions: a prompt of 8
    # and a cache of 48 would take the short ones for the prompt and the
    # long ones for every decode step.
    import subprocess
    from conftest import BUILD
    result = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(GENAI / "phi35.fp32"),
         "--bind", "batch_size=1,sequence_length=8", "--max-seq", "48",
         "-o", str(tmp_path / "art")], capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 1
    assert ("--max-seq 48: the If '/model/rope_caches_subgraph/If' picks its "
            "else branch for the prompt and its then branch for a cache of "
            "48 positions") in result.stderr, result.stderr


def test_planner_counts_int4_bytes(tmp_path):
    # --mesh auto plans with a rank's packed bytes: the projections it
    # splits over tp count their int4 blocks and scales, not float weights,
    # the fused query/key/value projection (seen through the rotary
    # embedding) among them. Layer 1's attention is dead in these exports
    # (the LM head reads layer 0's norm): its projections are not split.
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
                                      "model.layers.0.attn.o_proj.",
                                      "model.layers.0.attn.qkv_proj.")))
    assert shape["tensor_split_weight_bytes"] == split


@pytest.mark.parametrize("mesh", [None, {"tp": 2}], ids=["1", "tp=2"])
@pytest.mark.parametrize("name", ["llama", "llama.int4"])
def test_genai_bf16_generation_through_python(tmp_path, name, mesh):
    """The builder exports served from Python (partita.compile with
    max_seq, prefill, step, generate) in bf16: teacher-forced with the
    fp32 reference's tokens, every step's logits within 2e-2 of their
    scale, and the greedy token equal wherever the fp32 top-two margin
    exceeds twice that (test_serving.py's bf16 policy)."""
    import partita
    artifact = partita.compile(directory(name), mesh,
                               bind={"batch_size": 2,
                                     "sequence_length": SERVE_PROMPT},
                               max_seq=SERVE_MAX_SEQ, dtype="bf16")
    assert artifact.manifest["serving"]["padding"] == "right"
    ids, mask = serving_prompt()
    want_tokens, want_logits = ort_greedy(name, tmp_path)
    check_bf16_steps(artifact, ids, mask, want_tokens, want_logits,
                     min_clear=4)
    tokens = artifact.generate(ids, 8, attention_mask=mask)
    assert tokens.shape == (2, 8) and tokens.min() >= 0 and tokens.max() < 128
