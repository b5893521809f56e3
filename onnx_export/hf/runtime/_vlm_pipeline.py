"""``pipeline("image-text-to-text", folder)``: images and a prompt in, text out, without torch.

What transformers' processor and ``generate`` do, with the folder's files: the images go
through the image processor's settings (``_image_processor.py``), a chat prompt through
the chat template (which writes the image placeholder), each placeholder becomes the
image's tokens (one per feature the vision encoder gives), and
:class:`OrtModelForImageTextToText` generates.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._image_processor import ImageProcessor
from onnx_export.hf.runtime._tokenizer import TextTokenizer
from onnx_export.hf.runtime.generation._vlm import OrtModelForImageTextToText

__all__ = ["ImageTextToTextPipeline"]


def _processor_config(folder: pathlib.Path) -> dict[str, Any]:
    path = folder / "processor_config.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _repeat(token: str, count: int, texts: Mapping[str, Any]) -> str:
    """LLaVA & co.: the placeholder repeated once per image feature."""
    return token * count


def _gemma3(token: str, count: int, texts: Mapping[str, Any]) -> str:
    """Gemma 3: the soft image tokens between the begin- and end-of-image tokens."""
    soft, end = texts.get("image_token"), texts.get("eoi_token")
    if not isinstance(soft, str) or not isinstance(end, str):
        raise GenerationError(
            "tokenizer_config.json names no image_token and eoi_token (Gemma 3's image "
            "tokens): export a checkpoint saved with its processor."
        )
    return f"\n\n{token}{soft * count}{end}\n\n"


def _idefics3(token: str, count: int, texts: Mapping[str, Any]) -> str:
    """Idefics3 (one view of the image): the image tokens between its image markers."""
    return f"<fake_token_around_image><global-img>{token * count}<fake_token_around_image>"


def _pixtral(token: str, count: int, texts: Mapping[str, Any]) -> str:
    """Mistral 3: a row of image tokens per merged patch row, ended by a break token.

    The last row ends with the end-of-image token; ``texts["image_shape"]`` is the
    image's (height, width) in pixels.
    """
    height, width = (int(v) for v in texts["image_shape"])
    side = round(math.sqrt(height * width / count))  # the processor's patch * merge
    rows, columns = height // side, width // side
    breaks = str(texts.get("image_break_token") or "[IMG_BREAK]")
    end = str(texts.get("image_end_token") or "[IMG_END]")
    row: str = token * columns
    return (row + breaks) * (rows - 1) + row + end


#: model_type -> (the tokenizer config's name of the placeholder a prompt writes, or
#: ``None`` for the image token itself; the text that stands for one image of ``count``
#: features, as the family's processor writes it).
_LAYOUTS: dict[str, tuple[str | None, Any]] = {
    "llava": (None, _repeat),
    "llava_next": (None, _repeat),  # as many as the packed features (any resolution)
    "llava_onevision": (None, _repeat),
    "gemma3": ("boi_token", _gemma3),
    "idefics3": (None, _idefics3),
    "smolvlm": (None, _idefics3),  # one view of an image: as Idefics3
    "mistral3": (None, _pixtral),
}


class ImageTextToTextPipeline:
    """A vision-language model with its processor: images and a prompt in, text out.

    Attributes:
        task: ``"image-text-to-text"``.
        model: The :class:`OrtModelForImageTextToText` it runs.
        tokenizer: The folder's tokenizer and chat template.
        image_processor: The folder's image processor settings, applied with Pillow.
        image_token: The placeholder's text (``"<image>"`` for LLaVA).
        model_type: The folder's ``config.json`` ``model_type``.

    Example:
        >>> from onnx_export import hf
        >>> describe = hf.pipeline("image-text-to-text", "llava-onnx")  # doctest: +SKIP
        >>> describe(image, "What is in the picture?", max_new_tokens=20)  # doctest: +SKIP
        'A cat on a sofa.'
    """

    task = "image-text-to-text"

    def __init__(
        self,
        model: OrtModelForImageTextToText,
        tokenizer: TextTokenizer,
        image_processor: ImageProcessor,
        processor: Mapping[str, Any],
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.processor = dict(processor)
        model_type = self.model_type = str(model.folder.config.get("model_type"))
        placeholder, self._expand = _LAYOUTS.get(model_type, (None, _repeat))
        token = tokenizer.config.get(placeholder) if placeholder else None
        token = token or processor.get("image_token") or tokenizer.config.get("image_token")
        if not isinstance(token, str) and model_type in ("idefics3", "smolvlm"):
            token = "<image>"  # Idefics3's processor names it in code
        if not isinstance(token, str):
            token = tokenizer.tokenizer.id_to_token(model.image_token_id)
        if not isinstance(token, str):
            raise GenerationError(
                f"The tokenizer has no token for the image id {model.image_token_id}."
            )
        self.image_token = token

    @classmethod
    def from_folder(
        cls, folder: str | os.PathLike[str], providers: Sequence[str] | None = None
    ) -> ImageTextToTextPipeline:
        """Load the model, tokenizer and image processor an exported folder holds."""
        model = OrtModelForImageTextToText.from_pretrained(folder, providers)
        path = pathlib.Path(folder)
        return cls(
            model,
            TextTokenizer.from_folder(path),
            ImageProcessor.from_folder(path),
            _processor_config(path),
        )

    def __repr__(self) -> str:
        return f"Pipeline({self.task!r}, {self.model!r})"

    def _text(self, prompt: Any, images: int) -> tuple[str, bool]:
        """The prompt's text with one placeholder per image; whether to add special tokens."""
        if isinstance(prompt, str) and self.image_token in prompt:
            return prompt, True
        if isinstance(prompt, str):
            if self.tokenizer.chat_template is None:
                raise GenerationError(
                    f"The prompt has no {self.image_token!r} for its {images} image(s), and "
                    f"the folder has no chat template to place them: write one "
                    f"{self.image_token!r} per image where the image goes."
                )
            content = [
                *({"type": "image"} for _ in range(images)),
                {"type": "text", "text": prompt},
            ]
            prompt = [{"role": "user", "content": content}]
        if isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) for m in prompt):
            return self.tokenizer.render_chat(list(prompt)), False
        raise GenerationError(
            "prompt must be a text or chat messages ([{'role': 'user', 'content': [{'type': "
            f"'image'}}, {{'type': 'text', 'text': '...'}}]}}]), got {type(prompt).__name__}."
        )

    def __call__(
        self,
        images: Any,
        prompt: str | Sequence[Mapping[str, Any]],
        *,
        max_new_tokens: int = 32,
        skip_special_tokens: bool = True,
        **kwargs: Any,
    ) -> str:
        """Describe, answer or continue: the generated text for ``images`` and ``prompt``.

        Args:
            images: A PIL image or an (height, width, channels) uint8 array, or a list of
                them in the order the prompt places them.
            prompt: A text (with one image placeholder per image, or without: then the
                chat template places the images before it), or chat messages whose
                content lists ``{"type": "image"}`` entries.
            max_new_tokens: How many tokens to add at most.
            skip_special_tokens: Leave special tokens out of the text.
            **kwargs: :meth:`OrtModelForImageTextToText.generate`'s other arguments.

        Returns:
            The new text.

        Raises:
            GenerationError: The prompt's placeholders do not match the images, or what
                generation raises.
        """
        batch = list(images) if isinstance(images, (list, tuple)) else [images]
        text, special = self._text(prompt, len(batch))
        ids, features, grids = self._inputs(batch, text, special)
        sequences = self.model.generate(
            [ids], image_features=features, max_new_tokens=max_new_tokens, **grids, **kwargs
        )
        return self.tokenizer.decode(
            sequences[0][len(ids) :], skip_special_tokens=skip_special_tokens
        )

    def _inputs(
        self, batch: list[Any], text: str, special: bool
    ) -> tuple[list[int], list[Any], dict[str, Any]]:
        """The prompt's ids, the images' features, ``generate``'s other image arguments.

        Each placeholder is expanded to the image's tokens; the arguments are Qwen2-VL's
        grids. The OpenAI server calls this too.
        """
        placed = text.count(self.image_token)
        if placed != len(batch):
            raise GenerationError(
                f"The prompt places {placed} image(s) ({self.image_token!r}) for "
                f"{len(batch)} image(s) given: one placeholder per image."
            )
        grids: dict[str, Any] = {}
        shapes: list[Any] = [None] * len(batch)
        if self.image_processor.patched:  # Qwen2-VL: flat patches and their grids
            pixels, grid_thw = self.image_processor.patches(batch)
            grids["image_grid_thw"] = grid_thw
            features = self.model.image_features(pixels, grid_thw)
        elif self.image_processor.is_tiled:  # LLaVA-NeXT: tiles by size, packed features
            several = len(batch) > 1 and self.model_type == "llava_onevision"  # not tiled
            tiles, sizes = self.image_processor.tiled(batch, whole=several)
            features = self.model.image_features(tiles, image_sizes=sizes)
        elif self.model.vision.get_inputs()[0].shape[0] == 1:  # Mistral 3: sizes of their own
            arrays = self.image_processor.one_by_one(batch)
            shapes = [a.shape[2:] for a in arrays]
            features = [self.model.image_features(a)[0] for a in arrays]
        else:
            features = self.model.image_features(self.image_processor(batch))
        pieces = text.split(self.image_token)
        expanded = pieces[0]
        for piece, feature, shape in zip(pieces[1:], features, shapes, strict=True):
            texts = {**self.tokenizer.config, **self.processor, "image_shape": shape}
            expanded += self._expand(self.image_token, feature.shape[0], texts) + piece
        (ids,) = self.tokenizer.encode([expanded], add_special_tokens=special)
        return list(ids), list(features), grids
