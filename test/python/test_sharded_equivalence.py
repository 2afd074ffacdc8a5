"""Every committed transformer, compiled for tensor, data and 2-D
parallelism and run on host ranks, equals the unsharded run and
onnxruntime (fp32: rtol 1e-4); and the report's all-reduce traffic is the
Megatron optimum, 2·b·s·h fp32 elements per layer, computed here from the
model's own dimensions."""

import re

import numpy as np
import onnx
import pytest

from conftest import ROOT, compile_and_run

MODELS = ROOT / "test" / "models"
NAMES = ["gpt2", "llama", "bert"]
MESHES = ["tp=2", "tp=4", "dp=2", "dp=2,tp=2"]


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory):
    """name -> (outputs, report) of the one-device run."""
    results = {}
    for name in NAMES:
        inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
        results[name] = compile_and_run(
            tmp_path_factory.mktemp(name), MODELS / f"{name}.onnx", inputs)
    return results


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("name", NAMES)
def test_sharded_run_matches(tmp_path, unsharded, name, mesh):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    expected = dict(np.load(MODELS / f"{name}.outputs.npz"))
    outputs, report = compile_and_run(
        tmp_path, MODELS / f"{name}.onnx", inputs, "--mesh", mesh)
    world = int(np.prod([int(a.split("=")[1]) for a in mesh.split(",")]))
    assert report["mesh"]["world_size"] == world
    single, _ = unsharded[name]
    assert set(outputs) == set(expected) == set(single)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], single[key], rtol=1e-4,
                                   atol=1e-5, err_msg=f"{name} {mesh} vs 1 rank")
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} {mesh} vs onnxruntime")


def model_dims(name):
    """(layers, hidden) read from the ONNX model: the embedding table's
    width, and the number of distinct layer indices in weight names."""
    model = onnx.load(str(MODELS / f"{name}.onnx"), load_external_data=False)
    initializers = {t.name: t for t in model.graph.initializer}
    tables = [node.input[0] for node in model.graph.node
              if node.op_type == "Gather" and node.input[0] in initializers
              and len(initializers[node.input[0]].dims) == 2]
    hidden = initializers[tables[0]].dims[1]
    layers = {m.group(1) for t in initializers
              if (m := re.search(r"(?:^|\.)(?:h|layers|layer)\.(\d+)\.", t))}
    return len(layers), hidden


@pytest.mark.parametrize("mesh,tp,dp", [("tp=2", 2, 1), ("tp=4", 4, 1),
                                        ("dp=2,tp=2", 2, 2)])
@pytest.mark.parametrize("name", NAMES)
def test_report_all_reduce_bytes(tmp_path, unsharded, name, mesh, tp, dp):
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    batch, seq = inputs["input_ids"].shape
    layers, hidden = model_dims(name)
    _, report = compile_and_run(tmp_path, MODELS / f"{name}.onnx", inputs,
                                "--mesh", mesh)
    b = batch // dp
    per_layer = 2 * b * seq * hidden * 4  # two fp32 all-reduces of [b, s, h]
    embedding = b * seq * hidden * 4
    _, single_report = unsharded[name]
    single_weights = single_report["ranks"][0]["weight_bytes"]
    for rank in report["ranks"]:
        reduces = [c for c in rank["collectives"] if c["kind"] == "all_reduce"]
        assert len(reduces) == 1 and reduces[0]["axes"] == ["tp"], rank
        reduce = reduces[0]
        assert reduce["count"] == 2 * layers + 1
        assert reduce["payload"] - embedding == layers * per_layer
        assert reduce["bytes"] == reduce["payload"] * 2 * (tp - 1) // tp
        # Every weight matrix is split; only norms and biases of row-parallel
        # layers stay whole.
        assert rank["weight_bytes"] < single_weights * (1 / tp + 0.15)
    if name == "llama" and tp == 4:
        assert any("key/value heads do not divide tp=4" in r
                   for r in report["remarks"])


@pytest.mark.parametrize("mesh", ["tp=2", "tp=4", "sp=2 --sp-mode ulysses",
                                  "sp=2 --sp-mode ring",
                                  "tp=2 --sp-mode megatron"])
@pytest.mark.parametrize("name", NAMES)
def test_async_equals_synchronous(tmp_path, name, mesh):
    """The default program starts collectives asynchronously; it equals the
    --no-overlap one."""
    inputs = dict(np.load(MODELS / f"{name}.inputs.npz"))
    flags = ["--mesh", *mesh.split()]
    overlapped, _ = compile_and_run(tmp_path / "async",
                                    MODELS / f"{name}.onnx", inputs, *flags)
    synchronous, _ = compile_and_run(tmp_path / "sync",
                                     MODELS / f"{name}.onnx", inputs, *flags,
                                     "--no-overlap")
    for key, want in synchronous.items():
        np.testing.assert_allclose(overlapped[key], want, rtol=1e-4,
                                   atol=1e-5, err_msg=f"{name} {mesh}")


