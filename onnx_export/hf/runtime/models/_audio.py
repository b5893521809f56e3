"""Runtime classes of the audio tasks (classification, CTC recognition).

numpy and onnxruntime only; see :class:`onnx_export.hf.OrtModel`.
"""

from __future__ import annotations

from onnx_export.hf.runtime.models._base import OrtModel

__all__ = ["OrtModelForAudioClassification", "OrtModelForCTC"]


class OrtModelForAudioClassification(OrtModel):
    """An audio classifier exported for ``audio-classification``.

    Takes ``input_values`` (batch, samples) raw waveforms (or ``input_features`` for models that
    take log-mel features); returns ``logits`` (batch, labels).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForAudioClassification.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_values=waves)  # doctest: +SKIP
        >>> out.logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("audio-classification",)


class OrtModelForCTC(OrtModel):
    """A CTC speech recognizer (Wav2Vec2, HuBERT, WavLM, ...) exported for speech recognition.

    Takes ``input_values`` (batch, samples) raw waveforms; returns ``logits`` (batch, frames,
    vocab); greedy CTC decoding is ``logits.argmax(-1)`` with repeats and the blank (pad) token
    removed.

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForCTC.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_values=waves)  # doctest: +SKIP
        >>> out.logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("automatic-speech-recognition",)
