"""Which task a checkpoint exports to, read from its ``config.json`` without transformers.

Torch-free and transformers-free: the command line resolves (or refuses) a checkpoint
through this module before anything heavy is imported. The architectures come from
:mod:`onnx_export.hf._architectures`, a table generated from transformers' Auto mappings;
the refusals below are what this exporter knows cannot work, with what to try instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

from onnx_export.hf._architectures import TABLE
from onnx_export.hf._errors import CheckpointError

__all__ = [
    "TASKS",
    "SUPPORTED_ARCHITECTURES",
    "TASK_ALIASES",
    "VLM_FAMILIES",
    "Checkpoint",
    "read_checkpoint",
    "resolve_task",
    "model_class",
    "refusal",
]

#: Every task :func:`onnx_export.hf.export_pretrained` knows, in the order a bare
#: ``model_type`` (no ``architectures``) is matched against them.
TASKS = (
    "text2text-generation",
    "automatic-speech-recognition",
    "image-to-text",
    "zero-shot-image-classification",
    "image-text-to-text",
    "text-generation",
    "feature-extraction",
    "sentence-similarity",
    "fill-mask",
    "text-classification",
    "token-classification",
    "question-answering",
    "multiple-choice",
    "image-classification",
    "semantic-segmentation",
    "object-detection",
    "depth-estimation",
    "audio-classification",
)
"""Every task :func:`onnx_export.hf.export_pretrained` knows (``--task`` takes these names).

Example:
    >>> from onnx_export import hf
    >>> "text-generation" in hf.TASKS
    True
"""

#: Other names users give a task -> the task.
TASK_ALIASES: Mapping[str, str] = {
    "image-segmentation": "semantic-segmentation",
    "sequence-classification": "text-classification",
    "causal-lm": "text-generation",
    "seq2seq-lm": "text2text-generation",
    "masked-lm": "fill-mask",
    "vision2seq-lm": "image-to-text",
    "image-text-to-text-generation": "image-text-to-text",
    "vlm": "image-text-to-text",
    "speech2seq-lm": "automatic-speech-recognition",
}

_BY_TASK: Mapping[str, Mapping[str, str]] = TABLE["tasks"]


# Model types whose cache is not a list of key/value layers (recurrent or convolution
# states): the text-generation graph carries keys and values only.
_RECURRENT = (
    "mamba", "mamba2", "falcon_mamba", "rwkv", "jamba", "zamba", "zamba2", "bamba",
    "falcon_h1", "granitemoehybrid", "lfm2", "lfm2_moe", "qwen3_next", "recurrent_gemma",
    "xlstm", "nemotron_h", "plamo2", "minimax", "mamba3",
)  # fmt: skip
_RECURRENT_WHY = (
    "its cache holds recurrent (state-space / linear-attention) states, not only keys and "
    "values, and the text-generation graph and its generate() runtime carry keys and "
    "values; export the model with onnx_export.dynamo_export(model, input_ids), which "
    "returns the cache's states as outputs and takes them back as inputs (see "
    "docs/deployment.md), or use feature-extraction"
)

# (model_type, task or "*") -> why it cannot work and what to try. Origin: the failures
# measured on transformers' ModelTester configs (issue 21).
_REFUSED: Mapping[tuple[str, str], str] = {
    **{(m, "text-generation"): _RECURRENT_WHY for m in _RECURRENT},
    ("longformer", "*"): "with a dynamic sequence length its sliding-window attention sizes "
    "views from tensor values (`_chunk`), which torch.export cannot capture; use roberta or "
    "bert, or onnx_export.dynamo_export at a static sequence length (its global-attention "
    "branch is exported)",
    ("led", "*"): "with a dynamic sequence length its Longformer attention sizes views from "
    "tensor values, which torch.export cannot capture; use bart, or onnx_export.dynamo_export "
    "at a static sequence length",
    ("encodec", "*"): "its forward branches on a tensor's value, which torch.export cannot capture",
}


#: Vision-language families that ``image-text-to-text`` exports (``hf/export/graphs/_vlm.py``);
#: the other families of transformers' image-text-to-text mapping are refused by name.
VLM_FAMILIES = (
    "llava", "llava_next", "llava_onevision", "gemma3", "idefics3", "smolvlm", "mistral3",
    "qwen2_vl", "qwen2_5_vl",
)  # fmt: skip


def _vlm_refusal(model_type: str) -> str:
    others = [
        t for t in _heads(model_type) if t != "image-text-to-text" and not _refused(model_type, t)
    ]
    hint = f"; other tasks it exports to (--task): {', '.join(others)}" if others else ""
    return (
        f"{model_type} is a vision-language family this exporter does not export for "
        f"image-text-to-text yet (it exports: {', '.join(VLM_FAMILIES)}){hint}"
    )


def _refused(model_type: str, task: str) -> str | None:
    why = _REFUSED.get((model_type, task)) or _REFUSED.get((model_type, "*"))
    if why is None and task == "image-text-to-text" and model_type not in VLM_FAMILIES:
        return _vlm_refusal(model_type)
    return why


def _is_encoder(model_type: str) -> bool:
    """A text encoder (BERT & co.): a masked-LM head, no encoder-decoder head."""
    return (
        model_type in _BY_TASK["fill-mask"] and model_type not in _BY_TASK["text2text-generation"]
    )


def _heads(model_type: str) -> tuple[str, ...]:
    """The tasks transformers has a head (an Auto mapping entry) for ``model_type``."""
    return tuple(t for t in TASKS if model_type in _BY_TASK[t])


#: ``model_type`` -> the tasks it exports to (transformers' Auto mappings, less the pairs
#: refused below), the task a bare ``model_type`` gets first.
SUPPORTED_ARCHITECTURES: Mapping[str, tuple[str, ...]] = {
    model_type: tasks
    for model_type in sorted({m for table in _BY_TASK.values() for m in table})
    if (tasks := tuple(t for t in _heads(model_type) if _refused(model_type, t) is None))
}
"""``model_type`` -> the tasks it exports to, read without importing transformers.

