"""Sin, Cos and CumSum on graph inputs, as Hugging Face exports compute
rotary tables from a `position_ids` input and position ids from the
attention mask (`attention_mask.cumsum(-1) - 1`): nn.sin, nn.cos and
nn.cumsum compiled, run with partita-run on one rank and at tp=2, and
compared with onnxruntime."""

import itertools
import re
import subprocess

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (BUILD, compile_and_run, onnx_model as model,
                      value_info as vi, initializer as const)

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MESHES = ["", "tp=2"]


def reference(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def run(tmp_path, m, feeds, mesh):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "model.onnx"
    path.write_bytes(m.SerializeToString())
    flags = ["--mesh", mesh] if mesh else []
    outputs, _ = compile_and_run(tmp_path, path, feeds, *flags)
    return outputs


# --- Sin and Cos of an input -------------------------------------------------

def trig_model():
    # A projection first, so that tp=2 has something to shard: the angles of
    # a column-parallel matmul are split over the ranks.
    return model(
        [helper.make_node("Sin", ["x"], ["sin_x"], name="sin_x"),
         helper.make_node("Cos", ["x"], ["cos_x"], name="cos_x"),
         helper.make_node("MatMul", ["x", "w"], ["angles"], name="proj"),
         helper.make_node("Sin", ["angles"], ["sin_a"], name="sin_a"),
         helper.make_node("Cos", ["angles"], ["cos_a"], name="cos_a")],
        [vi("x", F, [4, 64])],
        [vi("sin_x", F, [4, 64]), vi("cos_x", F, [4, 64]),
         vi("sin_a", F, [4, 32]), vi("cos_a", F, [4, 32])],
        [const("w", np.eye(64, 32, dtype=np.float32) * 0.5)])


@pytest.mark.parametrize("mesh", MESHES)
def test_sin_cos_of_an_input(tmp_path, mesh):
    rng = np.random.default_rng(0)
    # Rotary angles: positions up to thousands times frequencies up to 1.
    x = rng.uniform(-4096, 4096, (4, 64)).astype(np.float32)
    x[0, :8] = [0, np.pi / 2, -np.pi, 1e-3, 4096, -4096, 2047.5, 3.0]
    m = trig_model()
    want = reference(m, {"x": x})
    got = run(tmp_path, m, {"x": x}, mesh)
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_sin_cos_of_constants_still_fold(compile_model):
    m = model(
        [helper.make_node("Sin", ["c"], ["s"]),
         helper.make_node("Cos", ["c"], ["k"])],
        [], [vi("s", F, [3]), vi("k", F, [3])],
        [const("c", np.array([0.0, 1.0, 4096.0], np.float32))])
    ir = compile_model(m).ok().ir
    assert "nn.sin" not in ir and "nn.cos" not in ir, ir
    assert "nn.constant" in ir


def test_sin_of_an_input_becomes_nn_sin(compile_model):
    m = model([helper.make_node("Sin", ["x"], ["y"])], [vi("x", F, [8])],
              [vi("y", F, [8])])
    assert "nn.sin" in compile_model(m).ok().ir


def rotary_angles_model():
    """cos/sin of position_ids x inv_freq, as HF's rotary embedding computes
    them from an int64 position input, each times a float input."""
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, 16, 2, dtype=np.float32) / 16))
    return model(
        [helper.make_node("Cast", ["pos"], ["posf"], to=F, name="cast"),
         helper.make_node("Unsqueeze", ["posf", "ax"], ["pos2"], name="unsq"),
         helper.make_node("Mul", ["pos2", "inv"], ["angles"], name="angles"),
         helper.make_node("Cos", ["angles"], ["c"], name="cos"),
         helper.make_node("Sin", ["angles"], ["s"], name="sin"),
         helper.make_node("Mul", ["c", "x"], ["xc"], name="xc"),
         helper.make_node("Mul", ["s", "x"], ["xs"], name="xs")],
        [vi("pos", I64, [64]), vi("x", F, [64, 8])],
        [vi("xc", F, [64, 8]), vi("xs", F, [64, 8])],
        [const("ax", np.array([1], np.int64)), const("inv", inv_freq)])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_rotary_angles_stay_f32_under_16_bit_storage(tmp_path, dtype):
    """Positions up to 4095: rounding position x frequency to 16 bits would
    put cos/sin off by up to 1; kept in f32, only the 16-bit products
    differ (relative 2^-8 for bf16)."""
    m = rotary_angles_model()
    rng = np.random.default_rng(3)
    feeds = {"pos": rng.integers(1000, 4096, 64).astype(np.int64),
             "x": np.ones((64, 8), np.float32)}
    expected = reference(m, feeds)
    path = tmp_path / "model.onnx"
    path.write_bytes(m.SerializeToString())
    outputs, _ = compile_and_run(tmp_path, path, feeds, "--dtype", dtype)
    for key, want in expected.items():
        np.testing.assert_allclose(outputs[key], want, rtol=0, atol=1e-2,
                                   err_msg=f"{dtype}: {key}")


