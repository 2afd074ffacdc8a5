"""The encoder fixtures of test/models/encoders (ViT, the Whisper encoder,
CLIP's text and vision models, through torch.onnx's legacy and dynamo
exporters): each runs on host ranks equal to onnxruntime (rtol 1e-4) on
every mesh. ViT and CLIP's vision model have 17 positions (16 patches and
the class token), which sequence parallelism over 2 cannot split: there the
sequence stays whole, with a remark."""

import json

import numpy as np
import pytest

from conftest import ROOT, compile_and_run

ENCODERS = ROOT / "test" / "models" / "encoders"
MANIFEST = json.loads((ENCODERS / "manifest.json").read_text())
FILES = sorted(MANIFEST["files"])
MESHES = ["1", "tp=2", "tp=4", "dp=2,tp=2", "pp=2", "sp=2 --sp-mode ulysses",
          "sp=2 --sp-mode ring", "tp=2 --sp-mode megatron"]
ODD_SEQUENCE = ("vit", "clip_vision")


def cases():
    for name in FILES:
        for mesh in MESHES:
            label = mesh.replace(" --sp-mode ", "-")
            yield pytest.param(name, mesh, id=f"{name}-{label}")


@pytest.mark.parametrize("name,mesh", list(cases()))
def test_encoder_matches_onnxruntime(tmp_path, name, mesh):
    entry = MANIFEST["files"][name]
    inputs = dict(np.load(ENCODERS / entry["inputs"]))
    expected = dict(np.load(ENCODERS / name.replace(".onnx",
                                                    ".outputs.npz")))
    flags = [] if mesh == "1" else ["--mesh", *mesh.split()]
    outputs, report = compile_and_run(tmp_path, ENCODERS / name, inputs,
                                      *flags)
    if "--sp-mode" in mesh and entry["model"] in ODD_SEQUENCE:
        axis = "tp=2" if "megatron" in mesh else "sp=2"
        assert any("the sequence of 17 positions" in remark and
                   f"is not divisible by {axis}, so it is not split" in remark
                   for remark in report["remarks"]), report["remarks"]
    for key, want in expected.items():
        # partita-run names a file after the output, ':' made '_'.
        got = outputs[key.replace(":", "_")]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} {mesh}: {key}")
