"""``OrtModelForSeq2SeqLM``: T5, BART, Whisper and vision encoder-decoder generation.

numpy + onnxruntime only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._pretrained import ExportedFolder, check_length, read_exported_folder
from onnx_export.hf.runtime._session import StepSession, host_float32
from onnx_export.hf.runtime._tokenizer import TextTokenizer, left_pad
from onnx_export.hf.runtime.generation._generate import (
    Stopping,
    as_ids,
    as_mask,
    decode,
    new_token_budget,
)

__all__ = ["OrtModelForSeq2SeqLM"]

_TASKS = ("text2text-generation", "automatic-speech-recognition", "image-to-text")


class OrtModelForSeq2SeqLM:
    """An encoder-decoder model exported by :func:`onnx_export.hf.export_pretrained`.

    T5 and BART take ``input_ids`` (and ``attention_mask``); Whisper takes
    ``input_features``; a vision encoder-decoder (image-to-text) takes ``pixel_values``.
    The encoder runs once and also returns every decoder layer's
    cross-attention keys and values; the decoder runs once per new token with its
    self-attention cache kept in ONNX Runtime values.

    Attributes:
        folder: The exported folder's manifest and configs.
        encoder: The encoder's session (``encoder_model.onnx``).
        decoder: The decoder's session (``decoder_model.onnx``).

    Example:
        >>> from onnx_export.hf import OrtModelForSeq2SeqLM
        >>> model = OrtModelForSeq2SeqLM.from_pretrained("t5-out")  # doctest: +SKIP
        >>> model.generate([[5, 6, 7, 1]], max_new_tokens=4)  # doctest: +SKIP
        array([[0, 9, 9, 3, 1]])
    """

    def __init__(self, folder: ExportedFolder, encoder: StepSession, decoder: StepSession) -> None:
        self.folder = folder
        self.encoder = encoder
        self.decoder = decoder
        self.speech = "input_features" in encoder.input_names
        self.vision = "pixel_values" in encoder.input_names
        self._tokenizer: TextTokenizer | None = None

    def __repr__(self) -> str:
        config = self.folder.config
        layers = config.get("num_hidden_layers", config.get("num_layers"))
        architecture = ",".join(config.get("architectures") or [str(config.get("model_type"))])
        return (
            f"OrtModelForSeq2SeqLM(folder={os.fspath(self.folder.path)!r}, "
            f"architecture={architecture!r}, layers={layers}, "
            f"providers={self.decoder.session.get_providers()})"
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
    ) -> OrtModelForSeq2SeqLM:
        """Load an exported ``text2text-generation`` or ``automatic-speech-recognition`` folder.

        Args:
            path: The folder :func:`onnx_export.hf.export_pretrained` wrote.
            providers: ``"cpu"``, ``"cuda"`` or onnxruntime provider names; CPU when
                ``None``.
            session_options: An ``onnxruntime.SessionOptions`` (threads, ...).

        Returns:
            The model, ready to :meth:`generate`.

        Raises:
            CheckpointError: The folder lacks its manifest, config or models, or holds
                another task.

        Example:
            >>> from onnx_export.hf import OrtModelForSeq2SeqLM
            >>> OrtModelForSeq2SeqLM.from_pretrained("whisper-out")  # doctest: +SKIP
        """
        folder = read_exported_folder(path, _TASKS)
        encoder = StepSession(folder.path / "encoder_model.onnx", providers, session_options)
        decoder = StepSession(folder.path / "decoder_model.onnx", providers, session_options)
        return cls(folder, encoder, decoder)

    def _encode(
        self, input_ids: Any, attention_mask: Any, input_features: Any, pixel_values: Any = None
    ) -> dict[str, Any]:
        """The decoder's encoder inputs; the batch size under ``"batch"``."""
        if self.vision:
            if pixel_values is None:
                raise GenerationError("This is an image-to-text model: pass pixel_values=...")
            pixels = np.asarray(pixel_values, dtype=self.encoder.input_dtype("pixel_values"))
            if pixels.ndim != 4:
                raise GenerationError(
                    f"pixel_values has shape {pixels.shape}; the encoder takes "
                    "(batch, channels, height, width) images."
                )
            encoded = self.encoder.run({"pixel_values": pixels})
            return {"batch": pixels.shape[0], **self._decoder_feed(encoded)}
        if self.speech:
            if input_features is None:
                raise GenerationError("This is a speech model: pass input_features=...")
            features = np.asarray(input_features, self.encoder.input_dtype("input_features"))
            expected = self.encoder.session.get_inputs()[0].shape
            if features.ndim != 3 or list(features.shape[1:]) != list(expected[1:]):
                raise GenerationError(
                    f"input_features has shape {features.shape}; the encoder takes "
                    f"(batch, {expected[1]}, {expected[2]}) log-mel features."
                )
            encoded = self.encoder.run({"input_features": features})
            return {"batch": features.shape[0], **self._decoder_feed(encoded)}
        if input_ids is None:
            raise GenerationError("This is a text model: pass input_ids (and attention_mask).")
        ids = as_ids(input_ids)
        mask = as_mask(attention_mask, ids)
        limit = self.folder.max_positions("max_position_embeddings")
        check_length("The input length", ids.shape[1], limit, "Shorten the input.")
        encoded = self.encoder.run({"input_ids": ids, "attention_mask": mask})
        encoded["encoder_attention_mask"] = self.decoder.to_device(mask)
        return {"batch": ids.shape[0], **self._decoder_feed(encoded)}

    def _decoder_feed(self, encoded: dict[str, Any]) -> dict[str, Any]:
        """The encoder's outputs the decoder takes, by name, kept on the device.

        ``last_hidden_state`` becomes ``encoder_hidden_states``; the cross-attention keys
        and values (``encoder_key_values.*``) keep their names.
        """
        encoded["encoder_hidden_states"] = encoded.pop("last_hidden_state")
        wanted = set(self.decoder.input_names)
        return {name: value for name, value in encoded.items() if name in wanted}

    def logits(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        *,
        input_features: Any = None,
        pixel_values: Any = None,
        decoder_input_ids: Any,
    ) -> npt.NDArray[np.float32]:
        """The decoder's logits (batch, decoder length, vocab) for ``decoder_input_ids``.

        Example:
            >>> model.logits([[5, 6, 1]], decoder_input_ids=[[0, 7]]).shape  # doctest: +SKIP
            (1, 2, 32128)
        """
        encoded = self._encode(input_ids, attention_mask, input_features, pixel_values)
        start = self._start(decoder_input_ids, int(encoded.pop("batch")))
        feed = {"input_ids": start, **encoded, **self.decoder.empty_past(start.shape[0])}
        return host_float32(self.decoder.run(feed, ["logits"])["logits"])

    def generate(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        *,
        input_features: Any = None,
        pixel_values: Any = None,
        decoder_input_ids: Any = None,
        max_new_tokens: int | None = None,
        max_length: int | None = None,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        seed: int | None = None,
    ) -> npt.NDArray[np.int64]:
        """Encode the inputs once, then decode up to ``max_new_tokens`` tokens.

        Greedy decoding (the default) gives the tokens ``transformers``' ``generate()``
        gives; the decoder starts from the config's ``decoder_start_token_id``.

        Args:
            input_ids: Encoder token ids (batch, length) for T5 and BART. A text (or a
                list of texts) goes to :meth:`generate_text` and the result is text.
            attention_mask: 1 for tokens, 0 for padding; all ones when ``None``.
            input_features: Log-mel features (batch, mel bins, frames) for Whisper.
            pixel_values: Images (batch, channels, height, width) for image-to-text.
            decoder_input_ids: The decoder's first tokens (batch, length), e.g. Whisper's
                language and task tokens; the config's ``decoder_start_token_id`` alone
                when ``None``.
            max_new_tokens: How many tokens to add at most. By default, as transformers:
                ``max_length`` (the prompt included) less the prompt's length, else
                generation_config.json's ``max_new_tokens``, else its ``max_length`` (20).
            max_length: The decoder's length at most, its start included (transformers'
                name); ``max_new_tokens`` wins when both are given.
            do_sample: Sample instead of taking the most likely token.
            temperature: Divides the logits before sampling.
            top_k: Sample among the ``top_k`` most likely tokens.
            top_p: Sample among the most likely tokens whose probabilities reach ``top_p``.
            eos_token_id: Token(s) that end a row; generation_config.json's by default.
            pad_token_id: Written after a row ended; the config's, else the first EOS.
            seed: Seed of the sampling generator (same seed, same tokens).

        Returns:
            int64 array: for T5 and BART (batch, start length + new tokens), the decoder's
            first tokens and the new ones; for Whisper only the new tokens, as
            ``transformers``' Whisper ``generate()`` returns them.

        Raises:
            GenerationError: Missing or misshapen inputs, or more positions than the
                model has.

        Example:
            >>> model.generate(input_features=features, max_new_tokens=3)  # doctest: +SKIP
            array([[50258, 50259, 50359, 50363]])
        """
        if isinstance(input_ids, str) or (
            isinstance(input_ids, list | tuple) and input_ids and isinstance(input_ids[0], str)
        ):  # text in: text out, as OrtModelForCausalLM.generate does
            return self.generate_text(  # type: ignore[return-value]  # text for text
                input_ids,
                max_new_tokens=max_new_tokens,
                max_length=max_length,
                do_sample=do_sample,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed,
            )
        encoded = self._encode(input_ids, attention_mask, input_features, pixel_values)
        batch = int(encoded.pop("batch"))
        start = self._start(decoder_input_ids, batch)
        max_new_tokens = new_token_budget(max_new_tokens, max_length, start.shape[1], self.folder)
        limit = self.folder.max_positions("max_target_positions", "max_position_embeddings")
        length = start.shape[1] + max_new_tokens
        check_length("Decoder start length plus max_new_tokens", length, limit, "Generate less.")
        stopping = Stopping.resolve(
            max_new_tokens,
            self.folder.setting("eos_token_id") if eos_token_id is None else eos_token_id,
            self.folder.setting("pad_token_id") if pad_token_id is None else pad_token_id,
        )
        chooser = self.folder.chooser(
            do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p
        )

        def next_feed(tokens: npt.NDArray[np.int64]) -> dict[str, Any]:
            return {"input_ids": tokens[:, None], **encoded}

        first = {"input_ids": start, **encoded}
        sequences = decode(self.decoder, first, next_feed, start, chooser, stopping, seed)
        return sequences[:, start.shape[1] :] if self.speech else sequences

    @property
    def tokenizer(self) -> TextTokenizer:
        """The folder's tokenizer (``tokenizer.json``), loaded on first use.

        Raises:
            GenerationError: No ``tokenizer.json``, or the ``text`` extra missing.

        Example:
            >>> model.tokenizer.decode([5, 6])  # doctest: +SKIP
            'hello world'
        """
        if self._tokenizer is None:
            self._tokenizer = TextTokenizer.from_folder(self.folder.path)
        return self._tokenizer

    def generate_text(
        self,
        prompt: str | Sequence[str],
        *,
        max_new_tokens: int | None = None,
        skip_special_tokens: bool = True,
        **kwargs: Any,
    ) -> str | list[str]:
        """Text in, text out for T5 and BART: tokenize, :meth:`generate`, decode.

        Args:
            prompt: The encoder's text, or a list of texts (one batch).
            max_new_tokens: How many tokens to add at most. By default, as transformers:
                ``max_length`` (the prompt included) less the prompt's length, else
                generation_config.json's ``max_new_tokens``, else its ``max_length`` (20).
            skip_special_tokens: Leave special tokens (start, EOS, padding) out of the text.
            **kwargs: :meth:`generate`'s other keyword arguments (``do_sample``, ``seed``...).

        Returns:
            The decoder's text for one prompt, a list for a list of texts.

        Raises:
            GenerationError: A speech or image-to-text model (it takes features, not
                text), no ``tokenizer.json``, or what :meth:`generate` raises.

        Example:
            >>> model.generate_text("translate: hello", max_new_tokens=8)  # doctest: +SKIP
            'hallo'
        """
        if self.speech or self.vision:
            takes = "input_features" if self.speech else "pixel_values"
            raise GenerationError(
                f"This model's encoder takes {takes}, not text: call "
                f"generate({takes}=..., max_new_tokens=...)."
            )
        if not isinstance(prompt, str) and not (
            isinstance(prompt, list | tuple) and prompt and all(isinstance(p, str) for p in prompt)
        ):
            raise GenerationError(
                "prompt must be a text or a list of texts for an encoder-decoder (it has no "
                f"chat template), got {type(prompt).__name__}."
            )
        tokenizer = self.tokenizer
        rows, single = tokenizer.encode_prompt(prompt)
        pad = self.folder.setting("pad_token_id")
        ids, mask = left_pad(rows, tokenizer.token_id("pad_token") if pad is None else int(pad))
        sequences = self.generate(ids, mask, max_new_tokens=max_new_tokens, **kwargs)
        texts = [
            tokenizer.decode(row, skip_special_tokens=skip_special_tokens) for row in sequences
        ]
        return texts[0] if single and len(texts) == 1 else texts

    def _start(self, decoder_input_ids: Any, batch: int) -> npt.NDArray[np.int64]:
        if decoder_input_ids is not None:
            start = as_ids(decoder_input_ids, "decoder_input_ids")
            if start.shape[0] != batch:
                raise GenerationError(
                    f"decoder_input_ids has batch {start.shape[0]}, the encoder inputs {batch}."
                )
            return start
        start_id = self.folder.setting("decoder_start_token_id")
        if start_id is None:
            raise GenerationError(
                f"{os.fspath(self.folder.path / 'config.json')!r} has no decoder_start_token_id:"
                " pass decoder_input_ids."
            )
        return np.full((batch, 1), int(start_id), dtype=np.int64)
