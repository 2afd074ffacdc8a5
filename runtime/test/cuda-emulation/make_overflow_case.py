"""Writes the committed llama_kv model with a past key row of zeros but one
FLT_MAX, and onnxruntime's outputs, for the CUDA emulation test:
MODELS_DIR/NAME.onnx, NAME.inputs.npz, NAME.outputs.npz. The row's score
is one product, q * FLT_MAX, which overflows where |q| > 1 (before the
scale, as the model computes it); a positive infinity makes its row's
softmax NaN, and the NaN reaches the logits and the second layer's
presents. The generated attention must give NaN in the same places
(test_numerical_edges.py has the host's cases, docs/reliability.md the
rule).

Usage: make_overflow_case.py MODELS_DIR NAME
"""

import pathlib
import shutil
import sys

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODELS = ROOT / "test" / "models"


def main():
    folder, name = pathlib.Path(sys.argv[1]), sys.argv[2]
    model = folder / f"{name}.onnx"
    shutil.copyfile(MODELS / "llama_kv.onnx", model)
    feeds = dict(np.load(MODELS / "llama_kv.inputs.npz"))
    key = feeds["past_key_values.0.key"].copy()
    key[0, 0, 3, :] = 0.0
    key[0, 0, 3, 0] = np.finfo(np.float32).max
    feeds["past_key_values.0.key"] = key
    session = ort.InferenceSession(str(model),
                                   providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    if not np.isnan(outputs[names.index("logits")]).any():
        sys.exit("onnxruntime's logits have no NaN: the case tests nothing")
    np.savez(folder / f"{name}.inputs.npz", **feeds)
    np.savez(folder / f"{name}.outputs.npz", **dict(zip(names, outputs)))


if __name__ == "__main__":
    main()
