"""Errors of the serving support: a model Triton cannot serve as asked, a server that fails."""

from __future__ import annotations

__all__ = ["ServingError", "RepositoryError", "ServerError", "RemoteInferenceError"]


class ServingError(Exception):
    """Base of the errors raised by :mod:`onnx_export.serving`.

    Example:
        >>> from onnx_export.serving import RepositoryError, ServingError
        >>> issubclass(RepositoryError, ServingError)
        True
    """


class RepositoryError(ServingError, ValueError):
    """A model (or an option) that cannot become a Triton model repository as asked.

    Raised for a file that is not a saved ONNX model, a graph input or output with a type
    Triton has no ``TYPE_*`` for, a decoder with a key/value cache, or an output folder that
    would overwrite something else; the message names the value and what to do.

    Example:
        >>> from onnx_export.serving import RepositoryError
        >>> issubclass(RepositoryError, ValueError)
        True
    """


class ServerError(ServingError, RuntimeError):
    """A Triton server that cannot be started, is not reachable, or stopped.

    Raised when no ``tritonserver`` binary is found, when this Python cannot host Triton's
    Python backend (the message says which interpreter to use), when the server exits or is
    not ready in time (the message quotes its log), and when a client cannot reach it.

    Example:
        >>> from onnx_export.serving import ServerError
        >>> issubclass(ServerError, RuntimeError)
        True
    """


class RemoteInferenceError(ServingError, RuntimeError):
    """A request the server received and answered with an error.

    Inputs are checked against the adapter spec before they are sent (with the errors of
    :func:`onnx_export.load`); this is what remains: the server's own refusal or failure,
    quoted in one line.

    Example:
        >>> from onnx_export.serving import RemoteInferenceError
        >>> issubclass(RemoteInferenceError, RuntimeError)
        True
    """
