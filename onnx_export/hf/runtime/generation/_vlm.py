"""``OrtModelForImageTextToText``: a vision-language model generating, numpy + onnxruntime only.

The folder holds three graphs (``hf/export/graphs/_vlm.py``): the vision encoder
(``pixel_values`` -> ``image_features``), the token embedding (``input_ids`` ->
``inputs_embeds``) and the decoder, which takes ``inputs_embeds``. The prompt's
embeddings get each image's features written over its image tokens, in order (what
transformers' ``masked_scatter`` does); every later step embeds the token just chosen.
The decoding loop is :class:`OrtModelForCausalLM`'s: greedy, sampling, beam search,
streaming and structured output work as they do for text.

Qwen2-VL and Qwen2.5-VL (``hf/export/graphs/_qwen_vl.py``): the vision encoder takes one
image's flat patches and grid at a time (and Qwen2.5-VL's windows), and
the decoder (3, batch, length) M-RoPE position ids: the prompt's from the images' grids
(transformers' ``get_rope_index``), each later step's its last position + 1 on all rows
(``_patched_vision.py``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import CheckpointError, GenerationError
from onnx_export.hf.runtime._anyres import AnyResolution
from onnx_export.hf.runtime._pretrained import ExportedFolder, read_exported_folder
from onnx_export.hf.runtime._session import ONNX_TO_NUMPY, StepSession, host_float32
from onnx_export.hf.runtime.generation._causal import OrtModelForCausalLM, _is_text, _positions
from onnx_export.hf.runtime.generation._patched_vision import Grids, PatchedVision, one_by_one

__all__ = ["OrtModelForImageTextToText", "image_token_id"]

_TASK = "image-text-to-text"
_FILES = ("vision_encoder.onnx", "embed_tokens.onnx", "decoder_model.onnx")


def image_token_id(config: Mapping[str, Any]) -> int:
    """The id of the image placeholder token, as the family's config names it."""
    for name in ("image_token_id", "image_token_index"):
        value = config.get(name)
        if isinstance(value, int):
            return value
    raise CheckpointError(
        "config.json names no image token (image_token_id or image_token_index): it is not "
        "a vision-language model's config."
    )


def _text_view(folder: ExportedFolder) -> ExportedFolder:
    """``folder`` whose config reads the language model's settings (vocab, positions) too."""
    text = folder.config.get("text_config")
    if not isinstance(text, Mapping):
        return folder
    return dataclasses.replace(folder, config={**text, **folder.config})


def _session(path: os.PathLike[str], providers: Sequence[str] | None, options: Any) -> Any:
    import onnxruntime as ort

    from onnx_export.adapters._session_checks import resolve_providers

    if not os.path.isfile(path):
        raise CheckpointError(f"{os.fspath(path)!r} is missing from the exported folder.")
    resolved = resolve_providers(providers, ort.get_available_providers(), ort.get_all_providers())
    return ort.InferenceSession(os.fspath(path), sess_options=options, providers=resolved)


