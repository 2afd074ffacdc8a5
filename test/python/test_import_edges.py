"""Edge cases of the importer's decompositions (issue 15) against
onnxruntime: indices at the ends of their range and just outside it, zero-
size dimensions, CumSum's types, Mod's signs, ReduceLogSumExp of infinite
rows, Clip with min > max, and dimension expressions that overflow, divide
by zero or name unbound symbols.

Each case either equals onnxruntime (fp32: rtol 1e-4, atol 1e-5) or, where
onnxruntime refuses, is refused by Partita too: a message and an exit
status in 1..127, never a crash or an answer."""

import functools
import pathlib
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import (BUILD, onnx_model, value_info as vi,
                      initializer as const)

F, F16, I64, I32, B = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64,
                       TensorProto.INT32, TensorProto.BOOL)
NP = {F: np.float32, F16: np.float16, I64: np.int64, I32: np.int32, B: np.bool_}
model = functools.partial(onnx_model, opset=18)
RNG = np.random.default_rng(1515)


def onnxruntime(m, feeds):
    """onnxruntime's outputs, or the exception it raised (loading or
    running)."""
    try:
        sess = ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return e


class Run:
    """partita-compile then (when it compiled) partita-run on `feeds`."""

    def __init__(self, tmp_path, m, feeds, *flags):
        tmp_path = pathlib.Path(tmp_path)
        tmp_path.mkdir(parents=True, exist_ok=True)
        path = tmp_path / "model.onnx"
        onnx.save(m, str(path))
        art, out = tmp_path / "art", tmp_path / "out"
        self.stage = "compile"
        proc = subprocess.run(
            [str(BUILD / "bin" / "partita-compile"), str(path), "-o", str(art),
             *flags], capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            self.stage = "run"
            args = [str(BUILD / "bin" / "partita-run"), str(art), "--output-dir",
                    str(out)]
            for name, value in feeds.items():
                np.save(tmp_path / f"{name}.npy", value)
                args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
            proc = subprocess.run(args, capture_output=True, text=True,
                                  timeout=120)
        self.returncode, self.stderr = proc.returncode, proc.stderr
        self.outputs = None
        if proc.returncode == 0:
            self.outputs = [np.load(out / f"{o.name}.npy") for o in m.graph.output]

    def assert_refused(self, match=None):
        """A clean refusal: exit 1..127 with a message (naming `match`)."""
        assert self.outputs is None, f"accepted: {self.outputs}"
        assert 1 <= self.returncode <= 127, (self.returncode, self.stderr)
        assert self.stderr.strip(), "refused without a message"
        for word in ["Sanitizer", "Assertion", "LLVM ERROR", "Stack dump"]:
            assert word not in self.stderr, self.stderr
        if match:
            assert match in self.stderr, self.stderr


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def check(tmp_path, m, feeds, *flags, match=None, rtol=1e-4, atol=1e-5):
    """Partita equals onnxruntime where onnxruntime answers, and refuses
    where onnxruntime refuses. Returns the Run."""
    want = onnxruntime(m, feeds)
    got = Run(tmp_path, m, feeds, *flags)
    if isinstance(want, Exception):
        got.assert_refused(match)
    else:
        assert got.outputs is not None, got.stderr
        assert_close(got.outputs, want, rtol, atol)
    return got


# --- GatherElements and GatherND at the ends of the index range ------------

X34 = RNG.standard_normal((3, 4)).astype(np.float32)


@pytest.mark.parametrize("itype", [I64, I32])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("live", [True, False], ids=["live", "constant"])
@pytest.mark.parametrize("where", ["ends", "above", "below", "int32-max"])
def test_gather_elements_index_range(tmp_path, itype, axis, live, where):
    size = X34.shape[axis]
    values = {"ends": [[-size, size - 1, 0], [size - 1, -size, -1]],
              "above": [[0, size, 0], [1, 1, 1]],
              "below": [[0, 0, 0], [-size - 1, 1, 1]],
              "int32-max": [[0, 2**31 - 1, 0], [1, 1, 1]]}[where]
    i = np.array(values, NP[itype])
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    if live:
        m = model([node], [vi("x", F, [3, 4]), vi("i", itype, [2, 3])],
                  [vi("y", F, [2, 3])])
        feeds = {"x": X34, "i": i}
    else:
        m = model([node], [vi("x", F, [3, 4])], [vi("y", F, [2, 3])],
                  [const("i", i)])
        feeds = {"x": X34}
    r = check(tmp_path, m, feeds, match="out of range")
    if where != "ends":
        # Constant indices are refused when imported, live ones when run.
        assert r.stage == ("run" if live else "compile"), r.stderr


@pytest.mark.parametrize("live", [True, False], ids=["live", "constant"])
@pytest.mark.parametrize("where", ["ends", "above", "below", "int64-min"])
@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_index_range(tmp_path, live, where, batch_dims):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    if batch_dims == 0:
        # Tuples of 2 over [2, 3]: the first component's size is 2.
        rows = {"ends": [[-2, -3], [1, 2]], "above": [[0, 0], [2, 0]],
                "below": [[0, -4], [0, 0]], "int64-min": [[-2**63, 0], [0, 0]]}
        i = np.array(rows[where], np.int64)
        out = [2, 4]
    else:
        rows = {"ends": [[-3], [2]], "above": [[3], [0]], "below": [[0], [-4]],
                "int64-min": [[0], [-2**63]]}
        i = np.array(rows[where], np.int64)
        out = [2, 4]
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    if live:
        m = model([node], [vi("x", F, [2, 3, 4]), vi("i", I64, list(i.shape))],
                  [vi("y", F, out)])
        feeds = {"x": x, "i": i}
    else:
        m = model([node], [vi("x", F, [2, 3, 4])], [vi("y", F, out)],
                  [const("i", i)])
        feeds = {"x": x}
    r = check(tmp_path, m, feeds, match="out of range")
    if where != "ends":
        assert r.stage == ("run" if live else "compile"), r.stderr


def test_gather_nd_int32_indices_are_refused(tmp_path):
    """ONNX types GatherND's indices int64 only; onnxruntime refuses int32."""
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"])],
              [vi("x", F, [3, 4]), vi("i", I32, [2, 1])], [vi("y", F, [2, 4])])
    r = check(tmp_path, m, {"x": X34, "i": np.array([[0], [2]], np.int32)})
    assert r.stage == "compile"


