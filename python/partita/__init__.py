"""Partita: compile an ONNX transformer for a device mesh and run it.

>>> import partita, numpy as np
>>> art = partita.compile("gpt2.onnx", mesh={"tp": 2})
>>> art.report["mesh"]["world_size"]
2
>>> out = art.run({"input_ids": np.zeros((2, 16), np.int64)})
>>> out["logits"].shape
(2, 16, 128)

`compile` takes the flags of ``partita-compile`` as keyword arguments and
returns an :class:`Artifact` held in memory; :meth:`Artifact.run` runs it in
this process (host ranks as threads, or on GPU 0 for a ``cuda`` artifact)
like ``partita-run``. Compilation errors raise :class:`CompileError`, whose
``diagnostics`` are the compiler's, one object each; failures to load or
run raise :class:`RunError`.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _partita
from .checkpoint import CheckpointError, export_onnx, read_checkpoint

__all__ = [
    "Artifact",
    "CompileError",
    "Diagnostic",
    "Error",
    "OptionError",
    "Plan",
    "RunError",
    "TensorSpec",
    "compile",
    "export_onnx",
    "load",
    "options",
    "plan",
    "read_checkpoint",
    "version",
]

#: The version of libpartita.
__version__: str = _partita.version()

#: A diagnostic of the compiler: ``severity`` (``"error"``, ``"warning"``,
#: ``"note"``, ``"remark"``), ``location`` (the ONNX node, or ``""``) and
#: ``message``; ``str()`` gives the line partita-compile prints.
Diagnostic = _partita.Diagnostic

Model = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]
Mesh = Union[Mapping[str, int], Sequence[Union[Tuple[str, int], Tuple[str, int, str]]], str, None]
Cluster = Union[Mapping[str, Any], str, "os.PathLike[str]", None]


class Error(Exception):
    """Base class of Partita's errors."""


class CompileError(Error):
    """The compiler rejected the model or the options.

    ``str(error)`` is every diagnostic, one per line, as partita-compile
    prints them; ``error.diagnostics`` holds them as :data:`Diagnostic`
    objects (errors, warnings and notes, in order).
    """

    def __init__(self, diagnostics: Sequence[Any]):
        self.diagnostics: List[Any] = list(diagnostics)
        text = "\n".join(str(d) for d in self.diagnostics) or "compilation failed"
        super().__init__(text)


class OptionError(CompileError, ValueError):
    """An option was given a value it does not take (out of its range, not
    among its choices, a mesh the --mesh parser refuses): refused before
    anything is compiled, with the compiler's message. It is a
    :class:`CompileError` and a ``ValueError``."""


class RunError(Error, RuntimeError):
    """An artifact could not be loaded, saved or run (wrong input names,
    dtypes or shapes, a runtime failure)."""


def version() -> str:
    """The version of libpartita, ``MAJOR.MINOR.PATCH``."""
    return _partita.version()


