"""A client that keeps the adapter: call a served model as the PyTorch model was called."""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_export.adapters import (
    AdapterSpec,
    InputAdapter,
    OutputAdapter,
    flat_input_names,
    flat_output_names,
)
from onnx_export.adapters._torch import is_torch_tensor
from onnx_export.adapters._torch_convert import numpy_to_torch, torch_to_numpy

from ._config_text import ADAPTER_PARAMETER
from ._errors import RemoteInferenceError, ServerError, ServingError
from ._signature import WIRE_TYPES

__all__ = ["TritonModel"]


class TritonModel:
    """A model served by Triton, called like the PyTorch model was (nested in, nested out).

    The adapter spec comes from the served model's configuration (the parameter
    ``onnx_export.adapter_spec`` that :func:`write_triton_repository` writes), or from
    ``spec`` (an :class:`~onnx_export.adapters.AdapterSpec`, its JSON, or the saved
    ``.onnx`` file). Inputs are bound to ``forward``'s signature, flattened, checked
    (dtype, rank, static sizes, constants) and sent; outputs come back in their nested
    structure. numpy arrays in give numpy arrays out, torch tensors in give CPU torch
    tensors out. Each thread gets its own connection, so one ``TritonModel`` may be called
    from many threads at once.

    Args:
        url: ``host:port`` or ``http://host:port`` for HTTP, ``grpc://host:port`` for gRPC.
        name: The model's name in the repository.
        spec: The adapter spec, when the server's configuration does not carry it.
        allowed_classes: Classes the outputs may be rebuilt as (see ``onnx_export.load``).
        timeout: Seconds to wait for the server's answer to a request.

    Close it (:meth:`close`, or ``with TritonModel(...) as model:``) when done: a server
    that stops waits for open HTTP connections.

    Raises:
        ServerError: The server is not reachable, or does not serve ``name``.
        ServingError: No adapter spec in the configuration and none given.

    Example:
        >>> from onnx_export.serving import TritonModel
        >>> model = TritonModel("127.0.0.1:8000", "cached")  # doctest: +SKIP
        >>> outputs = model(x, [c0, c1], scale=3.0)  # doctest: +SKIP
        >>> outputs["past"][0].shape  # doctest: +SKIP
        (2, 3)
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        spec: AdapterSpec | str | os.PathLike[str] | None = None,
        allowed_classes: Sequence[type] = (),
        timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.protocol, self.url = _split_url(url)
        self.timeout = timeout
        self._local = threading.local()
        self._opened: list[Any] = []  # every thread's client, for close()
        self._lock = threading.Lock()
        config = self._config()
        self.spec = _spec(spec, config, name)
        #: The graph inputs and outputs, in the order the adapter produces and consumes them.
        self.input_names = flat_input_names(self.spec)
        self.output_names = flat_output_names(self.spec)
        _check_names(config, self.input_names, self.output_names, name)
        self._scalar_items = _scalar_items(config, self.spec)
        self._inputs = InputAdapter(self.spec)
        self._outputs = OutputAdapter(self.spec, allowed_classes)

    def __repr__(self) -> str:
        return (
            f"TritonModel({self.protocol}://{self.url}, {self.name!r}, "
            f"inputs={self.input_names}, outputs={self.output_names})"
        )

    def __call__(self, *args: object, **kwargs: object) -> object:
        """Send one request: ``forward``'s arguments in, ``forward``'s outputs out.

        Raises:
            InputError: Inputs that do not fit the adapter spec (the subclasses
                ``onnx_export.load`` raises), found before anything is sent.
            RemoteInferenceError: The server refused or failed the request.
            ServerError: The server cannot be reached.
        """
        flat = self._inputs(*args, **kwargs)
        as_torch = any(is_torch_tensor(value) for value in flat)
        arrays = [np.ascontiguousarray(torch_to_numpy(value)) for value in flat]
        outputs = self.infer_flat(arrays)
        if as_torch:
            outputs = [numpy_to_torch(array, "cpu") for array in outputs]  # type: ignore[misc]  # torch tensors in the list from here on
        return self._outputs(outputs)

    def infer_flat(self, arrays: Sequence[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
        """Send the flat graph inputs (in graph order); the flat outputs in graph order."""
        if len(arrays) != len(self.input_names):
            raise ServingError(
                f"expected {len(self.input_names)} arrays (the graph inputs "
                f"{self.input_names}), got {len(arrays)}."
            )
        module, client = self._client()
        requests = []
        for name, given in zip(self.input_names, arrays, strict=True):
            wire = WIRE_TYPES.get(given.dtype.name)
            if wire is None:
                raise ServingError(
                    f"input {name!r}: expected an array of a type Triton carries, got "
                    f"{given.dtype}. Cast it first."
                )
            # Triton's dims [1] for a scalar item, reshaped to [] for the model
            array = given.reshape((*given.shape, 1)) if name in self._scalar_items else given
            request = module.InferInput(name, list(array.shape), wire)
            request.set_data_from_numpy(array)
            requests.append(request)
        wanted = [module.InferRequestedOutput(name) for name in self.output_names]
        try:
            result = client.infer(self.name, requests, outputs=wanted, **self._timeout())
        except Exception as e:
            raise _remote_error(e, self) from e
        outputs = [np.array(result.as_numpy(name)) for name in self.output_names]  # writable
        return [
            output.reshape(output.shape[:-1]) if name in self._scalar_items else output
            for name, output in zip(self.output_names, outputs, strict=True)
        ]

    def _timeout(self) -> dict[str, Any]:
        if self.protocol == "grpc":
            return {"client_timeout": self.timeout}
        return {}

    def close(self) -> None:
        """Close every thread's connection (the server waits for open ones when it stops)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for client in opened:
            with contextlib.suppress(Exception):  # already closed, or the server is gone
                client.close()
        self._local = threading.local()

    def __enter__(self) -> TritonModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _client(self) -> tuple[Any, Any]:
        made = getattr(self._local, "client", None)
        if made is None:
            made = _connect(self.protocol, self.url, self.timeout)
            self._local.client = made
            with self._lock:
                self._opened.append(made[1])
        return made

    def _config(self) -> dict[str, Any]:
        _, client = self._client()
        try:
            if self.protocol == "grpc":
                answer = client.get_model_config(self.name, as_json=True)
                return dict(answer.get("config", answer))
            return dict(client.get_model_config(self.name))
        except Exception as e:
            raise ServerError(
                f"cannot read the configuration of model {self.name!r} from "
                f"{self.protocol}://{self.url}: {_one_line(e)}. Check that the server runs and "
                "serves that model (GET /v2/models/NAME/ready)."
            ) from e


