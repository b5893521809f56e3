"""Serve exported models on NVIDIA Triton Inference Server, keeping the adapter.

Three pieces, none of which imports torch:

- :func:`write_triton_repository` writes a Triton model repository from a saved model (or
  a folder ``onnx-export hf`` wrote): ``config.pbtxt`` for Triton's ONNX Runtime backend
  (or its Python backend), derived from the graph and the adapter spec, and optionally a
  KServe InferenceService manifest.
- :class:`TritonModel` calls a served model as the PyTorch model was called: nested
  inputs and keyword arguments in, nested outputs out, over HTTP or gRPC.
- :class:`TritonServer` starts a real ``tritonserver`` (the one ``nvidia-pytriton``
  bundles) on a repository and stops it with its backend processes.

Usage:
    >>> from onnx_export.serving import ServingOptions, write_triton_repository
    >>> options = ServingOptions(device="cpu", instances=2, max_batch_size=32)
    >>> repo = write_triton_repository("model.onnx", "repo", options=options)  # doctest: +SKIP
"""

from ._client import TritonModel
from ._config_text import ServingOptions
from ._errors import RemoteInferenceError, RepositoryError, ServerError, ServingError
from ._repository import TritonRepository, write_triton_repository
from ._server import TritonServer, find_tritonserver, free_port

__all__ = [
    # Repository
    "ServingOptions",
    "TritonRepository",
    "write_triton_repository",
    # Server and client
    "TritonServer",
    "TritonModel",
    "find_tritonserver",
    "free_port",
    # Errors
    "ServingError",
    "RepositoryError",
    "ServerError",
    "RemoteInferenceError",
]
