#!/usr/bin/env python3
"""Writes the training fixtures of test/models/train/: small transformers
exported for training, and torch's own training of each as the reference
(issue 35).

Run by hand, never in CI. It needs torch and transformers: Debian's torch
(python3-torch) with transformers from PyPI in a virtual environment that
sees the system's packages,

    /usr/bin/python3 -m venv --system-site-packages /work/venv-train
    /work/venv-train/bin/pip install transformers==4.36.2 onnx onnxruntime
    /work/venv-train/bin/python test/models/train/make_train.py [--only NAME]

or torch 2.x and transformers in a venv of their own. For each model:

* `<name>.onnx`: `torch.onnx.export(dynamo=False)` at opset 17 with
  `do_constant_folding=False`, as onnxruntime-training asks: every
  parameter stays an initializer of its own, under its torch name (a tied
  weight once, under the name torch lists first), with the transposes and
  reshapes of its uses as nodes of the graph (`model.` prefixes every
  name: the export's wrapper module holds the model as `model`). Static shapes: batch 2,
  sequence 16. Checked before it is kept: onnxruntime's logits equal
  torch's within 1e-4, and every trainable torch parameter is an
  initializer of equal value.
* `<name>.train.npz`, torch's training from the exported weights (float32,
  CPU, deterministic), with the loss of every step taken before its update:
  - `batch<i>/<input>` for i in 0..4: the inputs of step i, with
    `batch<i>/labels`, already shifted for a causal LM (-100 on the last
    position and on padding) and -100 but on the masked tokens for BERT's
    masked-LM head; the loss is `F.cross_entropy(logits.flatten(0, 1),
    labels.flatten(), ignore_index=-100)`;
  - `grad/<initializer>`: the gradient of every parameter at step 0 (a
    tied weight's is the sum of its uses');
  - `sgd/loss` [5]: torch.optim.SGD(lr=0.1, momentum=0.9,
    weight_decay=0.01), steps 0..4 on batches 0..4;
  - `adamw/loss` [5] and `adamw/param/<initializer>`: torch.optim.AdamW
    (lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01) from the
    same start, and the parameters after its 5 steps;
  - `clip/loss` [5] and `clip/param/<initializer>`: the AdamW run with
    `torch.nn.utils.clip_grad_norm_(params, 0.5)` before each step (the
    step-0 norm, `clip/norm0`, is above 0.5: the clip acts).
* `manifest.json`: each model's class, shapes, inputs, the optimizers'
  hyperparameters and the partita-compile flags that name them.

Models (every dropout 0; hidden 32, 4 heads, 2 layers, FFN 64, vocabulary
128): GPT-2 (`GPT2LMHeadModel`, tied embedding and LM head), Llama
(`LlamaForCausalLM`, 2 kv heads: GQA), BERT (`BertForMaskedLM`, its decoder
tied to the word embeddings), GPT-NeoX (`GPTNeoXForCausalLM`, parallel
attention and MLP, rotary on a quarter of each head) and Mixtral
(`MixtralForCausalLM`, 4 experts of FFN 48, top 2; transformers >= 5 for
its "batched_mm" experts, torch 2.x). Each model's entry in the manifest
records the torch and transformers that wrote it.
"""

import argparse
import json
import pathlib
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
import transformers as tf
from onnx import numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
VOCAB, BATCH, SEQ, STEPS = 128, 2, 16, 5
SGD = dict(lr=0.1, momentum=0.9, weight_decay=0.01)
ADAMW = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
CLIP = 0.5

warnings.filterwarnings("ignore")


def common(**extra):
    config = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, initializer_range=0.1,
                  use_cache=False)
    config.update(extra)
    return config


