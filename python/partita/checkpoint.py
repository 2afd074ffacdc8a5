"""Training checkpoints (``partita-run --save``, docs/training.md) as
global tensors, and trained weights written back into the ONNX model.

A checkpoint is a directory: ``checkpoint.json`` and one safetensors file
per rank, holding the rank's block of each parameter and optimizer state
tensor; the JSON gives each block's slice of the global tensor and each
file's SHA-256. Reading needs numpy only (and onnx to export)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Any, Dict, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

_DTYPES = {"f32": np.float32, "f16": np.float16, "i64": np.int64,
           "i32": np.int32, "i8": np.int8, "bool": np.bool_}
_SAFETENSORS = {"F32": np.float32, "F16": np.float16, "I64": np.int64,
                "I32": np.int32, "I8": np.int8, "BOOL": np.bool_}


class CheckpointError(ValueError):
    """A directory that is not a valid Partita checkpoint."""


def _read_safetensors(path: str) -> Dict[str, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise CheckpointError(f"{path}: not a safetensors file")
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        raise CheckpointError(f"{path}: truncated header")
    header = json.loads(data[8:8 + size])
    body = memoryview(data)[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS.get(entry["dtype"])
        if dtype is None:
            raise CheckpointError(f"{path}: '{name}' has dtype "
                                  f"{entry['dtype']}")
        start, stop = entry["data_offsets"]
        if not 0 <= start <= stop <= len(body):
            raise CheckpointError(f"{path}: '{name}' lies outside the file")
        tensors[name] = np.frombuffer(body[start:stop], dtype=dtype).reshape(
            entry["shape"]).copy()
    return tensors


def read_checkpoint(directory: PathLike) -> Dict[str, np.ndarray]:
    """The checkpoint's tensors as global, unsharded arrays keyed by ONNX
    initializer name, the optimizer's state under ``NAME/exp_avg``,
    ``NAME/exp_avg_sq`` or ``NAME/momentum_buffer``. Every rank's block is
    placed at its slice; blocks that ranks hold alike (replicas over dp)
    must agree bit for bit, and every file must match its hash."""
    directory = os.fspath(directory)
    try:
        with open(os.path.join(directory, "checkpoint.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{directory}: {error}") from None
    if manifest.get("format") != "partita-checkpoint/1":
        raise CheckpointError(f"{directory}: not a Partita checkpoint")
    specs = {spec["name"]: spec
             for spec in manifest["parameters"] + manifest["state"]}
    tensors = {name: np.zeros(spec["shape"], _DTYPES[spec["dtype"]])
               for name, spec in specs.items()}
    covered = {name: np.zeros(spec["shape"], bool)
               for name, spec in specs.items()}
    for shard in manifest["ranks"]:
        path = os.path.join(directory, shard["file"])
        if os.path.basename(shard["file"]) != shard["file"]:
            raise CheckpointError(f"{directory}: file '{shard['file']}' is "
                                  "not inside the checkpoint")
        with open(path, "rb") as f:
            digest = "sha256:" + hashlib.sha256(f.read()).hexdigest()
        if digest != shard["sha256"]:
            raise CheckpointError(f"{path} does not match its hash")
        blocks = _read_safetensors(path)
        for name, ranges in shard["slices"].items():
            if name not in specs or name not in blocks:
                raise CheckpointError(f"{path}: '{name}' is not listed")
            where = tuple(slice(start, stop) for start, stop in ranges)
            block = blocks[name]
            if tensors[name][where].shape != block.shape:
                raise CheckpointError(f"{path}: '{name}' does not fit its "
                                      "slice")
            seen = covered[name][where]
            if seen.any() and not np.array_equal(
                    tensors[name][where][seen], block[seen]):
                raise CheckpointError(f"{path}: ranks disagree on '{name}'")
            tensors[name][where] = block
            covered[name][where] = True
    for name, mask in covered.items():
        if not mask.all():
            raise CheckpointError(f"{directory}: no rank holds all of "
                                  f"'{name}'")
    # A parameter the step holds in another shape than its initializer's
    # (a fused projection held as its segments): the same elements in the
    # same order, given back in the initializer's shape.
    for name, spec in specs.items():
        if "onnx_shape" not in spec:
            continue
        shape = spec["onnx_shape"]
        if (not isinstance(shape, list)
                or not all(isinstance(d, int) and d >= 0 for d in shape)
                or int(np.prod(shape, dtype=np.int64)) != tensors[name].size):
            raise CheckpointError(f"{directory}: '{name}' has onnx_shape "
                                  f"{shape}, which does not hold its "
                                  f"{tensors[name].size} elements")
        tensors[name] = tensors[name].reshape(shape)
    return tensors


def export_onnx(checkpoint_dir: PathLike, model_onnx: PathLike,
                out_onnx: PathLike) -> None:
    """Writes a copy of ``model_onnx`` whose initializers hold the
    checkpoint's trained parameters, its tensors as external data beside
    ``out_onnx`` (``<out>.data``), so that onnxruntime, or
    ``partita-compile`` for serving, reads the trained model. Every
    parameter must be an initializer of the model, of its dtype and
    shape."""
    import onnx
    from onnx import numpy_helper

    trained = read_checkpoint(checkpoint_dir)
    model = onnx.load(os.fspath(model_onnx))
    initializers = {init.name: init for init in model.graph.initializer}
    parameters = {name: value for name, value in trained.items()
                  if "/" not in name}
    for name, value in parameters.items():
        init = initializers.get(name)
        if init is None:
            raise CheckpointError(f"'{name}' is not an initializer of "
                                  f"{os.fspath(model_onnx)}")
        old = numpy_helper.to_array(init)
        if old.shape != value.shape or old.dtype != value.dtype:
            raise CheckpointError(f"'{name}' is {old.dtype}{list(old.shape)} "
                                  f"in the model, {value.dtype}"
                                  f"{list(value.shape)} in the checkpoint")
        init.CopyFrom(numpy_helper.from_array(value, name))
    out_onnx = os.fspath(out_onnx)
    onnx.save_model(model, out_onnx, save_as_external_data=True,
                    all_tensors_to_one_file=True,
                    location=os.path.basename(out_onnx) + ".data",
                    size_threshold=0)
