#!/usr/bin/env python3
"""Writes the Hugging Face export fixtures of test/models/hf/.

Run by hand, never in CI: it needs torch 2.x and transformers from PyPI in a
virtual environment of your own (a large download), and optimum-onnx in a
second one (optimum-onnx pins an older transformers):

    python3 -m venv /work/venv-hf
    /work/venv-hf/bin/pip install torch transformers onnx onnxruntime onnxscript
    python3 -m venv /work/venv-opt    # optimum-onnx, its transformers
    /work/venv-opt/bin/pip install optimum-onnx
    /work/venv-hf/bin/python test/models/hf/make_hf.py \
        [--optimum-python /work/venv-opt/bin/python] [--only NAME,...]

Each model is a small configuration of a transformers class with seeded
random weights, exported as its users export it:

* `legacy`: `torch.onnx.export(dynamo=False)` at opset 17 with the model's
  default attention (`sdpa`, or `eager` where the class has no sdpa path:
  BLOOM),
* `dynamo18`, `dynamo23`: `torch.onnx.export(dynamo=True)` at opset 18 and
  23,
* `optimum`: `optimum.exporters.onnx.main_export` at its default opset,

static (batch 2, sequence 16) and dynamic (`<name>.<exporter>.dynamic.onnx`,
batch and sequence symbolic; optimum writes only dynamic models). Every
file is checked before it is kept: onnxruntime's outputs on the model's
inputs equal torch's within 1e-4, and a dynamic model's equal the static
one's. `<name>.inputs.npz` holds the inputs (keys are ONNX input names),
`<file>.outputs.npz` onnxruntime's outputs (CPU, graph optimizations off).
`manifest.json` lists every file with its exporter, opset, shapes and the
symbols a dynamic model needs bound; tests read it. `skipped.json` lists
the exports that failed or that onnxruntime refuses, with the reason.
"""

import argparse
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import logging
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf

HERE = pathlib.Path(__file__).resolve().parent
BATCH, SEQ = 2, 16
PAD = 5  # The second row's last PAD positions are padding.
VOCAB = 128
# The fixtures whose vocabulary is not VOCAB: their inputs hold the last id.
ODD_VOCAB = {"gpt2_vocab": 131, "bert_vocab": 130}
PAST = 6  # Cached positions of the KV-cache fixtures.
NEW = 4  # New positions of the KV-cache fixtures.

warnings.filterwarnings("ignore")
logging.getLogger("torch").setLevel(logging.ERROR)


def common(**extra):
    config = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, initializer_range=0.1,
                  use_cache=False, tie_word_embeddings=False)
    config.update(extra)
    return config