class TensorSpec:
    """A model input or output: name, NumPy dtype and global shape. bf16
    tensors are float32 on the Python side (``partita_dtype`` says
    ``"bf16"``)."""

    __slots__ = ("name", "partita_dtype", "shape")

    def __init__(self, name: str, partita_dtype: str, shape: Sequence[int]):
        self.name = name
        self.partita_dtype = partita_dtype
        self.shape: Tuple[int, ...] = tuple(shape)

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of arrays for this tensor."""
        return np.dtype(_NUMPY_DTYPES[self.partita_dtype])

    def __repr__(self) -> str:
        return f"TensorSpec({self.name!r}, {self.partita_dtype}, {list(self.shape)})"


# Partita's dtype names -> what NumPy holds them as.
_NUMPY_DTYPES = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": np.float32,  # NumPy has no bfloat16; converted at the boundary.
    "i64": np.int64,
    "i32": np.int32,
    "i8": np.int8,
    "bool": np.bool_,
}


def _float_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Rounds float32 to bfloat16 (nearest, ties to even; NaN stays a quiet
    NaN), as partita-run does; returns the raw uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    with np.errstate(over="ignore"):
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = np.where(nan, (bits >> 16) | np.uint32(0x40), rounded)
    return rounded.astype(np.uint16)


def _bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _input_array(spec: TensorSpec, value: Any) -> np.ndarray:
    """The array the library reads for `spec`: its exact dtype, dense."""
    array = np.asarray(value)
    if spec.partita_dtype == "bf16":
        if array.dtype.kind not in "fiub":
            raise RunError(
                f"input '{spec.name}': expected floating values for bf16, "
                f"got {array.dtype}")
        return _float_to_bf16_bits(array)
    want = spec.dtype
    if array.dtype != want:
        # Widening or same-kind casts (int32 ids, float64 lists) are what
        # a caller means; float ids, int activations or bool ids (which
        # NumPy would widen, and onnxruntime refuses) are mistakes.
        if not np.can_cast(array.dtype, want, casting="same_kind") or (
                array.dtype.kind == "b") != (np.dtype(want).kind == "b"):
            raise RunError(
                f"input '{spec.name}': expected {spec.partita_dtype} "
                f"{list(spec.shape)}, got {array.dtype} {list(array.shape)}")
        array = _cast_integers(array, want, f"input '{spec.name}'")
    return np.ascontiguousarray(array)


def _feeds(described: Sequence[Any], given: Mapping[str, Any], owner: str,
           what: str) -> List[Tuple[str, str, np.ndarray]]:
    """(name, dtype, array) for each tensor the session describes, from
    `given`, which must name each once and nothing else."""
    specs = [TensorSpec(*t) for t in described]
    known = {s.name for s in specs}
    unknown = sorted(set(given) - known)
    if unknown:
        raise RunError(
            f"{owner} has no {what} {', '.join(map(repr, unknown))}; its "
            f"{what}s are: {', '.join(sorted(known))}")
    feeds = []
    for spec in specs:
        if spec.name not in given:
            raise RunError(f"missing {what} '{spec.name}' "
                           f"({spec.partita_dtype} {list(spec.shape)})")
        feeds.append((spec.name, spec.partita_dtype,
                      _input_array(spec, given[spec.name])))
    return feeds


def _cast_integers(array: np.ndarray, want: Any, what: str) -> np.ndarray:
    """`array` as `want`; integers that `want` cannot hold (a uint64 id of
    2^64-1 wraps to -1 as int64) are refused, not wrapped."""
    want = np.dtype(want)
    if (array.dtype.kind in "iu" and want.kind in "iu" and array.size
            and not np.can_cast(array.dtype, want, casting="safe")):
        info = np.iinfo(want)
        high, low = array.max(), array.min()
        if high > info.max or low < info.min:
            bad = high if high > info.max else low
            raise RunError(f"{what}: {int(bad)} does not fit {want}")
    return array.astype(want)


def _count(value: Any, what: str) -> int:
    """`value` as a count the library takes (int64): an integer, not a bool
    or a float (4.9 tokens are not 4)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, np.integer)):
        raise TypeError(f"{what} expects an integer, got {value!r}")
    if not -(1 << 63) <= int(value) < (1 << 63):
        raise RunError(f"{what}: {int(value)} is beyond int64")
    return int(value)


def _mesh_text(mesh: Mesh) -> str:
    """`mesh` spelled as --mesh takes it: a string is the flag's own text
    (the compiler's one mesh parser checks it); a mapping or a list of
    (name, size[, role]) is spelled out."""
    if isinstance(mesh, str):  # "dp=2,tp=2" or "model=2:tp", as on the command line
        return mesh
    if not isinstance(mesh, (Mapping, list, tuple)):
        raise TypeError("mesh expects a mapping of axis names to sizes, a "
                        "list of (name, size[, role]) or a string, got "
                        f"{type(mesh).__name__}")
    items = mesh.items() if isinstance(mesh, Mapping) else mesh
    axes = []
    for entry in items:
        if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3) \
                or not all(isinstance(t, str) for t in entry[:1] + entry[2:]):
            raise TypeError(f"mesh: {entry!r} is not (name, size[, role]) "
                            "with a string name and role")
        name, size, *role = entry
        if isinstance(size, (bool, np.bool_)) or not isinstance(
                size, (int, np.integer)):
            raise TypeError(f"mesh: the size of {name!r} must be an integer, "
                            f"got {size!r}")
        axes.append(f"{name}={int(size)}" + (f":{role[0]}" if role else ""))
    return ",".join(axes)


