"""Which tasks each architecture supports, read from a checkpoint's ``config.json``.

Torch-free: the runtime and the command line read checkpoints through this module too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

from onnx_export.hf._errors import CheckpointError

__all__ = ["TASKS", "SUPPORTED_ARCHITECTURES", "Checkpoint", "read_checkpoint", "resolve_task"]

#: Every task :func:`onnx_export.hf.export_pretrained` knows.
TASKS = (
    "text-generation",
    "text2text-generation",
    "automatic-speech-recognition",
    "feature-extraction",
    "text-classification",
    "image-classification",
)

_ENCODER_TASKS = ("feature-extraction", "text-classification")

#: ``model_type`` (from ``config.json``) -> the tasks it exports to, the default first.
SUPPORTED_ARCHITECTURES: Mapping[str, tuple[str, ...]] = {
    "llama": ("text-generation",),
    "qwen2": ("text-generation",),
    "mistral": ("text-generation",),
    "gemma": ("text-generation",),
    "phi3": ("text-generation",),
    "gpt2": ("text-generation",),
    "t5": ("text2text-generation",),
    "bart": ("text2text-generation",),
    "whisper": ("automatic-speech-recognition",),
    "bert": _ENCODER_TASKS,
    "roberta": _ENCODER_TASKS,
    "xlm-roberta": _ENCODER_TASKS,
    "distilbert": _ENCODER_TASKS,
    "vit": ("image-classification",),
    "convnext": ("image-classification",),
    "swin": ("image-classification",),
}

# The class name's ending in ``architectures`` -> the task it was saved for.
_HEADS = (
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForSequenceClassification", "text-classification"),
    ("ForImageClassification", "image-classification"),
    ("ForSpeechSeq2Seq", "automatic-speech-recognition"),
    ("Model", "feature-extraction"),
)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder's ``config.json``, read.

    Attributes:
        path: The folder.
        config: ``config.json`` as a dict.
        model_type: ``config["model_type"]``.
        architectures: ``config["architectures"]`` (empty when absent).
    """

    path: pathlib.Path
    config: Mapping[str, Any]
    model_type: str
    architectures: tuple[str, ...]


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read ``path/config.json``; ``CheckpointError`` names what is missing or broken."""
    folder = pathlib.Path(path)
    if not folder.is_dir():
        raise CheckpointError(
            f"Checkpoint folder {os.fspath(path)!r} does not exist or is not a folder. Give "
            "the folder `save_pretrained` wrote (config.json and *.safetensors)."
        )
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(
            f"{os.fspath(config_path)!r} is missing: a checkpoint folder needs the "
            "config.json that `save_pretrained` writes beside the weights."
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{os.fspath(config_path)!r} is not readable JSON: {e}.") from e
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str):
        raise CheckpointError(
            f"{os.fspath(config_path)!r} has no 'model_type': it is not a transformers config."
        )
    architectures = tuple(str(a) for a in config.get("architectures") or ())
    return Checkpoint(folder, config, model_type, architectures)


def _task_of_architecture(model_type: str, architectures: tuple[str, ...]) -> str | None:
    tasks = SUPPORTED_ARCHITECTURES[model_type]
    for architecture in architectures:
        if architecture.endswith("ForConditionalGeneration"):
            return tasks[0]
        for ending, task in _HEADS:
            if architecture.endswith(ending) and task in tasks:
                return task
    return None


def resolve_task(model_type: str, architectures: tuple[str, ...], task: str | None) -> str:
    """The task to export: ``task`` checked against the architecture, or inferred from it."""
    supported = SUPPORTED_ARCHITECTURES.get(model_type)
    if supported is None:
        raise CheckpointError(
            f"Architecture {model_type!r} (config.json 'model_type') cannot be exported by "
            f"`onnx_export.hf`; supported: {', '.join(sorted(SUPPORTED_ARCHITECTURES))}. "
            "Export the model yourself with onnx_export.dynamo_export."
        )
    if task is None:
        return _task_of_architecture(model_type, architectures) or supported[0]
    if task not in TASKS:
        raise CheckpointError(f"Unknown task {task!r}; the tasks are: {', '.join(TASKS)}.")
    if task not in supported:
        raise CheckpointError(
            f"Task {task!r} does not fit architecture {model_type!r}, which exports to: "
            f"{', '.join(supported)}. Leave the task out to use {supported[0]!r}."
        )
    return task
