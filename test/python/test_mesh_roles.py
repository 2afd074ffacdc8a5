"""Mesh axes may have any names: `--mesh model=2:tp` and
`--mesh stages=2:pp,model=2:tp` give the roles to axes that are not called
tp and pp. The committed models compiled that way equal the runs on the
conventional names and onnxruntime (fp32 rtol 1e-4), and the manifest and
the report name the real axes (with their roles where the name does not
imply them)."""

import json

import numpy as np
import pytest

from conftest import ROOT, compile_and_run

MODELS = ROOT / "test" / "models"
NAMES = ["gpt2", "llama"]
# (named mesh, the same mesh on conventional names, its axes as the
# manifest spells them)
MESHES = [
    ("model=2:tp", "tp=2", [{"name": "model", "size": 2, "role": "tp"}]),
    ("stages=2:pp,model=2:tp", "pp=2,tp=2",
     [{"name": "stages", "size": 2, "role": "pp"},
      {"name": "model", "size": 2, "role": "tp"}]),
]


@pytest.mark.parametrize("named,conventional,axes", MESHES)
@pytest.mark.parametrize("name", NAMES)
def test_named_axes_match(tmp_path, name, named, conventional, axes):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    outputs, report = compile_and_run(tmp_path / "named",
                                      MODELS / f"{name}.onnx", inputs,
                                      "--mesh", named)
    reference, reference_report = compile_and_run(
        tmp_path / "conventional", MODELS / f"{name}.onnx", inputs, "--mesh",
        conventional)
    assert set(outputs) == set(expected) == set(reference)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], reference[key], rtol=1e-4,
                                   atol=1e-5,
                                   err_msg=f"{name} {named} vs {conventional}")
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} {named} vs onnxruntime")

    # The artifact and the report speak of the axes as the mesh names them.
    manifest = json.loads((tmp_path / "named" / "art" /
                           "manifest.json").read_text())
    assert manifest["mesh"]["axes"] == axes
    assert report["mesh"]["axes"] == axes
    names = [axis["name"] for axis in axes]
    for entry, rank in zip(manifest["ranks"], report["ranks"]):
        assert list(entry["coords"]) == names
        assert set(rank["coords"]) == set(names)
        for collective in rank["collectives"]:
            assert set(collective["axes"]) <= set(names), collective
    # Stages follow the pp-role axis; tensor parallelism is all-reduced over
    # the tp-role axis, as often as on the conventional mesh.
    if "stages" in names:
        assert [r["stage"] for r in manifest["ranks"]] == [0, 0, 1, 1]
    reduces = [[c["count"] for c in r["collectives"]
                if c["kind"] == "all_reduce"] for r in report["ranks"]]
    reference_reduces = [[c["count"] for c in r["collectives"]
                          if c["kind"] == "all_reduce"]
                         for r in reference_report["ranks"]]
    assert reduces == reference_reduces
    assert all(c["axes"] == ["model"] for r in report["ranks"]
               for c in r["collectives"] if c["kind"] == "all_reduce")