class _Option:
    """One declared compiler option (partita/Options/CompilerOptions.def),
    as the native module lists it: what a keyword argument is checked
    against."""

    def __init__(self, flag: str, keyword: str, kind: str, default: str,
                 choices: List[str], low: int, high: int, nullable: bool,
                 help: str):
        self.flag, self.keyword, self.kind = flag, keyword, kind
        self.default, self.choices = default, choices
        self.low, self.high, self.nullable, self.help = low, high, nullable, help

    def text(self, value: Any) -> Optional[str]:
        """`value` as the flag spells it; None for the default. Raises
        TypeError naming the keyword for a value of the wrong kind (the
        declaration then checks the range and the choices)."""
        name, kind = self.keyword, self.kind
        if value is None or (kind == "choice" and value == "" and self.nullable):
            if self.nullable:
                return None
            raise TypeError(f"{name}: a value is required, got None")
        if kind == "flag":
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} expects True or False, got {value!r}")
            return "true" if value else "false"
        if kind == "integer":
            if isinstance(value, (bool, np.bool_)) or not isinstance(
                    value, (int, np.integer)):
                raise TypeError(f"{name} expects an integer, got {value!r}")
            return str(int(value))
        if kind in ("real", "bytes"):
            if isinstance(value, (bool, np.bool_)) or not isinstance(
                    value, (int, float, np.integer, np.floating)):
                raise TypeError(f"{name} expects a number, got {value!r}")
            return repr(float(value))
        if kind in ("text", "choice"):
            if not isinstance(value, str):
                raise TypeError(f"{name} expects a string, got {value!r}")
            return value
        if kind == "mesh":
            return _mesh_text(value)
        if kind == "bindings":
            if not isinstance(value, Mapping):
                raise TypeError(f"{name} expects a mapping of names to "
                                f"integers, got {value!r}")
            for key, size in value.items():
                if isinstance(size, (bool, np.bool_)) or not isinstance(
                        size, (int, np.integer)):
                    raise TypeError(f"{name}: {key!r} expects an integer, "
                                    f"got {size!r}")
            return ",".join(f"{k}={int(v)}" for k, v in value.items())
        if kind == "list":
            if isinstance(value, str):
                return value
            if not all(isinstance(item, str) for item in value):
                raise TypeError(f"{name} expects a string or strings, got "
                                f"{value!r}")
            return ",".join(value)
        if kind == "cluster":
            if isinstance(value, Mapping):
                return json.dumps(value)
            if isinstance(value, os.PathLike):
                return os.fspath(value)
            if not isinstance(value, str):
                raise TypeError(f"{name} expects a preset, a path, JSON text "
                                f"or a dict, got {value!r}")
            return value
        raise TypeError(f"{name}: options of kind {kind} are not supported")


#: The options compile() and plan() take as keyword arguments, by keyword:
#: every option the APIs set by name, from its declaration.
_OPTIONS: Dict[str, _Option] = {
    row[1]: _Option(*row) for row in _partita.option_table()}


def _option_texts(options: Mapping[str, Any]) -> List[Tuple[str, str]]:
    """(flag, text) of each keyword that is not its default; an unknown
    keyword is a TypeError, as for any Python function."""
    texts = []
    for keyword, value in options.items():
        option = _OPTIONS.get(keyword)
        if option is None:
            raise TypeError(f"unexpected keyword argument '{keyword}' (the "
                            f"options are {', '.join(sorted(_OPTIONS))})")
        text = option.text(value)
        if text is not None:
            _unicode(text, keyword)
            texts.append((option.flag, text))
    return texts


