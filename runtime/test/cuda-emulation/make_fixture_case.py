"""Copies a committed Hugging Face export (test/models/hf) under a case's
name for the CUDA emulation test: MODELS_DIR/NAME.onnx with the fixture's
inputs and onnxruntime's outputs as NAME.inputs.npz and NAME.outputs.npz.

Usage: make_fixture_case.py MODELS_DIR NAME FIXTURE (e.g. mixtral.legacy:
test/models/hf/mixtral.legacy.onnx, mixtral.inputs.npz and
mixtral.legacy.outputs.npz)
"""

import pathlib
import shutil
import sys

HF = pathlib.Path(__file__).resolve().parents[3] / "test" / "models" / "hf"


def main():
    folder, name, fixture = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    model = fixture.split(".")[0]
    shutil.copyfile(HF / f"{fixture}.onnx", folder / f"{name}.onnx")
    shutil.copyfile(HF / f"{model}.inputs.npz", folder / f"{name}.inputs.npz")
    shutil.copyfile(HF / f"{fixture}.outputs.npz",
                    folder / f"{name}.outputs.npz")


if __name__ == "__main__":
    main()