def _check_names(config: dict[str, Any], inputs: list[str], outputs: list[str], name: str) -> None:
    served_inputs = sorted(str(t["name"]) for t in config.get("input", []))
    served_outputs = sorted(str(t["name"]) for t in config.get("output", []))
    if served_inputs != sorted(inputs) or served_outputs != sorted(outputs):
        raise ServingError(
            f"model {name!r} is served with inputs {served_inputs} and outputs "
            f"{served_outputs}, but its adapter spec expects inputs {sorted(inputs)} and "
            f"outputs {sorted(outputs)}. Pass the spec of the model that is served."
        )


def _scalar_items(config: dict[str, Any], spec: AdapterSpec) -> frozenset[str]:
    """Tensors whose items are scalars: Triton carries them with one more axis of size 1.

    ``config.pbtxt`` gives them ``dims: [ 1 ]`` and ``reshape { shape: [ ] }`` (Triton needs
    at least one dim), so on the wire they have one axis more than the graph's tensor.
    """
    ranks = {
        leaf.tensor.name: len(leaf.tensor.shape)
        for leaf in (*spec.inputs, *spec.outputs)
        if leaf.tensor is not None
    }
    batched = int(config.get("max_batch_size", 0)) > 0
    return frozenset(
        str(tensor["name"])
        for tensor in (*config.get("input", []), *config.get("output", []))
        if tensor["name"] in ranks
        and len(tensor.get("dims", [])) + batched == ranks[tensor["name"]] + 1
    )


def _split_url(url: str) -> tuple[str, str]:
    if url.startswith("grpc://"):
        return "grpc", url.removeprefix("grpc://")
    if url.startswith("https://"):
        raise ServingError(f"expected an http:// or grpc:// URL, got {url!r} (TLS is not set up).")
    return "http", url.removeprefix("http://")


def _connect(protocol: str, url: str, timeout: float) -> tuple[Any, Any]:
    try:
        if protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
    except ImportError as e:
        raise ServingError(
            f"the Triton client is not installed ({e}). Install it: pip install "
            "'onnx-export[serve]' (tritonclient[http,grpc])."
        ) from e
    if protocol == "grpc":
        return module, module.InferenceServerClient(url)
    return module, module.InferenceServerClient(
        url, connection_timeout=timeout, network_timeout=timeout
    )


def _spec(
    given: AdapterSpec | str | os.PathLike[str] | None, config: dict[str, Any], name: str
) -> AdapterSpec:
    if isinstance(given, AdapterSpec):
        return given
    if given is not None:
        text = str(given)
        if not text.lstrip().startswith("{"):
            return _spec_from_file(pathlib.Path(text))
        return AdapterSpec.from_json(text)
    parameter = config.get("parameters", {}).get(ADAPTER_PARAMETER)
    if not parameter:
        raise ServingError(
            f"model {name!r}'s configuration has no parameter {ADAPTER_PARAMETER!r}, so its "
            "inputs' structure is unknown. Serve a repository written by onnx-export triton, "
            "or pass spec= the saved .onnx file."
        )
    return AdapterSpec.from_json(str(parameter["string_value"]))


def _spec_from_file(path: pathlib.Path) -> AdapterSpec:
    from onnx_export.adapters import METADATA_KEY

    from ._signature import read_served_model

    text = read_served_model(path).adapter_spec
    if text is None:
        raise ServingError(f"{path} has no adapter spec ({METADATA_KEY} in metadata_props).")
    return AdapterSpec.from_json(text)


def _remote_error(error: Exception, model: TritonModel) -> ServingError:
    text = _one_line(error)
    status = str(getattr(error, "status", lambda: "")() or "")
    unreachable = "StatusCode.UNAVAILABLE" in status or isinstance(error, ConnectionError | OSError)
    if unreachable:
        return ServerError(
            f"cannot reach the Triton server at {model.protocol}://{model.url}: {text}."
        )
    return RemoteInferenceError(f"Triton answered model {model.name!r} with an error: {text}")


def _one_line(error: Exception) -> str:
    message = getattr(error, "message", None)
    text = message() if callable(message) else str(error)
    return " ".join(str(text).split()) or type(error).__name__