def _unicode(text: str, what: str) -> str:
    """`text`, which must be encodable as UTF-8 (a lone surrogate from
    os.fsdecode is not) to reach the compiler."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{what}: {text!r} is not valid Unicode "
                         f"({error.reason})") from None
    return text


def options() -> Dict[str, Dict[str, Any]]:
    """The keyword arguments :func:`compile` and :func:`plan` take, from
    the compiler's declarations: ``{keyword: {"flag", "kind", "default",
    "choices", "min", "max", "help"}}`` (``min``/``max`` for integers)."""
    table = {}
    for option in _OPTIONS.values():
        entry = {"flag": option.flag, "kind": option.kind,
                 "default": option.default, "choices": list(option.choices),
                 "help": option.help}
        if option.kind == "integer":
            entry.update(min=option.low, max=option.high)
        table[option.keyword] = entry
    return table


def compile(
    model: Model,
    mesh: Mesh = None,
    *,
    name: Optional[str] = None,
    **options: Any,
) -> "Artifact":
    """Compiles an ONNX model for a device mesh.

    Args:
      model: a path (``str`` or ``os.PathLike``) to a ``.onnx`` file (binary
        or textual syntax), the serialized model as ``bytes``, or an
        ``onnx.ModelProto`` (anything with ``SerializeToString``).
      mesh: mesh axes and sizes in order, e.g. ``{"dp": 2, "tp": 2}`` (or
        ``[("tp", 2)]``, or ``"tp=2"``); an axis whose name does not say its
        role gives it third: ``[("model", 2, "tp")]`` or ``"model=2:tp"``;
        ``"auto"``: the planner chooses the mesh, ``sp_mode``,
        ``microbatches``, ``virtual_stages`` and ``collective_matmul`` (as
        ``--mesh auto``; :func:`plan` shows its candidates); ``None``: one
        device.
      name: the model's file name in diagnostics for an in-memory model.
      **options: partita-compile's options, its flags spelled with ``_``
        (:func:`options` lists each with its flag, kind, default, range and
        help; they are declared once, in the compiler). ``target``
        (``"host"``, ``"cuda"``), ``bind`` (``{"batch": 2}``),
        ``strategy``, ``sp_mode``, ``microbatches``, ``virtual_stages``,
        ``dtype`` (``"fp32"``, ``"bf16"``, ``"fp16"``), ``cuda_arch``
        (``"sm_90a"`` or a list), ``overlap`` (``False``: ``--no-overlap``),
        ``collective_matmul``, ``cluster`` (a preset such as
        ``"h200-141g:2x8"``, a dict, JSON text or a path), ``devices``,
        ``objective`` and ``device_memory`` (with ``mesh="auto"``) and
        ``max_seq`` (a decoder exported with past key values compiles to a
        prefill and a decode program over one KV cache of ``max_seq``
        tokens per sequence; :meth:`Artifact.generate` runs them). ``None``
        means the default where an option has one to fall back on. A value
        of the wrong type is a TypeError naming the keyword; one the option
        does not take (out of range, not among its choices) is an
        :class:`OptionError`, a CompileError and a ValueError.

    Returns:
      The compiled :class:`Artifact`, in memory (with ``mesh="auto"``, its
      ``report["plan"]`` holds the plan and the candidates it beat).

    Raises:
      CompileError: the compiler's diagnostics, when it failed (a value an
        option does not take among them, e.g. ``--target expects host or
        cuda, got 'tpu'``).
    """
    source, is_path, name = _model_source(model, name)
    auto = isinstance(mesh, str) and mesh.strip() == "auto"
    if not auto and (options.get("objective") is not None
                     or options.get("device_memory") is not None):
        raise ValueError("objective and device_memory need mesh='auto'")
    native, diagnostics, refused = _partita.compile(
        source, is_path, name, _option_texts({"mesh": mesh, **options}))
    if native is None:
        raise (OptionError if refused else CompileError)(diagnostics)
    return Artifact(native=native, diagnostics=diagnostics)


def _flag(value: Any, what: str) -> bool:
    """`value` as a yes or no: a bool, not a truthy string ('no' is not
    False) or a number."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} expects True or False, got {value!r}")
    return bool(value)


def _text(value: Any, what: str) -> str:
    """`value` as a string the native module takes."""
    if not isinstance(value, str):
        raise TypeError(f"{what} expects a string, got {value!r}")
    return _unicode(value, what)