# --- CumSum ------------------------------------------------------------------

COMBINATIONS = list(itertools.product([0, 1], [0, 1]))


def cumsum_model(axes):
    """Every (exclusive, reverse) combination on an int64 mask [2, 16] along
    each of `axes`, on a float tensor [2, 16, 8] (a projection of an input)
    along each of its axes; plus the position ids of a padded batch."""
    nodes, outputs, inits = [], [], []
    nodes.append(helper.make_node("MatMul", ["h", "w"], ["y"], name="proj"))
    inits.append(const("w", np.linspace(-1, 1, 64, dtype=np.float32)
                       .reshape(8, 8)))
    for exclusive, reverse in COMBINATIONS:
        suffix = f"e{exclusive}r{reverse}"
        for axis in axes["mask"]:
            name = f"mask_{suffix}_a{axis}".replace("-", "m")
            inits.append(const(f"axis_{name}", np.int64(axis)))
            nodes.append(helper.make_node(
                "CumSum", ["mask", f"axis_{name}"], [name], name=name,
                exclusive=exclusive, reverse=reverse))
            outputs.append(vi(name, I64, [2, 16]))
        for axis in axes["y"]:
            name = f"y_{suffix}_a{axis}".replace("-", "m")
            # A 1-element axis tensor, int32: both forms are allowed.
            inits.append(const(f"axis_{name}", np.array([axis], np.int32)))
            nodes.append(helper.make_node(
                "CumSum", ["y", f"axis_{name}"], [name], name=name,
                exclusive=exclusive, reverse=reverse))
            outputs.append(vi(name, F, [2, 16, 8]))
    # transformers: position_ids = attention_mask.cumsum(-1) - 1.
    inits += [const("last", np.int64(-1)), const("one", np.int64(1))]
    nodes += [helper.make_node("CumSum", ["mask", "last"], ["counted"]),
              helper.make_node("Sub", ["counted", "one"], ["position_ids"])]
    outputs.append(vi("position_ids", I64, [2, 16]))
    return model(nodes, [vi("mask", I64, [2, 16]), vi("h", F, [2, 16, 8])],
                 outputs, inits)


def cumsum_feeds():
    rng = np.random.default_rng(1)
    mask = np.ones((2, 16), np.int64)
    mask[1, :5] = 0  # Left padding.
    # Integers beyond float's exact range: a float accumulation would round.
    mask[0, 3] = 2**40 + 1
    mask[0, 4] = -(2**53) - 7
    h = rng.standard_normal((2, 16, 8)).astype(np.float32)
    return {"mask": mask, "h": h}


@pytest.mark.parametrize("mesh", MESHES)
def test_cumsum_matches_onnxruntime(tmp_path, mesh):
    m = cumsum_model({"mask": [1, -1, 0], "y": [0, 1, 2, -1]})
    feeds = cumsum_feeds()
    want = reference(m, feeds)
    got = run(tmp_path, m, feeds, mesh)
    assert set(got) == set(want)
    for name, expected in want.items():
        if expected.dtype == np.int64:
            np.testing.assert_array_equal(got[name], expected, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected, rtol=1e-5,
                                       atol=1e-5, err_msg=name)


