#!/usr/bin/env python3
"""The campaign's `api` target (fuzz/campaign.py): the Python and C APIs
called as a careless or hostile program calls them.

One case is a few calls, each with one argument of the wrong type, out of
range, past int64, NaN, empty, huge or NULL, the rest valid, on the
artifacts `campaign.py` compiles beforehand (a plain GPT-2, a serving
GPT-2 with a KV cache and a serving onnxruntime-genai Llama export, whose
rows are right-padded). The Python calls go through `partita`, the C calls
through `libpartita.so` with ctypes, in memory the C contract allows (a
shape array of `rank` entries, data of the size the tensor claims, or
NULL). Run as

    api.py --seed S --index I --work DIR --build BUILD

it prints one JSON line per call: what was called, whether the argument
was invalid (a type the parameter cannot take, a NULL where the header
requires a pointer), and the outcome (`ok`, or the exception or status and
its message). The parent classifies: a signal or an abort is a crash, the
timeout a hang, an error without a message, with nanobind's "incompatible
function arguments" or of an exception type the API does not raise an
empty diagnostic, and an invalid argument accepted an accepted-invalid.
"""

import argparse
import ctypes
import json
import math
import os
import pathlib
import random
import sys

import numpy as np

# What the Python API raises for a bad argument: partita's own errors, or
# TypeError / ValueError (OptionError is both a CompileError and one).
PYTHON_ERRORS = (TypeError, ValueError, OSError)

HOSTILE = [None, True, False, 0, -1, 2**31, 2**63 - 1, 2**63, 2**64, -2**63 - 1,
           2.5, float("nan"), float("inf"), -0.0, "", "x", "no", "\x00",
           "x" * 5000, "\udcff", b"bytes", [], [1, 2], {}, {"a": 1}, (),
           object(), np.int64(2), np.float32(1.5), np.array([1, 2]),
           np.bool_(True)]


def describe(value):
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


def wrong_type(kind, value):
    """Whether `value` is of a type an option of `kind` cannot take (None
    falls back on the default; a range is the compiler's to refuse)."""
    if value is None:
        return False
    is_bool = isinstance(value, (bool, np.bool_))
    is_int = isinstance(value, (int, np.integer)) and not is_bool
    if kind == "flag":
        return not is_bool
    if kind == "integer":
        return not is_int
    if kind == "bytes":
        return not (is_int or isinstance(value, (float, np.floating, str))
                    ) or is_bool
    if kind in ("choice", "list"):
        return not isinstance(value, str) and not (
            kind == "list" and isinstance(value, (list, tuple)) and
            all(isinstance(v, str) for v in value))
    if kind == "bindings":
        return not isinstance(value, (dict, str))
    if kind == "cluster":
        return not isinstance(value, (dict, str, os.PathLike))
    return False