# name -> (config factory, model class, kind). kind: "lm" (input_ids,
# attention_mask -> logits), "encoder" (-> last_hidden_state), "pooled"
# (sentence-transformers mean pooling and L2 normalization -> embeddings),
# "kv" (a decoder step with past key/values: optimum), "kv_torch" (the
# same step exported by torch.onnx's legacy exporter, as optimum would if
# it supported the class: export_kv_torch).
MODELS = {
    "gpt2": (lambda: tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_inner=64,
                                   n_head=4, n_positions=64,
                                   initializer_range=0.1, use_cache=False),
             tf.GPT2LMHeadModel, "lm"),
    "llama": (lambda: tf.LlamaConfig(**common(num_key_value_heads=2)),
              tf.LlamaForCausalLM, "lm"),
    "mistral": (lambda: tf.MistralConfig(**common(num_key_value_heads=2,
                                                  sliding_window=4096)),
                tf.MistralForCausalLM, "lm"),
    # A sliding window shorter than the sequence: nn.attention's window.
    "mistral_window": (lambda: tf.MistralConfig(**common(
        num_key_value_heads=2, sliding_window=6)),
                       tf.MistralForCausalLM, "lm"),
    "qwen2": (lambda: tf.Qwen2Config(**common(num_key_value_heads=2)),
              tf.Qwen2ForCausalLM, "lm"),
    "phi3": (lambda: tf.Phi3Config(**common(num_key_value_heads=2,
                                            pad_token_id=0)),
             tf.Phi3ForCausalLM, "lm"),
    "gemma": (lambda: tf.GemmaConfig(**common(num_key_value_heads=1,
                                              head_dim=8)),
              tf.GemmaForCausalLM, "lm"),
    # ALiBi biases instead of positions; fused QKV interleaved per head.
    "bloom": (lambda: tf.BloomConfig(vocab_size=VOCAB, hidden_size=32,
                                     n_layer=2, n_head=4,
                                     initializer_range=0.1, use_cache=False),
              tf.BloomForCausalLM, "lm"),
    # Softcapped scores and logits, a sliding window (layer 0) shorter
    # than the sequence, query scaling by query_pre_attn_scalar.
    "gemma2": (lambda: tf.Gemma2Config(**common(
        num_key_value_heads=2, head_dim=8, sliding_window=6,
        attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
        query_pre_attn_scalar=16)),
               tf.Gemma2ForCausalLM, "lm"),
    # Weights stored [out, in], learned positions offset by 2.
    "opt": (lambda: tf.OPTConfig(vocab_size=VOCAB, hidden_size=32,
                                 num_hidden_layers=2, ffn_dim=64,
                                 num_attention_heads=4,
                                 max_position_embeddings=64,
                                 word_embed_proj_dim=32, init_std=0.1,
                                 use_cache=False),
            tf.OPTForCausalLM, "lm"),
    # Falcon-7B's layout: multi-query fused QKV, parallel attention and MLP.
    "falcon": (lambda: tf.FalconConfig(vocab_size=VOCAB, hidden_size=32,
                                       num_hidden_layers=2,
                                       num_attention_heads=4,
                                       multi_query=True, parallel_attn=True,
                                       new_decoder_architecture=False,
                                       alibi=False, bias=False,
                                       max_position_embeddings=64,
                                       initializer_range=0.1,
                                       use_cache=False),
               tf.FalconForCausalLM, "lm"),
    # RMS norms of q and k over the whole projection (not per head).
    "olmo2": (lambda: tf.Olmo2Config(**common(num_key_value_heads=2)),
              tf.Olmo2ForCausalLM, "lm"),
    # Vocabularies that tp does not divide, as GPT-2's 50257 (odd; the LM
    # head tied to the embedding) and BERT's 30522 (2 modulo 4).
    "gpt2_vocab": (lambda: tf.GPT2Config(vocab_size=ODD_VOCAB["gpt2_vocab"],
                                         n_embd=32, n_layer=2, n_inner=64,
                                         n_head=4, n_positions=64,
                                         initializer_range=0.1,
                                         use_cache=False),
                   tf.GPT2LMHeadModel, "lm"),
    "bert_vocab": (lambda: tf.BertConfig(**common(
        type_vocab_size=2, vocab_size=ODD_VOCAB["bert_vocab"])),
                   tf.BertModel, "encoder"),
    "bert": (lambda: tf.BertConfig(**common(type_vocab_size=2)),
             tf.BertModel, "encoder"),
    "minilm": (lambda: tf.BertConfig(**common(type_vocab_size=2)),
               tf.BertModel, "pooled"),
    "t5": (lambda: tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8,
                               d_ff=64, num_layers=2, num_heads=4,
                               initializer_factor=1.0, use_cache=False),
           tf.T5EncoderModel, "encoder"),
    "gpt2_kv": (lambda: tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_inner=64,
                                      n_head=4, n_positions=64,
                                      initializer_range=0.1),
                tf.GPT2LMHeadModel, "kv"),
    "llama_kv": (lambda: tf.LlamaConfig(**common(num_key_value_heads=2,
                                                 use_cache=True)),
                 tf.LlamaForCausalLM, "kv"),
    "qwen2_kv": (lambda: tf.Qwen2Config(**common(num_key_value_heads=2,
                                                 use_cache=True)),
                 tf.Qwen2ForCausalLM, "kv"),
    # Mixtures of experts, with transformers' "batched_mm" experts (each
    # token's k experts' weights gathered, then batched products): a
    # softmax router and its top 2 of 4 (renormalized for Mixtral and
    # Qwen3-MoE), Qwen2-MoE's shared expert behind a sigmoid gate.
    "mixtral": (lambda: tf.MixtralConfig(**common(
        num_key_value_heads=2, intermediate_size=48, num_local_experts=4,
        num_experts_per_tok=2)),
                tf.MixtralForCausalLM, "lm"),
    "qwen2_moe": (lambda: tf.Qwen2MoeConfig(**common(
        num_key_value_heads=2, moe_intermediate_size=24,
        shared_expert_intermediate_size=40, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1,
        norm_topk_prob=False)),
                  tf.Qwen2MoeForCausalLM, "lm"),
    "qwen3_moe": (lambda: tf.Qwen3MoeConfig(**common(
        num_key_value_heads=2, head_dim=8, moe_intermediate_size=24,
        num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
        norm_topk_prob=True)),
                  tf.Qwen3MoeForCausalLM, "lm"),
    # The same Mixtral with transformers' "eager" experts: a loop over the
    # experts the example input reached (NonZero, index_select, index_add).
    "mixtral_eager": (lambda: tf.MixtralConfig(**common(
        num_key_value_heads=2, intermediate_size=48, num_local_experts=4,
        num_experts_per_tok=2)),
                      tf.MixtralForCausalLM, "lm"),
    # 64 experts, top 1: the example's 32 tokens reach at most 32, so the
    # loop holds fewer bodies than there are experts.
    # Qwen2-MoE and Qwen3-MoE with transformers' "eager" experts (the same
    # experts class as Mixtral's; Qwen2-MoE's shared expert stays a plain
    # MLP beside the loop).
    "qwen2_moe_eager": (lambda: tf.Qwen2MoeConfig(**common(
        num_key_value_heads=2, moe_intermediate_size=24,
        shared_expert_intermediate_size=40, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1,
        norm_topk_prob=False)),
                        tf.Qwen2MoeForCausalLM, "lm"),
    "qwen3_moe_eager": (lambda: tf.Qwen3MoeConfig(**common(
        num_key_value_heads=2, head_dim=8, moe_intermediate_size=24,
        num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
        norm_topk_prob=True)),
                        tf.Qwen3MoeForCausalLM, "lm"),
    # Mixtral with a KV cache (optimum-onnx has no Mixtral export): one
    # decoder step, transformers' batched_mm experts, for serving.
    "mixtral_kv": (lambda: tf.MixtralConfig(**common(
        num_key_value_heads=2, intermediate_size=48, num_local_experts=4,
        num_experts_per_tok=2, use_cache=True)),
                   tf.MixtralForCausalLM, "kv_torch"),
    "mixtral_eager64": (lambda: tf.MixtralConfig(**common(
        num_key_value_heads=2, intermediate_size=8, num_local_experts=64,
        num_experts_per_tok=1)),
                        tf.MixtralForCausalLM, "lm"),
}