Example:
    >>> from onnx_export import hf
    >>> "text-generation" in hf.SUPPORTED_ARCHITECTURES["qwen3"]
    True
"""


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


def refusal(model_type: str, task: str, config: Mapping[str, Any] | None = None) -> str | None:
    """Why ``model_type`` cannot be exported for ``task`` (``None`` when it can)."""
    why = _refused(model_type, task)
    if why is not None:
        return why
    if (
        task == "text-generation"
        and _is_encoder(model_type)
        and not (config or {}).get("is_decoder")
    ):
        return (
            f"{model_type} is an encoder: its causal-LM head needs is_decoder=true in "
            "config.json; use fill-mask or feature-extraction"
        )
    return None


def model_class(model_type: str, task: str) -> str | None:
    """The transformers class that loads ``model_type`` for ``task`` (``None``: use Auto)."""
    return _BY_TASK.get(task, {}).get(model_type)


# The class name's ending in ``architectures`` -> the task it was saved for, for classes
# the table does not name (heads transformers' Auto mappings leave out).
_HEADS = (
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForMaskedLM", "fill-mask"),
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForMultipleChoice", "multiple-choice"),
    ("ForImageClassification", "image-classification"),
    ("ForSemanticSegmentation", "semantic-segmentation"),
    ("ForObjectDetection", "object-detection"),
    ("ForDepthEstimation", "depth-estimation"),
    ("ForAudioClassification", "audio-classification"),
    ("ForSequenceClassification", "audio-classification"),
    ("ForCTC", "automatic-speech-recognition"),
    ("ForSpeechSeq2Seq", "automatic-speech-recognition"),
    ("ForConditionalGeneration", "text2text-generation"),
    ("Model", "feature-extraction"),
)


def _inferred(model_type: str, architectures: tuple[str, ...]) -> str | None:
    tasks = _heads(model_type)
    for architecture in architectures:
        for task in TASKS:  # the class transformers' mapping names for a task
            if _BY_TASK[task].get(model_type) == architecture:
                return task
        for ending, task in _HEADS:
            if architecture.endswith(ending) and (task in tasks or not tasks):
                return task
    if _is_encoder(model_type):
        return "feature-extraction"  # an encoder: its bare model
    return tasks[0] if tasks else None


def _unknown(model_type: str, task: str | None) -> CheckpointError:
    version = TABLE["transformers_version"]
    return CheckpointError(
        f"Architecture {model_type!r} (config.json 'model_type') is not in transformers "
        f"{version}'s Auto mappings for {task or 'any task'!r} (onnx_export/hf/_architectures.py)"
        f", and config.json's 'architectures' does not name a head this exporter knows. "
        "Pass --task (one of: " + ", ".join(TASKS) + "), or export the model yourself with "
        "onnx_export.dynamo_export."
    )


def resolve_task(
    model_type: str,
    architectures: tuple[str, ...],
    task: str | None,
    config: Mapping[str, Any] | None = None,
) -> str:
    """The task to export: ``task`` checked against the architecture, or inferred from it.

    Refuses, from the config alone, a task that is unknown, one the architecture has no
    transformers head for, and the pairs this exporter knows cannot work (with why).
    """
    if task is not None:
        task = TASK_ALIASES.get(task, task)
        if task not in TASKS:
            raise CheckpointError(f"Unknown task {task!r}; the tasks are: {', '.join(TASKS)}.")
    everything = _REFUSED.get((model_type, "*"))
    if everything is not None:
        raise CheckpointError(f"Architecture {model_type!r} cannot be exported: {everything}.")
    supported = _heads(model_type)
    if task is None:
        task = _inferred(model_type, architectures)
        if task is None:
            raise _unknown(model_type, None)
    elif supported and task not in supported:
        raise CheckpointError(
            f"Task {task!r} does not fit architecture {model_type!r}: transformers has no "
            f"{task} head for it. It exports to: "
            f"{', '.join(SUPPORTED_ARCHITECTURES.get(model_type, supported))}. Leave the task "
            f"out to use {_inferred(model_type, architectures)!r}."
        )
    why = refusal(model_type, task, config)
    if why is not None:
        raise CheckpointError(
            f"Architecture {model_type!r} cannot be exported for {task!r}: {why}."
        )
    return task