# --- Zero-size dimensions ------------------------------------------------------

ZERO_SIZE = {
    "gather-elements-no-indices": (
        "GatherElements", {"axis": 0}, [("x", F, [3, 4]), ("i", I64, [0, 4])],
        [("y", F, [0, 4])]),
    "gather-elements-empty-data-no-indices": (
        "GatherElements", {"axis": 1}, [("x", F, [3, 0]), ("i", I64, [3, 0])],
        [("y", F, [3, 0])]),
    "gather-nd-no-tuples": (
        "GatherND", {}, [("x", F, [3, 4]), ("i", I64, [0, 1])], [("y", F, [0, 4])]),
    "gather-nd-empty-rows": (
        "GatherND", {}, [("x", F, [3, 0]), ("i", I64, [2, 1])], [("y", F, [2, 0])]),
    "cumsum-empty-axis": (
        "CumSum", {}, [("x", F, [0, 3])], [("y", F, [0, 3])]),
    "cumsum-empty-other": (
        "CumSum", {}, [("x", F, [3, 0])], [("y", F, [3, 0])]),
    "reduce-l2-empty-axis": (
        "ReduceL2", {"keepdims": 0}, [("x", F, [3, 0])], [("y", F, [3])]),
    "reduce-logsumexp-empty-axis": (
        "ReduceLogSumExp", {"keepdims": 0}, [("x", F, [3, 0])], [("y", F, [3])]),
    "reduce-prod-empty-axis": (
        "ReduceProd", {"keepdims": 0}, [("x", F, [3, 0])], [("y", F, [3])]),
    "reduce-sum-square-empty-axis": (
        "ReduceSumSquare", {"keepdims": 1}, [("x", F, [3, 0])], [("y", F, [3, 1])]),
    "clip-empty": ("Clip", {}, [("x", F, [0, 2])], [("y", F, [0, 2])]),
    "mod-empty": ("Mod", {"fmod": 0}, [("x", I64, [0, 3]), ("d", I64, [3])],
                  [("y", I64, [0, 3])]),
    "isnan-empty": ("IsNaN", {}, [("x", F, [2, 0])], [("y", B, [2, 0])]),
}


