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

__all__ = [
    "Artifact",
    "CompileError",
    "Diagnostic",
    "Error",
    "RunError",
    "TensorSpec",
    "compile",
    "load",
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
        # a caller means; float ids or int activations are mistakes.
        if not np.can_cast(array.dtype, want, casting="same_kind"):
            raise RunError(
                f"input '{spec.name}': expected {spec.partita_dtype} "
                f"{list(spec.shape)}, got {array.dtype} {list(array.shape)}")
        array = array.astype(want)
    return np.ascontiguousarray(array)


def _mesh_axes(mesh: Mesh) -> List[Tuple[str, int, str]]:
    """(name, size, role) per axis; role "" is the one the name implies."""
    if mesh is None:
        return []
    if isinstance(mesh, str):  # "dp=2,tp=2" or "model=2:tp", as on the command line
        axes = []
        for item in filter(None, (s.strip() for s in mesh.split(","))):
            name, _, rest = item.partition("=")
            size, _, role = rest.partition(":")
            if not size.strip().isdigit():
                raise ValueError(
                    f"mesh: '{item}' is not of the form axis=size[:role]")
            axes.append((name.strip(), int(size), role.strip()))
        return axes
    items = mesh.items() if isinstance(mesh, Mapping) else mesh
    axes = []
    for entry in items:
        name, size, *role = entry
        if len(role) > 1:
            raise ValueError(f"mesh: {entry!r} is not (name, size[, role])")
        axes.append((str(name), int(size), str(role[0]) if role else ""))
    return axes


def _cuda_archs(cuda_arch: Union[str, Sequence[str], None]) -> List[str]:
    if cuda_arch is None:
        return []
    if isinstance(cuda_arch, str):
        return [a.strip() for a in cuda_arch.split(",") if a.strip()]
    return [str(a) for a in cuda_arch]


def _cluster_json(cluster: Union[Mapping[str, Any], str, "os.PathLike[str]", None]) -> str:
    if cluster is None:
        return ""
    if isinstance(cluster, Mapping):
        return json.dumps(cluster)
    if isinstance(cluster, str) and cluster.lstrip().startswith("{"):
        return cluster
    # A preset ("h100-80g:2x8") unless it names a file or is spelled like a
    # path, as partita-compile --cluster decides.
    if (isinstance(cluster, str) and not os.path.exists(cluster)
            and "/" not in cluster and not cluster.endswith(".json")):
        return json.dumps({"preset": cluster})
    with open(cluster, encoding="utf-8") as f:
        return f.read()


def compile(
    model: Model,
    mesh: Mesh = None,
    *,
    target: str = "host",
    bind: Optional[Mapping[str, int]] = None,
    strategy: str = "megatron",
    sp_mode: str = "none",
    microbatches: int = 1,
    virtual_stages: int = 1,
    dtype: str = "fp32",
    cuda_arch: Union[str, Sequence[str], None] = None,
    overlap: bool = True,
    collective_matmul: str = "auto",
    cluster: Union[Mapping[str, Any], str, "os.PathLike[str]", None] = None,
    name: Optional[str] = None,
) -> "Artifact":
    """Compiles an ONNX model for a device mesh.

    Args:
      model: a path (``str`` or ``os.PathLike``) to a ``.onnx`` file (binary
        or textual syntax), the serialized model as ``bytes``, or an
        ``onnx.ModelProto`` (anything with ``SerializeToString``).
      mesh: mesh axes and sizes in order, e.g. ``{"dp": 2, "tp": 2}`` (or
        ``[("tp", 2)]``, or ``"tp=2"``); an axis whose name does not say its
        role gives it third: ``[("model", 2, "tp")]`` or ``"model=2:tp"``;
        ``None``: one device.
      target: ``"host"`` or ``"cuda"``.
      bind: values of the model's symbolic dimensions, ``{"batch": 2}``.
      strategy: ``"megatron"`` or ``"none"``.
      sp_mode: ``"none"`` (or ``""``), ``"megatron"``, ``"ulysses"`` or
        ``"ring"``.
      microbatches, virtual_stages: the pipeline schedule (``pp`` axis).
      dtype: storage type of fp32 tensors, ``"fp32"``, ``"bf16"`` or
        ``"fp16"``.
      cuda_arch: fatbin architectures, ``"sm_90a"`` or a list; ``None``:
        the default (sm_80, sm_90a).
      overlap: ``False`` keeps collectives synchronous (``--no-overlap``).
      collective_matmul: ``"auto"``, ``"always"`` or ``"never"``.
      cluster: the cluster model: a preset (``"h100-80g"``,
        ``"h200-141g:2x8"``, ...), a dict, JSON text, or a path to a JSON
        file (``--cluster``).
      name: the model's file name in diagnostics for an in-memory model.

    Returns:
      The compiled :class:`Artifact`, in memory.

    Raises:
      CompileError: the compiler's diagnostics, when it failed (a value an
        option does not take among them, e.g. ``--target expects host or
        cuda, got 'tpu'``).
    """
    if isinstance(model, (str, os.PathLike)):
        source, is_path = os.fsencode(model), True
        name = name or os.fsdecode(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        source, is_path = bytes(model), False
    elif hasattr(model, "SerializeToString"):  # onnx.ModelProto
        source, is_path = model.SerializeToString(), False
    else:
        raise TypeError(
            "model must be a path, bytes or an onnx.ModelProto, not "
            f"{type(model).__name__}")
    native, diagnostics = _partita.compile(
        source, is_path, name or "model.onnx", _mesh_axes(mesh), target,
        {str(k): int(v) for k, v in (bind or {}).items()}, strategy,
        sp_mode or "none",
        int(microbatches), int(virtual_stages), dtype, _cuda_archs(cuda_arch),
        bool(overlap), collective_matmul, _cluster_json(cluster))
    if native is None:
        raise CompileError(diagnostics)
    return Artifact(native=native, diagnostics=diagnostics)


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
        ``programs/rank0.pb``, ...)."""
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
        with self._lock:
            session = self._get_session()
            specs = [TensorSpec(*t) for t in session.inputs]
            known = {s.name for s in specs}
            unknown = sorted(set(inputs) - known)
            if unknown:
                raise RunError(
                    f"the model has no input {', '.join(map(repr, unknown))}; "
                    f"its inputs are: {', '.join(sorted(known))}")
            feeds = []
            for spec in specs:
                if spec.name not in inputs:
                    raise RunError(
                        f"missing input '{spec.name}' ({spec.partita_dtype} "
                        f"{list(spec.shape)})")
                feeds.append((spec.name, spec.partita_dtype,
                              _input_array(spec, inputs[spec.name])))
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