def projection_model():
    """A vocab-parallel style last projection whose output (split on its
    features at tp=2) is scanned along the sequence, which keeps the split,
    and along the features, which must gather first; and its cosine."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("CumSum", ["r", "seq_axis"], ["cs"], reverse=1),
             helper.make_node("MatMul", ["cs", "w2"], ["y"]),
             helper.make_node("CumSum", ["y", "seq_axis"], ["seq"],
                              exclusive=1, name="scan_seq"),
             helper.make_node("CumSum", ["y", "feature_axis"], ["feat"],
                              name="scan_feat"),
             helper.make_node("Cos", ["y"], ["cos_y"])]
    return model(
        nodes, [vi("x", F, [2, 16, 8])],
        [vi(n, F, [2, 16, 8]) for n in ["y", "seq", "feat", "cos_y"]],
        [const("w1", rng.standard_normal((8, 32)).astype(np.float32)),
         const("w2", rng.standard_normal((32, 8)).astype(np.float32) / 4),
         const("seq_axis", np.int64(1)), const("feature_axis", np.int64(-1))])


@pytest.mark.parametrize("mesh", MESHES)
def test_cumsum_and_cos_of_a_sharded_projection(tmp_path, mesh):
    m = projection_model()
    x = np.random.default_rng(5).standard_normal((2, 16, 8)).astype(
        np.float32)
    if mesh:
        # The split of y's features reaches the scan along the sequence and
        # the cosine (local [2, 16, 4]); the scan along the features runs on
        # the gathered [2, 16, 8].
        path = tmp_path / "model.onnx"
        path.write_bytes(m.SerializeToString())
        local = subprocess.run(
            [str(BUILD / "bin" / "partita-compile"), str(path), "--mesh", mesh,
             "--emit", "local"], capture_output=True, text=True, timeout=60)
        assert local.returncode == 0, local.stderr
        assert re.search(r"nn.cumsum %\S+ axis = 1 exclusive : "
                         r"tensor<2x16x4xf32>", local.stdout), local.stdout
        assert re.search(r"nn.cos %\S+ : tensor<2x16x4xf32>", local.stdout)
        assert re.search(r"nn.cumsum %\S+ axis = 2 : tensor<2x16x8xf32>",
                         local.stdout), local.stdout
    want = reference(m, {"x": x})
    got = run(tmp_path / "run", m, {"x": x}, mesh)
    # The design's fp32 tolerance: the scan along the features adds terms
    # up to ~50 into sums near 0, whose last bits follow OpenBLAS's kernel
    # for the projection (1.5e-5 off on 0.355 on an AMD EPYC).
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_cumsum_of_constants_folds(compile_model):
    m = model(
        [helper.make_node("CumSum", ["c", "ax"], ["y"], exclusive=1,
                          reverse=1)],
        [], [vi("y", I64, [2, 3])],
        [const("c", np.array([[1, 2, 3], [4, 5, 6]], np.int64)),
         const("ax", np.int64(-1))])
    ir = compile_model(m).ok().ir
    assert "nn.cumsum" not in ir, ir
    assert "dense<[[5, 3, 0], [11, 6, 0]]>" in ir, ir


def test_cumsum_negative_axis_is_normalized(compile_model):
    m = model(
        [helper.make_node("CumSum", ["x", "ax"], ["y"], reverse=1)],
        [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4])],
        [const("ax", np.int64(-2))])
    assert "nn.cumsum %arg0 axis = 1 reverse" in compile_model(m).ok().ir


# --- Errors ------------------------------------------------------------------

def test_cumsum_axis_must_be_constant(compile_model):
    m = model(
        [helper.make_node("CumSum", ["x", "ax"], ["y"], name="scan")],
        [vi("x", F, [2, 3]), vi("ax", I64, [])], [vi("y", F, [2, 3])])
    result = compile_model(m)
    assert result.returncode != 0
    assert ("node 'scan': error: the axis input of CumSum must be a constant"
            in result.stderr), result.stderr


def test_cumsum_axis_out_of_range(compile_model):
    m = model(
        [helper.make_node("CumSum", ["x", "ax"], ["y"], name="scan")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
        [const("ax", np.int64(2))])
    result = compile_model(m)
    assert result.returncode != 0
    assert "node 'scan': error:" in result.stderr, result.stderr
    assert "axis 2" in result.stderr, result.stderr


def test_cumsum_axis_with_two_elements(compile_model):
    m = model(
        [helper.make_node("CumSum", ["x", "ax"], ["y"], name="scan")],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
        [const("ax", np.array([0, 1], np.int64))])
    result = compile_model(m)
    assert result.returncode != 0
    assert ("node 'scan': error: the axis input of CumSum must hold one "
            "integer, not a tensor of shape [2]") in result.stderr, \
        result.stderr


def test_cumsum_exclusive_must_be_boolean(compile_model):
    m = model(
        [helper.make_node("CumSum", ["x", "ax"], ["y"], name="scan",
                          exclusive=2)],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
        [const("ax", np.int64(0))])
    result = compile_model(m)
    assert result.returncode != 0
    assert "node 'scan'" in result.stderr and "exclusive" in result.stderr, \
        result.stderr