@pytest.mark.parametrize("case", sorted(ZERO_SIZE))
def test_zero_size_dimensions(tmp_path, case):
    op, attrs, inputs, outputs = ZERO_SIZE[case]
    names = [n for n, _, _ in inputs]
    inits = []
    if op == "CumSum":
        names.append("axis")
        inits.append(const("axis", np.array(0 if "axis" in case else 1, np.int64)))
    if op.startswith("Reduce"):
        names.append("axes")
        inits.append(const("axes", np.array([1], np.int64)))
    m = model([helper.make_node(op, names, [o[0] for o in outputs], **attrs)],
              [vi(*i) for i in inputs], [vi(*o) for o in outputs], inits)
    feeds = {}
    for name, elem, shape in inputs:
        if name == "d":
            feeds[name] = np.array([2, -3, 5], np.int64)
        else:
            feeds[name] = np.zeros(shape, NP[elem])
    want = onnxruntime(m, feeds)
    got = Run(tmp_path, m, feeds)
    if isinstance(want, Exception) or got.outputs is None:
        # Either side may refuse a zero-size case, with a message.
        if got.outputs is None:
            got.assert_refused()
        return
    assert_close(got.outputs, want)


# --- CumSum types ----------------------------------------------------------------

def cumsum_model(elem, exclusive=0, reverse=0):
    return model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                                   reverse=reverse)],
                 [vi("x", elem, [2, 5])], [vi("y", elem, [2, 5])],
                 [const("axis", np.array(-1, np.int32))], opset=14)


def test_cumsum_of_bool_is_refused(tmp_path):
    m = cumsum_model(B)
    r = check(tmp_path, m, {"x": RNG.random((2, 5)) > 0.5})
    assert r.stage == "compile"


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_of_f16_is_right(tmp_path, exclusive, reverse):
    """onnxruntime's CPU kernel has no f16 CumSum; Partita's must equal the
    fp32 sums rounded once to f16 (its kernel accumulates in fp32)."""
    x = (RNG.standard_normal((2, 5)) * 4).astype(np.float16)
    got = Run(tmp_path, cumsum_model(F16, exclusive, reverse), {"x": x})
    assert got.outputs is not None, got.stderr
    a = x.astype(np.float32)[:, ::-1] if reverse else x.astype(np.float32)
    s = np.cumsum(a, axis=-1, dtype=np.float32)
    if exclusive:
        s = np.concatenate([np.zeros((2, 1), np.float32), s[:, :-1]], -1)
    want = (s[:, ::-1] if reverse else s).astype(np.float16)
    np.testing.assert_array_equal(got.outputs[0], want)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cumsum_of_int32_wraps_like_onnxruntime(tmp_path, exclusive, reverse):
    x = np.array([[2**31 - 1, 1, 5, -7, 2**30], [-2**31, -1, 3, 2**31 - 1, 1]],
                 np.int32)
    check(tmp_path, cumsum_model(I32, exclusive, reverse), {"x": x})


# --- Mod by negative divisors ----------------------------------------------------

