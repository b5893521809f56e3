"""Runtime classes of the text encoder tasks.

numpy and onnxruntime only; see :class:`onnx_export.hf.OrtModel`.
"""

from __future__ import annotations

from onnx_export.hf.runtime.models._base import OrtModel

__all__ = [
    "OrtModelForFeatureExtraction",
    "OrtModelForSentenceSimilarity",
    "OrtModelForMaskedLM",
    "OrtModelForSequenceClassification",
    "OrtModelForTokenClassification",
    "OrtModelForQuestionAnswering",
    "OrtModelForMultipleChoice",
]


class OrtModelForFeatureExtraction(OrtModel):
    """A bare encoder exported for ``feature-extraction``: its hidden states.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them), or
    ``pixel_values`` / ``input_values`` for vision and audio encoders; returns
    ``last_hidden_state``.

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForFeatureExtraction.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[5, 6, 7]])  # doctest: +SKIP
        >>> out.last_hidden_state.shape  # doctest: +SKIP
    """

    tasks = ("feature-extraction",)


class OrtModelForSentenceSimilarity(OrtModel):
    """A text encoder exported for ``sentence-similarity``: one embedding a sentence.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them);
    returns ``token_embeddings`` and ``sentence_embedding`` (the mean of the token embeddings
    the mask keeps).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForSentenceSimilarity.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[5, 6, 7]])  # doctest: +SKIP
        >>> out.sentence_embedding.shape  # doctest: +SKIP
    """

    tasks = ("sentence-similarity",)


class OrtModelForMaskedLM(OrtModel):
    """A masked language model exported for ``fill-mask``.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them);
    returns ``logits`` (batch, sequence, vocab).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForMaskedLM.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[5, 4, 7]])  # doctest: +SKIP
        >>> out.logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("fill-mask",)


class OrtModelForSequenceClassification(OrtModel):
    """A text classifier exported for ``text-classification``.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them);
    returns ``logits`` (batch, labels).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForSequenceClassification.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[5, 6, 7]])  # doctest: +SKIP
        >>> out.logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("text-classification",)


class OrtModelForTokenClassification(OrtModel):
    """A token classifier (NER, POS) exported for ``token-classification``.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them);
    returns ``logits`` (batch, sequence, labels).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForTokenClassification.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[5, 6, 7]])  # doctest: +SKIP
        >>> out.logits.shape  # doctest: +SKIP
    """

    tasks = ("token-classification",)


class OrtModelForQuestionAnswering(OrtModel):
    """An extractive question-answering model exported for ``question-answering``.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them);
    returns ``start_logits`` and ``end_logits`` (batch, sequence).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForQuestionAnswering.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[5, 6, 7]])  # doctest: +SKIP
        >>> out.start_logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("question-answering",)


class OrtModelForMultipleChoice(OrtModel):
    """A multiple-choice model exported for ``multiple-choice``.

    Takes ``input_ids``, ``attention_mask`` (and ``token_type_ids``) of shape (batch, choices,
    sequence); returns ``logits`` (batch, choices).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForMultipleChoice.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=[[[5, 6], [5, 7]]])  # doctest: +SKIP
        >>> out.logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("multiple-choice",)
