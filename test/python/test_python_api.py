"""The Python package (python/partita): compile from a path, bytes and an
onnx.ModelProto, the report, running GPT-2 unsharded and over tp=2 against
onnxruntime's outputs, saving and loading, and the error model."""

import json
import pathlib
import sys

import numpy as np
import onnx
import pytest

from conftest import BUILD, ROOT

# scripts/test sets PYTHONPATH=build/python; without it, use the build tree.
try:
    import partita
except ImportError:
    sys.path.insert(0, str(BUILD / "python"))
    import partita

MODELS = ROOT / "test" / "models"
GPT2 = MODELS / "gpt2.onnx"


def reference(name):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    outputs = dict(np.load(MODELS / f"{name}.outputs.npz"))
    return inputs, outputs


@pytest.fixture(scope="module")
def gpt2_tp2():
    return partita.compile(GPT2, mesh={"tp": 2})


def test_version():
    assert partita.version() == partita.__version__
    assert len(partita.version().split(".")) == 3


def test_compile_from_path_report(gpt2_tp2):
    report = gpt2_tp2.report
    assert report["format"] == "partita-report/1"
    assert report["mesh"]["axes"] == [{"name": "tp", "size": 2}]
    assert report["mesh"]["world_size"] == 2
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["model"]["params"] > 0 and report["model"]["flops"] > 0
    # Megatron tp: an all-reduce after attention and after the MLP.
    kinds = {c["kind"] for c in report["ranks"][0]["collectives"]}
    assert "all_reduce" in kinds
    assert "manifest.json" in gpt2_tp2.files
    assert gpt2_tp2.manifest["mesh"]["world_size"] == 2


def test_compile_from_bytes_and_model_proto():
    data = GPT2.read_bytes()
    from_bytes = partita.compile(data, mesh=[("tp", 2)])
    from_proto = partita.compile(onnx.load(GPT2), mesh="tp=2")
    for artifact in (from_bytes, from_proto):
        assert artifact.report["mesh"]["world_size"] == 2
    # The same model gives the same plan, whichever way it came in.
    assert from_bytes.report["ranks"] == from_proto.report["ranks"]


def test_tensor_specs(gpt2_tp2):
    (ids,) = gpt2_tp2.inputs
    assert (ids.name, ids.partita_dtype, ids.shape) == ("input_ids", "i64", (2, 16))
    assert ids.dtype == np.int64
    (logits,) = gpt2_tp2.outputs
    assert (logits.name, logits.shape) == ("logits", (2, 16, 128))
    assert gpt2_tp2.target == "host"


@pytest.mark.parametrize("mesh", [None, {"tp": 2}], ids=["unsharded", "tp2"])
def test_run_gpt2(mesh):
    inputs, expected = reference("gpt2")
    artifact = partita.compile(str(GPT2), mesh=mesh)
    outputs = artifact.run(inputs)
    assert set(outputs) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(outputs[name], value, rtol=1e-4, atol=1e-5)
    # The session is cached: a second run reuses it and gives the same.
    # Bitwise: the same session makes the same kernel calls in the same
    # order (same pools; collectives reduce in rank order).
    again = artifact.run(inputs)
    np.testing.assert_array_equal(again["logits"], outputs["logits"])


def test_run_casts_same_kind_inputs(gpt2_tp2):
    inputs, expected = reference("gpt2")
    ids = inputs["input_ids"].astype(np.int32)
    outputs = gpt2_tp2.run({"input_ids": ids})
    np.testing.assert_allclose(outputs["logits"], expected["logits"],
                               rtol=1e-4, atol=1e-5)


def test_arguments_are_checked_by_name(gpt2_tp2, tmp_path):
    """Arguments of the wrong type are a TypeError naming them, never
    nanobind's "incompatible function arguments" or a truthy string taken
    as True; the campaign's api target found each (issue 34)."""
    inputs, _ = reference("gpt2")
    with pytest.raises(TypeError, match="name expects a string"):
        partita.compile(GPT2.read_bytes(), name=5)
    with pytest.raises(ValueError, match="mesh: .* is not valid Unicode"):
        partita.compile(GPT2, "\udcff")
    with pytest.raises(ValueError, match="sp_mode: .* is not valid Unicode"):
        partita.compile(GPT2, sp_mode="\udcff")
    with pytest.raises(TypeError, match="inputs expects a mapping"):
        gpt2_tp2.run(None)
    with pytest.raises(TypeError, match="inputs expects a mapping"):
        gpt2_tp2.run([("input_ids", inputs["input_ids"])])
    # Bools are no ids, though NumPy would widen them (onnxruntime refuses).
    with pytest.raises(partita.RunError, match="got bool"):
        gpt2_tp2.run({"input_ids": inputs["input_ids"] > 3})
    # file() reads the artifact's own files, nothing beside them.
    path = tmp_path / "saved"
    gpt2_tp2.save(path)
    loaded = partita.load(path)
    assert json.loads(loaded.file("manifest.json"))
    for relative in ["../saved/manifest.json", "/etc/passwd", ""]:
        with pytest.raises(partita.RunError, match="has no file"):
            loaded.file(relative)
    with pytest.raises(TypeError, match="relative expects a string"):
        loaded.file(5)
    with pytest.raises(TypeError, match="verify expects True or False"):
        partita.load(path, verify="yes")


