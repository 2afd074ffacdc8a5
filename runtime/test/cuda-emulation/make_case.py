"""Writes a generated GPT (bench/gen_gpt.py) larger than the committed test
models, with random token ids and onnxruntime's outputs, for the CUDA
emulation test: MODELS_DIR/NAME.onnx, NAME.inputs.npz, NAME.outputs.npz.

Usage: make_case.py MODELS_DIR NAME [gen_gpt.py flags...]
"""

import pathlib
import subprocess
import sys

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[3]


def save_reference(session, feeds, folder, name):
    """Runs `session` on `feeds` and writes NAME.inputs.npz and
    NAME.outputs.npz (onnxruntime's outputs by name) into `folder`."""
    outputs = session.run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    np.savez(folder / f"{name}.inputs.npz", **feeds)
    np.savez(folder / f"{name}.outputs.npz", **dict(zip(names, outputs)))


def main():
    folder, name, flags = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    model = folder / f"{name}.onnx"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_gpt.py"), "1",
                    str(model), *flags], check=True)
    session = ort.InferenceSession(str(model),
                                   providers=["CPUExecutionProvider"])
    feeds = {}
    rng = np.random.default_rng(0)
    vocab = int(flags[flags.index("--vocab") + 1])
    for spec in session.get_inputs():
        shape = [int(d) for d in spec.shape]
        feeds[spec.name] = rng.integers(0, vocab, shape, dtype=np.int64)
    save_reference(session, feeds, folder, name)


if __name__ == "__main__":
    main()
