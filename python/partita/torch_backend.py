"""A ``torch.compile`` backend that runs FX graphs with Partita.

>>> import torch, partita.torch_backend as ptb
>>> fast = torch.compile(model, backend=ptb.partita_backend)
>>> sharded = torch.compile(model, backend=ptb.backend(mesh={"tp": 2}))

The backend exports the graph to ONNX (``torch.onnx.export`` at the
exporter's own opset, which Partita reads from 13 to 23, at the example
inputs' shapes; asking torch 2's dynamo exporter for another opset makes it
down-convert the model, which leaves attributes of its own opset behind), compiles it with :func:`partita.compile` and
returns a callable that runs the artifact on the host (torch tensors go
through NumPy). Whatever it cannot do (a graph torch cannot export, an op
Partita does not know, a dtype NumPy cannot carry, inputs of another shape
than the example) falls back to running the graph eagerly, with a
``warnings.warn`` naming the reason. Without ``torch.compile`` (torch < 2),
call the backend directly on ``torch.fx.symbolic_trace(module)``.

The ``onnx`` package is not needed: torch serializes the model itself.
"""

from __future__ import annotations

import functools
import io
import warnings
from typing import Any, Callable, List, Sequence

import numpy as np

import partita

__all__ = ["backend", "partita_backend"]


class _Unsupported(Exception):
    """A reason to run the graph eagerly."""


def _numpy_dtypes():
    import torch

    # Torch dtypes that go through NumPy unchanged (no bfloat16 in NumPy).
    return {
        torch.float32: np.float32,
        torch.float16: np.float16,
        torch.int64: np.int64,
        torch.int32: np.int32,
        torch.int8: np.int8,
        torch.bool: np.bool_,
    }


def _fallback(gm: Any, reason: str) -> Callable[..., Any]:
    warnings.warn(
        f"partita: running the graph eagerly: {reason}", RuntimeWarning,
        stacklevel=3)
    return gm.forward


def _compile_graph(gm: Any, example_inputs: Sequence[Any],
                   options: dict) -> Callable[..., Any]:
    import torch
    from torch.utils import _pytree as pytree

    dtypes = _numpy_dtypes()
    for i, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            raise _Unsupported(
                f"input {i} is a {type(value).__name__}, not a tensor "
                "(dynamic shapes are not supported)")
        if value.dtype not in dtypes:
            raise _Unsupported(f"input {i} has unsupported dtype {value.dtype}")

    # The output structure (tuple, list, single tensor) to rebuild; the
    # eager run also gives the output dtypes and device.
    with torch.no_grad():
        expected = gm(*example_inputs)
    flat, spec = pytree.tree_flatten(expected)
    for i, value in enumerate(flat):
        if not isinstance(value, torch.Tensor):
            raise _Unsupported(
                f"output {i} is a {type(value).__name__}, not a tensor")
        if value.dtype not in dtypes:
            raise _Unsupported(
                f"output {i} has unsupported dtype {value.dtype}")

    input_names = [f"input_{i}" for i in range(len(example_inputs))]
    output_names = [f"output_{i}" for i in range(len(flat))]
    buffer = io.BytesIO()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                gm, tuple(example_inputs), buffer,
                input_names=input_names, output_names=output_names,
                do_constant_folding=True)
    except Exception as error:  # torch raises many kinds here
        raise _Unsupported(
            f"torch.onnx.export failed: {type(error).__name__}: {error}") from error

    try:
        artifact = partita.compile(buffer.getvalue(), name="fx_graph.onnx",
                                   **options)
        # Export drops inputs the graph does not use; feed only the rest.
        model_inputs = {spec_.name for spec_ in artifact.inputs}
        model_outputs = [spec_.name for spec_ in artifact.outputs]
    except partita.Error as error:
        raise _Unsupported(f"{type(error).__name__}: {error}") from error
    if sorted(model_outputs) != sorted(output_names):
        raise _Unsupported(
            f"the exported model's outputs {model_outputs} are not the "
            f"graph's {output_names}")
    shapes = [tuple(value.shape) for value in example_inputs]
    out_meta = [(value.dtype, value.device) for value in flat]
    warned = []

    def run(*args: Any) -> Any:
        if len(args) != len(shapes) or any(
                not isinstance(a, torch.Tensor) or tuple(a.shape) != s
                for a, s in zip(args, shapes)):
            # Compiled for the example shapes only.
            if not warned:
                warned.append(True)
                warnings.warn(
                    "partita: inputs differ from the example inputs' "
                    "shapes; running the graph eagerly", RuntimeWarning,
                    stacklevel=2)
            return gm.forward(*args)
        feeds = {
            name: arg.detach().cpu().numpy()
            for name, arg in zip(input_names, args) if name in model_inputs
        }
        try:
            outputs = artifact.run(feeds)
        except partita.RunError as error:
            raise RuntimeError(f"partita: {error}") from error
        tensors = [
            torch.from_numpy(np.ascontiguousarray(outputs[name])).to(
                device=device, dtype=dtype)
            for name, (dtype, device) in zip(output_names, out_meta)
        ]
        return pytree.tree_unflatten(tensors, spec)

    run.artifact = artifact  # type: ignore[attr-defined]
    return run


def partita_backend(gm: Any, example_inputs: List[Any],
                    **options: Any) -> Callable[..., Any]:
    """The backend: compiles `gm` (a ``torch.fx.GraphModule``) for
    `example_inputs` with :func:`partita.compile` (``options`` are its
    keyword arguments: ``mesh``, ``dtype``, ...), or returns ``gm.forward``
    with a warning when it cannot. The returned callable has the compiled
    :class:`partita.Artifact` as ``.artifact``."""
    try:
        return _compile_graph(gm, example_inputs, options)
    except _Unsupported as reason:
        return _fallback(gm, str(reason))
    except ImportError as error:
        return _fallback(gm, f"{error}")


def backend(**options: Any) -> Callable[..., Callable[..., Any]]:
    """A backend with :func:`partita.compile` options bound, e.g.
    ``torch.compile(model, backend=backend(mesh={"tp": 2}))``."""
    @functools.wraps(partita_backend)
    def configured(gm: Any, example_inputs: List[Any]) -> Callable[..., Any]:
        return partita_backend(gm, example_inputs, **options)

    return configured
