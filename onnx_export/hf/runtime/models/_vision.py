"""Runtime classes of the image tasks.

numpy and onnxruntime only; see :class:`onnx_export.hf.OrtModel`.
"""

from __future__ import annotations

from onnx_export.hf.runtime.models._base import OrtModel

__all__ = [
    "OrtModelForImageClassification",
    "OrtModelForSemanticSegmentation",
    "OrtModelForObjectDetection",
    "OrtModelForDepthEstimation",
    "OrtModelForZeroShotImageClassification",
]


class OrtModelForImageClassification(OrtModel):
    """An image classifier exported for ``image-classification``.

    Takes ``pixel_values`` (batch, channels, height, width), float32; returns ``logits`` (batch,
    labels).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForImageClassification.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(pixel_values=images)  # doctest: +SKIP
        >>> out.logits.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("image-classification",)


class OrtModelForSemanticSegmentation(OrtModel):
    """A semantic segmentation model exported for ``semantic-segmentation``.

    Takes ``pixel_values`` (batch, channels, height, width), float32; returns ``logits`` (batch,
    labels, height', width').

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForSemanticSegmentation.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(pixel_values=images).logits.argmax(1)  # doctest: +SKIP
        >>> out.shape  # doctest: +SKIP
    """

    tasks = ("semantic-segmentation",)


class OrtModelForObjectDetection(OrtModel):
    """An object detector (DETR-style) exported for ``object-detection``.

    Takes ``pixel_values`` (batch, channels, height, width), float32; returns ``logits`` (batch,
    queries, labels + 1) and ``pred_boxes`` (batch, queries, 4: centre x, centre y, width,
    height, relative).

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForObjectDetection.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(pixel_values=images)  # doctest: +SKIP
        >>> out.pred_boxes.shape  # doctest: +SKIP
    """

    tasks = ("object-detection",)


class OrtModelForDepthEstimation(OrtModel):
    """A monocular depth model exported for ``depth-estimation``.

    Takes ``pixel_values`` (batch, channels, height, width), float32; returns
    ``predicted_depth`` (batch, height', width').

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForDepthEstimation.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(pixel_values=images)  # doctest: +SKIP
        >>> out.predicted_depth.shape  # doctest: +SKIP
    """

    tasks = ("depth-estimation",)


class OrtModelForZeroShotImageClassification(OrtModel):
    """A CLIP/SigLIP-style two-tower model exported for ``zero-shot-image-classification``.

    Takes ``input_ids`` and ``attention_mask`` of the candidate labels' texts, and
    ``pixel_values`` of the images; returns ``logits_per_image`` (images, texts),
    ``logits_per_text``, ``text_embeds`` and ``image_embeds``.

    Example:
        >>> from onnx_export import hf
        >>> m = hf.OrtModelForZeroShotImageClassification.from_pretrained("out")  # doctest: +SKIP
        >>> out = m(input_ids=label_ids, pixel_values=images)  # doctest: +SKIP
        >>> out.logits_per_image.argmax(-1)  # doctest: +SKIP
    """

    tasks = ("zero-shot-image-classification",)
