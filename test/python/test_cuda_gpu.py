"""On a machine with an NVIDIA GPU (scripts/gpu-check; skipped elsewhere):
cuda artifacts of every committed transformer run on the GPU and equal
onnxruntime, fp32 (rtol 1e-4) and bf16 (compared in fp32, rtol 2e-2), one
rank, several ranks sharing the GPU (--single-gpu: the device-to-device
communicator) and one NCCL process per rank (--ranks N, when the machine
has N GPUs)."""

import os
import subprocess

import numpy as np
import pytest

from conftest import BUILD, ROOT

MODELS = ROOT / "test" / "models"
NAMES = ["gpt2", "llama", "bert"]


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return out.stdout.count("GPU ") if out.returncode == 0 else 0


GPUS = gpu_count()
pytestmark = pytest.mark.skipif(GPUS == 0, reason="no NVIDIA GPU here")
ENV = dict(os.environ, PARTITA_CACHE_DIR=str(BUILD / "partita-cache"))


def compile_and_run_cuda(tmp_path, name, compile_flags, run_flags):
    art = tmp_path / "art"
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(MODELS / f"{name}.onnx"),
         "--target", "cuda", "-o", str(art), *compile_flags],
        capture_output=True, text=True, timeout=900, env=ENV)
    assert proc.returncode == 0, proc.stderr
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    args = [str(BUILD / "bin" / "partita-run"), str(art),
            "--output-dir", str(tmp_path / "out"), *run_flags]
    for key, value in inputs.items():
        np.save(tmp_path / f"{key}.npy", value)
        args += ["--input", f"{key}={tmp_path / (key + '.npy')}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600,
                         env=ENV)
    assert run.returncode == 0, run.stderr
    return {p.stem: np.load(p) for p in (tmp_path / "out").glob("*.npy")}


def check(outputs, name, dtype):
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    assert set(outputs) == set(expected)
    for key, want in expected.items():
        got = outputs[key].astype(np.float32)
        if dtype == "fp32":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} {key}")
        else:
            scale = float(np.max(np.abs(want)))
            np.testing.assert_allclose(got, want, rtol=2e-2,
                                       atol=2e-2 * scale,
                                       err_msg=f"{name} {key}")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("mesh", [None, "tp=2", "dp=2,pp=2,tp=2",
                                  "sp=2 ring", "sp=2 ulysses"])
@pytest.mark.parametrize("name", NAMES)
def test_single_gpu_matches_onnxruntime(tmp_path, name, mesh, dtype):
    flags = ["--dtype", dtype]
    if mesh:
        axes, *mode = mesh.split()
        flags += ["--mesh", axes] + (["--sp-mode", mode[0]] if mode else [])
    run_flags = ["--single-gpu"] if mesh else []
    check(compile_and_run_cuda(tmp_path, name, flags, run_flags), name, dtype)


@pytest.mark.parametrize("name", NAMES)
def test_nccl_process_per_gpu(tmp_path, name):
    ranks = 2 if GPUS >= 2 else 1
    flags = ["--mesh", f"tp={ranks}"] if ranks > 1 else []
    check(compile_and_run_cuda(tmp_path, name, flags, []), name, "fp32")


@pytest.mark.parametrize("mesh", [None, "tp=2"])
def test_generate_matches_host(tmp_path, mesh):
    """Serving on the GPU: gpt2_kv with --max-seq compiled for cuda (the KV
    cache resident on the device, flash-decoding attention over 300 slots:
    two key splits of 256) generates the host artifact's 16 greedy tokens,
    with logits within fp32's tolerance."""
    ids = (np.arange(16, dtype=np.int64).reshape(2, 8) * 37 + 11) % 50
    mask = np.ones((2, 8), np.int64)
    mask[1, :3] = 0
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "mask.npy", mask)
    results = {}
    for target in ["host", "cuda"]:
        art = tmp_path / target
        flags = ["--mesh", mesh] if mesh else []
        proc = subprocess.run(
            [str(BUILD / "bin" / "partita-compile"),
             str(MODELS / "hf" / "gpt2_kv.optimum.onnx"), "--target", target,
             "--bind", "batch_size=2,sequence_length=8", "--max-seq", "300",
             "-o", str(art), *flags],
            capture_output=True, text=True, timeout=900, env=ENV)
        assert proc.returncode == 0, proc.stderr
        out = tmp_path / f"out-{target}"
        run_flags = ["--single-gpu"] if mesh and target == "cuda" else []
        run = subprocess.run(
            [str(BUILD / "bin" / "partita-run"), str(art), "--generate", "16",
             "--input", f"input_ids={tmp_path / 'ids.npy'}", "--input",
             f"attention_mask={tmp_path / 'mask.npy'}", "--dump-logits",
             "--output-dir", str(out), *run_flags],
            capture_output=True, text=True, timeout=600, env=ENV)
        assert run.returncode == 0, run.stderr
        results[target] = (np.load(out / "tokens.npy"),
                           np.load(out / "logits.npy"))
    np.testing.assert_array_equal(results["cuda"][0], results["host"][0])
    np.testing.assert_allclose(results["cuda"][1], results["host"][1],
                               rtol=1e-4, atol=1e-5)