def _model_source(model: Model, name: Optional[str]) -> Tuple[bytes, bool, str]:
    """(bytes, is_path, name): the path, or the serialized model."""
    if name is not None:
        _text(name, "name")
    if isinstance(model, (str, os.PathLike)):
        # The name in messages: the path, undecodable bytes replaced.
        return (os.fsencode(model), True,
                name or os.fsencode(model).decode("utf-8", "replace"))
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), False, name or "model.onnx"
    if hasattr(model, "SerializeToString"):  # onnx.ModelProto
        return model.SerializeToString(), False, name or "model.onnx"
    raise TypeError(
        "model must be a path, bytes or an onnx.ModelProto, not "
        f"{type(model).__name__}")


class Plan(List[Dict[str, Any]]):
    """What :func:`plan` returns: every candidate searched, best first (the
    feasible ones, then the refused), each a dict as the report's
    ``plan.candidates`` holds them: ``mesh`` (``{"tp": 8}``; ``{}`` for one
    device), ``flags`` (the partita-compile flags that compile it),
    ``sp_mode``, ``microbatches``, ``virtual_stages``,
    ``collective_matmul``, ``feasible``, ``reason`` (when not) and the
    predictions (``step_seconds``, ``compute_seconds``,
    ``communication_seconds``, ``exposed_communication_seconds``,
    ``bubble_seconds``, ``weight_bytes``, ``activation_bytes``,
    ``kv_cache_bytes``, ``memory_bytes``, ``tokens_per_second`` and
    ``batch``, the batch they are for: the model's, or under
    ``decode-throughput`` the largest that fits; absent for a candidate
    refused before it was costed). ``str(plan)`` is the ``--explain-plan``
    table."""

    def __init__(self, report: Dict[str, Any], table: str):
        super().__init__(report["candidates"])
        #: The whole ``plan`` object (devices, objective, shape, budget,
        #: rejected families), as the report writes it.
        self.report: Dict[str, Any] = report
        #: The ``--explain-plan`` table.
        self.table: str = table

    @property
    def best(self) -> Optional[Dict[str, Any]]:
        """The chosen candidate; None when none fits."""
        return self[0] if self and self[0]["feasible"] else None

    @property
    def rejected(self) -> List[str]:
        """A line per parallelism family that lost, saying why."""
        return list(self.report["rejected"])

    @property
    def shape(self) -> Dict[str, Any]:
        """What the planner read of the model (layers, heads, batch, ...)."""
        return dict(self.report["shape"])

    def __str__(self) -> str:
        return self.table

    def __repr__(self) -> str:
        best = self.best
        chosen = best["flags"] if best else "no plan fits"
        return f"<partita.Plan {len(self)} candidates, best: {chosen}>"


def plan(
    model: Model,
    devices: Optional[int] = None,
    *,
    name: Optional[str] = None,
    **options: Any,
) -> Plan:
    """Plans `model` as ``compile(model, mesh="auto", ...)`` would, without
    compiling it: the model's shapes are read, never its weights.

    Args:
      model: as for :func:`compile`.
      devices: how many devices (``None``: the cluster's).
      cluster, dtype, bind, target, name: as for :func:`compile`.
      objective: ``"latency"`` (one batch's time) or ``"throughput"``
        (the time per batch of a stream of batches); with ``max_seq``,
        ``"decode-latency"`` or ``"decode-throughput"`` plan the decode
        step of a KV-cache export (docs/serving.md); decode-throughput
        ranks by tokens per second at the largest batch each candidate's
        memory holds (at most 1024 sequences).
      max_seq: as for :func:`compile`.
      device_memory: the memory of one device in bytes (``None``: the
        cluster's).

    Returns:
      A :class:`Plan`: the candidates best first. When none fits it is not
      an error: ``plan.best`` is None and each candidate's ``reason`` says
      why (``"memory: ... (short by 12.3 GB)"``).

    Raises:
      CompileError: the model could not be read or planned (a bad option,
        a symbolic dimension not bound).
    """
    source, is_path, name = _model_source(model, name)
    report, table, diagnostics, refused = _partita.plan(
        source, is_path, name,
        _option_texts({"devices": devices, **options}))
    if report is None:
        raise (OptionError if refused else CompileError)(diagnostics)
    return Plan(json.loads(report), table)


