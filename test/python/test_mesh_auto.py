"""partita-compile --mesh auto: the planner's choice compiles and runs on
host ranks equal to onnxruntime's outputs, for the committed models at 2, 4
and 8 devices, and the report's plan names the mesh the artifact has."""

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUILD, ROOT

try:
    import partita
except ImportError:
    sys.path.insert(0, str(BUILD / "python"))
    import partita

MODELS = ROOT / "test" / "models"
COMPILER = BUILD / "bin" / "partita-compile"


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_planned_mesh_runs_equal_to_onnxruntime(tmp_path, name, devices,
                                                objective):
    art, report = tmp_path / "art", tmp_path / "report.json"
    subprocess.run([str(COMPILER), str(MODELS / f"{name}.onnx"), "--mesh",
                    "auto", "--devices", str(devices), "--objective",
                    objective, "--cluster", "h100-80g", "-o", str(art),
                    "--report", str(report)], check=True)
    plan = json.loads(report.read_text())["plan"]
    chosen = plan["chosen"]
    assert chosen["feasible"]
    # The chosen plan is the best feasible one of everything searched.
    assert chosen == plan["candidates"][0]
    assert all(c["step_seconds"] >= chosen["step_seconds"]
               for c in plan["candidates"])
    artifact = partita.load(str(art))
    axes = {a["name"]: a["size"] for a in artifact.manifest["mesh"]["axes"]}
    spelled = ",".join(f"{k}={v}" for k, v in axes.items() if v > 1) or "1"
    assert spelled == chosen["mesh"]
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    outputs = artifact.run(inputs)
    for key, value in expected.items():
        np.testing.assert_allclose(outputs[key], value, rtol=1e-4, atol=1e-5)