def test_save_load_round_trip(gpt2_tp2, tmp_path):
    inputs, expected = reference("gpt2")
    path = tmp_path / "gpt2-tp2"
    gpt2_tp2.save(path)
    assert (path / "manifest.json").is_file()
    loaded = partita.load(path)
    assert loaded.path == str(path)
    assert loaded.manifest["mesh"]["world_size"] == 2
    assert sorted(loaded.files) == sorted(gpt2_tp2.files)
    outputs = loaded.run(inputs)
    np.testing.assert_allclose(outputs["logits"], expected["logits"],
                               rtol=1e-4, atol=1e-5)
    # Saving replaces an artifact, and a loaded one saves too.
    gpt2_tp2.save(path)
    copy = tmp_path / "copy"
    loaded.save(copy)
    assert partita.load(copy).manifest == loaded.manifest


def test_load_verify_hashes_the_weights(gpt2_tp2, tmp_path):
    inputs, _ = reference("gpt2")
    path = tmp_path / "gpt2-tp2"
    gpt2_tp2.save(path)
    weights = sorted((path / "weights").iterdir())[0]
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    # The manifest and programs are hashed at every load, the weight bytes
    # only with verify=True.
    partita.load(path).run(inputs)
    with pytest.raises(partita.RunError, match="hash mismatch"):
        partita.load(path, verify=True).run(inputs)


def test_save_refuses_other_paths(gpt2_tp2, tmp_path):
    other = tmp_path / "not-an-artifact"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(partita.Error, match="not a Partita artifact"):
        gpt2_tp2.save(other)
    assert (other / "keep.txt").read_text() == "mine"


def test_load_rejects_non_artifact(tmp_path):
    with pytest.raises(partita.RunError, match="not a Partita artifact"):
        partita.load(tmp_path)


def test_compile_error_bad_mesh():
    # gpt2 has 4 heads and a vocabulary of 128: neither splits over 3.
    with pytest.raises(partita.CompileError) as caught:
        partita.compile(GPT2, mesh={"tp": 3})
    error = caught.value
    assert error.diagnostics
    first = error.diagnostics[0]
    assert first.severity == "error"
    assert "gpt2.onnx" in first.location and "node" in first.location
    assert "split" in first.message or "divisible" in first.message
    assert str(first) in str(error)
    assert str(error).startswith(first.location + ": error: ")


def test_compile_error_garbage_bytes():
    with pytest.raises(partita.CompileError) as caught:
        partita.compile(b"\x00\x01 this is not a model", name="junk.onnx")
    assert caught.value.diagnostics
    assert all(d.severity in ("error", "warning", "note", "remark")
               for d in caught.value.diagnostics)
    assert any(d.severity == "error" for d in caught.value.diagnostics)


def test_compile_error_missing_file(tmp_path):
    with pytest.raises(partita.CompileError, match="missing.onnx"):
        partita.compile(tmp_path / "missing.onnx")


def test_compile_rejects_other_types():
    with pytest.raises(TypeError, match="path, bytes or an onnx.ModelProto"):
        partita.compile(42)


def test_run_error_wrong_shape(gpt2_tp2):
    with pytest.raises(partita.RunError, match="input_ids"):
        gpt2_tp2.run({"input_ids": np.zeros((2, 8), np.int64)})
    # The session survives a refused run.
    inputs, expected = reference("gpt2")
    np.testing.assert_allclose(gpt2_tp2.run(inputs)["logits"],
                               expected["logits"], rtol=1e-4, atol=1e-5)


def test_run_error_names_and_dtypes(gpt2_tp2):
    with pytest.raises(partita.RunError, match="missing input 'input_ids'"):
        gpt2_tp2.run({})
    with pytest.raises(partita.RunError, match="no input 'ids'"):
        gpt2_tp2.run({"input_ids": np.zeros((2, 16), np.int64),
                      "ids": np.zeros(1)})
    with pytest.raises(partita.RunError, match="expected i64"):
        gpt2_tp2.run({"input_ids": np.zeros((2, 16), np.float32)})
    assert issubclass(partita.RunError, RuntimeError)