class OrtModelForImageTextToText(OrtModelForCausalLM):
    """A vision-language model (LLaVA & co.) exported for ``image-text-to-text``.

    Runs with numpy and onnxruntime only. :meth:`generate` takes the processor's
    ``input_ids`` (each image token already repeated once per image feature, as
    transformers' processors write them) and ``pixel_values``, and gives the tokens
    transformers' ``generate()`` gives. ``hf.pipeline("image-text-to-text", folder)``
    does the processor's work too (image resizing, the chat template, the image tokens).

    Attributes:
        folder: The exported folder's manifest and configs (the language model's
            settings read through ``text_config``).
        session: The decoder's session (``decoder_model.onnx``).
        vision: The vision encoder's ``onnxruntime.InferenceSession``.
        embedding: The token embedding's ``onnxruntime.InferenceSession``.
        image_token_id: The image placeholder token.

    Example:
        >>> from onnx_export.hf import OrtModelForImageTextToText
        >>> model = OrtModelForImageTextToText.from_pretrained("llava-onnx")  # doctest: +SKIP
        >>> model.generate(ids, pixel_values=pixels, max_new_tokens=5)  # doctest: +SKIP
        array([[ 1, 87, 72,  4,  4, ..., 76, 49, 49,  9, 49]])
    """

    def __init__(
        self, folder: ExportedFolder, session: StepSession, vision: Any, embedding: Any
    ) -> None:
        super().__init__(folder, session)
        self.vision = vision
        self.embedding = embedding
        self.image_token_id = image_token_id(folder.config)
        #: Gemma 3's decoder marks the image tokens (bidirectional attention in the prompt).
        self._typed = "token_type_ids" in session.input_names
        self._pending: list[npt.NDArray[Any]] | None = None
        #: Qwen2-VL: flat patches and grids in, (3, batch, length) position ids (M-RoPE).
        self._patched = None
        if "image_grid_thw" in {i.name for i in vision.get_inputs()}:
            self._patched = PatchedVision(vision, folder.config, self.image_token_id)
        self._grids: Grids | None = None
        #: LLaVA-NeXT: tiles by image size in, packed with the encoder's image_newline.
        self._anyres = AnyResolution.of(vision, folder.config)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
        *,
        upcast: Sequence[str] = (),
        cuda_graph: bool = False,
    ) -> OrtModelForImageTextToText:
        """Load an exported ``image-text-to-text`` folder.

        Args:
            path: The folder :func:`onnx_export.hf.export_pretrained` wrote.
            providers: ``"cpu"``, ``"cuda"`` or onnxruntime provider names; CPU when ``None``.
            session_options: An ``onnxruntime.SessionOptions`` (threads, ...).
            upcast: As :meth:`OrtModelForCausalLM.from_pretrained`'s, for the decoder.
            cuda_graph: Refused: CUDA graphs need the fused decoder (``--target
                onnxruntime``), which this task does not have; kept for the same signature.

        Returns:
            The model, ready to :meth:`generate`.

        Raises:
            CheckpointError: The folder lacks its manifest, config or one of its three
                graphs, or holds another task.
            CudaGraphError: ``cuda_graph=True``.

        Example:
            >>> from onnx_export.hf import OrtModelForImageTextToText
            >>> OrtModelForImageTextToText.from_pretrained("llava-onnx")  # doctest: +SKIP
        """
        folder = _text_view(read_exported_folder(path, (_TASK,)))
        vision, embed, decoder = (folder.path / name for name in _FILES)
        session = StepSession(decoder, providers, session_options, upcast, cuda_graph)
        return cls(
            folder,
            session,
            _session(vision, providers, session_options),
            _session(embed, providers, session_options),
        )

    def __repr__(self) -> str:
        return super().__repr__().replace("OrtModelForCausalLM", type(self).__name__, 1)

    def image_features(
        self, pixel_values: Any, image_grid_thw: Any = None, image_sizes: Any = None
    ) -> list[npt.NDArray[np.float32]]:
        """The projected features of each image: a (tokens, hidden) array per image.

        Args:
            pixel_values: (images, channels, height, width) float32 (or the processor's
                (prompts, images, ...) with all-zero padding images, Idefics3's); for
                Qwen2-VL, all images' flat patches (patches, patch size).
            image_grid_thw: Qwen2-VL's (images, 3) grids, as its processor gives them.
            image_sizes: Mistral 3's (images, 2) heights and widths in the padded
                ``pixel_values``, as its processor gives them: each image is cropped to
                its size and encoded alone. LLaVA-NeXT's: each image's size before
                processing, which fixes its tiles (``pixel_values`` (images, tiles,
                channels, height, width)) and how their features are packed.

        Example:
            >>> [f.shape for f in model.image_features(pixels)]  # doctest: +SKIP
            [(25, 32)]
        """
        if self._patched is not None:
            return self._patched.features(pixel_values, image_grid_thw)
        if image_grid_thw is not None:
            raise GenerationError("image_grid_thw is for Qwen2-VL's folders; drop it.")
        if self._anyres is not None:
            return self._anyres.features(pixel_values, image_sizes)
        pixels = np.asarray(pixel_values, dtype=np.float32)
        if pixels.ndim == 3:
            pixels = pixels[None]
        if pixels.ndim == 5:  # (prompts, images, ...) as Idefics3's processor pads them
            pixels = pixels.reshape(-1, *pixels.shape[2:])
            pixels = pixels[~(pixels == 0).all(axis=(1, 2, 3))]  # padding images are all 0
        if pixels.ndim != 4:
            raise GenerationError(
                "pixel_values must be (images, channels, height, width), got shape "
                f"{pixels.shape}; hf.pipeline('image-text-to-text', folder) makes them from "
                "images."
            )
        meta = self.vision.get_inputs()[0]
        for axis in (1, 2, 3):
            if isinstance(meta.shape[axis], int) and meta.shape[axis] != pixels.shape[axis]:
                raise GenerationError(
                    f"pixel_values has shape {pixels.shape}; the vision encoder takes "
                    f"(images, {', '.join(str(d) for d in meta.shape[1:])}): resize the images "
                    "as the folder's image processor says (hf.pipeline does)."
                )
        dtype = ONNX_TO_NUMPY.get(meta.type, np.float32)  # float16 exports
        if image_sizes is not None or meta.shape[0] == 1:  # Mistral 3: one image a run
            return one_by_one(self.vision, pixels.astype(dtype), image_sizes, self.folder.config)
        (batch,) = self.vision.run(["image_features"], {"pixel_values": pixels.astype(dtype)})
        return [np.asarray(f, dtype=np.float32) for f in batch]

    def embed(self, input_ids: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The language model's embeddings of ``input_ids`` (batch, length, hidden)."""
        (embeds,) = self.embedding.run(["inputs_embeds"], {"input_ids": input_ids})
        return np.asarray(embeds)

    def generate(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        *,
        pixel_values: Any = None,
        image_features: Any = None,
        image_grid_thw: Any = None,
        image_sizes: Any = None,
        max_new_tokens: int | None = None,
        **kwargs: Any,
    ) -> npt.NDArray[np.int64]:
        """Continue each prompt, its image tokens standing for the images' features.

        Args:
            input_ids: (batch, length) token ids, each image token repeated once per
                feature (the processor's output); left-pad prompts of different lengths.
            attention_mask: 1 for tokens, 0 for padding; all ones when ``None``.
            pixel_values: (images, channels, height, width) float32, the images in the
                order their tokens appear (row by row); none for a text-only prompt.
            image_features: Instead of ``pixel_values``: :meth:`image_features`' output.
            image_grid_thw: Qwen2-VL's (images, 3) grids, as its processor gives them
                (with ``pixel_values`` or ``image_features``); they place the image
                tokens' M-RoPE positions.
            image_sizes: Mistral 3's (images, 2) sizes in the padded ``pixel_values``;
                LLaVA-NeXT's sizes of the images before processing.
            max_new_tokens: How many tokens to add at most. By default, as transformers:
                ``max_length`` (the prompt included) less the prompt's length, else
                generation_config.json's ``max_new_tokens``, else its ``max_length`` (20).
            **kwargs: :meth:`OrtModelForCausalLM.generate`'s other arguments
                (``do_sample``, ``num_beams``, ``streamer``, ``json_schema``...), but not
                speculative decoding.

        Returns:
            int64 array (batch * num_return_sequences, length + new tokens).

        Raises:
            GenerationError: The image tokens and the images' features do not match, or
                what :meth:`OrtModelForCausalLM.generate` raises.

        Example:
            >>> model.generate(ids, pixel_values=pixels, max_new_tokens=8)  # doctest: +SKIP
        """
        speculative = ("prompt_lookup_num_tokens", "assistant_model")
        if any(kwargs.get(k) is not None for k in speculative):
            raise GenerationError(
                "Speculative decoding (prompt_lookup_num_tokens, assistant_model) is not "
                "available for image-text-to-text: drop it."
            )
        if pixel_values is not None and image_features is not None:
            raise GenerationError("Pass pixel_values or image_features, not both.")
        if _is_text(input_ids) and (pixel_values is not None or image_features is not None):
            raise GenerationError(
                "Text with images goes through hf.pipeline('image-text-to-text', folder), "
                "which places the image tokens; generate() takes the processor's input_ids."
            )
        if _is_text(input_ids):  # text only: tokenized by the text model's generate_text
            return super().generate(input_ids, max_new_tokens=max_new_tokens, **kwargs)
        features = image_features
        if pixel_values is not None:
            features = self.image_features(pixel_values, image_grid_thw, image_sizes)
        ids = self._ids(input_ids)
        self._pending = self._rows(ids, features)
        self._grids = self._prompt_grids(ids, image_grid_thw)
        try:
            return super().generate(
                input_ids, attention_mask, max_new_tokens=max_new_tokens, **kwargs
            )
        finally:
            self._pending, self._grids = None, None

    def _prompt_grids(self, ids: npt.NDArray[np.int64], grid_thw: Any) -> Grids | None:
        """Qwen2-VL: each prompt's image grids (for its positions); ``None`` otherwise."""
        if self._patched is None:
            if grid_thw is not None:
                raise GenerationError("image_grid_thw is for Qwen2-VL's folders; drop it.")
            return None
        return self._patched.prompt_grids(ids, grid_thw)

    def _rows(self, ids: npt.NDArray[np.int64], features: Any) -> list[npt.NDArray[Any]] | None:
        """Each prompt's image features, in the order of its image tokens."""
        slots = ids == self.image_token_id
        if features is None:
            if slots.any():
                raise GenerationError(
                    f"input_ids holds {int(slots.sum())} image tokens (id "
                    f"{self.image_token_id}) but no pixel_values were given."
                )
            return None
        images = [np.asarray(f, dtype=np.float32) for f in features]
        if any(i.ndim != 2 for i in images):
            raise GenerationError(
                "image_features must be a (tokens, hidden) array per image (image_features()'s "
                f"output), got shapes {[i.shape for i in images]}."
            )
        flat = np.concatenate(images) if images else np.zeros((0, 0), np.float32)
        counts = slots.sum(axis=1)
        if int(counts.sum()) != flat.shape[0]:
            raise GenerationError(
                f"input_ids holds {int(counts.sum())} image tokens (id {self.image_token_id}), "
                f"and the images give {flat.shape[0]} features ({len(images)} images of "
                f"{[i.shape[0] for i in images]}): each image needs as many image tokens in the "
                "prompt (the processor, or hf.pipeline('image-text-to-text', ...), writes them)."
            )
        return np.split(flat, np.cumsum(counts)[:-1])

    def _merged(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """The prompt's embeddings with the pending image features over the image tokens.

        ``ids`` may repeat each prompt (``num_return_sequences``, beams: copies side by
        side); each copy gets its prompt's features.
        """
        embeds = self.embed(ids)
        rows = self._pending
        if rows is None:
            return embeds
        copies = ids.shape[0] // len(rows)
        slots = ids == self.image_token_id
        for i in range(ids.shape[0]):
            embeds[i, slots[i]] = rows[i // copies].astype(embeds.dtype)
        return embeds

    def _prompt_feed(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
    ) -> dict[str, Any]:
        feed: dict[str, Any] = {"inputs_embeds": self._merged(ids), "attention_mask": mask}
        if self._patched is not None:
            feed["position_ids"] = self._patched.positions(ids, mask, self._grids)
        elif self._uses_positions:
            feed["position_ids"] = _positions(mask)
        if self._typed:
            feed["token_type_ids"] = (ids == self.image_token_id).astype(np.int64)
        return feed

    def _feeds(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
    ) -> tuple[dict[str, Any], Any]:
        """The prompt's feed (images merged) and each next step's (the new token embedded)."""
        first = self._prompt_feed(ids, mask)
        mrope = self._patched is not None
        last = first["position_ids"][..., -1:] if mrope else _positions(mask)[:, -1:]
        state = {"mask": mask, "positions": last}

        def next_feed(tokens: npt.NDArray[np.int64]) -> dict[str, Any]:
            state["mask"] = np.concatenate(
                [state["mask"], np.ones((ids.shape[0], 1), np.int64)], axis=1
            )
            state["positions"] = state["positions"] + 1
            feed: dict[str, Any] = {
                "inputs_embeds": self.embed(tokens[:, None]),
                "attention_mask": state["mask"],
            }
            if self._uses_positions:
                feed["position_ids"] = state["positions"]
            if self._typed:  # the new token is text
                feed["token_type_ids"] = np.zeros_like(state["mask"])
            return feed

        return first, next_feed

    def logits(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        *,
        pixel_values: Any = None,
        image_grid_thw: Any = None,
        image_sizes: Any = None,
    ) -> npt.NDArray[np.float32]:
        """The logits of a prompt (batch, length, vocab), with an empty cache."""
        from onnx_export.hf.runtime.generation._generate import as_mask

        ids = self._ids(input_ids)
        features = None
        if pixel_values is not None:
            features = self.image_features(pixel_values, image_grid_thw, image_sizes)
        self._pending = self._rows(ids, features)
        self._grids = self._prompt_grids(ids, image_grid_thw)
        try:
            feed = self._prompt_feed(ids, as_mask(attention_mask, ids))
        finally:
            self._pending, self._grids = None, None
        results = self.session.run({**feed, **self.session.empty_past(ids.shape[0])}, ["logits"])
        return host_float32(results["logits"])

    def batcher(self) -> Any:
        """Not available: continuous batching feeds token ids, this decoder embeddings."""
        raise GenerationError("batcher() is not available for image-text-to-text models.")

    def live(self, input_ids: Any = None) -> Any:
        """Not available: a live sequence feeds token ids, this decoder embeddings."""
        raise GenerationError("live() is not available for image-text-to-text models.")
