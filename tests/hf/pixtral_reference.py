"""Mistral 3's processor, written here from transformers' documented steps (the reference).

transformers' ``PixtralProcessor`` needs torchvision, which this environment cannot have
(FACTS.md), so the tests build the processor's output themselves, as its code describes
it: the images through transformers' ``PixtralImageProcessorPil`` (which needs no
torchvision) with the processor's patch size times its ``spatial_merge_size`` (what
``PixtralProcessor._process_images`` passes), padded to the batch's largest with their
``image_sizes``; each ``[IMG]`` placeholder replaced by one row of ``[IMG]`` per merged
patch row, each row ended by ``[IMG_BREAK]`` and the last by ``[IMG_END]``
(``PixtralProcessor.replace_image_token``); then the tokenizer. ``save_pretrained``
writes what a Mistral 3 checkpoint holds: ``preprocessor_config.json``, a
``processor_config.json`` with the processor's settings, the tokenizer and the template.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import transformers as tf

TOKENS = {
    "image_token": "[IMG]",
    "image_break_token": "[IMG_BREAK]",
    "image_end_token": "[IMG_END]",
}


class _MergedPatch:
    """The image processor as the processor calls it: patches of patch * merge pixels."""

    def __init__(self, images: Any, side: int) -> None:
        self.images = images
        self.side = side

    def __call__(self, images: Any, **kwargs: Any) -> Any:
        return self.images(images, patch_size={"height": self.side, "width": self.side}, **kwargs)


class PixtralReference:
    """``PixtralProcessor``'s output for images and prompts, without torchvision."""

    def __init__(
        self, images: Any, tokenizer: Any, patch_size: int, merge: int, chat_template: str
    ) -> None:
        self.images = images
        self.tokenizer = tokenizer
        self.patch_size, self.merge = patch_size, merge
        self.chat_template = chat_template
        self.image_processor = _MergedPatch(images, patch_size * merge)

    def apply_chat_template(self, messages: Any, add_generation_prompt: bool = False) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages,
                chat_template=self.chat_template,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
            )
        )

    def _image_text(self, height: int, width: int) -> str:
        side = self.patch_size * self.merge
        row = TOKENS["image_token"] * (width // side)
        rows = [row + TOKENS["image_break_token"]] * (height // side)
        rows[-1] = row + TOKENS["image_end_token"]
        return "".join(rows)

    def __call__(self, images: Any, text: list[str], **kwargs: Any) -> Any:
        flat = [i for group in images for i in (group if isinstance(group, list) else [group])]
        pixels = self.image_processor(flat, return_tensors="pt")
        sizes = iter(pixels["image_sizes"].tolist())
        expanded = []
        for prompt in text:
            pieces = prompt.split(TOKENS["image_token"])
            expanded.append(
                pieces[0] + "".join(self._image_text(*next(sizes)) + p for p in pieces[1:])
            )
        encoded = self.tokenizer(expanded, **kwargs)
        return tf.BatchFeature({**encoded, **pixels})

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return str(self.tokenizer.decode(ids, **kwargs))

    def save_pretrained(self, folder: pathlib.Path) -> None:
        self.tokenizer.save_pretrained(folder)
        self.images.save_pretrained(folder)
        (folder / "chat_template.jinja").write_text(self.chat_template)
        settings = {
            "processor_class": "PixtralProcessor",
            "patch_size": self.patch_size,
            "spatial_merge_size": self.merge,
            **TOKENS,
        }
        (folder / "processor_config.json").write_text(json.dumps(settings, indent=2))
