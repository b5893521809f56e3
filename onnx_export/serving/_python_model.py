"""The ``model.py`` of Triton's Python backend: ``onnx_export.load`` with ONNX Runtime inside.

:func:`write_triton_repository` copies this file into ``NAME/1/model.py`` when the backend is
``"python"``; Triton's Python backend stub imports it (``triton_python_backend_utils`` exists
only there). Requests that the dynamic batcher hands over together are concatenated along
the batch axis, run as one call, and split again.

Tensors cross the stub through DLPack, not ``as_numpy()``/``Tensor(name, array)``: the stub
of nvidia-pytriton 0.7.0 was built against numpy 1, and with numpy 2 those two read the
array's descriptor at numpy 1's offsets (inputs come out as zeros, outputs as empty).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
from typing import Any

import numpy as np

__all__ = ["TritonPythonModel"]


def _honour_pythonpath() -> None:
    """Put ``PYTHONPATH``'s folders first on ``sys.path``, as ``python`` itself would.

    The stub's embedded interpreter starts without reading ``PYTHONPATH``;
    :class:`TritonServer` sets it to reach the ``onnx_export`` that started the server.
    """
    folders = [f for f in os.environ.get("PYTHONPATH", "").split(os.pathsep) if f]
    for folder in reversed(folders):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def _quiet_capsules(hook: Any) -> Any:
    """An unraisable hook that drops the stub's DLPack capsule-name complaint only.

    The stub renames a consumed capsule ``used_dlpack`` where numpy expects
    ``used_dltensor``, so numpy's capsule destructor reports a ``ValueError`` for every
    tensor handed over; the tensor itself is intact.
    """

    def quiet(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, ValueError) and "PyCapsule_GetPointer" in str(
            unraisable.exc_value
        ):
            return
        hook(unraisable)

    return quiet


class TritonPythonModel:
    """Runs the saved model next to this file for Triton's Python backend."""

    def initialize(self, args: dict[str, str]) -> None:
        """Load ``model.onnx`` (Triton calls this once per model instance)."""
        _honour_pythonpath()
        from onnx_export.adapters import load

        sys.unraisablehook = _quiet_capsules(sys.unraisablehook)
        config = json.loads(args["model_config"])
        folder = pathlib.Path(args["model_repository"]) / args["model_version"]
        on_gpu = args.get("model_instance_kind") == "GPU"
        self._module = load(folder / "model.onnx", providers=["cuda"] if on_gpu else ["cpu"])
        self._inputs = [tensor["name"] for tensor in config["input"]]
        self._outputs = [tensor["name"] for tensor in config["output"]]
        self._batched = int(config.get("max_batch_size", 0)) > 0
        import triton_python_backend_utils as pb_utils

        package = pathlib.Path(sys.modules["onnx_export"].__file__ or "?").parent
        pb_utils.Logger.log_info(
            f"{args['model_name']}: onnx_export.load from {package} in Python "
            f"{sys.version.split()[0]}, providers {self._module.providers}"
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        """Answer the requests Triton hands over (several when it batched them)."""
        import triton_python_backend_utils as pb_utils

        feeds = [self._feeds(pb_utils, request) for request in requests]
        if self._batched and len(feeds) > 1 and _stackable(feeds):
            try:
                results = self._run_batch(feeds)
            except Exception as e:  # answered to each request, below
                return [_error(pb_utils, e) for _ in requests]
            return [self._response(pb_utils, r) for r in results]
        responses = []
        for feed in feeds:
            try:
                responses.append(self._response(pb_utils, self._run(feed)))
            except Exception as e:  # the request's own error, not the server's end
                responses.append(_error(pb_utils, e))
        return responses

    def _feeds(self, pb_utils: Any, request: Any) -> dict[str, np.ndarray[Any, Any]]:
        return {
            name: np.from_dlpack(pb_utils.get_input_tensor_by_name(request, name))
            for name in self._inputs
        }

    def _run(self, feed: dict[str, np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
        return list(self._module.session.run(self._outputs, feed))

    def _run_batch(
        self, feeds: list[dict[str, np.ndarray[Any, Any]]]
    ) -> list[list[np.ndarray[Any, Any]]]:
        sizes = [len(feed[self._inputs[0]]) for feed in feeds]
        joined = {name: np.concatenate([feed[name] for feed in feeds]) for name in self._inputs}
        outputs = self._run(joined)
        bounds = np.cumsum(sizes)[:-1]
        split = [np.split(output, bounds) for output in outputs]
        return [[parts[i] for parts in split] for i in range(len(feeds))]

    def _response(self, pb_utils: Any, outputs: list[np.ndarray[Any, Any]]) -> Any:
        return pb_utils.InferenceResponse(
            [
                pb_utils.Tensor.from_dlpack(name, np.ascontiguousarray(value))
                for name, value in zip(self._outputs, outputs, strict=True)
            ]
        )

    def finalize(self) -> None:
        """Release the session (Triton calls this when it unloads the model)."""
        self._module = None  # type: ignore[assignment]  # dropped on unload


def _stackable(feeds: list[dict[str, np.ndarray[Any, Any]]]) -> bool:
    """Whether the requests differ in their batch axis only (else each runs alone)."""
    first = feeds[0]
    return all(
        feed[name].shape[1:] == array.shape[1:] and feed[name].dtype == array.dtype
        for feed in feeds[1:]
        for name, array in first.items()
    )


def _error(pb_utils: Any, error: Exception) -> Any:
    message = " ".join(f"{type(error).__name__}: {error}".split())
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))