MODELS = {
    "gpt2": (lambda: tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2,
                                   n_inner=64, n_head=4, n_positions=64,
                                   initializer_range=0.1, use_cache=False,
                                   resid_pdrop=0.0, embd_pdrop=0.0,
                                   attn_pdrop=0.0),
             tf.GPT2LMHeadModel, "causal"),
    "llama": (lambda: tf.LlamaConfig(**common(num_key_value_heads=2)),
              tf.LlamaForCausalLM, "causal"),
    "bert": (lambda: tf.BertConfig(**common(type_vocab_size=2,
                                            hidden_dropout_prob=0.0,
                                            attention_probs_dropout_prob=0.0)),
             tf.BertForMaskedLM, "masked"),
    "gpt_neox": (lambda: tf.GPTNeoXConfig(**common(rotary_pct=0.25,
                                                   use_parallel_residual=True,
                                                   hidden_dropout=0.0,
                                                   attention_dropout=0.0)),
                 tf.GPTNeoXForCausalLM, "causal"),
    # A mixture of experts (transformers >= 5: its experts "batched_mm",
    # which the legacy exporter writes as Gathers of the stacked weights
    # and batched MatMuls): 4 experts, top 2, renormalized.
    "mixtral": (lambda: tf.MixtralConfig(**common(
        num_key_value_heads=2, intermediate_size=48, num_local_experts=4,
        num_experts_per_tok=2)), getattr(tf, "MixtralForCausalLM", None),
                "causal"),
}
# How a mixture of experts computes its experts (transformers'
# set_experts_implementation; its default, grouped_mm, does not export).
EXPERTS = {"mixtral": "batched_mm"}


def build(name):
    make_config, cls, kind = MODELS[name]
    torch.manual_seed(sum(map(ord, name)))
    model = cls(make_config())
    if name in EXPERTS:
        model.set_experts_implementation(EXPERTS[name])
    with torch.no_grad():
        # Norm scales and biases off their init, so that each matters.
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.train(), kind