def test_options_reach_the_compiler():
    # bf16 storage (the signature stays f32), synchronous collectives, a
    # cluster model given as a dict: compared in fp32 at bf16's tolerance.
    inputs, expected = reference("gpt2")
    artifact = partita.compile(GPT2, mesh={"tp": 2}, dtype="bf16",
                               overlap=False, collective_matmul="never",
                               cluster={}, bind={})
    recorded = artifact.manifest["compile_options"]
    assert recorded["dtype"] == "bf16" and recorded["no-overlap"] == "true"
    outputs = artifact.run(inputs)
    assert outputs["logits"].dtype == np.float32
    np.testing.assert_allclose(outputs["logits"], expected["logits"],
                               rtol=2e-2, atol=5e-2)


def test_cluster_preset_by_name():
    # A preset names the machine the times are estimated on, as
    # partita-compile --cluster h100-80g:2x8 does; the program is the same.
    inputs, expected = reference("gpt2")
    artifact = partita.compile(GPT2, mesh={"tp": 2}, cluster="h100-80g:2x8")
    np.testing.assert_allclose(artifact.run(inputs)["logits"],
                               expected["logits"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options, message", [
    ({"target": "tpu"}, "--target expects host or cuda"),
    ({"dtype": "fp8"}, "--dtype expects"),
    ({"strategy": "alpa"}, "--strategy expects megatron or none, got 'alpa'"),
    ({"sp_mode": "zigzag"}, "--sp-mode expects none, megatron, ulysses or "
                            "ring, got 'zigzag'"),
    ({"collective_matmul": "some"}, "--collective-matmul expects auto, "
                                    "always or never, got 'some'"),
    ({"mesh": {"tp": 0}}, "sizes are at least 1"),
    ({"mesh": [("model", 2, "xp")]}, "unknown role 'xp'"),
    ({"mesh": "model=2:tp,tp=2"}, "axes 'model' and 'tp' both have role tp"),
    ({"cluster": "{not json"}, "--cluster"),
    ({"cluster": "h100"}, "unknown cluster preset 'h100' \\(known: a100-80g"),
    ({"cluster": "h100-80g:2by8"}, "the suffix must be NODESxGPUS"),
])
def test_compile_error_bad_option(options, message):
    with pytest.raises(partita.CompileError, match=message) as caught:
        partita.compile(GPT2, **options)
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.severity == "error" and diagnostic.location == ""


@pytest.mark.parametrize("mesh", [[("model", 2, "tp")], "model=2:tp"])
def test_mesh_axis_roles(mesh):
    # An axis named for nothing plays the role it is given: the same program
    # as tp=2, with the axis named as the caller named it.
    inputs = dict(np.load(MODELS / "gpt2.inputs.npz"))
    expected = dict(np.load(MODELS / "gpt2.outputs.npz"))
    artifact = partita.compile(MODELS / "gpt2.onnx", mesh=mesh)
    report = artifact.report
    assert report["mesh"]["axes"] == [{"name": "model", "size": 2,
                                       "role": "tp"}]
    outputs = artifact.run(inputs)
    np.testing.assert_allclose(outputs["logits"], expected["logits"],
                               rtol=1e-4, atol=1e-5)


def test_mesh_string_is_checked():
    with pytest.raises(ValueError, match="'tp=x' is not of the form axis=size"):
        partita.compile(MODELS / "gpt2.onnx", mesh="tp=x")


def test_cuda_artifact_is_inspectable_without_a_gpu():
    # Target, inputs and outputs come from the manifest: no session (and no
    # GPU) is needed to read them. Building the fatbin needs nvcc.
    cache = (BUILD / "CMakeCache.txt").read_text()
    if "CUDAToolkit_NVCC_EXECUTABLE:FILEPATH=/" not in cache:
        pytest.skip("no CUDA toolkit (nvcc) in this build")
    art = partita.compile(MODELS / "gpt2.onnx", mesh={"tp": 2}, target="cuda")
    assert art.target == "cuda"
    assert [(t.name, t.partita_dtype, t.shape) for t in art.inputs] == [
        ("input_ids", "i64", (2, 16))]
    assert [(t.name, t.shape) for t in art.outputs] == [("logits", (2, 16, 128))]
    assert any(f.endswith(".fatbin") for f in art.files)
