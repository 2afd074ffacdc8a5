#!/usr/bin/env python3
"""Writes a GPT-2-small-shaped decoder with a KV cache as optimum exports
it, for the benchmark of generation with a KV cache.

A GPT2LMHeadModel of GPT-2 small's shape (12 layers, n_embd 768, 12 heads,
n_inner 3072, vocab 50257, n_positions 1024) with seeded random weights
(transformers' init), saved and exported by optimum's `main_export` with
task `text-generation-with-past`: the plain decoder with past (inputs
`input_ids`, `attention_mask`, `position_ids`,
`past_key_values.<layer>.key`/`.value` [batch, 12, past, 64]; outputs
`logits`, `present.<layer>.key`/`.value`), not the merged model with an
`If`. One file, about 500 MB at fp32 (external data only past 2 GB). The
file is checked before it is kept: onnxruntime's logits of a prefill step
(empty past) and of a decode step after it equal torch's.

Run by hand, never in CI: it needs torch and transformers in /work/venv-hf
and optimum-onnx in /work/venv-opt (see test/models/hf/make_hf.py):

    /work/venv-hf/bin/python bench/make_decode_model.py \
        [-o /tmp/decode/gpt2s_kv.onnx] [--optimum-python /work/venv-opt/bin/python]

or, with optimum 1.16 and Debian's torch 1.13, make_trained_kv.py's one
environment for both (eager attention: that transformers has no sdpa for
GPT-2; torch 1.13 exchanges arrays with numpy 1 only, so there also
`pip install "numpy<2" ml_dtypes==0.5.1`):

    /work/venv-train/bin/python bench/make_decode_model.py \
        --optimum-python /work/venv-train/bin/python
"""

import argparse
import logging
import pathlib
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers as tf

warnings.filterwarnings("ignore")
logging.getLogger("torch").setLevel(logging.ERROR)

LAYERS, HIDDEN, HEADS, FFN, VOCAB, POSITIONS = 12, 768, 12, 3072, 50257, 1024
PREFILL, DECODE = 5, 1  # Tokens of the checked steps.

# optimum in its own interpreter, as make_hf.py runs it. optimum-onnx
# writes one decoder that also takes an empty past for the first step;
# no_post_process keeps a post-processing step from merging separate
# decoders into one model with an If (monolith is refused with -with-past).
OPTIMUM = """\
import sys
from optimum.exporters.onnx import main_export
main_export(sys.argv[1], sys.argv[2], task="text-generation-with-past",
            do_validation=False, no_post_process=True)
"""


def build(seed):
    torch.manual_seed(seed)
    config = tf.GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS,
                           n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                           n_inner=FFN, use_cache=True)
    config._attn_implementation = "sdpa"
    try:
        return tf.GPT2LMHeadModel(config).eval()
    except ValueError:
        # transformers before GPT-2's sdpa (4.36, with Debian's torch 1.13
        # and optimum 1.16: test/models/hf/make_trained_kv.py's venv).
        torch.manual_seed(seed)
        config._attn_implementation = "eager"
        return tf.GPT2LMHeadModel(config).eval()


def export(model, out, optimum_python):
    with tempfile.TemporaryDirectory() as tmp:
        saved = pathlib.Path(tmp) / "model"
        model.save_pretrained(saved, safe_serialization=True)
        target = pathlib.Path(tmp) / "onnx"
        run = subprocess.run([optimum_python, "-c", OPTIMUM, str(saved),
                              str(target)], capture_output=True, text=True)
        files = sorted(target.glob("*.onnx")) if target.is_dir() else []
        if run.returncode != 0 or len(files) != 1:
            sys.stderr.write(run.stdout + run.stderr)
            raise SystemExit(f"optimum: not exported (rc {run.returncode}, "
                             f"files {[f.name for f in files]})")
        m = onnx.load(str(files[0]))  # With its external data, if any.
        out.parent.mkdir(parents=True, exist_ok=True)
        external = m.ByteSize() >= 2**31 - 2**24  # protobuf's 2 GB limit
        onnx.save(m, str(out), save_as_external_data=external,
                  all_tensors_to_one_file=True, location=out.name + ".data")


def check_graph(path):
    m = onnx.load(str(path), load_external_data=False)
    if any(n.op_type == "If" for n in m.graph.node):
        raise SystemExit(f"{path}: a merged model (If), not the decoder "
                         "with past")
    ins = [i.name for i in m.graph.input]
    outs = [o.name for o in m.graph.output]
    want_in = {"input_ids", "attention_mask", "position_ids"} | {
        f"past_key_values.{i}.{w}" for i in range(LAYERS)
        for w in ("key", "value")}
    want_out = {"logits"} | {f"present.{i}.{w}" for i in range(LAYERS)
                             for w in ("key", "value")}
    if set(ins) != want_in or set(outs) != want_out:
        raise SystemExit(f"{path}: inputs {ins}, outputs {outs}")


def check_numbers(model, path, seed):
    """A prefill step (past 0) and a decode step (past PREFILL) through
    onnxruntime against torch."""
    session = ort.InferenceSession(str(path),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (1, PREFILL + DECODE), dtype=np.int64)
    head = HIDDEN // HEADS
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    past = {f"past_key_values.{i}.{w}": np.zeros((1, HEADS, 0, head),
                                                 np.float32)
            for i in range(LAYERS) for w in ("key", "value")}
    names = [o.name for o in session.get_outputs()]
    done = 0
    for step in (PREFILL, DECODE):
        feeds = dict(past)
        feeds["input_ids"] = ids[:, done:done + step]
        feeds["attention_mask"] = np.ones((1, done + step), np.int64)
        feeds["position_ids"] = np.arange(done, done + step,
                                          dtype=np.int64)[None]
        got = dict(zip(names, session.run(None, feeds)))
        err = float(np.max(np.abs(got["logits"] - want[:, done:done + step])))
        scale = max(1.0, float(np.max(np.abs(want))))
        print(f"  past {done}, {step} new: logits {got['logits'].shape}, "
              f"present {got['present.0.key'].shape}, |ort - torch| {err:.3g}",
              file=sys.stderr)
        if err > 1e-4 * scale:
            raise SystemExit(f"{path}: differs from torch by {err}")
        past = {f"past_key_values.{i}.{w}": got[f"present.{i}.{w}"]
                for i in range(LAYERS) for w in ("key", "value")}
        done += step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", default="/tmp/decode/gpt2s_kv.onnx")
    parser.add_argument("--optimum-python",
                        default="/work/venv-opt/bin/python")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    model = build(args.seed)
    export(model, out, args.optimum_python)
    check_graph(out)
    check_numbers(model, out, args.seed)
    print(f"{out}: {out.stat().st_size / 1e6:.0f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
