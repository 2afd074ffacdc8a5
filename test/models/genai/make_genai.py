"""Writes the onnxruntime-genai builder fixtures of test/models/genai/.

Small configurations of real `transformers` model classes with seeded
random weights, exported by onnxruntime-genai's model builder as a user
exports a downloaded model (`python -m onnxruntime_genai.models.builder
-i HF_DIR -o OUT -p fp32 -e cpu`), and onnxruntime's outputs on fixed
inputs. Run by hand in a virtual environment with torch, transformers,
onnxruntime-genai, onnx_ir, onnx and onnxruntime from PyPI (the versions
README.md records); never in CI:

    python3 -m venv /work/venv-genai
    /work/venv-genai/bin/pip install torch transformers onnxruntime-genai \\
        onnx_ir onnx onnxruntime
    /work/venv-genai/bin/python test/models/genai/make_genai.py

Each fixture is a builder output directory NAME.PRECISION/ (model.onnx,
model.onnx.data, genai_config.json; the tokenizer files are dropped) and
NAME.PRECISION.outputs.npz: onnxruntime's outputs for a prompt (batch 2,
6 tokens, an empty past: `prompt/<input or output name>`), for a decode
step of one token after 5 cached ones (`decode/...`) and for one after 39
(`long/...`, past Phi-3.5's 32 original positions).

The int4 exports (`-p int4`: MatMulNBits, 4 bits, blocks of 32) are of
Llama (symmetric, the builder's default) and Qwen3 (asymmetric: zero
points). The builder asks for `accuracy_level` 4, under which onnxruntime
quantizes the activations to int8; their outputs are those of the same
model at accuracy level 0 (fp32 arithmetic on the dequantized weights),
and `accuracy4/<step>/<name>` holds the builder's level-4 outputs beside
them.
"""

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
VOCAB = 128

# hidden 64, 4 heads of 16 (onnxruntime's GroupQueryAttention wants a
# multiple of 16), 2 key/value heads, 2 layers, FFN 128.
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
              num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)


def configs():
    from transformers import (LlamaConfig, MistralConfig, Phi3Config,
                              Qwen2Config, Qwen3Config)
    return {
        "llama": LlamaConfig(**COMMON),
        "mistral": MistralConfig(**COMMON, sliding_window=4096),
        "qwen2": Qwen2Config(**COMMON),
        "qwen3": Qwen3Config(**COMMON, head_dim=16),
        "phi3": Phi3Config(**COMMON, pad_token_id=0,
                           original_max_position_embeddings=64),
        # Phi-3.5's long rope: past 32 positions the builder's If picks the
        # rescaled cos/sin caches.
        "phi35": Phi3Config(**COMMON, pad_token_id=0,
                            original_max_position_embeddings=32,
                            rope_scaling={
                                "rope_type": "longrope", "type": "longrope",
                                "long_factor": [1.0 + 0.1 * i
                                                for i in range(8)],
                                "short_factor": [1.0] * 8}),
    }


def save_hf(name, config, directory):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(directory)
    # The builder writes the tokenizer's files; a word-level one of the
    # vocabulary serves.
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0",
                            bos_token="t1", eos_token="t2",
                            pad_token="t0").save_pretrained(directory)


# The int4 exports: name -> the builder's extra options. Twice the fp32
# width (hidden 128, 8 heads of 16, 4 key/value heads, FFN 256), so that
# tp=4 splits every projection by whole blocks: 4 blocks of 32 rows for
# Llama, 8 of 16 for Qwen3, whose zero points pack two blocks to a byte.
INT4 = {"llama": [], "qwen3": ["is_symmetric=false", "block_size=16"]}
INT4_SHAPE = dict(hidden_size=128, intermediate_size=256,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=16)


def build(hf, out, precision, extra=()):
    with tempfile.TemporaryDirectory() as cache:
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder",
                   "-i", str(hf), "-o", str(out), "-p", precision, "-e",
                   "cpu", "-c", cache]
        if extra:
            command += ["--extra_options", *extra]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    for f in out.iterdir():
        if f.name not in ("model.onnx", "model.onnx.data",
                          "genai_config.json"):
            f.unlink()


def feeds_for(model, batch, past, seq, rng):
    import onnx
    feeds = {"input_ids": rng.integers(0, VOCAB, (batch, seq)),
             "attention_mask": np.ones((batch, past + seq), np.int64)}
    for value in model.graph.input:
        if value.name.startswith("past_key_values."):
            dims = value.type.tensor_type.shape.dim
            shape = [batch, dims[1].dim_value, past, dims[3].dim_value or 16]
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
        elif value.name == "position_ids":
            feeds[value.name] = np.tile(np.arange(past, past + seq),
                                        (batch, 1))
    return {k: np.asarray(v, np.int64) if v.dtype.kind == "i" else v
            for k, v in feeds.items()}