def test_tp8_splits_every_matmul_weight_of_a_70b_shaped_llama(tmp_path):
    """Llama-3-70B's head layout (64 query heads, 8 key/value heads, a
    SwiGLU MLP of 3.5x the hidden, the LM head) at tp=8: every projection,
    the embedding and the LM head are split 8 ways, so no rank holds more
    than 1/8 of any matmul weight; the run equals onnxruntime. Widths are
    shrunk (head size 8) so that it runs here; the layout is 70B's."""
    import subprocess
    import sys
    import onnxruntime as ort
    from conftest import BUILD
    model = tmp_path / "llama70.onnx"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_gpt.py"), "2",
                    str(model), "--llama", "--hidden", "512", "--heads",
                    "64", "--kv-heads", "8", "--ffn", "1792", "--vocab",
                    "1024", "--seq", "16", "--batch", "2"],
                   check=True, capture_output=True)
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o",
         str(tmp_path / "explained"), "--mesh", "tp=8", "--explain"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()
             if line.startswith("  ") and "tensor<" in line]
    matrices = [(name, " ".join(rest)) for name, shape, *rest in lines
                if shape.count("x") == 2]
    assert len(matrices) == 2 * 7 + 2, lines
    for name, sharding in matrices:
        assert sharding in ("[{}, {tp}]", "[{tp}, {}]"), (name, sharding)
    session = ort.InferenceSession(str(model),
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(70)
    inputs = {i.name: rng.integers(0, 1024, size=[d if isinstance(d, int)
                                                  else 1 for d in i.shape])
              .astype(np.int64) for i in session.get_inputs()}
    expected = dict(zip([o.name for o in session.get_outputs()],
                        session.run(None, inputs)))
    outputs, report = compile_and_run(tmp_path / "run", model, inputs,
                                      "--mesh", "tp=8")
    assert report["mesh"]["world_size"] == 8
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], want, rtol=1e-4, atol=1e-5)


def test_explain_lists_the_split_candidates_of_each_matmul_weight(tmp_path):
    """--explain lists, for each matmul weight over tp, the split chosen
    and each candidate's cost per rank: its weight bytes and the collective
    bytes the matmul needs. The chosen candidates' costs are what the
    program does: their all-reduces, with the vocab-parallel embedding's,
    are the report's."""
    import subprocess
    import sys
    import json
    from conftest import BUILD
    model = tmp_path / "gpt.onnx"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_gpt.py"), "2",
                    str(model), "--hidden", "64", "--heads", "4", "--vocab",
                    "256", "--seq", "8", "--batch", "2"],
                   check=True, capture_output=True)
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o",
         str(tmp_path / "art"), "--mesh", "tp=2", "--explain", "--report",
         str(report)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("matmul weights over tp")[1].split(
        "collectives of rank 0")[0].splitlines()[1:]
    choices = {}
    for line in lines:
        name, chosen, rest = line.split(None, 2)
        candidates = dict(part.split(": ", 1)
                          for part in rest.strip("[]").split("; "))
        choices[name] = (chosen, candidates)
    activation = 2 * 8 * 64 * 4
    for layer in ("h0", "h1"):
        assert choices[f"{layer}.up.w"][0] == "columns"
        assert choices[f"{layer}.down.w"][0] == "rows"
        up = choices[f"{layer}.up.w"][1]
        assert up["columns"] == "32768 B, no collective"
        assert up["whole"] == "65536 B, no collective"
        down = choices[f"{layer}.down.w"][1]
        # Row-parallel: the partial sum all-reduced, 2(n-1)/n of it.
        assert down["rows"] == f"32768 B, all_reduce {activation} B"
        # Columns would gather the [2, 8, 256] input and the output.
        assert down["columns"] == \
            f"32768 B, all_gather {2 * 8 * 256 * 4 // 2} B, " \
            f"all_gather {activation // 2} B"
    chosen_reduce = sum(
        int(part.split("all_reduce ")[1].split(" B")[0])
        for chosen, candidates in choices.values()
        for part in [candidates[chosen]] if "all_reduce" in part)
    collectives = json.loads(report.read_text())["ranks"][0]["collectives"]
    reported = sum(c["bytes"] for c in collectives
                   if c["kind"] == "all_reduce")
    # The vocab-parallel embedding's lookup adds one all-reduce of an
    # activation.
    assert chosen_reduce + activation == reported