class Forward(torch.nn.Module):
    """input_ids, attention_mask -> logits, as users wrap it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids,
                          attention_mask=attention_mask).logits


def batches(name, kind):
    """STEPS batches: ids, a mask whose second row ends in padding, and
    labels as the loss reads them."""
    rng = np.random.default_rng(sum(map(ord, name)) + 1)
    out = []
    for step in range(STEPS):
        ids = rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int64)
        mask = np.ones((BATCH, SEQ), np.int64)
        mask[1, SEQ - 3 - step % 3:] = 0
        if kind == "causal":
            labels = np.full((BATCH, SEQ), -100, np.int64)
            labels[:, :-1] = ids[:, 1:]
            labels[mask == 0] = -100
            labels[:, :-1][mask[:, 1:] == 0] = -100
        else:
            labels = np.full((BATCH, SEQ), -100, np.int64)
            chosen = rng.random((BATCH, SEQ)) < 0.25
            chosen[0, 1] = True  # At least one masked token.
            chosen &= mask == 1
            labels[chosen] = ids[chosen]
            ids = ids.copy()
            ids[chosen] = 3  # The [MASK] token of this vocabulary.
        out.append({"input_ids": ids, "attention_mask": mask,
                    "labels": labels})
    return out


def loss_of(model, batch):
    logits = Forward(model)(torch.from_numpy(batch["input_ids"]),
                            torch.from_numpy(batch["attention_mask"]))
    return F.cross_entropy(logits.flatten(0, 1),
                           torch.from_numpy(batch["labels"]).flatten(),
                           ignore_index=-100)


def export(model, path, batch):
    model.eval()
    wrapper = Forward(model)
    feeds = (torch.from_numpy(batch["input_ids"]),
             torch.from_numpy(batch["attention_mask"]))
    # torch 2.x exports with dynamo by default; these fixtures are the
    # legacy exporter's (every parameter an initializer under its name).
    legacy = {"dynamo": False} if int(torch.__version__.split(".")[0]) >= 2 \
        else {}
    torch.onnx.export(wrapper, feeds, str(path), opset_version=17,
                      do_constant_folding=False,
                      input_names=["input_ids", "attention_mask"],
                      output_names=["logits"],
                      training=torch.onnx.TrainingMode.EVAL, **legacy)
    model.train()
    with torch.no_grad():
        want = wrapper(*feeds).numpy()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options,
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": batch["input_ids"],
                             "attention_mask": batch["attention_mask"]})[0]
    error = float(np.abs(got - want).max())
    if error > 1e-4:
        raise SystemExit(f"{path.name}: onnxruntime is {error} off torch")
    return error


def check_initializers(path, wrapper):
    """Every parameter of `wrapper` (named as the export names them: the
    wrapper's `model.` prefix, tied ones once) is an initializer of equal
    value."""
    graph = onnx.load(str(path)).graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for pname, p in wrapper.named_parameters():
        if pname not in values:
            raise SystemExit(f"{path.name}: parameter {pname} is no "
                             "initializer (constant-folded?)")
        if not np.array_equal(values[pname], p.detach().numpy()):
            raise SystemExit(f"{path.name}: initializer {pname} differs from "
                             "torch's parameter")


def train(model, data, optimizer, clip=None):
    """Losses of STEPS steps (each before its update) and the parameters
    after them; the step-0 gradients and norm."""
    losses, grads, norm0 = [], {}, None
    params = dict(Forward(model).named_parameters())
    for step, batch in enumerate(data):
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        if step == 0:
            grads = {n: p.grad.detach().numpy().copy()
                     for n, p in params.items()}
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(params.values(), clip)
            if step == 0:
                norm0 = float(norm)
        optimizer.step()
        losses.append(float(loss))
    final = {n: p.detach().numpy().copy() for n, p in params.items()}
    return np.array(losses, np.float32), grads, final, norm0


def make(name):
    model, kind = build(name)
    data = batches(name, kind)
    path = HERE / f"{name}.onnx"
    error = export(model, path, data[0])
    check_initializers(path, Forward(model))
    start = {n: p.detach().clone() for n, p in model.named_parameters()}

    def reset():
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(start[n])

    torch.use_deterministic_algorithms(True)
    arrays = {}
    for step, batch in enumerate(data):
        for key, value in batch.items():
            arrays[f"batch{step}/{key}"] = value
    params = [p for _, p in model.named_parameters()]
    sgd_loss, grads, _, _ = train(model, data, torch.optim.SGD(params, **SGD))
    arrays["sgd/loss"] = sgd_loss
    for n, g in grads.items():
        arrays[f"grad/{n}"] = g
    reset()
    adamw_loss, _, adamw_final, _ = train(model, data,
                                          torch.optim.AdamW(params, **ADAMW))
    arrays["adamw/loss"] = adamw_loss
    for n, value in adamw_final.items():
        arrays[f"adamw/param/{n}"] = value
    reset()
    clip_loss, _, clip_final, norm0 = train(
        model, data, torch.optim.AdamW(params, **ADAMW), clip=CLIP)
    if not norm0 > CLIP:
        raise SystemExit(f"{name}: step-0 gradient norm {norm0} does not "
                         f"exceed the clip {CLIP}")
    arrays["clip/loss"] = clip_loss
    arrays["clip/norm0"] = np.array(norm0, np.float32)
    for n, value in clip_final.items():
        arrays[f"clip/param/{n}"] = value
    np.savez(HERE / f"{name}.train.npz", **arrays)
    return {"class": MODELS[name][1].__name__, "kind": kind,
            "batch": BATCH, "sequence": SEQ, "vocab": VOCAB,
            "inputs": ["input_ids", "attention_mask"], "output": "logits",
            "parameters": len(params),
            "parameter_elements": int(sum(p.numel() for p in params)),
            "onnxruntime_error": error,
            "sgd_loss": sgd_loss.tolist(), "adamw_loss": adamw_loss.tolist(),
            "clip_norm0": norm0,
            "torch": torch.__version__, "transformers": tf.__version__,
            "onnx": onnx.__version__, "onnxruntime": ort.__version__}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="",
                        help="comma-separated model names")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(MODELS)
    manifest_path = HERE / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) \
        if manifest_path.exists() else {"models": {}}
    manifest.update({
        "generator": "make_train.py",
        "loss": "cross_entropy:logits",
        "optimizers": {
            "sgd": {**SGD, "flag": "sgd:lr=0.1,momentum=0.9,"
                                   "weight_decay=0.01"},
            "adamw": {**ADAMW, "betas": list(ADAMW["betas"]),
                      "flag": "adamw:lr=0.01,beta1=0.9,beta2=0.999,"
                              "eps=1e-8,weight_decay=0.01"},
            "clip": {"clip_grad_norm": CLIP, "optimizer": "adamw"}},
    })
    for name in names:
        manifest["models"][name] = make(name)
        print(f"{name}: {manifest['models'][name]}")
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