def load(path: Union[str, "os.PathLike[str]"], *,
         verify: bool = False) -> "Artifact":
    """The artifact directory at `path` (written by :meth:`Artifact.save` or
    ``partita-compile -o``). It is read when first run, from disk (weights
    memory-mapped). The manifest and programs are always checked against
    their hashes; the weight bytes only with ``verify=True`` (as
    ``partita-run --verify``), which reads every one of them once.
    ``report`` is the ``report.json`` that
    ``save`` writes beside ``manifest.json`` (None for a directory written
    by partita-compile, which keeps the report where ``--report`` says)."""
    path = os.fspath(path)
    verify = _flag(verify, "verify")
    if not os.path.isfile(os.path.join(path, "manifest.json")):
        raise RunError(f"{path}: not a Partita artifact (no manifest.json)")
    return Artifact(path=path, verify=verify)


class Artifact:
    """A compiled model: in memory (from :func:`compile`) or a directory
    (from :func:`load`). Runs lazily create one session, reused."""

    def __init__(self, *, native: Any = None, path: Optional[str] = None,
                 diagnostics: Sequence[Any] = (), verify: bool = False):
        self._native = native
        self._path = path
        self._verify = verify
        #: Warnings and notes the compiler gave on success.
        self.diagnostics: List[Any] = list(diagnostics)
        self._report: Optional[Dict[str, Any]] = None
        self._session: Any = None
        #: Time to first token and each decode step's time of the last
        #: :meth:`generate`, in seconds (None before one).
        self.last_timings: Optional[Dict[str, Any]] = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = f"path={self._path!r}" if self._path else "in memory"
        return f"<partita.Artifact {where}>"

    @property
    def path(self) -> Optional[str]:
        """The directory this artifact was loaded from, or None."""
        return self._path

    @property
    def report(self) -> Optional[Dict[str, Any]]:
        """The plan, as ``partita-compile --report`` writes it (the
        ``partita-report/1`` schema of DESIGN.md), parsed; None for a loaded
        artifact without ``report.json``."""
        if self._report is None:
            if self._native is not None:
                self._report = json.loads(self._native.report)
            else:
                report = os.path.join(self._path, "report.json")
                if os.path.isfile(report):
                    with open(report, encoding="utf-8") as f:
                        self._report = json.load(f)
        return self._report

    @property
    def manifest(self) -> Dict[str, Any]:
        """The artifact's ``manifest.json``, parsed."""
        return json.loads(self.file("manifest.json"))

    @property
    def files(self) -> List[str]:
        """The artifact's files, relative paths, sorted (the report, which
        ``save`` writes beside them as ``report.json``, is not one)."""
        if self._native is not None:
            return list(self._native.file_names())
        names = []
        for root, _, filenames in os.walk(self._path):
            for filename in filenames:
                full = os.path.join(root, filename)
                names.append(os.path.relpath(full, self._path).replace(os.sep, "/"))
        return sorted(n for n in names if n != "report.json")

    def file(self, relative: str) -> bytes:
        """The bytes of one of the artifact's files (``manifest.json``,
        ``programs/rank0.pb``, ...): one of :attr:`files`, nothing outside
        the artifact."""
        _text(relative, "relative")
        if relative not in self.files:
            raise RunError(f"the artifact has no file '{relative}'")
        if self._native is not None:
            return self._native.file(relative)
        with open(os.path.join(self._path, relative), "rb") as f:
            return f.read()

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the artifact directory at `path`, with the report as
        ``report.json`` beside ``manifest.json``, replacing an artifact there
        and refusing any other existing path; nothing is left on failure."""
        native = self._native
        if native is None:
            files = {name: self.file(name) for name in self.files}
            report = json.dumps(self.report) if self.report is not None else ""
            native = _partita.Artifact(files, report)
        try:
            native.save(os.fspath(path))
        except _partita.Error as error:
            raise Error(str(error)) from None

    def _get_session(self) -> Any:
        if self._session is None:
            try:
                if self._native is not None:
                    self._session = _partita.Session.load_artifact(self._native)
                else:
                    self._session = _partita.Session.load_path(
                        self._path, verify_weights=self._verify)
            except _partita.Error as error:
                raise RunError(str(error)) from None
        return self._session

    @property
    def target(self) -> str:
        """``"host"`` or ``"cuda"`` (from the manifest; no session needed)."""
        return str(self.manifest["target"])

    @property
    def inputs(self) -> List[TensorSpec]:
        """The model's inputs, global shapes (from the manifest)."""
        return [TensorSpec(t["name"], t["dtype"], t["shape"])
                for t in self.manifest["inputs"]]

    @property
    def outputs(self) -> List[TensorSpec]:
        """The model's outputs, global shapes (from the manifest)."""
        return [TensorSpec(t["name"], t["dtype"], t["shape"])
                for t in self.manifest["outputs"]]

    def _serving_session(self) -> Any:
        session = self._get_session()
        if not session.serving:
            raise RunError(
                "the artifact was not compiled with max_seq (--max-seq): it "
                "has no decode program or KV cache to generate with")
        return session

    @staticmethod
    def _ids(array: Any, what: str) -> np.ndarray:
        ids = np.asarray(array)
        if ids.dtype.kind not in "iu":
            raise RunError(f"{what} must be integers, not {ids.dtype}")
        return np.ascontiguousarray(_cast_integers(ids, np.int64, what))

    def _vocab(self) -> int:
        logits = self.manifest["serving"]["logits"]
        for spec in self.manifest["outputs"]:
            if spec["name"] == logits:
                return int(spec["shape"][-1])
        raise RunError(f"the manifest has no output '{logits}'")

    def generate(self, input_ids: Any, max_new_tokens: int, *,
                 attention_mask: Any = None,
                 return_logits: bool = False) -> Any:
        """Greedy generation on a serving artifact (``max_seq``): a prefill
        of the prompt, then ``max_new_tokens - 1`` decode steps, the loop in
        the runtime and the KV cache resident on the ranks.

        Args:
          input_ids: int [batch, p] prompt ids, p at most the compiled
            prompt length, the batch as compiled; rows of different lengths
            left-padded, as Hugging Face pads them.
          max_new_tokens: how many tokens to generate (the first from the
            prompt's logits).
          attention_mask: int [batch, p] of 0 (padding) and 1; ``None``: all
            ones.
          return_logits: also return every step's logits.

        Returns:
          int64 [batch, max_new_tokens] tokens; with ``return_logits``, the
          pair (tokens, float32 [max_new_tokens, batch, vocab] logits).

        Raises:
          RunError: not a serving artifact, a prompt of the wrong batch or
            longer than the prefill, more tokens than the cache holds.
        """
        ids = self._ids(input_ids, "input_ids")
        mask = (None if attention_mask is None
                else self._ids(attention_mask, "attention_mask"))
        count = _count(max_new_tokens, "max_new_tokens")
        return_logits = _flag(return_logits, "return_logits")
        with self._lock:
            session = self._serving_session()
            try:
                (tokens, batch, generated, logits, vocab, prefill_seconds,
                 step_seconds) = session.generate(ids, mask, count,
                                                  return_logits)
            except _partita.Error as error:
                raise RunError(str(error)) from None
        self.last_timings = {"prefill_seconds": prefill_seconds,
                             "step_seconds": list(step_seconds)}
        out = np.asarray(tokens, dtype=np.int64).reshape(batch, generated)
        if not return_logits:
            return out
        return out, np.asarray(logits, dtype=np.float32).reshape(
            generated, batch, vocab)

    def prefill(self, input_ids: Any, *,
                attention_mask: Any = None) -> np.ndarray:
        """Starts a generation (the step API, for callers who sample
        themselves): zeroes the cache, runs the prompt and returns the
        logits of its last position, float32 [batch, vocab]."""
        ids = self._ids(input_ids, "input_ids")
        mask = (None if attention_mask is None
                else self._ids(attention_mask, "attention_mask"))
        with self._lock:
            session = self._serving_session()
            logits = np.empty((ids.shape[0] if ids.ndim else 0, self._vocab()),
                              dtype=np.float32)
            try:
                session.prefill(ids, mask, logits)
            except _partita.Error as error:
                raise RunError(str(error)) from None
        return logits

    def step(self, tokens: Any) -> np.ndarray:
        """Feeds one token per row (int [batch]) at the next position and
        returns its logits, float32 [batch, vocab]; refused before
        :meth:`prefill` or with the cache full."""
        ids = self._ids(tokens, "tokens")
        with self._lock:
            session = self._serving_session()
            logits = np.empty((ids.shape[0] if ids.ndim else 0, self._vocab()),
                              dtype=np.float32)
            try:
                session.step(ids, logits)
            except _partita.Error as error:
                raise RunError(str(error)) from None
        return logits

    @property
    def cache_position(self) -> int:
        """Cache slots the current generation has filled (0 before one)."""
        with self._lock:
            return int(self._serving_session().cache_position)

    def _training_session(self) -> Any:
        session = self._get_session()
        if not session.training:
            raise RunError(
                "the artifact was not compiled with train=True (--train): it "
                "has no training step")
        return session

    def train_step(self, batch: Mapping[str, Any],
                   lr: Optional[float] = None) -> float:
        """Runs one optimizer step (a ``train=True`` artifact,
        docs/training.md) and returns the loss before its update.

        Args:
          batch: every batch input by name (the model's inputs and
            ``labels`` or ``target``), global arrays.
          lr: this step's learning rate (a schedule is the caller's);
            None: the compiled one.

        Raises:
          RunError: a missing or unknown input, a wrong dtype or shape, a
            label outside [0, classes) other than -100 (refused before the
            step), or a failure of the runtime.
        """
        if not isinstance(batch, Mapping):
            raise TypeError("batch expects a mapping of input names to "
                            f"arrays, got {type(batch).__name__}")
        if lr is not None and (isinstance(lr, bool) or
                               not isinstance(lr, (int, float)) or
                               not np.isfinite(lr) or lr < 0):
            raise ValueError(f"lr must be a finite number of 0 or more, "
                             f"not {lr!r}")
        with self._lock:
            session = self._training_session()
            feeds = _feeds(session.batch_inputs, batch, "the step",
                           "batch input")
            try:
                return float(session.train_step(
                    feeds, float("nan") if lr is None else float(lr)))
            except _partita.Error as error:
                raise RunError(str(error)) from None

    @property
    def training_steps(self) -> int:
        """The optimizer steps taken (0 before the first)."""
        with self._lock:
            return int(self._training_session().training_steps)

    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the parameters and optimizer state after the steps taken
        to a new directory (``partita.read_checkpoint`` reads it back as
        global tensors). :meth:`save` writes the artifact itself."""
        with self._lock:
            try:
                self._training_session().save_checkpoint(os.fspath(path))
            except _partita.Error as error:
                raise RunError(str(error)) from None

    def load_checkpoint(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Continues from a checkpoint saved on the same mesh."""
        with self._lock:
            try:
                self._training_session().load_checkpoint(os.fspath(path))
            except _partita.Error as error:
                raise RunError(str(error)) from None

    def run(self, inputs: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """Runs the model once.

        Args:
          inputs: every model input by name, as NumPy arrays (or anything
            ``numpy.asarray`` takes) of the global shape. Same-kind dtypes
            are cast (int32 ids for an int64 input); bf16 inputs take
            floats, rounded to bf16.

        Returns:
          Every output by name, global (unsharded); bf16 outputs as
          float32.

        Raises:
          RunError: a missing or unknown input, a wrong dtype or shape, or
            a failure of the runtime.
        """
        if not isinstance(inputs, Mapping):
            raise TypeError("inputs expects a mapping of input names to "
                            f"arrays, got {type(inputs).__name__}")
        with self._lock:
            session = self._get_session()
            if session.training:
                raise RunError("a training artifact runs one step at a "
                               "time: call train_step with a batch")
            feeds = _feeds(session.inputs, inputs, "the model", "input")
            results = []
            for name, dtype, shape in session.outputs:
                storage = np.uint16 if dtype == "bf16" else _NUMPY_DTYPES[dtype]
                results.append((name, dtype, np.empty(shape, dtype=storage)))
            try:
                session.run(feeds, results)
            except _partita.Error as error:
                raise RunError(str(error)) from None
        return {
            name: _bf16_bits_to_float(array) if dtype == "bf16" else array
            for name, dtype, array in results
        }