# How the mixtures of experts compute their experts (transformers'
# set_experts_implementation).
EXPERTS = {"mixtral": "batched_mm", "qwen2_moe": "batched_mm",
           "qwen3_moe": "batched_mm", "mixtral_eager": "eager",
           "mixtral_eager64": "eager", "mixtral_kv": "batched_mm",
           "qwen2_moe_eager": "eager", "qwen3_moe_eager": "eager"}

# The KV-cache models also exported in optimum's legacy form.
LEGACY_MODELS = ("gpt2_kv", "llama_kv")

OPTIMUM_TASK = {"lm": "text-generation", "encoder": "feature-extraction",
                "pooled": "feature-extraction",
                "kv": "text-generation-with-past"}


def build(name):
    """The seeded model: transformers' init, then every norm scale and bias
    perturbed so that each parameter matters."""
    make_config, cls, kind = MODELS[name]
    torch.manual_seed(sum(map(ord, name)))
    config = make_config()
    config._attn_implementation = "sdpa"
    try:
        model = cls(config).eval()
    except ValueError:  # No sdpa path (BLOOM): the class's eager one.
        config._attn_implementation = "eager"
        model = cls(config).eval()
    if name in EXPERTS:
        model.set_experts_implementation(EXPERTS[name])
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model, kind


