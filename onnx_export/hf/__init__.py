"""Hugging Face ``transformers`` models end to end: export a checkpoint, generate without torch.

:func:`export_pretrained` turns a checkpoint folder (``save_pretrained``'s config and
safetensors) into a folder of ONNX models with its config and tokenizer files.
:class:`OrtModelForCausalLM` and :class:`OrtModelForSeq2SeqLM` generate with that
folder using numpy and onnxruntime only: greedy decoding gives the tokens
``transformers``' ``generate()`` gives.

Usage:
    >>> import tempfile, pathlib, transformers
    >>> from onnx_export import hf
    >>> config = transformers.LlamaConfig(
    ...     vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    ...     eos_token_id=None)
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> transformers.LlamaForCausalLM(config).save_pretrained(folder / "llama")
    >>> _ = hf.export_pretrained(folder / "llama", folder / "onnx")
    >>> model = hf.OrtModelForCausalLM.from_pretrained(folder / "onnx")
    >>> model.generate([[1, 2, 3]], max_new_tokens=4).shape
    (1, 7)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from onnx_export.hf._errors import (
    AdapterError,
    CheckpointError,
    CudaGraphError,
    ExportMismatchError,
    GenerationError,
)
from onnx_export.hf._tasks import SUPPORTED_ARCHITECTURES, TASKS

if TYPE_CHECKING:
    from onnx_export.hf.export._export import ExportedCheckpoint, export_pretrained
    from onnx_export.hf.runtime._pipeline import Pipeline, pipeline
    from onnx_export.hf.runtime._vlm_pipeline import ImageTextToTextPipeline
    from onnx_export.hf.runtime.generation._causal import OrtModelForCausalLM
    from onnx_export.hf.runtime.generation._seq2seq import OrtModelForSeq2SeqLM
    from onnx_export.hf.runtime.generation._vlm import OrtModelForImageTextToText
    from onnx_export.hf.runtime.models._audio import (
        OrtModelForAudioClassification,
        OrtModelForCTC,
    )
    from onnx_export.hf.runtime.models._base import (
        ModelOutput,
        OrtModel,
    )
    from onnx_export.hf.runtime.models._text import (
        OrtModelForFeatureExtraction,
        OrtModelForMaskedLM,
        OrtModelForMultipleChoice,
        OrtModelForQuestionAnswering,
        OrtModelForSentenceSimilarity,
        OrtModelForSequenceClassification,
        OrtModelForTokenClassification,
    )
    from onnx_export.hf.runtime.models._vision import (
        OrtModelForDepthEstimation,
        OrtModelForImageClassification,
        OrtModelForObjectDetection,
        OrtModelForSemanticSegmentation,
        OrtModelForZeroShotImageClassification,
    )

# Export needs torch and transformers, the runtime onnxruntime: both load on first use.
_LAZY = {
    "export_pretrained": "onnx_export.hf.export._export",
    "ExportedCheckpoint": "onnx_export.hf.export._export",
    "OrtModelForCausalLM": "onnx_export.hf.runtime.generation._causal",
    "OrtModelForSeq2SeqLM": "onnx_export.hf.runtime.generation._seq2seq",
    "OrtModelForImageTextToText": "onnx_export.hf.runtime.generation._vlm",
    "pipeline": "onnx_export.hf.runtime._pipeline",
    "Pipeline": "onnx_export.hf.runtime._pipeline",
    "ImageTextToTextPipeline": "onnx_export.hf.runtime._vlm_pipeline",
    "OrtModel": "onnx_export.hf.runtime.models._base",
    "ModelOutput": "onnx_export.hf.runtime.models._base",
    "OrtModelForFeatureExtraction": "onnx_export.hf.runtime.models._text",
    "OrtModelForSentenceSimilarity": "onnx_export.hf.runtime.models._text",
    "OrtModelForMaskedLM": "onnx_export.hf.runtime.models._text",
    "OrtModelForSequenceClassification": "onnx_export.hf.runtime.models._text",
    "OrtModelForTokenClassification": "onnx_export.hf.runtime.models._text",
    "OrtModelForQuestionAnswering": "onnx_export.hf.runtime.models._text",
    "OrtModelForMultipleChoice": "onnx_export.hf.runtime.models._text",
    "OrtModelForImageClassification": "onnx_export.hf.runtime.models._vision",
    "OrtModelForSemanticSegmentation": "onnx_export.hf.runtime.models._vision",
    "OrtModelForObjectDetection": "onnx_export.hf.runtime.models._vision",
    "OrtModelForDepthEstimation": "onnx_export.hf.runtime.models._vision",
    "OrtModelForZeroShotImageClassification": "onnx_export.hf.runtime.models._vision",
    "OrtModelForAudioClassification": "onnx_export.hf.runtime.models._audio",
    "OrtModelForCTC": "onnx_export.hf.runtime.models._audio",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'onnx_export.hf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # Exporting a checkpoint folder (torch and transformers)
    "export_pretrained",
    "ExportedCheckpoint",
    "TASKS",
    "SUPPORTED_ARCHITECTURES",
    # Generating (numpy and onnxruntime only)
    "OrtModelForCausalLM",
    "OrtModelForSeq2SeqLM",
    "OrtModelForImageTextToText",
    # Every other task: inputs and outputs by name (numpy and onnxruntime only)
    "OrtModel",
    "ModelOutput",
    "OrtModelForFeatureExtraction",
    "OrtModelForSentenceSimilarity",
    "OrtModelForMaskedLM",
    "OrtModelForSequenceClassification",
    "OrtModelForTokenClassification",
    "OrtModelForQuestionAnswering",
    "OrtModelForMultipleChoice",
    "OrtModelForImageClassification",
    "OrtModelForSemanticSegmentation",
    "OrtModelForObjectDetection",
    "OrtModelForDepthEstimation",
    "OrtModelForZeroShotImageClassification",
    "OrtModelForAudioClassification",
    "OrtModelForCTC",
    "pipeline",
    "Pipeline",
    "ImageTextToTextPipeline",
    # Errors
    "CheckpointError",
    "AdapterError",
    "CudaGraphError",
    "GenerationError",
    "ExportMismatchError",
]
