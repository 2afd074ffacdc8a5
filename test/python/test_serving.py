"""Serving (--max-seq): a prefill and a decode program in one artifact, the
KV cache resident on its ranks, and greedy generation in the runtime, token
for token and logit for logit against a greedy loop over the same export in
onnxruntime (test/models/hf's optimum KV-cache fixtures)."""

import json
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from conftest import BUILD, ROOT

HF = ROOT / "test" / "models" / "hf"
COMPILE = BUILD / "bin" / "partita-compile"
RUN = BUILD / "bin" / "partita-run"
# Prompts of 6 tokens, the second left-padded by 2, in a prefill compiled
# for 8: the runtime pads both rows further, as Hugging Face would.
PROMPT = 8
MAX_SEQ = 48
NEW_TOKENS = 32


def prompt():
    rng = np.random.default_rng(19)
    ids = rng.integers(1, 128, size=(2, 6)).astype(np.int64)
    mask = np.ones((2, 6), np.int64)
    ids[1, :2] = 0
    mask[1, :2] = 0
    return ids, mask


def positions(mask):
    """Hugging Face's position ids: cumsum(mask) - 1, 1 where masked."""
    p = np.cumsum(mask, -1) - 1
    p[mask == 0] = 1
    return p


def ort_greedy(path, ids, mask, steps):
    """Greedy generation with onnxruntime over the export, the cache fed
    back as the next step's past: (tokens [batch, steps], logits [steps,
    batch, vocab])."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options,
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    pasts = [i for i in session.get_inputs() if i.name.startswith("past")]
    outputs = [o.name for o in session.get_outputs()]
    batch = ids.shape[0]
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "position_ids" in names:
        feeds["position_ids"] = positions(mask)
    for past in pasts:
        feeds[past.name] = np.zeros((batch, past.shape[1], 0, past.shape[3]),
                                    np.float32)
    tokens, logits = [], []
    for _ in range(steps):
        results = dict(zip(outputs, session.run(None, feeds)))
        last = results["logits"][:, -1]
        token = last.argmax(-1).astype(np.int64)
        tokens.append(token)
        logits.append(last)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
        feeds = {"input_ids": token[:, None], "attention_mask": mask}
        if "position_ids" in names:
            feeds["position_ids"] = positions(mask)[:, -1:]
        for past in pasts:
            feeds[past.name] = results[past.name.replace("past_key_values",
                                                         "present")]
    return np.stack(tokens, 1), np.stack(logits)


_REFERENCE = {}


def reference(name):
    if name not in _REFERENCE:
        ids, mask = prompt()
        _REFERENCE[name] = ort_greedy(HF / f"{name}.optimum.onnx", ids, mask,
                                      NEW_TOKENS)
    return _REFERENCE[name]


def compile_serving(directory, name, *flags, max_seq=MAX_SEQ):
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "art"
    subprocess.run(
        [COMPILE, HF / f"{name}.optimum.onnx", "-o", out, "--bind",
         f"batch_size=2,sequence_length={PROMPT}", "--max-seq", str(max_seq),
         *flags], check=True, capture_output=True, text=True)
    return out


def generate(directory, artifact, steps=NEW_TOKENS):
    ids, mask = prompt()
    np.save(directory / "ids.npy", ids)
    np.save(directory / "mask.npy", mask)
    result = subprocess.run(
        [RUN, artifact, "--generate", str(steps), "--input",
         f"input_ids={directory / 'ids.npy'}", "--input",
         f"attention_mask={directory / 'mask.npy'}", "--dump-logits",
         "--output-dir", directory / "out"],
        check=True, capture_output=True, text=True)
    return (np.load(directory / "out" / "tokens.npy"),
            np.load(directory / "out" / "logits.npy"), result.stdout)


MESHES = [
    [],
    ["--mesh", "tp=2"],
    ["--mesh", "tp=4"],
    ["--mesh", "dp=2"],
    ["--mesh", "pp=2", "--microbatches", "2"],
]


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: " ".join(m) or "1")
@pytest.mark.parametrize("name", ["gpt2_kv", "llama_kv", "qwen2_kv"])
def test_generation_matches_onnxruntime(tmp_path, name, mesh):
    artifact = compile_serving(tmp_path, name, *mesh)
    tokens, logits, stdout = generate(tmp_path, artifact)
    want_tokens, want_logits = reference(name)
    np.testing.assert_array_equal(tokens, want_tokens)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-5)
    for line in ("time to first token", "per-token latency", "tokens/s",
                 "kv cache"):
        assert line in stdout


@pytest.mark.parametrize("mesh", [None, {"tp": 2}], ids=["1", "tp=2"])
@pytest.mark.parametrize("name", ["gpt2_kv", "llama_kv"])
def test_bf16_generation(tmp_path, name, mesh):
    """bf16 keeps 8 bits of mantissa (rtol 2e-2 of the logits' scale). The
    small fixtures' logits are close together (top-2 margins down to 0.003,
    under bf16's error), so the steps are teacher-forced with the fp32
    reference's tokens; the greedy token must match wherever the margin
    exceeds twice the tolerance."""
    import partita
    artifact = partita.compile(HF / f"{name}.optimum.onnx", mesh,
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=MAX_SEQ, dtype="bf16")
    assert {c["dtype"] for c in artifact.manifest["serving"]["cache"]} == \
        {"bf16"}
    ids, mask = prompt()
    want_tokens, want_logits = reference(name)
    logits = [artifact.prefill(ids, attention_mask=mask)]
    for step in range(7):
        logits.append(artifact.step(want_tokens[:, step]))
    logits = np.stack(logits)
    scale = float(np.abs(want_logits[:8]).max())
    np.testing.assert_allclose(logits, want_logits[:8], rtol=2e-2,
                               atol=2e-2 * scale)
    top2 = np.sort(want_logits[:8], -1)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > 4e-2 * scale
    assert clear.sum() >= 8
    np.testing.assert_array_equal(logits.argmax(-1)[clear],
                                  want_tokens.T[:8][clear])
    # Untouched by teacher forcing: the runtime's own loop runs in bf16.
    tokens = artifact.generate(ids, 8, attention_mask=mask)
    assert tokens.shape == (2, 8) and tokens.min() >= 0 and tokens.max() < 128


def test_cache_is_sharded_and_weights_stored_once(tmp_path):
    """At tp=2 each rank holds half the heads of every cache; the decode
    program reads the prefill's weights, which are stored once."""
    one = compile_serving(tmp_path / "one", "gpt2_kv", "--report",
                          tmp_path / "one.json")
    two = compile_serving(tmp_path / "two", "gpt2_kv", "--mesh", "tp=2",
                          "--report", tmp_path / "two.json")
    m1 = json.loads((one / "manifest.json").read_text())
    m2 = json.loads((two / "manifest.json").read_text())
    assert [c["sharding"]["dims"][1] for c in m2["serving"]["cache"]] == \
        [["tp"]] * 4
    assert all(r["decode_program"].endswith(".decode.pb") for r in m2["ranks"])
    # Cache names are neither inputs nor outputs of the artifact.
    names = {t["name"] for t in m2["inputs"] + m2["outputs"]}
    assert not names & {c["name"] for c in m2["serving"]["cache"]}
    r1 = json.loads((tmp_path / "one.json").read_text())["serving"]
    r2 = json.loads((tmp_path / "two.json").read_text())["serving"]
    # [2, 4, 48, 8] f32, four tensors; half the heads on each tp rank.
    assert r1["kv_cache_bytes"] == [4 * 2 * 4 * MAX_SEQ * 8 * 4]
    assert r2["kv_cache_bytes"] == [r1["kv_cache_bytes"][0] // 2] * 2
    single = tmp_path / "single"
    subprocess.run([COMPILE, HF / "gpt2_kv.optimum.onnx", "-o", single,
                    "--bind", "batch_size=2,sequence_length=1,"
                    "past_sequence_length=7"], check=True)
    weights = lambda art: sum(p.stat().st_size
                              for p in (art / "weights").iterdir())
    assert weights(one) == weights(single)


def test_python_generate_and_step_api(tmp_path):
    import partita
    artifact = partita.compile(HF / "llama_kv.optimum.onnx", {"tp": 2},
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=MAX_SEQ)
    ids, mask = prompt()
    want_tokens, want_logits = reference("llama_kv")
    tokens, logits = artifact.generate(ids, 16, attention_mask=mask,
                                       return_logits=True)
    np.testing.assert_array_equal(tokens, want_tokens[:, :16])
    np.testing.assert_allclose(logits, want_logits[:16], rtol=1e-4, atol=1e-5)
    assert len(artifact.last_timings["step_seconds"]) == 15
    # The step API, sampling in the caller: the same logits.
    step_logits = [artifact.prefill(ids, attention_mask=mask)]
    assert artifact.cache_position == PROMPT
    for _ in range(4):
        step_logits.append(artifact.step(step_logits[-1].argmax(-1)))
    assert artifact.cache_position == PROMPT + 4
    np.testing.assert_allclose(np.stack(step_logits), want_logits[:5],
                               rtol=1e-4, atol=1e-5)
    # A second generation starts from a fresh cache.
    again = artifact.generate(ids, 16, attention_mask=mask)
    np.testing.assert_array_equal(again, tokens)


def test_python_serving_errors(tmp_path):
    import partita
    artifact = partita.compile(HF / "gpt2_kv.optimum.onnx",
                               bind={"batch_size": 2,
                                     "sequence_length": PROMPT},
                               max_seq=16)
    ids, mask = prompt()
    with pytest.raises(partita.RunError, match="before"):
        artifact.step(np.array([1, 2]))
    with pytest.raises(partita.RunError, match="cache"):
        artifact.generate(ids, 10, attention_mask=mask)  # 8 + 9 > 16
    with pytest.raises(partita.RunError):
        artifact.generate(np.ones((2, PROMPT + 1), np.int64), 2)
    with pytest.raises(partita.RunError):
        artifact.generate(np.ones((3, 4), np.int64), 2)
    # Token ids outside the vocabulary: refused alike on every mesh.
    with pytest.raises(partita.RunError, match="outside the vocabulary"):
        artifact.generate(np.full((2, 4), 128, np.int64), 2)
    artifact.prefill(ids, attention_mask=mask)
    with pytest.raises(partita.RunError, match="token id -1"):
        artifact.step(np.array([1, -1]))
    for _ in range(16 - PROMPT):
        artifact.step(np.array([1, 2]))
    with pytest.raises(partita.RunError, match="cache"):
        artifact.step(np.array([1, 2]))
    plain = partita.compile(HF / "gpt2_kv.optimum.onnx",
                            bind={"batch_size": 2, "sequence_length": 1,
                                  "past_sequence_length": 7})
    with pytest.raises(partita.RunError, match="max_seq"):
        plain.generate(ids, 2)


@pytest.mark.parametrize("flags,message", [
    (["--max-seq", "16"], "no past key or value inputs"),
    (["--max-seq", "16", "--mesh", "sp=2"], "sequence parallelism"),
    (["--max-seq", "-1"], "--max-seq must be positive"),
], ids=["no-cache", "sp", "negative"])
def test_compile_errors(tmp_path, flags, message):
    model = HF / ("gpt2.optimum.onnx" if "past key" in message
                  else "gpt2_kv.optimum.onnx")
    result = subprocess.run(
        [COMPILE, model, "-o", tmp_path / "art", "--bind",
         "batch_size=2,sequence_length=8", *flags],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "art").exists()


def test_compile_errors_on_lengths(tmp_path):
    def compile_with(bind, max_seq):
        return subprocess.run(
            [COMPILE, HF / "gpt2_kv.optimum.onnx", "-o", tmp_path / "art",
             "--bind", bind, "--max-seq", str(max_seq)],
            capture_output=True, text=True)
    short = compile_with("batch_size=2,sequence_length=8", 4)
    assert short.returncode != 0
    assert "more than the cache holds" in short.stderr
    bound = compile_with("batch_size=2,sequence_length=8,"
                         "past_sequence_length=3", 16)
    assert bound.returncode != 0
    assert "do not --bind it" in bound.stderr


def test_run_errors(tmp_path):
    plain = tmp_path / "plain"
    subprocess.run([COMPILE, HF / "gpt2_kv.optimum.onnx", "-o", plain,
                    "--bind", "batch_size=2,sequence_length=1,"
                    "past_sequence_length=7"], check=True)
    ids, _ = prompt()
    np.save(tmp_path / "ids.npy", ids)
    result = subprocess.run(
        [RUN, plain, "--generate", "4", "--input",
         f"input_ids={tmp_path / 'ids.npy'}", "--output-dir", tmp_path / "o"],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert "--max-seq" in result.stderr
    serving = compile_serving(tmp_path, "gpt2_kv")
    for args, message in [(["--generate", "0"], "--generate"),
                          (["--generate", "4"], "input_ids")]:
        result = subprocess.run([RUN, serving, *args, "--output-dir",
                                 tmp_path / "o"], capture_output=True,
                                text=True)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr


def test_decode_objectives_plan_the_decode_step():
    import partita
    bind = {"batch_size": 2, "sequence_length": PROMPT}
    plan = partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                        max_seq=MAX_SEQ, objective="decode-latency")
    # One token per sequence, the cache at max-seq.
    assert plan.shape["sequence"] == 1
    assert plan.best is not None and plan.best["tokens_per_second"] > 0
    prefill = partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                           max_seq=MAX_SEQ)
    assert prefill.shape["sequence"] == PROMPT
    assert prefill.shape["kv_cache_bytes"] == plan.shape["kv_cache_bytes"]
    with pytest.raises(partita.CompileError, match="needs --max-seq"):
        partita.plan(HF / "llama_kv.optimum.onnx", 2, bind=bind,
                     objective="decode-throughput")
