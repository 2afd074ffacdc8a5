#!/usr/bin/env python3
"""Writes gpt2_trained_kv, llama_trained_kv and qwen2_trained_kv
(.optimum.onnx): a small GPT-2, Llama and Qwen2 (the last two with
grouped-query attention: 4 heads, 2 kv heads) trained until their greedy
choices are clear, exported with their KV caches by optimum.

The other KV-cache fixtures have random weights: their top-two logits lie
as close as 0.003, under what bf16 resolves, so no bf16 run can be asked to
pick their tokens. A trained model, as users serve, picks with margins of
several units. These learn a synthetic language: every token is a fixed
permutation of the token two before it (two interleaved chains), which a
decoder can only continue by attending to its cache.

Written as the other KV-cache fixtures are (make_hf.py), for each NAME:
the model, `NAME.inputs.npz` (one decode step, 4 tokens of the language
after 6 cached, plus under `prompt.*` two prompts of the language for
generation), `NAME.optimum.outputs.npz` (onnxruntime's outputs of the
step, graph optimizations off) and its entry in manifest.json.

Run by hand, never in CI, with Debian's torch (python3-torch, 1.13) and an
optimum of its era from PyPI: 1.16.2 for the GPT-2 and the Llama, 1.19.2
for the Qwen2 (the first of them that exports Qwen2; the manifest records
which):

    /usr/bin/python3 -m venv --system-site-packages /work/venv-train
    /work/venv-train/bin/pip install transformers==4.36.2 optimum==1.16.2 \\
        onnx onnxruntime
    /work/venv-train/bin/python test/models/hf/make_trained_kv.py \\
        --only gpt2_trained_kv,llama_trained_kv
    /usr/bin/python3 -m venv --system-site-packages /work/venv-train2
    /work/venv-train2/bin/pip install transformers==4.40.2 optimum==1.19.2 \\
        onnx onnxruntime "numpy<2" ml_dtypes==0.5.1
    /work/venv-train2/bin/python test/models/hf/make_trained_kv.py \\
        --only qwen2_trained_kv

Deterministic on one machine (seeded, one thread); it prints the training
loss, the exported model's error against torch on the step, and the
top-two margins of a 32-token greedy run from the prompts in onnxruntime.
"""

import argparse
import collections
import json
import pathlib
import shutil
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf
from optimum.exporters.onnx import main_export
from optimum.version import __version__ as optimum_version

HERE = pathlib.Path(__file__).resolve().parent
VOCAB = 128
LENGTH = 48  # Training sequences: as long as the tests' cache (--max-seq 48).
STEPS = 1000
PAST, NEW = 6, 4  # The fixture's decode step, as the other KV fixtures'.


def language(rng, batch):
    """Sequences whose token t is PERM[token t - 2]."""
    perm = np.random.default_rng(0).permutation(VOCAB)
    seq = np.zeros((batch, LENGTH), np.int64)
    seq[:, :2] = rng.integers(0, VOCAB, size=(batch, 2))
    for t in range(2, LENGTH):
        seq[:, t] = perm[seq[:, t - 2]]
    return seq


# name -> the model, made after torch.manual_seed(0): hidden 64, 4 heads
# of 16, 2 layers, FFN 128, vocabulary 128, 64 positions, no dropout.
MODELS = {
    "gpt2_trained_kv": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        n_inner=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "llama_trained_kv": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=VOCAB, max_position_embeddings=64, hidden_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, tie_word_embeddings=False)),
    # Named when called: transformers 4.36 has no Qwen2.
    "qwen2_trained_kv": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(
        vocab_size=VOCAB, max_position_embeddings=64, hidden_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, tie_word_embeddings=False)),
}


def train(name):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MODELS[name]()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        batch = torch.tensor(language(rng, 64).tolist())
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 250 == 0 or step == STEPS - 1:
            print(f"step {step}: loss {loss.item():.4f}")
    return model.eval()


def prompts():
    """Two prompts of the language, 6 tokens and 4 left-padded to 6, with
    the positions generation gives them."""
    ids = language(np.random.default_rng(19), 2)[:, :6]
    mask = np.ones((2, 6), np.int64)
    ids[1, :2] = 0
    mask[1, :2] = 0
    positions = np.cumsum(mask, -1) - 1
    positions[mask == 0] = 1
    return ids, mask, positions


def tensor(array):
    return torch.tensor(array.tolist())