@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("elem", [I64, I32])
@pytest.mark.parametrize("live", [True, False], ids=["live", "constant"])
def test_integer_mod_signs(tmp_path, fmod, elem, live):
    dtype = NP[elem]
    info = np.iinfo(dtype)
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1, -1, info.max, info.min + 1, 5, -5, 3],
                 dtype)
    d = np.array([3, 3, -3, -3, -3, -3, -4, -1, -1, -2, -7, 5, 5, -10], dtype)
    node = helper.make_node("Mod", ["a", "d"], ["y"], fmod=fmod)
    if live:
        m = model([node], [vi("a", elem, [14]), vi("d", elem, [14])],
                  [vi("y", elem, [14])])
        feeds = {"a": a, "d": d}
    else:
        m = model([node], [vi("a", elem, [14])], [vi("y", elem, [14])],
                  [const("d", d)])
        feeds = {"a": a}
    check(tmp_path, m, feeds)


@pytest.mark.parametrize("live", [True, False], ids=["live", "constant"])
def test_float_fmod_signs(tmp_path, live):
    a = np.array([7.5, -7.5, 7.5, -7.5, 6.0, -6.0, 0.25, -0.25, 1e-3, 2.5, -9.25],
                 np.float32)
    d = np.array([2.0, 2.0, -2.0, -2.0, -3.0, -3.0, -1.0, 0.5, -0.3, -0.75, 0.5],
                 np.float32)
    node = helper.make_node("Mod", ["a", "d"], ["y"], fmod=1)
    if live:
        m = model([node], [vi("a", F, [11]), vi("d", F, [11])], [vi("y", F, [11])])
        feeds = {"a": a, "d": d}
    else:
        m = model([node], [vi("a", F, [11])], [vi("y", F, [11])], [const("d", d)])
        feeds = {"a": a}
    check(tmp_path, m, feeds)


def fmod_model(n):
    return model([helper.make_node("Mod", ["a", "d"], ["y"], fmod=1)],
                 [vi("a", F, [n]), vi("d", F, [n])], [vi("y", F, [n])])


def test_float_fmod_where_the_quotient_rounds_up(tmp_path):
    """-9.287533 / -0.19760709 is 46.999999 but rounds to 47.0 in fp32: the
    remainder a - 47 * d is -0.1976069 (std::fmod), not 0 (the decomposition
    before issue 15's hardening). And fmod(a, inf) is a, not NaN."""
    a = np.array([-9.287533, 3.0, -3.0, np.inf, 3.0, 0.0, 5.0], np.float32)
    d = np.array([-0.19760709, np.inf, -np.inf, 2.0, 0.0, 0.0, 5.0], np.float32)
    r = check(tmp_path, fmod_model(7), {"a": a, "d": d}, rtol=1e-6, atol=0)
    assert r.outputs[0][0] < -0.19


@pytest.mark.parametrize("scale", [1, 100, 10000])
def test_float_fmod_of_random_values_is_exact(tmp_path, scale):
    """std::fmod is exact; the decomposition must be too (to the rounding of
    its last step) while |a / d| < 2^23."""
    rng = np.random.default_rng(scale)
    a = (rng.standard_normal(20000) * scale).astype(np.float32)
    d = rng.standard_normal(20000).astype(np.float32)
    keep = np.abs(a / d) < 2**22
    a, d = a[keep], d[keep]
    check(tmp_path, fmod_model(a.size), {"a": a, "d": d}, rtol=1e-6, atol=1e-30)


def test_float_mod_without_fmod_is_refused(tmp_path):
    m = model([helper.make_node("Mod", ["a", "d"], ["y"], fmod=0)],
              [vi("a", F, [2]), vi("d", F, [2])], [vi("y", F, [2])])
    r = Run(tmp_path, m, {"a": np.ones(2, np.float32), "d": -np.ones(2, np.float32)})
    r.assert_refused("fmod")


def test_integer_mod_by_a_constant_zero_is_refused(tmp_path):
    m = model([helper.make_node("Mod", ["a", "d"], ["y"])], [vi("a", I64, [2])],
              [vi("y", I64, [2])], [const("d", np.array([-3, 0], np.int64))])
    r = Run(tmp_path, m, {"a": np.ones(2, np.int64)})
    r.assert_refused("by zero")
    assert r.stage == "compile"


# --- ReduceLogSumExp of infinite rows ----------------------------------------------

