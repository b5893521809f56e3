"""``pipeline(task, folder)``: raw texts, images or waveforms in, answers out, without torch.

Texts are tokenized with the folder's ``tokenizer.json`` (the ``tokenizers`` library);
images are numpy arrays (height, width, channels) already at the model's size, rescaled
and normalized as ``preprocessor_config.json`` says; waveforms are 1-D float arrays.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_export.hf._errors import CheckpointError
from onnx_export.hf.runtime.models._audio import OrtModelForAudioClassification, OrtModelForCTC
from onnx_export.hf.runtime.models._base import OrtModel
from onnx_export.hf.runtime.models._text import (
    OrtModelForFeatureExtraction,
    OrtModelForSentenceSimilarity,
    OrtModelForSequenceClassification,
    OrtModelForTokenClassification,
)
from onnx_export.hf.runtime.models._vision import OrtModelForImageClassification

if TYPE_CHECKING:
    from onnx_export.hf.runtime._vlm_pipeline import ImageTextToTextPipeline

__all__ = ["Pipeline", "pipeline"]

_CLASSES: dict[str, type[OrtModel]] = {
    "text-classification": OrtModelForSequenceClassification,
    "token-classification": OrtModelForTokenClassification,
    "feature-extraction": OrtModelForFeatureExtraction,
    "sentence-similarity": OrtModelForSentenceSimilarity,
    "image-classification": OrtModelForImageClassification,
    "audio-classification": OrtModelForAudioClassification,
    "automatic-speech-recognition": OrtModelForCTC,
}


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(-1, keepdims=True))


def _label(config: Any, index: int) -> str:
    labels = config.get("id2label") or {}
    return str(labels.get(str(index), labels.get(index, f"LABEL_{index}")))


def _json(path: pathlib.Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else {}


class Pipeline:
    """A task's model with its pre- and post-processing; call it with raw inputs.

    Attributes:
        task: The task.
        model: The :class:`OrtModel` it runs.

    Example:
        >>> from onnx_export import hf
        >>> classify = hf.pipeline("text-classification", "bert-onnx")  # doctest: +SKIP
        >>> classify(["a fine day"])  # doctest: +SKIP
        [{'label': 'POSITIVE', 'score': 0.98}]
    """

    def __init__(self, task: str, model: OrtModel, tokenizer: Any = None) -> None:
        self.task = task
        self.model = model
        self.tokenizer = tokenizer
        self.preprocessor = _json(model.folder.path / "preprocessor_config.json")

    def __repr__(self) -> str:
        return f"Pipeline({self.task!r}, {self.model!r})"

    def _encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        if self.tokenizer is None:
            raise CheckpointError(
                f"{os.fspath(self.model.folder.path)!r} has no tokenizer.json: texts cannot "
                "be tokenized; call the model with input_ids instead."
            )
        self.tokenizer.enable_padding(pad_id=int(self.model.config.get("pad_token_id") or 0))
        encodings = self.tokenizer.encode_batch(list(texts))
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }

    def _pixels(self, images: Sequence[np.ndarray]) -> np.ndarray:
        batch = np.stack([np.asarray(i, dtype=np.float32) for i in images])
        if self.preprocessor.get("do_rescale", True):
            batch *= np.float32(self.preprocessor.get("rescale_factor", 1 / 255))
        if self.preprocessor.get("do_normalize", False):
            batch -= np.asarray(self.preprocessor["image_mean"], np.float32)
            batch /= np.asarray(self.preprocessor["image_std"], np.float32)
        return np.ascontiguousarray(batch.transpose(0, 3, 1, 2))

    def _waves(self, waves: Sequence[np.ndarray]) -> np.ndarray:
        batch = np.stack([np.asarray(w, dtype=np.float32) for w in waves])
        if self.preprocessor.get("do_normalize", False):
            mean, std = batch.mean(-1, keepdims=True), batch.std(-1, keepdims=True)
            batch = (batch - mean) / np.sqrt(std**2 + 1e-7)
        return batch

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        """Run the task on a batch of texts, images or waveforms (one answer each)."""
        config = self.model.config
        if self.task in ("image-classification", "audio-classification"):
            name = "pixel_values" if self.task == "image-classification" else "input_values"
            values = self._pixels(inputs) if name == "pixel_values" else self._waves(inputs)
            return self._classes(self.model(**{name: values}).logits, config)
        if self.task == "automatic-speech-recognition":
            return self._ctc(self.model(input_values=self._waves(inputs)).logits, config)
        encoded = self._encode(inputs)
        out = self.model(**encoded)
        if self.task == "text-classification":
            return self._classes(out.logits, config)
        if self.task == "token-classification":
            best = out.logits.argmax(-1)
            return [
                [_label(config, int(best[row, i])) for i in np.flatnonzero(mask)]
                for row, mask in enumerate(encoded["attention_mask"])
            ]
        if self.task == "sentence-similarity":
            return list(out.sentence_embedding)
        return list(out.last_hidden_state)

    @staticmethod
    def _classes(logits: np.ndarray, config: Any) -> list[Any]:
        scores = _softmax(logits)
        return [
            {"label": _label(config, int(row.argmax())), "score": float(row.max())}
            for row in scores
        ]

    def _ctc(self, logits: np.ndarray, config: Any) -> list[Any]:
        blank = int(config.get("pad_token_id") or 0)
        texts: list[Any] = []
        for row in logits.argmax(-1):
            kept = [int(t) for i, t in enumerate(row) if t != blank and (i == 0 or t != row[i - 1])]
            if self.tokenizer is None:
                texts.append(kept)
            else:
                tokens = [self.tokenizer.id_to_token(t) or "" for t in kept]
                texts.append("".join(tokens).replace("|", " ").strip())
        return texts


def pipeline(
    task: str, folder: str | os.PathLike[str], providers: Sequence[str] | None = None
) -> Pipeline | ImageTextToTextPipeline:
    """A callable that runs ``task`` on raw inputs with an exported folder, without torch.

    Args:
        task: ``text-classification``, ``token-classification``, ``feature-extraction``,
            ``sentence-similarity`` (texts; needs the ``tokenizers`` library and the
            folder's ``tokenizer.json``), ``image-classification`` (numpy images, height x
            width x channels, at the model's size), ``audio-classification`` or
            ``automatic-speech-recognition`` (CTC; 1-D waveforms at the model's rate),
            ``image-text-to-text`` (a vision-language model: images and a prompt in, text
            out; see :class:`ImageTextToTextPipeline`).
        folder: The folder :func:`onnx_export.hf.export_pretrained` wrote for ``task``.
        providers: ``"cpu"``, ``"cuda"`` or onnxruntime provider names.

    Returns:
        The pipeline: classification returns ``[{"label": ..., "score": ...}]``, token
        classification a label per token, embeddings one array per input, CTC the text.

    Raises:
        CheckpointError: A task without a pipeline, or a folder of another task.

    Example:
        >>> from onnx_export import hf
        >>> embed = hf.pipeline("sentence-similarity", "minilm-onnx")  # doctest: +SKIP
        >>> embed(["a cat", "a dog"])[0].shape  # doctest: +SKIP
        (384,)
    """
    if task == "image-text-to-text":
        from onnx_export.hf.runtime._vlm_pipeline import ImageTextToTextPipeline

        return ImageTextToTextPipeline.from_folder(folder, providers)
    cls = _CLASSES.get(task)
    if cls is None:
        raise CheckpointError(
            f"pipeline() runs {', '.join([*_CLASSES, 'image-text-to-text'])}; for {task!r} "
            "call its OrtModelFor... class with the model's inputs."
        )
    model = cls.from_pretrained(folder, providers)
    tokenizer = None
    path = pathlib.Path(folder) / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(os.fspath(path))
    return Pipeline(task, model, tokenizer)