def step(model):
    """One decode step as the other KV-cache fixtures hold it: 4 tokens of
    the language after 6 cached ones (the cache from torch's prefill), and
    the prompts under `prompt.*`; with torch's logits of the step."""
    ids = language(np.random.default_rng(23), 2)[:, :PAST + NEW]
    mask = np.ones_like(ids)
    mask[1, :2] = 0
    pos = np.cumsum(mask, -1) - 1
    pos[mask == 0] = 1
    feeds = {"input_ids": ids[:, PAST:], "attention_mask": mask,
             "position_ids": pos[:, PAST:]}
    with torch.no_grad():
        pre = model(input_ids=tensor(ids[:, :PAST]),
                    attention_mask=tensor(mask[:, :PAST]),
                    position_ids=tensor(pos[:, :PAST]), use_cache=True)
        # Copied before the next call: a DynamicCache (Llama's) grows in
        # place.
        cache = pre.past_key_values
        for layer in range(len(cache)):
            key, value = cache[layer]
            feeds[f"past_key_values.{layer}.key"] = np.array(
                key.tolist(), np.float32)
            feeds[f"past_key_values.{layer}.value"] = np.array(
                value.tolist(), np.float32)
        full = model(input_ids=tensor(ids[:, PAST:]),
                     attention_mask=tensor(mask),
                     position_ids=tensor(pos[:, PAST:]),
                     past_key_values=cache, use_cache=True)
    feeds["prompt.input_ids"], feeds["prompt.attention_mask"], _ = prompts()
    return feeds, np.array(full.logits.tolist(), np.float32)


# run_ort and describe are make_hf.py's, which this environment cannot
# import: its table of models names classes transformers 4.36 lacks.
def run_ort(path, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options,
                                   providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    values = session.run(None, {k: v for k, v in feeds.items()
                                if k in wanted})
    return dict(zip(names, values))


def margins(path):
    """The top-two margins of a 32-token greedy run from the prompts, and
    the logits' scale."""
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    ids, mask, positions = prompts()
    names = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    feeds = {"input_ids": ids, "attention_mask": mask,
             "position_ids": positions}
    for i in session.get_inputs():
        if i.name.startswith("past"):
            feeds[i.name] = np.zeros((2, i.shape[1], 0, i.shape[3]),
                                     np.float32)
    found = []
    for _ in range(32):
        results = dict(zip(outputs, session.run(None, feeds)))
        last = results["logits"][:, -1]
        top2 = np.sort(last, -1)[:, -2:]
        found.append(float((top2[:, 1] - top2[:, 0]).min()))
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
        feeds = {"input_ids": last.argmax(-1)[:, None],
                 "attention_mask": mask,
                 "position_ids": (np.cumsum(mask, -1) - 1)[:, -1:]}
        for name in names:
            if name.startswith("past"):
                feeds[name] = results[name.replace("past_key_values",
                                                   "present")]
    return found, float(np.abs(last).max())


def describe(path):
    """The manifest's description of a file, as make_hf.py writes it."""
    m = onnx.load(str(path))
    dims = {d.dim_param for vi in list(m.graph.input) + list(m.graph.output)
            for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}
    ops = collections.Counter(n.op_type for n in m.graph.node)
    opset = next(o.version for o in m.opset_import
                 if o.domain in ("", "ai.onnx"))
    return {"opset": opset, "symbols": sorted(dims),
            "ops": dict(sorted(ops.items())), "bytes": path.stat().st_size}


def make(name):
    out = HERE / f"{name}.optimum.onnx"
    model = train(name)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        model.save_pretrained(tmp / "model")
        main_export(str(tmp / "model"), output=tmp / "onnx",
                    task="text-generation-with-past", opset=17,
                    no_post_process=True, do_validation=False)
        shutil.copy(tmp / "onnx" / "model.onnx", out)
    feeds, want = step(model)
    outputs = run_ort(out, feeds)
    error = float(np.abs(outputs["logits"] - want).max())
    print(f"{name}: onnxruntime vs torch on the step: max |error| "
          f"{error:.2e}")
    assert error < 1e-4
    found, scale = margins(out)
    print(f"{name}: 32 greedy steps: top-two margins {min(found):.2f} to "
          f"{max(found):.2f}, logit scale {scale:.1f}")
    np.savez(HERE / f"{name}.inputs.npz", **feeds)
    np.savez(HERE / f"{name}.optimum.outputs.npz", **outputs)
    manifest_path = HERE / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    exporter = "optimum-" + ".".join(optimum_version.split(".")[:2])
    entry = {"model": name, "kind": "kv", "exporter": exporter,
             "dynamic": True, "inputs": f"{name}.inputs.npz",
             "max_abs_err_vs_torch": error}
    entry.update(describe(out))
    manifest[out.name] = entry
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())),
                                        indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated fixture names")
    args = parser.parse_args()
    for name in args.only.split(",") if args.only else MODELS:
        make(name)


if __name__ == "__main__":
    main()
