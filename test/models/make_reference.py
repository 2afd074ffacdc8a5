"""Make reference inputs/outputs for the test models and check the exports.

Run with the pyenv python (the `python3` first on PATH, which has onnx and
onnxruntime), after export.py has written the .onnx files:

    python3 test/models/make_reference.py [NAME ...]   (default: all)

For each model <name> in gpt2, llama, bert, gpt2_masked this writes, next
to the models:
    <name>.inputs.npz   one deterministic input set, batch 2, seq 16
    <name>.outputs.npz  onnxruntime's (CPU, no graph optimizations) outputs
                        of <name>.onnx on those inputs
Keys are the ONNX graph input/output names.  For bert the attention_mask pads
the last 5 positions of the second batch row.  The static-only fixtures
(llama_hd32; llama_kv, whose step has seq 8 after 8 cached positions drawn
from a standard normal) get the same two files, and only the checks that
need no dynamic export.

Checks, each of which fails loudly (non-zero exit):
  * onnx.load + onnx.checker.check_model(full_check=True) on all six files;
  * <name>_dynamic.onnx gives the same outputs as <name>.onnx (within 1e-4),
    and also runs at another shape (batch 3, seq 7);
  * torch's outputs match onnxruntime's within 1e-4 for all of the above:
    this script runs `/usr/bin/python3 export.py --verify DIR` (Debian torch;
    override with $TORCH_PYTHON), which rebuilds the seeded torch models.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

# The reference outputs checked into test/models were produced with these.
ORT_VERSION_USED = "1.32.0"
ONNX_VERSION_USED = "1.23.2"

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["gpt2", "llama", "bert", "gpt2_masked"]
STATIC_ONLY = ["llama_hd32", "llama_kv"]
LAYERS, KV_HEADS, HEAD_DIM, PAST = 2, 2, 16, 8  # llama_kv's cache
VOCAB = 128
ATOL = 1e-4


def make_inputs(name, batch, seq, pad, seed=1234):
    rng = np.random.default_rng(seed)
    if name == "llama_kv":
        seq = 8
    feeds = {"input_ids": rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)}
    if name == "llama_kv":
        for i in range(LAYERS):
            for t in ("key", "value"):
                feeds[f"past_key_values.{i}.{t}"] = rng.standard_normal(
                    (batch, KV_HEADS, PAST, HEAD_DIM)).astype(np.float32)
    if name in ("bert", "gpt2_masked"):
        mask = np.ones((batch, seq), dtype=np.int64)
        mask[batch - 1, seq - pad:] = 0  # pad the tail of the last row
        feeds["attention_mask"] = mask
    return feeds


def run(path, feeds):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(names, feeds)))
    for k, v in outs.items():
        if not np.all(np.isfinite(v)):
            sys.exit(f"FAIL {path}: output {k} has non-finite values")
    return outs


def max_diff(a, b):
    assert a.keys() == b.keys(), (a.keys(), b.keys())
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def main():
    if ort.__version__ != ORT_VERSION_USED:
        print(f"warning: onnxruntime {ort.__version__}, references were made with {ORT_VERSION_USED}")
    tmp = tempfile.mkdtemp(prefix="partita-ref-")
    names = sys.argv[1:] or MODELS + STATIC_ONLY
    for name in names:
        if name in STATIC_ONLY:
            static = os.path.join(HERE, f"{name}.onnx")
            model = onnx.load(static)
            onnx.checker.check_model(model, full_check=True)
            print(f"OK   checker {os.path.basename(static)}: ir {model.ir_version}")
            feeds = make_inputs(name, 2, 16, pad=5)
            outs = run(static, feeds)
            np.savez(os.path.join(HERE, f"{name}.inputs.npz"), **feeds)
            np.savez(os.path.join(HERE, f"{name}.outputs.npz"), **outs)
            np.savez(os.path.join(tmp, f"{name}.inputs.npz"), **feeds)
            np.savez(os.path.join(tmp, f"{name}.ort.npz"), **outs)
            continue
        static, dynamic = (os.path.join(HERE, f"{name}{s}.onnx") for s in ("", "_dynamic"))
        for path in (static, dynamic):
            model = onnx.load(path)
            onnx.checker.check_model(model, full_check=True)
            print(f"OK   checker {os.path.basename(path)}: ir {model.ir_version}, "
                  f"opset {[(o.domain or 'ai.onnx', o.version) for o in model.opset_import]}")

        feeds = make_inputs(name, 2, 16, pad=5)
        outs = run(static, feeds)
        dyn_outs = run(dynamic, feeds)
        d = max_diff(outs, dyn_outs)
        if d > ATOL:
            sys.exit(f"FAIL {name}: static vs dynamic onnxruntime outputs differ by {d:.3g}")
        print(f"OK   static vs dynamic {name}: max |diff| = {d:.3g}")
        np.savez(os.path.join(HERE, f"{name}.inputs.npz"), **feeds)
        np.savez(os.path.join(HERE, f"{name}.outputs.npz"), **outs)

        other = make_inputs(name, 3, 7, pad=3, seed=99)
        for tag, f, o in ((name, feeds, outs), (f"{name}_dynamic", feeds, dyn_outs),
                          (f"{name}_dynamic.b3s7", other, run(dynamic, other))):
            np.savez(os.path.join(tmp, f"{tag}.inputs.npz"), **f)
            np.savez(os.path.join(tmp, f"{tag}.ort.npz"), **o)

    torch_python = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
    subprocess.run([torch_python, os.path.join(HERE, "export.py"), "--verify", tmp], check=True)
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    print("all checks passed")


if __name__ == "__main__":
    main()