class PythonCalls:
    """Calls of the Python API."""

    def __init__(self, rng, work, partita):
        self.rng, self.work, self.partita = rng, work, partita
        self.model = str(pathlib.Path(work) / "gpt2.onnx")
        self.kv_model = str(pathlib.Path(work) / "gpt2_kv.onnx")

    def compile_option(self):
        table = self.partita.options()
        keyword = self.rng.choice(sorted(table))
        value = self.rng.choice(HOSTILE)
        kind = table[keyword]["kind"]
        invalid = wrong_type(kind, value) and keyword != "mesh"
        call = f"compile(gpt2, {keyword}={describe(value)})"
        fn = self.partita.plan if keyword in (
            "devices", "objective", "device_memory") else self.partita.compile
        args = {keyword: value}
        if fn is self.partita.plan:
            call = "plan" + call[len("compile"):]
        return call, invalid, lambda: fn(self.model, **args)

    def compile_argument(self):
        value = self.rng.choice(HOSTILE)
        where = self.rng.choice(["model", "mesh", "name"])
        if where == "model":
            invalid = not isinstance(value, (str, bytes))
            return (f"compile({describe(value)})", invalid,
                    lambda: self.partita.compile(value))
        if where == "mesh":
            invalid = value is not None and not isinstance(
                value, (str, dict, list, tuple))
            return (f"compile(gpt2, mesh={describe(value)})", invalid,
                    lambda: self.partita.compile(self.model, value))
        invalid = value is not None and not isinstance(value, str)
        return (f"compile(bytes, name={describe(value)})", invalid,
                lambda: self.partita.compile(
                    pathlib.Path(self.model).read_bytes(), name=value))

    def run(self):
        artifact = self.partita.load(pathlib.Path(self.work) / "plain")
        ids = np.ones((2, 16), np.int64)
        choice = self.rng.randrange(6)
        if choice == 0:
            value = self.rng.choice(HOSTILE)
            invalid = not isinstance(value, dict)
            return (f"run({describe(value)})", invalid,
                    lambda: artifact.run(value))
        if choice == 1:
            value = self.rng.choice(HOSTILE)
            invalid = not (isinstance(value, np.ndarray) and value.shape ==
                           (2, 16)) and not isinstance(value, (int,
                                                               np.integer))
            return (f"run(input_ids={describe(value)})", invalid and
                    not isinstance(value, (bool, np.bool_)),
                    lambda: artifact.run({"input_ids": value}))
        if choice == 2:
            bad = self.rng.choice([2**63, 2**64 - 1, -2**63 - 1, 2**70])
            array = np.array([[bad] * 16] * 2, dtype=object)
            return (f"run(input_ids=object array of {bad})", True,
                    lambda: artifact.run({"input_ids": array}))
        if choice == 3:
            dtype = self.rng.choice([np.uint64, np.int32, np.int8, np.float32,
                                     np.float64, np.bool_, np.uint8])
            array = ids.astype(dtype)
            if dtype == np.uint64 and self.rng.randrange(2):
                array[0, 0] = np.iinfo(np.uint64).max
                return ("run(input_ids=uint64 holding 2^64-1)", True,
                        lambda: artifact.run({"input_ids": array}))
            invalid = np.dtype(dtype).kind not in "iu"
            return (f"run(input_ids={np.dtype(dtype).name})", invalid,
                    lambda: artifact.run({"input_ids": array}))
        if choice == 4:
            shape = self.rng.choice([(2, 15), (2, 16, 1), (0, 16), (), (32,)])
            array = np.ones(shape, np.int64)
            return (f"run(input_ids of shape {shape})", True,
                    lambda: artifact.run({"input_ids": array}))
        relative = self.rng.choice(["manifest.json", "../plain/manifest.json",
                                    "/etc/passwd", "", "nope", 5, None])
        invalid = relative != "manifest.json"
        return (f"file({describe(relative)})", invalid,
                lambda: artifact.file(relative))

    def serving(self):
        # GPT-2 (left-padded rows) or onnxruntime-genai's Llama export
        # (right-padded rows, each written at its own slot).
        name = self.rng.choice(["serving", "serving_genai"])
        artifact = self.partita.load(pathlib.Path(self.work) / name)
        ids = np.ones((2, 8), np.int64)
        choice = self.rng.randrange(5)
        value = self.rng.choice(HOSTILE)
        if choice == 4:
            # Masks of 0 and 1 with a kept token in every row are valid,
            # holes and all; a row of zeros, another value or another
            # shape is not.
            masks = [np.ones((2, 8), np.int64),
                     np.array([[0, 0, 1, 1, 1, 1, 1, 1]] * 2),
                     np.array([[1, 0, 1, 0, 1, 0, 1, 0]] * 2),
                     np.array([[1] * 8, [0] * 8]),
                     np.array([[2] * 8] * 2), np.ones((2, 7), np.int64),
                     np.ones((3, 8), np.int64)]
            index = self.rng.randrange(len(masks))
            mask = masks[index]
            return (f"{name}.generate(ids, 3, attention_mask=masks[{index}])",
                    index >= 3, lambda: artifact.generate(
                        ids, 3, attention_mask=mask))
        if choice == 0:
            invalid = isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, np.integer)) or not 1 <= value <= 8
            return (f"generate(ids, {describe(value)})", invalid,
                    lambda: artifact.generate(ids, value))
        if choice == 1:
            invalid = not isinstance(value, (bool, np.bool_))
            return (f"generate(ids, 2, return_logits={describe(value)})",
                    invalid,
                    lambda: artifact.generate(ids, 2, return_logits=value))
        if choice == 2:
            invalid = value is not None
            return (f"generate(ids, 2, attention_mask={describe(value)})",
                    invalid, lambda: artifact.generate(
                        ids, 2, attention_mask=value))
        tokens = self.rng.choice([np.array([1, 2]), np.array([128, 1]),
                                  np.array([-129, 1]), np.array([1.5, 1]),
                                  np.array([2**63, 1], dtype=object),
                                  np.array([1, 2, 3]), value])
        try:  # What the API reads: anything np.asarray makes integers of.
            array = np.asarray(tokens)
            invalid = not (array.dtype.kind in "iu" and array.shape == (2,)
                           and -128 <= array.min() and array.max() < 128)
        except Exception:  # noqa: BLE001 - a ragged or odd object.
            invalid = True

        def step():
            artifact.prefill(ids)
            return artifact.step(tokens)
        return f"step({describe(tokens)})", invalid, step

    def load(self):
        value = self.rng.choice(HOSTILE)
        invalid = not isinstance(value, (bool, np.bool_))
        return (f"load(plain, verify={describe(value)})", invalid,
                lambda: self.partita.load(pathlib.Path(self.work) / "plain",
                                          verify=value))

    def make(self):
        return self.rng.choice([self.compile_option, self.compile_option,
                                self.compile_argument, self.run, self.run,
                                self.serving, self.load])()


class Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("rank", ctypes.c_int64),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("data", ctypes.c_void_p)]


P = ctypes.c_void_p
I64, U64, SIZE = ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t
INTS = [0, 1, -1, 2, 2**20, 2**31 - 1, 2**40, 2**62, 2**63 - 1, -2**63]
SIZES = [0, 1, 2, 3, 2**32, 2**63, 2**64 - 1]
DOUBLES = [0.0, -1.0, 1e-9, 1.0, 1e308, float("inf"), float("nan"),
           float("-inf")]
STRINGS = [None, b"", b"x", b"tp", b"dp=2", b"\xff\xfe", b"x" * 5000,
           b"sm_80", b"fp16", b"auto", b"ring", b"host", b"{}", b"[[[]]]"]


class CCalls:
    """Calls of the C API through ctypes, in memory the contract allows."""

    def __init__(self, rng, work, build):
        self.rng, self.work = rng, pathlib.Path(work)
        self.lib = ctypes.CDLL(str(pathlib.Path(build) / "lib" /
                                   "libpartita.so"))
        lib = self.lib
        for name, res, args in [
                ("partita_status_message", ctypes.c_char_p, [P]),
                ("partita_status_destroy", None, [P]),
                ("partita_compile_options_create", P, []),
                ("partita_compile_options_destroy", None, [P]),
                ("partita_compile_options_set", P, [P, ctypes.c_char_p,
                                                    ctypes.c_char_p]),
                ("partita_compile_option_count", SIZE, []),
                ("partita_compile_option_name", ctypes.c_char_p, [SIZE]),
                ("partita_compile_options_add_mesh_axis", P,
                 [P, ctypes.c_char_p, I64]),
                ("partita_compile_options_set_bind", P,
                 [P, ctypes.c_char_p, I64]),
                ("partita_compile_options_set_microbatches", P, [P, I64]),
                ("partita_compile_options_set_auto_mesh", P, [P, I64]),
                ("partita_compile_options_set_max_seq", P, [P, I64]),
                ("partita_compile_options_set_device_memory", P,
                 [P, ctypes.c_double]),
                ("partita_compile_options_set_cluster_json", P,
                 [P, ctypes.c_char_p]),
                ("partita_compile_file", P, [ctypes.c_char_p, P,
                                             ctypes.POINTER(P)]),
                ("partita_compile_result_destroy", None, [P]),
                ("partita_compile_result_diagnostic_count", SIZE, [P]),
                ("partita_session_options_create", P, []),
                ("partita_session_options_destroy", None, [P]),
                ("partita_session_options_set_threads_per_rank", P,
                 [P, ctypes.c_uint]),
                ("partita_session_options_set_timeout_seconds", P,
                 [P, ctypes.c_double]),
                ("partita_session_load_path", P,
                 [ctypes.c_char_p, P, ctypes.POINTER(P)]),
                ("partita_session_destroy", None, [P]),
                ("partita_session_input", P,
                 [P, SIZE, ctypes.POINTER(Tensor)]),
                ("partita_session_run", P,
                 [P, ctypes.POINTER(Tensor), SIZE, ctypes.POINTER(Tensor),
                  SIZE]),
                ("partita_session_generate", P,
                 [P, ctypes.POINTER(Tensor), ctypes.POINTER(Tensor), I64,
                  ctypes.POINTER(I64), SIZE]),
                ("partita_session_step", P,
                 [P, ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)])]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.keep = []  # Memory the current call's tensors point into.

    def status(self, status):
        """('ok', '') or ('error', the message), freeing the status."""
        if not status:
            return "ok", ""
        message = self.lib.partita_status_message(status)
        text = message.decode("utf-8", "replace") if message else ""
        self.lib.partita_status_destroy(status)
        return "error", text

    def options_call(self):
        lib = self.lib
        options = None if self.rng.randrange(8) == 0 else \
            lib.partita_compile_options_create()
        choice = self.rng.randrange(6)
        if choice == 0:
            count = lib.partita_compile_option_count()
            names = [lib.partita_compile_option_name(i)
                     for i in range(count)] + [None, b"bogus", b""]
            name = self.rng.choice(names)
            value = self.rng.choice(STRINGS)
            call = f"options_set({describe(name)}, {describe(value)})"
            invalid = options is None or name is None or value is None or \
                name in (b"bogus", b"")
            run = lambda: lib.partita_compile_options_set(options, name, value)
        elif choice == 1:
            name, size = self.rng.choice(STRINGS), self.rng.choice(INTS)
            call = f"add_mesh_axis({describe(name)}, {size})"
            invalid = options is None or name is None or size < 1
            run = lambda: lib.partita_compile_options_add_mesh_axis(
                options, name, size)
        elif choice == 2:
            fn = self.rng.choice(["set_microbatches", "set_auto_mesh",
                                  "set_max_seq"])
            value = self.rng.choice(INTS)
            call = f"{fn}({value})"
            invalid = options is None or value < 0
            run = lambda: getattr(lib, "partita_compile_options_" + fn)(
                options, value)
        elif choice == 3:
            value = self.rng.choice(DOUBLES)
            call = f"set_device_memory({value})"
            invalid = options is None or not math.isfinite(value) or value < 0
            run = lambda: lib.partita_compile_options_set_device_memory(
                options, value)
        elif choice == 4:
            name, value = self.rng.choice(STRINGS), self.rng.choice(INTS)
            call = f"set_bind({describe(name)}, {value})"
            invalid = options is None or name is None or value < 0
            run = lambda: lib.partita_compile_options_set_bind(options, name,
                                                               value)
        else:
            text = self.rng.choice(STRINGS + [b'{"bogus": 1}',
                                              b'{"device": {"flops": -1}}'])
            call = f"set_cluster_json({describe(text)})"
            invalid = options is None or text not in (b"{}", b"")
            run = lambda: lib.partita_compile_options_set_cluster_json(
                options, text)

        def go():
            try:
                return self.status(run())
            finally:
                if options:
                    lib.partita_compile_options_destroy(options)
        return call, invalid, go

    def compile_call(self):
        lib = self.lib
        path = self.rng.choice([None, b"", b"/nonexistent.onnx",
                                str(self.work).encode(),
                                str(self.work / "gpt2.onnx").encode()])
        null_result = self.rng.randrange(6) == 0
        invalid = path != str(self.work / "gpt2.onnx").encode() or null_result

        def go():
            result = P()
            status = lib.partita_compile_file(
                path, None, None if null_result else ctypes.byref(result))
            outcome = self.status(status)
            if result:
                lib.partita_compile_result_destroy(result)
            return outcome
        return (f"compile_file({describe(path)}"
                f"{', NULL result' if null_result else ''})", invalid, go)

    def tensor(self, spec, named=True):
        """A tensor as the session's spec has it, one field now and then
        changed; its memory is kept alive in self.keep. Generation takes
        its tensors by position: their names are not read (`named`)."""
        name = spec["name"]
        dtype, shape = spec["dtype"], list(spec["shape"])
        invalid = False
        change = self.rng.randrange(8)
        if change == 0:
            dtype, invalid = self.rng.choice([-1, 99, 2**31 - 1]), True
        elif change == 1:
            shape = self.rng.choice([[], shape + [1], shape[:-1],
                                     [-1] * len(shape), [2**62] * len(shape),
                                     [0] * len(shape)])
            invalid = shape != list(spec["shape"])
        elif change == 2:
            name, invalid = self.rng.choice([None, b"", b"bogus"]), named
        count = 1
        for d in shape:
            count *= d
        size = self.lib_dtype_size(dtype) * count if count >= 0 else 0
        data = None
        if change == 3 or size > (1 << 24) or size <= 0:
            invalid = invalid or change == 3 or count != 0 and size <= 0
        else:
            buffer = (ctypes.c_char * size)()
            self.keep.append(buffer)
            data = ctypes.cast(buffer, ctypes.c_void_p)
        dims = (I64 * max(len(shape), 1))(*shape)
        self.keep.append(dims)
        return Tensor(name, dtype, len(shape), dims, data), invalid

    def lib_dtype_size(self, dtype):
        fn = self.lib.partita_dtype_size
        fn.restype, fn.argtypes = SIZE, [ctypes.c_int]
        return fn(dtype)

    def session_call(self):
        lib = self.lib
        which = self.rng.choice(["plain", "serving"])
        options = lib.partita_session_options_create()
        # Mostly options that load, so that the calls behind them run.
        threads, timeout = self.rng.choice([0, 1, 2]), 60.0
        if self.rng.randrange(4) == 0:
            threads = self.rng.choice([1024, 1025, 2**32 - 1])
        if self.rng.randrange(4) == 0:
            timeout = self.rng.choice([0.0, 1e-9, -1.0, 1e7, float("nan"),
                                       float("inf")])
        described = []

        def go():
            try:
                outcome = self.status(
                    lib.partita_session_options_set_threads_per_rank(
                        options, threads))
                if outcome[0] == "error":
                    return outcome
                outcome = self.status(
                    lib.partita_session_options_set_timeout_seconds(
                        options, timeout))
                if outcome[0] == "error":
                    return outcome
                session = P()
                outcome = self.status(lib.partita_session_load_path(
                    str(self.work / which).encode(), options,
                    ctypes.byref(session)))
                if outcome[0] == "error":
                    return outcome
                try:
                    return self.session_body(session, which)
                finally:
                    lib.partita_session_destroy(session)
            finally:
                lib.partita_session_options_destroy(options)
        invalid_options = threads > 1024 or not 0 < timeout <= 1e6
        call = (f"session {which} threads={threads} timeout={timeout}")
        described.append(call)
        self.invalid_options = invalid_options
        return call, None, go

    def session_body(self, session, which):
        lib = self.lib
        # i64 ids (zeros: in the vocabulary) and f32 logits.
        spec = {"name": b"input_ids", "dtype": 3,
                "shape": [2, 16] if which == "plain" else [2, 8]}
        out = {"name": b"logits", "dtype": 0,
               "shape": [2, 16, 128] if which == "plain" else [2, 128]}
        if which == "plain":
            inputs, bad_in = self.tensor(spec)
            outputs, bad_out = self.tensor(out)
            n_in = self.rng.choice([1, 1, 1, 0, 2, 2**64 - 1])
            n_out = self.rng.choice([1, 1, 1, 0, 2**63])
            self.last_invalid = bad_in or bad_out or n_in != 1 or n_out != 1
            # A count past the arrays is the caller's bug unless refused
            # before reading past the first element: the counts are checked
            # against the model's, so only counts of 0 and 1 read memory.
            if n_in not in (0, 1) and self.rng.randrange(2):
                n_in = 0
            if n_out not in (0, 1) and self.rng.randrange(2):
                n_out = 0
            self.last_invalid = bad_in or bad_out or n_in != 1 or n_out != 1
            return self.status(lib.partita_session_run(
                session, ctypes.byref(inputs), n_in, ctypes.byref(outputs),
                n_out))
        ids, bad_ids = self.tensor(spec, named=False)
        count = self.rng.choice([1, 2, 8, 0, -1, 2**62, 2**63 - 1])
        capacity = self.rng.choice([0, 2 * max(count, 0), 2**64 - 1])
        tokens = (I64 * 64)()
        if capacity > 64:
            capacity = 64 if self.rng.randrange(2) else capacity
        self.last_invalid = bad_ids or not 1 <= count <= 8 or \
            capacity < 2 * count
        if capacity > 64:
            # The buffer holds 64: a larger capacity is only safe to pass
            # where the call must refuse before writing (count out of
            # range).
            if 1 <= count <= 32:
                capacity = 64
                self.last_invalid = bad_ids or not 1 <= count <= 8
        return self.status(lib.partita_session_generate(
            session, ctypes.byref(ids), None, count, tokens, capacity))

    def make(self):
        self.last_invalid = False
        self.invalid_options = False
        return self.rng.choice([self.options_call, self.options_call,
                                self.compile_call, self.session_call,
                                self.session_call])()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--build", required=True)
    p.add_argument("--calls", type=int, default=4)
    args = p.parse_args()
    sys.path.insert(0, str(pathlib.Path(args.build) / "python"))
    import partita
    rng = random.Random(f"{args.seed}:api:{args.index}")
    python = PythonCalls(rng, args.work, partita)
    c = CCalls(rng, args.work, args.build)
    for _ in range(args.calls):
        surface = rng.choice(["python", "c"])
        if surface == "python":
            call, invalid, fn = python.make()
        else:
            call, invalid, fn = c.make()
        record = {"surface": surface, "call": call}
        print(json.dumps({**record, "started": True}), flush=True)
        try:
            if surface == "python":
                fn()
                outcome, kind, message = "ok", "", ""
            else:
                outcome, message = fn()
                kind = "status"
                if invalid is None:  # A session call: what it ran decides.
                    invalid = c.invalid_options or c.last_invalid
        except PYTHON_ERRORS + (partita.Error,) as e:
            outcome, kind, message = "error", type(e).__name__, str(e)
        except Exception as e:  # noqa: BLE001 - what the oracle classifies.
            outcome, kind, message = "unexpected", type(e).__name__, str(e)
        print(json.dumps({**record, "invalid": bool(invalid),
                          "outcome": outcome, "type": kind,
                          "message": message[:400]}), flush=True)
        c.keep.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