@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[1], [-1], [0, 2]])
def test_logsumexp_of_infinite_rows(tmp_path, keepdims, axes):
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    x[0, :, :] = -np.inf          # every element -inf: the result is -inf
    x[1, 0, :] = np.inf           # +inf wins
    x[2, :, 0] = -np.inf          # a -inf column beside finite values
    x[2, 1, 1] = 80.0             # exp overflows unless shifted
    m = model([helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"],
                                keepdims=keepdims)],
              [vi("x", F, [3, 4, 2])], [vi("y", F, None)],
              [const("axes", np.array(axes, np.int64))])
    check(tmp_path, m, {"x": x})


def test_logsumexp_of_a_folded_minus_inf_row(tmp_path):
    x = np.array([[-np.inf, -np.inf], [1.0, -np.inf]], np.float32)
    m = model([helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)],
              [], [vi("y", F, [2])], [const("x", x), const("axes", np.array([1]))])
    check(tmp_path, m, {})


# --- Clip with min > max ---------------------------------------------------------------

@pytest.mark.parametrize("elem", [F, I64, I32])
@pytest.mark.parametrize("live", [True, False], ids=["live-bounds", "constant"])
def test_clip_with_min_above_max_gives_max(tmp_path, elem, live):
    dtype = NP[elem]
    x = (RNG.standard_normal((3, 4)) * 10).astype(dtype)
    lo, hi = np.array(5, dtype), np.array(-2, dtype)
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    if live:
        m = model([node], [vi("x", elem, [3, 4]), vi("lo", elem, []),
                           vi("hi", elem, [])], [vi("y", elem, [3, 4])])
        feeds = {"x": x, "lo": lo, "hi": hi}
    else:
        m = model([node], [], [vi("y", elem, [3, 4])],
                  [const("x", x), const("lo", lo), const("hi", hi)])
        feeds = {}
    r = check(tmp_path, m, feeds)
    np.testing.assert_array_equal(r.outputs[0], np.full((3, 4), hi, dtype))


# --- Dimension expressions -------------------------------------------------------------

def expr_model(dim):
    return model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [2, dim])],
                 [vi("y", F, [2, dim])])


