"""``config.pbtxt``: a Triton model configuration, written from a :class:`ServedModel`.

Protobuf text format, written by hand (no protobuf import): every field is one Triton's
``ModelConfig`` message defines, which the tests check by parsing each file with
``tritonclient``'s ``model_config_pb2``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal

from ._signature import ServedModel, ServedTensor

__all__ = ["ServingOptions", "config_text", "WARMUP_SIZE", "ADAPTER_PARAMETER"]

#: The size given to each named dynamic axis in ``model_warmup``: torch.export keeps no
#: axis of size 0 or 1 dynamic, so 2 is in every exported model's range.
WARMUP_SIZE = 2
#: The key of the model configuration parameter that carries the adapter spec.
ADAPTER_PARAMETER = "onnx_export.adapter_spec"

Device = Literal["cpu", "cuda"]
Backend = Literal["onnxruntime", "python"]


@dataclasses.dataclass(frozen=True)
class ServingOptions:
    """How Triton should serve a model.

    Attributes:
        device: ``"cpu"`` (``KIND_CPU``) or ``"cuda"`` (``KIND_GPU``).
        instances: Model instances (``instance_group.count``); each runs requests alone.
        max_batch_size: The largest batch the dynamic batcher forms (used only when the
            model has a batch axis; else ``max_batch_size: 0``).
        max_queue_delay_us: How long a request may wait for others to join its batch.
        warmup: Whether to write ``model_warmup`` (one request of zeros).

    Example:
        >>> from onnx_export.serving import ServingOptions
        >>> ServingOptions(instances=2).max_batch_size
        16
    """

    device: Device = "cpu"
    instances: int = 1
    max_batch_size: int = 16
    max_queue_delay_us: int = 500
    warmup: bool = True


def config_text(model: ServedModel, name: str, backend: Backend, options: ServingOptions) -> str:
    """The ``config.pbtxt`` of ``model`` served as ``name`` by ``backend``."""
    batched = model.batch_axis is not None
    lines = [f"name: {_quote(name)}"]
    lines.append(
        f"backend: {_quote(backend)}"
        if backend == "python"
        else 'platform: "onnxruntime_onnx"\nbackend: "onnxruntime"'
    )
    lines.append(f"max_batch_size: {options.max_batch_size if batched else 0}")
    lines += _tensors("input", model.inputs, batched)
    lines += _tensors("output", model.outputs, batched)
    if batched:
        lines.append(
            f"dynamic_batching {{\n  max_queue_delay_microseconds: {options.max_queue_delay_us}\n}}"
        )
    kind = "KIND_GPU" if options.device == "cuda" else "KIND_CPU"
    lines.append(
        f"instance_group [\n  {{\n    kind: {kind}\n    count: {options.instances}\n  }}\n]"
    )
    if options.warmup:
        lines += _warmup(model.inputs, batched)
    if model.adapter_spec is not None:
        lines.append(
            "parameters {\n"
            f"  key: {_quote(ADAPTER_PARAMETER)}\n"
            f"  value {{\n    string_value: {_quote(model.adapter_spec)}\n  }}\n"
            "}"
        )
    return "\n".join(lines) + "\n"


def _dims(tensor: ServedTensor, batched: bool) -> list[int]:
    shape = tensor.shape[1:] if batched else tensor.shape
    return [size if isinstance(size, int) else -1 for size in shape]


def _tensors(field: str, tensors: tuple[ServedTensor, ...], batched: bool) -> Iterator[str]:
    yield f"{field} ["
    for index, tensor in enumerate(tensors):
        dims = _dims(tensor, batched)
        # Triton needs at least one dim: a scalar travels as [1], reshaped to [] for the model.
        shape = (
            f"\n    dims: [ {_join(dims)} ]"
            if dims
            else "\n    dims: [ 1 ]\n    reshape { shape: [ ] }"
        )
        comma = "," if index < len(tensors) - 1 else ""
        yield (
            f"  {{\n    name: {_quote(tensor.name)}\n    data_type: {tensor.triton_type}"
            f"{shape}\n  }}{comma}"
        )
    yield "]"


def _warmup(inputs: tuple[ServedTensor, ...], batched: bool) -> Iterator[str]:
    yield "model_warmup [\n  {"
    yield '    name: "zeros"'
    yield "    batch_size: 1"
    for tensor in inputs:
        shape = tensor.shape[1:] if batched else tensor.shape
        dims = [size if isinstance(size, int) else WARMUP_SIZE for size in shape] or [1]
        yield (
            f"    inputs {{\n      key: {_quote(tensor.name)}\n      value {{\n"
            f"        data_type: {tensor.triton_type}\n        dims: [ {_join(dims)} ]\n"
            "        zero_data: true\n      }\n    }"
        )
    yield "  }\n]"


def _join(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def _quote(text: str) -> str:
    """A protobuf text-format string literal (C escapes; UTF-8 passes through)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