class Forward(torch.nn.Module):
    """input_ids, attention_mask -> the first output, as users wrap it."""

    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        if self.kind != "pooled":
            return out[0]
        # sentence-transformers: mean over the kept tokens, L2 normalized.
        hidden = out[0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


def make_inputs(name, kind):
    rng = np.random.default_rng(sum(map(ord, name)))
    vocab = ODD_VOCAB.get(name, VOCAB)
    ids = rng.integers(0, vocab, (BATCH, SEQ), dtype=np.int64)
    if name in ODD_VOCAB:
        ids[0, 1] = vocab - 1
    mask = np.ones((BATCH, SEQ), dtype=np.int64)
    mask[1, SEQ - PAD:] = 0
    # optimum's decoders take position_ids: transformers' default (arange).
    positions = np.broadcast_to(np.arange(SEQ, dtype=np.int64), (BATCH, SEQ))
    # optimum's BERT takes token_type_ids: transformers' default (zeros).
    return {"input_ids": ids, "attention_mask": mask,
            "position_ids": np.ascontiguousarray(positions),
            "token_type_ids": np.zeros((BATCH, SEQ), dtype=np.int64)}


OUTPUT_NAME = {"lm": "logits", "encoder": "last_hidden_state",
               "pooled": "embeddings"}


def export_torch(model, kind, inputs, path, exporter, dynamic):
    wrapper = Forward(model, kind).eval()
    args = tuple(torch.from_numpy(inputs[k])
                 for k in ("input_ids", "attention_mask"))
    names = ["input_ids", "attention_mask"]
    out_name = OUTPUT_NAME[kind]
    if exporter == "legacy":
        axes = None
        if dynamic:
            axes = {n: {0: "batch", 1: "sequence"} for n in names}
            axes[out_name] = {0: "batch", 1: "sequence"} if kind != "pooled" \
                else {0: "batch"}
        torch.onnx.export(wrapper, args, path, input_names=names,
                          output_names=[out_name], opset_version=17,
                          dynamo=False, dynamic_axes=axes)
        return
    opset = int(exporter[len("dynamo"):])
    shapes = None
    if dynamic:
        batch = torch.export.Dim("batch", min=1, max=64)
        seq = torch.export.Dim("sequence", min=2, max=64)
        shapes = {n: {0: batch, 1: seq} for n in names}
    program = torch.onnx.export(wrapper, args, None, input_names=names,
                                output_names=[out_name], opset_version=opset,
                                dynamo=True, dynamic_shapes=shapes,
                                optimize=True, verbose=False)
    program.save(str(path), external_data=False)


# optimum's main_export; a class optimum has no ONNX config for is
# exported with its nearest relative's, as a user does (custom_onnx_configs):
# Mixtral with Mistral's, which optimum-onnx's transformers 4.57 computes
# with its eager loop over the experts the example reached, each an
# nn.Linear module (docs/frontend.md).
OPTIMUM_EXPORT = """
import sys
import transformers
from optimum.exporters.onnx import main_export
from optimum.exporters.tasks import TasksManager
saved, target, task = sys.argv[1:4]
relatives = {"mixtral": "mistral"}
config = transformers.AutoConfig.from_pretrained(saved)
custom = {}
if config.model_type in relatives:
    constructor = TasksManager.get_exporter_config_constructor(
        exporter="onnx", model_type=relatives[config.model_type], task=task,
        library_name="transformers")
    past = task.endswith("-with-past")
    custom = {"model": constructor(config, task=task.replace("-with-past", ""),
                                   use_past=past, use_past_in_inputs=past)}
main_export(saved, target, task=task, do_validation=False,
            no_post_process=True, custom_onnx_configs=custom or None)
"""


def export_optimum(model, name, kind, outdir, optimum_python, skipped):
    """optimum's main_export on the saved model, in its own interpreter;
    returns the exported file or None when optimum cannot export it."""
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "model"
        model.config.use_cache = kind == "kv"
        model.save_pretrained(saved, safe_serialization=True)
        target = pathlib.Path(tmp) / "onnx"
        code = OPTIMUM_EXPORT
        run = subprocess.run([optimum_python, "-c", code, str(saved),
                              str(target), OPTIMUM_TASK[kind]],
                             capture_output=True, text=True)
        model.config.use_cache = False
        onnx_files = sorted(target.glob("*.onnx")) if target.is_dir() else []
        if run.returncode != 0 or len(onnx_files) != 1:
            skipped[f"{name}.optimum.onnx"] = "optimum: not exported"
            print(f"  optimum: {name}: not exported "
                  f"({run.stderr.strip().splitlines()[-1:] or run.returncode})",
                  file=sys.stderr)
            return None
        # Inline external data (small models) into one file.
        m = onnx.load(str(onnx_files[0]))
        out = outdir / f"{name}.optimum.onnx"
        onnx.save(m, str(out), save_as_external_data=False)
        return out


# optimum's earlier form of a decoder with past key values, still
# common on the Hugging Face Hub: a pair of graphs exported with its own
# ONNX configs (use_past without, then with, the pasts as inputs), and
# their merge into one If on use_cache_branch by optimum.onnx.merge_decoders.
LEGACY_FILES = ("decoder_model.onnx", "decoder_with_past_model.onnx",
                "decoder_model_merged.onnx")
LEGACY_EXPORT = """
import pathlib, sys, tempfile
import onnx
import transformers
from optimum.exporters.onnx import main_export
from optimum.exporters.tasks import TasksManager
from optimum.onnx import merge_decoders
saved, target = sys.argv[1], pathlib.Path(sys.argv[2])
target.mkdir(parents=True, exist_ok=True)
config = transformers.AutoConfig.from_pretrained(saved)
constructor = TasksManager.get_exporter_config_constructor(
    exporter="onnx", model_type=config.model_type,
    task="text-generation-with-past", library_name="transformers")
for name, with_past in (("decoder_model", False),
                        ("decoder_with_past_model", True)):
    with tempfile.TemporaryDirectory() as tmp:
        onnx_config = constructor(config, task="text-generation",
                                  use_past=True, use_past_in_inputs=with_past)
        main_export(saved, tmp, task="text-generation-with-past",
                    do_validation=False, no_post_process=True,
                    custom_onnx_configs={"model": onnx_config})
        model = onnx.load(str(pathlib.Path(tmp) / "model.onnx"))
        onnx.save(model, str(target / (name + ".onnx")),
                  save_as_external_data=False)
merge_decoders(target / "decoder_model.onnx",
               target / "decoder_with_past_model.onnx",
               save_path=str(target / "decoder_model_merged.onnx"))
"""


def export_optimum_legacy(model, name, outdir, optimum_python, feeds, want,
                          prompt, prefill):
    """optimum's pair and merged decoder in `<name>.optimum-legacy/`, each
    checked against torch: the with-past graphs on the KV-cache step
    (`feeds`, `want`), the no-past graphs on the prompt whose cache the
    step holds (`prompt`, `prefill`)."""
    target = outdir / f"{name}.optimum-legacy"
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "model"
        model.config.use_cache = True
        model.save_pretrained(saved, safe_serialization=True)
        model.config.use_cache = False
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([optimum_python, "-c", LEGACY_EXPORT, str(saved),
                        str(target)], check=True, capture_output=True,
                       text=True)
    err = 0.0
    for file in LEGACY_FILES:
        path = target / file
        cases = []
        if file != "decoder_with_past_model.onnx":
            no_past = dict(prompt)
            if file.endswith("merged.onnx"):
                no_past["use_cache_branch"] = np.array([False])
                for k, v in feeds.items():
                    if k.startswith("past"):
                        no_past[k] = np.zeros(v.shape[:2] + (0,) + v.shape[3:],
                                              v.dtype)
            cases.append((no_past, prefill))
        if file != "decoder_model.onnx":
            with_past = dict(feeds, use_cache_branch=np.array([True]))
            cases.append((with_past, want))
        for inputs, expected in cases:
            err = max(err, check_close(f"{target.name}/{file}",
                                       run_ort(path, inputs)["logits"],
                                       expected))
    sizes = sum((target / f).stat().st_size for f in LEGACY_FILES)
    print(f"  {target.name}: {sizes // 1024} KiB, |ort - torch| {err}",
          file=sys.stderr)


class KvStep(torch.nn.Module):
    """input_ids, attention_mask, position_ids and each layer's past key
    and value -> logits and the presents, named as optimum names them."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = tf.DynamicCache()
        for layer in range(len(past) // 2):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, past_key_values=cache,
                         use_cache=True)
        presents = []
        for layer in out.past_key_values.layers:
            presents += [layer.keys, layer.values]
        return (out.logits, *presents)


def export_kv_torch(model, name, outdir):
    """One decoder step with past key/values through torch.onnx.export
    (dynamo=False, opset 17), inputs and outputs named as optimum's, batch
    and lengths symbolic: `<name>.legacy.onnx`."""
    config = model.config
    layers = config.num_hidden_layers
    heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or \
        config.hidden_size // config.num_attention_heads
    model.config.use_cache = True
    args = (torch.zeros(BATCH, NEW, dtype=torch.long),
            torch.ones(BATCH, PAST + NEW, dtype=torch.long),
            torch.arange(PAST, PAST + NEW).expand(BATCH, NEW).contiguous())
    past = tuple(torch.randn(BATCH, heads, PAST, head_dim)
                 for _ in range(2 * layers))
    pasts, presents = [], []
    for layer in range(layers):
        pasts += [f"past_key_values.{layer}.key",
                  f"past_key_values.{layer}.value"]
        presents += [f"present.{layer}.key", f"present.{layer}.value"]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    axes.update({n: {0: "batch_size", 2: "past_sequence_length"}
                 for n in pasts})
    axes.update({n: {0: "batch_size", 2: "total_sequence_length"}
                 for n in presents})
    path = outdir / f"{name}.legacy.onnx"
    torch.onnx.export(KvStep(model).eval(), args + past, str(path),
                      input_names=["input_ids", "attention_mask",
                                   "position_ids"] + pasts,
                      output_names=["logits"] + presents,
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    model.config.use_cache = False
    return path


def kv_inputs(model, name, path):
    """Inputs of one decode step of a KV-cache export: NEW tokens after PAST
    cached ones (the cache from torch's prefill), and the reference logits;
    then the prefill's inputs and logits."""
    m = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(sum(map(ord, name)))
    ids = rng.integers(0, VOCAB, (BATCH, PAST + NEW), dtype=np.int64)
    mask = np.ones((BATCH, PAST + NEW), dtype=np.int64)
    mask[1, :2] = 0  # Left padding, as generation pads.
    # Positions as generation computes them for left-padded rows.
    pos = np.cumsum(mask, axis=1) - 1
    pos[mask == 0] = 1
    with torch.no_grad():
        model.config.use_cache = True
        pre = model(input_ids=torch.from_numpy(ids[:, :PAST]),
                    attention_mask=torch.from_numpy(mask[:, :PAST]),
                    position_ids=torch.from_numpy(pos[:, :PAST]),
                    use_cache=True)
        past = pre.past_key_values
        # The cache object grows in place in the next call: copy it first.
        layers = [(layer.keys.clone(), layer.values.clone())
                  for layer in past.layers] if hasattr(past, "layers") \
            else [(k.clone(), v.clone()) for k, v in past]
        full = model(input_ids=torch.from_numpy(ids[:, PAST:]),
                     attention_mask=torch.from_numpy(mask),
                     position_ids=torch.from_numpy(pos[:, PAST:]),
                     past_key_values=past, use_cache=True)
        model.config.use_cache = False
    feeds = {}
    for inp in m.graph.input:
        n = inp.name
        if n == "input_ids":
            feeds[n] = ids[:, PAST:]
        elif n == "attention_mask":
            feeds[n] = mask
        elif n == "position_ids":
            feeds[n] = pos[:, PAST:].astype(np.int64)
        elif n.startswith("past_key_values."):
            _, layer, which = n.split(".")
            k, v = layers[int(layer)]
            feeds[n] = (k if which == "key" else v).numpy()
        else:
            raise SystemExit(f"{path}: unexpected input {n}")
    prompt = {"input_ids": ids[:, :PAST], "attention_mask": mask[:, :PAST],
              "position_ids": pos[:, :PAST]}
    return feeds, full.logits.numpy(), prompt, pre.logits.numpy()


def run_ort(path, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    values = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    return dict(zip(names, values))


def check_close(what, got, want, tol=1e-4):
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 0.0)
    if got.shape != want.shape or err > tol * scale:
        raise SystemExit(f"{what}: differs from torch (shape {got.shape} vs "
                         f"{want.shape}, max |err| {err:.3g})")
    return err


def describe(path):
    m = onnx.load(str(path), load_external_data=False)
    dims = set()
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                dims.add(d.dim_param)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    return {"opset": opset, "symbols": sorted(dims),
            "ops": dict(sorted(ops.items())),
            "bytes": path.stat().st_size}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--optimum-python",
                        help="interpreter with optimum-onnx (skips optimum "
                             "exports when absent)")
    parser.add_argument("--out", default=str(HERE))
    args = parser.parse_args()
    outdir = pathlib.Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(MODELS)
    skipped_path = outdir / "skipped.json"
    skipped = json.loads(skipped_path.read_text()) \
        if skipped_path.exists() else {}
    manifest_path = outdir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) \
        if manifest_path.exists() else {}
    for name in names:
        model, kind = build(name)
        print(f"{name}:", file=sys.stderr)
        files = []
        if kind == "kv_torch":
            path = export_kv_torch(model, name, outdir)
            feeds, want, _, _ = kv_inputs(model, name, path)
            np.savez(outdir / f"{name}.inputs.npz", **feeds)
            outs = run_ort(path, feeds)
            err = check_close(path.name, outs["logits"], want)
            files.append((path, "legacy", True, err, outs))
            kind = "kv"
        elif kind == "kv":
            if not args.optimum_python:
                continue
            path = export_optimum(model, name, kind, outdir,
                                  args.optimum_python, skipped)
            if path is None:
                continue
            feeds, want, prompt, prefill = kv_inputs(model, name, path)
            np.savez(outdir / f"{name}.inputs.npz", **feeds)
            outs = run_ort(path, feeds)
            err = check_close(path.name, outs["logits"], want)
            files.append((path, "optimum", True, err, outs))
            if name in LEGACY_MODELS:
                export_optimum_legacy(model, name, outdir,
                                      args.optimum_python, feeds, want,
                                      prompt, prefill)
        else:
            inputs = make_inputs(name, kind)
            np.savez(outdir / f"{name}.inputs.npz", **inputs)
            with torch.no_grad():
                want = Forward(model, kind)(
                    torch.from_numpy(inputs["input_ids"]),
                    torch.from_numpy(inputs["attention_mask"])).numpy()
            for exporter in ("legacy", "dynamo18", "dynamo23"):
                for dynamic in (False, True):
                    suffix = ".dynamic" if dynamic else ""
                    path = outdir / f"{name}.{exporter}{suffix}.onnx"
                    try:
                        export_torch(model, kind, inputs, path, exporter,
                                     dynamic)
                    except Exception as e:  # noqa: BLE001 - report and go on
                        msg = str(e).strip().splitlines()[:1]
                        print(f"  {path.name}: export failed: {msg}",
                              file=sys.stderr)
                        path.unlink(missing_ok=True)
                        skipped[path.name] = f"export failed: {msg}"
                        continue
                    try:
                        outs = run_ort(path, inputs)
                    except Exception as e:  # noqa: BLE001 - onnxruntime refuses
                        msg = str(e).strip().splitlines()[0][:300]
                        print(f"  {path.name}: onnxruntime refuses it: {msg}",
                              file=sys.stderr)
                        skipped[path.name] = f"onnxruntime refuses it: {msg}"
                        path.unlink()
                        continue
                    err = check_close(path.name, next(iter(outs.values())),
                                      want)
                    files.append((path, exporter, dynamic, err, outs))
            # optimum exports a sentence-transformers model without its
            # pooling (the same graph as "bert"), and T5 as the whole
            # encoder-decoder, not T5EncoderModel.
            if args.optimum_python and kind != "pooled" and name != "t5":
                path = export_optimum(model, name, kind, outdir,
                                      args.optimum_python, skipped)
                if path is not None:
                    try:
                        outs = run_ort(path, inputs)
                    except Exception as e:  # noqa: BLE001 - refused
                        # optimum traces with its own dummy inputs: an
                        # expert loop over the experts they reached
                        # refuses inputs that reach another number.
                        msg = str(e).strip().splitlines()[0][:300]
                        print(f"  {path.name}: onnxruntime refuses it: "
                              f"{msg}", file=sys.stderr)
                        skipped[path.name] = f"onnxruntime refuses it: {msg}"
                        path.unlink()
                        path = None
                if path is not None:
                    first = outs.get(OUTPUT_NAME[kind], next(iter(outs.values())))
                    try:
                        files_err = check_close(path.name, first, want)
                    except SystemExit as e:
                        # The same loop on an input that reaches as many
                        # experts, other ones: each body's weights are
                        # those of the expert the dummy input reached.
                        print(f"  {e}", file=sys.stderr)
                        skipped[path.name] = str(e)
                        path.unlink()
                        continue
                    files.append((path, "optimum", True, files_err, outs))
        for path, exporter, dynamic, err, outs in files:
            np.savez(outdir / (path.name[:-len(".onnx")] + ".outputs.npz"),
                     **outs)
            entry = {"model": name, "kind": kind, "exporter": exporter,
                     "dynamic": dynamic, "inputs": f"{name}.inputs.npz",
                     "max_abs_err_vs_torch": err}
            entry.update(describe(path))
            manifest[path.name] = entry
            print(f"  {path.name}: {entry['bytes'] // 1024} KiB, opset "
                  f"{entry['opset']}, |ort - torch| {err}", file=sys.stderr)
        # Written after every model, so that a failure keeps the rest.
        manifest_path.write_text(json.dumps(dict(sorted(manifest.items())),
                                            indent=1) + "\n")
        skipped_path.write_text(json.dumps(dict(sorted(skipped.items())),
                                           indent=1) + "\n")


if __name__ == "__main__":
    main()