def at_accuracy_level(directory, level, out):
    """A copy of the export in `out` whose MatMulNBits use `level`."""
    import onnx
    model = onnx.load(directory / "model.onnx")
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attribute in node.attribute:
                if attribute.name == "accuracy_level":
                    attribute.i = level
    onnx.save(model, out / "model.onnx", save_as_external_data=True,
              location="model.onnx.data")
    return out


def reference(directory, prefix=""):
    import onnx
    import onnxruntime as ort
    model = onnx.load(directory / "model.onnx", load_external_data=False)
    session = ort.InferenceSession(str(directory / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(36)
    arrays = {}
    for step, (batch, past, seq) in {"prompt": (2, 0, 6),
                                     "decode": (2, 5, 1),
                                     "long": (1, 39, 1)}.items():
        feeds = feeds_for(model, batch, past, seq, rng)
        names = [o.name for o in session.get_outputs()]
        for key, value in feeds.items():
            arrays[f"{prefix}{step}/{key}"] = value
        for key, value in zip(names, session.run(None, feeds)):
            arrays[f"{prefix}{step}/{key}"] = value
    return arrays, model


# The serving test's prompts (test_genai_models.py): 6 tokens, and the
# second row's last 4, generated from greedily for GENERATE new tokens.
GENERATE = 24


def genai_greedy(directory):
    """onnxruntime-genai's own greedy generation over the export: the two
    prompts given right-padded (id 0 after the second's 4 tokens), as
    onnxruntime-genai pads a batch for these models. Each row stops at its
    end-of-sequence token; `generate/lengths` holds how many tokens each
    row made (the rest of `generate/tokens` is padding). Nothing where
    onnxruntime-genai refuses the export's configuration."""
    import onnxruntime_genai as og
    rng = np.random.default_rng(19)
    ids = rng.integers(1, 128, size=(2, 6)).astype(np.int64)
    prompt = np.zeros((2, 6), np.int32)
    prompt[0] = ids[0]
    prompt[1, :4] = ids[1, 2:]
    model = og.Model(str(directory))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, batch_size=2,
                              max_length=6 + GENERATE)
    try:
        generator = og.Generator(model, params)
    except RuntimeError as error:  # Phi-3's eos id lies past the tiny vocab.
        print(f"{directory.name}: onnxruntime-genai refuses it: {error}")
        return {}
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    tokens = np.zeros((2, GENERATE), np.int64)
    lengths = np.zeros(2, np.int64)
    eos = json.loads((directory / "genai_config.json").read_text())[
        "model"]["eos_token_id"]
    for b in range(2):
        made = [int(t) for t in generator.get_sequence(b)[6:]]
        if eos in made:
            made = made[:made.index(eos) + 1]
        tokens[b, :len(made)] = made
        lengths[b] = len(made)
    return {"generate/prompt": prompt.astype(np.int64),
            "generate/tokens": tokens, "generate/lengths": lengths}


def main():
    import onnxruntime
    import onnxruntime_genai
    import torch
    import transformers
    manifest = {"onnxruntime_genai": onnxruntime_genai.__version__,
                "onnxruntime": onnxruntime.__version__,
                "torch": torch.__version__,
                "transformers": transformers.__version__, "models": {}}
    exports = [(name, config, "fp32") for name, config in configs().items()]
    for name in INT4:
        config = configs()[name]
        for key, value in INT4_SHAPE.items():
            setattr(config, key, value)
        exports.append((name, config, "int4"))
    for name, config, precision in exports:
        fixture = name if precision == "fp32" else f"{name}.{precision}"
        with tempfile.TemporaryDirectory() as tmp:
            hf = pathlib.Path(tmp) / "hf"
            save_hf(name, config, hf)
            out = HERE / f"{name}.{precision}"
            shutil.rmtree(out, ignore_errors=True)
            try:
                build(hf, out, precision, INT4.get(name, [])
                      if precision == "int4" else [])
            except subprocess.CalledProcessError as error:
                manifest["models"][fixture] = {"error": str(error)}
                shutil.rmtree(out, ignore_errors=True)
                continue
        if precision == "int4":
            with tempfile.TemporaryDirectory() as tmp:
                exact = at_accuracy_level(out, 0, pathlib.Path(tmp))
                shutil.copy(out / "genai_config.json", exact)
                arrays, _ = reference(exact)
                arrays.update(genai_greedy(exact))
            built, model = reference(out, prefix="accuracy4/")
            arrays.update(built)
        else:
            arrays, model = reference(out)
            arrays.update(genai_greedy(out))
        np.savez(HERE / f"{name}.{precision}.outputs.npz", **arrays)
        ops = sorted({(n.domain + "." if n.domain else "") + n.op_type
                      for n in model.graph.node})
        manifest["models"][fixture] = {
            "directory": out.name,
            "class": type(config).__name__.replace("Config", ""),
            "opset": [(o.domain, o.version) for o in model.opset_import],
            "ops": ops,
            "inputs": [i.name for i in model.graph.input],
            "symbols": sorted({d.dim_param for i in model.graph.input
                               for d in i.type.tensor_type.shape.dim
                               if d.dim_param})}
        print(name, ops)
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