def compile_bound(tmp_path, m, bind):
    path = pathlib.Path(tmp_path) / "model.onnx"
    onnx.save(m, str(path))
    return subprocess.run([str(BUILD / "bin" / "partita-compile"), str(path), "--emit",
                           "nn", "--bind", bind], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("dim,bind,expected", [
    ("a * b", "a=4611686018427387904,b=4", "overflows int64"),
    ("a + b", "a=9223372036854775807,b=1", "overflows int64"),
    ("-a - b", "a=9223372036854775807,b=2", "overflows int64"),
    ("a // (b - 2)", "a=4,b=2", "divides by zero"),
    ("a / (b - 1)", "a=4,b=1", "divides by zero"),
    ("(a - 1) // (b - b)", "a=4,b=3", "divides by zero"),
    ("a + c", "a=4", "unbound symbolic dimensions: c ("),
    ("past + seq", "batch=1", "unbound symbolic dimensions: past ("),
])
def test_dim_expression_errors(tmp_path, dim, bind, expected):
    proc = compile_bound(tmp_path, expr_model(dim), bind)
    assert 1 <= proc.returncode <= 127, proc.stderr
    assert expected in proc.stderr, proc.stderr
    assert "Sanitizer" not in proc.stderr and "Stack dump" not in proc.stderr


@pytest.mark.parametrize("dim,bind", [("a - b", "a=2,b=5"), ("-a", "a=3"),
                                      ("a // b", "a=-7,b=2")])
def test_negative_dim_expressions_are_refused(tmp_path, dim, bind):
    proc = compile_bound(tmp_path, expr_model(dim), bind)
    assert 1 <= proc.returncode <= 127, proc.stderr
    assert "negative" in proc.stderr or "-" in proc.stderr, proc.stderr


@pytest.mark.parametrize("dim", ["(" * 100000 + "a" + ")" * 100000,
                                 "-" * 100000 + "a", "a" + " + a" * 20000])
def test_huge_dim_expressions_do_not_crash(tmp_path, dim):
    proc = compile_bound(tmp_path, expr_model(dim), "a=1")
    assert 0 <= proc.returncode <= 127, proc.stderr[-2000:]
    if proc.returncode:
        assert proc.stderr.strip()


@pytest.mark.parametrize("dim,bind,value", [("(s - 1)//2 + 1", "s=7", 4),
                                            ("-(-s // 2)", "s=7", 4),
                                            ("(s - 10) / 2 * 2 + 12", "s=7", 8),
                                            ("a*b - (a + b)", "a=3,b=4", 5)])
def test_dim_expressions_run_like_onnxruntime(tmp_path, dim, bind, value):
    m = expr_model(dim)
    x = RNG.standard_normal((2, value)).astype(np.float32)
    check(tmp_path, m, {"x": x}, "--bind", bind)


# --- Found by the issue-15 campaign ----------------------------------------------------

@pytest.mark.parametrize("how", ["elem-type-0", "elem-type-unset", "no-type"])
def test_output_of_undefined_element_type(tmp_path, how):
    """A graph output's type may be left out, but a tensor type without an
    element type is invalid: onnxruntime refuses it, and so does Partita."""
    if how == "elem-type-0":
        out = vi("y", 0, [2, 3])
    else:
        out = onnx.ValueInfoProto(name="y")
        if how == "elem-type-unset":
            out.type.tensor_type.shape.dim.add().dim_value = 2
    clip = helper.make_node("Clip", ["x", "lo"], ["y"])
    m = model([clip], [vi("x", F, [2, 3])], [out],
              [const("lo", np.array(0.5, np.float32))], opset=13)
    r = check(tmp_path, m, {"x": X34[:2, :3].copy()},
              match="undefined element type")
    assert r.stage == ("run" if how == "no-type" else "compile")


@pytest.mark.parametrize("op,attrs", [("Mod", {"fmod": 2**32}), ("Mod", {"fmod": -1}),
                                      ("CumSum", {"reverse": 2})])
def test_boolean_attributes_of_the_new_ops_hold_0_or_1(tmp_path, op, attrs):
    if op == "Mod":
        m = model([helper.make_node("Mod", ["a", "d"], ["y"], **attrs)],
                  [vi("a", I64, [3])], [vi("y", I64, [3])],
                  [const("d", np.array([2, -3, 5], np.int64))])
        feeds = {"a": np.array([7, -7, 1], np.int64)}
    else:
        m = cumsum_model(F, 0, 0)
        m.graph.node[0].attribute[1].i = attrs["reverse"]
        feeds = {"x": np.ones((2, 5), np.float32)}
    r = check(tmp_path, m, feeds, match="must be 0 or 1")
    assert r.stage == "compile"


@pytest.mark.parametrize("to", [I64, I32])
def test_cast_of_out_of_range_floats_folds_as_it_runs(tmp_path, to):
    """Found by the libFuzzer target: the folded float-to-integer Cast of
    1.7e28 was an out-of-range conversion (undefined). ONNX leaves the value
    undefined; folded or run, Partita saturates at int64 (NaN gives 0) and
    wraps to the width, the same both ways."""
    x = np.array([1.7443123e28, -3.35937e38, np.nan, np.inf, -np.inf, 2.5e9,
                  -2.5e9, -7.9], np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=to)
    live = Run(tmp_path / "live", model([node], [vi("x", F, [8])], [vi("y", to, [8])]),
               {"x": x})
    folded = Run(tmp_path / "folded",
                 model([node], [], [vi("y", to, [8])], [const("x", x)]), {})
    assert live.outputs is not None, live.stderr
    assert folded.outputs is not None, folded.stderr
    np.testing.assert_array_equal(folded.outputs[0], live.outputs[0])
    big = np.iinfo(np.int64)
    want = np.array([big.max, big.min, 0, big.max, big.min, 2500000000,
                     -2500000000, -7], np.int64).astype(NP[to])
    np.testing.assert_array_equal(live.outputs[0], want)
