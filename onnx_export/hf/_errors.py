"""Errors of the Hugging Face support: a bad checkpoint folder, a bad generation request."""

from __future__ import annotations

from onnx_export.errors import ExportInputError, OnnxExportError

__all__ = [
    "CheckpointError",
    "AdapterError",
    "CudaGraphError",
    "GenerationError",
    "ExportMismatchError",
]


class CheckpointError(ExportInputError):
    """A checkpoint folder (or an exported folder) that cannot be used as asked.

    Raised for a folder without ``config.json``, an architecture this exporter does not
    know, or a task that does not fit the architecture; the message names the file or
    the value, and what to do.

    Example:
        >>> from onnx_export.hf import CheckpointError
        >>> issubclass(CheckpointError, ValueError) or issubclass(CheckpointError, RuntimeError)
        True
    """


class AdapterError(CheckpointError):
    """A PEFT adapter folder that the exported model cannot take, or a LoRA request it lacks.

    Raised when an adapter is not LoRA (IA3, prompt tuning, ...), uses a LoRA variant that
    is more than a low-rank update ``B @ A`` (DoRA, trained biases, ``modules_to_save``),
    targets modules the model was not exported with, or has shapes that do not fit them;
    and when a model exported without LoRA inputs is given an adapter. The message names
    the file, the module or the setting, and what to do.

    Example:
        >>> from onnx_export.hf import AdapterError, CheckpointError
        >>> issubclass(AdapterError, CheckpointError)
        True
    """


class GenerationError(ValueError):
    """A generation request that the exported model cannot serve.

    Raised for a prompt longer than the model's maximum positions, inputs whose shapes
    disagree, or arguments out of range; the message names the value.

    Example:
        >>> from onnx_export.hf import GenerationError
        >>> str(GenerationError("max_new_tokens must be at least 1, got 0."))
        'max_new_tokens must be at least 1, got 0.'
    """


class CudaGraphError(GenerationError):
    """``cuda_graph=True`` asked of a session that cannot record CUDA graphs.

    Raised by ``OrtModelForCausalLM.from_pretrained(..., cuda_graph=True)`` when the
    session does not run on ONNX Runtime's CUDA provider, or when the folder's decoder has
    no fixed-size cache (export it with ``--target onnxruntime``).

    Example:
        >>> from onnx_export.hf import CudaGraphError, GenerationError
        >>> issubclass(CudaGraphError, GenerationError)
        True
    """


class ExportMismatchError(OnnxExportError):
    """An exported graph whose outputs differ from eager transformers on the example inputs.

    :func:`onnx_export.hf.export_pretrained` runs each graph in ONNX Runtime against the
    eager model before it writes the folder; the message names each output that differs.

    Example:
        >>> from onnx_export.hf import ExportMismatchError
        >>> from onnx_export.errors import OnnxExportError
        >>> issubclass(ExportMismatchError, OnnxExportError)
        True
    """