def conv_stem(path, mels, width, frames):
    """Whisper's encoder stem: two Conv1d (the second with stride 2), each
    followed by an erf GELU, with random weights. No role of the strategy
    recognizes it: the convolutions' weights are placed by the split
    search."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = {
        "conv1.weight": rng.standard_normal((width, mels, 3)) / np.sqrt(3 * mels),
        "conv1.bias": rng.standard_normal(width) * 0.1,
        "conv2.weight": rng.standard_normal((width, width, 3)) / np.sqrt(3 * width),
        "conv2.bias": rng.standard_normal(width) * 0.1,
        "sqrt2": np.array(np.sqrt(2)), "half": np.array(0.5),
        "one": np.array(1.0)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k)
             for k, v in weights.items()]

    def gelu(x, y):
        return [helper.make_node("Div", [x, "sqrt2"], [y + "_d"]),
                helper.make_node("Erf", [y + "_d"], [y + "_e"]),
                helper.make_node("Add", [y + "_e", "one"], [y + "_a"]),
                helper.make_node("Mul", [x, y + "_a"], [y + "_m"]),
                helper.make_node("Mul", [y + "_m", "half"], [y])]
    nodes = [helper.make_node("Conv", ["input_features", "conv1.weight",
                                       "conv1.bias"], ["c1"], pads=[1, 1],
                              kernel_shape=[3])]
    nodes += gelu("c1", "g1")
    nodes += [helper.make_node("Conv", ["g1", "conv2.weight", "conv2.bias"],
                               ["c2"], pads=[1, 1], strides=[2],
                               kernel_shape=[3])]
    nodes += gelu("c2", "hidden")
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info(
            "input_features", TensorProto.FLOAT, [1, mels, frames])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT,
                                       [1, width, frames // 2])], inits)
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True,
              location=path.name + ".data")


@pytest.mark.parametrize("width,frames,split", [(1280, 3000, True),
                                                (16, 8, False)])
def test_unrecognized_convolutions_are_split_by_cost(tmp_path, width, frames,
                                                     split):
    """Whisper's convolution stem has no role the strategy knows. At
    Whisper-large's width (128 mel bins, 1280 channels, 3000 frames) the
    cost model's estimate of the step prefers conv1 by columns and conv2
    by rows (one all-reduce, half the weight bytes per rank); at a tiny
    width every split's latency exceeds what it saves, and both stay whole.
    Either way the run equals onnxruntime, --explain gives the search's
    estimates, and a split is remarked in the report."""
    import subprocess
    import onnxruntime as ort
    from conftest import BUILD
    model = tmp_path / "stem.onnx"
    conv_stem(model, 128 if split else 4, width, frames)
    session = ort.InferenceSession(str(model),
                                   providers=["CPUExecutionProvider"])
    features = np.random.default_rng(1).standard_normal(
        session.get_inputs()[0].shape).astype(np.float32)
    expected = session.run(None, {"input_features": features})[0]
    outputs, report = compile_and_run(tmp_path / "run", model,
                                      {"input_features": features},
                                      "--mesh", "tp=2")
    np.testing.assert_allclose(outputs["hidden"], expected, rtol=1e-4,
                               atol=1e-4)
    kinds = [c["kind"] for c in report["ranks"][0]["collectives"]]
    remarks = [r for r in report["remarks"] if "no role splits" in r]
    proc = subprocess.run(
        [str(BUILD / "bin" / "partita-compile"), str(model), "-o",
         str(tmp_path / "explained"), "--mesh", "tp=2", "--explain"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    chosen = {}
    for line in proc.stdout.splitlines():
        if "{chosen by the estimated step on one device:" not in line:
            continue
        name, split_of = line.split()[:2]
        estimates = dict(part.split()[:2] for part in line.split(
            "one device:")[1].strip(" ;}").split(";"))
        estimates = {k: float(v) for k, v in estimates.items()}
        # The choice is the minimum of the search's estimates.
        assert min(estimates, key=estimates.get) == split_of, line
        chosen[name] = split_of
    if split:
        assert chosen == {"conv1.weight": "columns", "conv2.weight": "rows"}
        assert kinds == ["all_reduce"], kinds
        assert len(remarks) == 2, report["remarks"]
        # The convolutions' weights (f32) halve; the biases are small.
        whole = 4 * 3 * width * (128 + width)
        assert max(r["weight_bytes"] for r in report["ranks"]) < \
            0.5 * whole + 4 * 4 * width
    else:
        assert chosen == {"conv1.weight": "whole", "conv2.weight": "whole"}
        assert kinds == [] and remarks == [], (kinds, report["remarks"])
