"""--target cuda on a machine without a GPU: for every committed transformer
on tp=1, tp=2 and dp=2×pp=2×tp=2 (and bf16), the generated CUDA compiles
with nvcc for sm_80 and sm_90a into the artifact, ptxas reports no register
spills in the attention and normalisation kernels, and running the artifact
here says plainly that there is no GPU."""

import json
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import BUILD, ROOT

MODELS = ROOT / "test" / "models"
NAMES = ["gpt2", "llama", "bert"]
MESHES = [None, "tp=2", "dp=2,pp=2,tp=2"]


def nvcc_available():
    cache = BUILD / "CMakeCache.txt"
    if not cache.exists():
        return False
    match = re.search(r"^PARTITA_NVCC:\w+=(.*)$|^CUDAToolkit_NVCC_EXECUTABLE:\w+=(.*)$",
                      cache.read_text(), re.M)
    path = match and (match.group(1) or match.group(2))
    return bool(path) and os.access(path, os.X_OK)


pytestmark = pytest.mark.skipif(not nvcc_available(),
                                reason="no CUDA toolkit (nvcc) in this build")

# Fatbins are cached per build tree: a warm run does not call nvcc again.
ENV = dict(os.environ, PARTITA_CACHE_DIR=str(BUILD / "partita-cache"))


def compile_cuda(art, name, *flags):
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(MODELS / f"{name}.onnx"),
         "--target", "cuda", "-o", str(art), *flags],
        capture_output=True, text=True, timeout=900, env=ENV)
    assert proc.returncode == 0, proc.stderr
    return json.loads((art / "manifest.json").read_text())


def ptxas_functions(log):
    """function name -> (registers, spill store bytes, spill load bytes),
    from ptxas -v's report; one entry per function and architecture."""
    functions = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for '(\w+)'", line)
        if m:
            current = (m.group(1), m.group(2))
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            functions.setdefault(current, {})["spills"] = (
                int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            functions.setdefault(current, {})["registers"] = int(m.group(1))
    return functions


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("name", NAMES)
def test_cuda_artifact_builds_without_spills(tmp_path, name, mesh):
    flags = ["--mesh", mesh] if mesh else []
    manifest = compile_cuda(tmp_path / "art", name, *flags)
    assert manifest["target"] == "cuda"
    assert manifest["cuda"]["archs"] == ["sm_80", "sm_90a"]
    sources = {r["cuda"]["source"] for r in manifest["ranks"]}
    # Code is specialised to shapes, not ranks: without a pipeline every
    # rank runs one module (a stage's transfers split over tp slice at a
    # rank's own offset, so pipeline ranks may differ). Equal sources are
    # stored once.
    if mesh is None or "pp" not in mesh:
        assert len(sources) == 1
    files = list((tmp_path / "art" / "cuda").iterdir())
    assert len(files) == 3 * len(sources)
    for source in sources:
        stem = source[:-len(".cu")]
        fatbin = (tmp_path / "art" / (stem + ".fatbin")).read_bytes()
        assert len(fatbin) > 0
        text = (tmp_path / "art" / source).read_text()
        log = (tmp_path / "art" / (stem + ".ptxas.txt")).read_text()
        functions = ptxas_functions(log)
        kernels = set(re.findall(
            r'__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', text))
        assert kernels, "no kernels generated"
        for arch in ["sm_80", "sm_90a"]:
            for kernel in kernels:
                assert (kernel, arch) in functions, (kernel, arch, log[:2000])
        checked = [k for k in kernels
                   if re.search(r"attention|layer_norm|rms_norm|softmax", k)]
        assert checked, "no attention or normalisation kernel to check"
        for kernel in checked:
            for arch in ["sm_80", "sm_90a"]:
                info = functions[(kernel, arch)]
                assert info.get("spills") == (0, 0), (kernel, arch, info)


def test_bf16_artifact_builds(tmp_path):
    manifest = compile_cuda(tmp_path / "art", "llama", "--dtype", "bf16",
                            "--mesh", "tp=2")
    source = manifest["ranks"][0]["cuda"]["source"]
    assert "__nv_bfloat16" in (tmp_path / "art" / source).read_text()


def gpu_present():
    return any(os.path.exists(p) for p in ["/dev/nvidia0", "/dev/nvidiactl"])


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU")
def test_running_a_cuda_artifact_without_a_gpu_says_so(tmp_path):
    compile_cuda(tmp_path / "art", "gpt2")
    inputs = dict(np.load(MODELS / "gpt2.inputs.npz"))
    args = [str(BUILD / "bin" / "partita-run"), str(tmp_path / "art"),
            "--output-dir", str(tmp_path / "out")]
    for key, value in inputs.items():
        np.save(tmp_path / f"{key}.npy", value)
        args += ["--input", f"{key}={tmp_path / (key + '.npy')}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    # Exit 1 with a message: a crash (or a sanitizer's abort) is not one.
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"no CUDA device|no GPU", proc.stderr), proc.stderr
    assert not (tmp_path / "out").exists() or not any(
        (tmp_path / "out").iterdir())
