"""``OrtModelForCausalLM``: generation with an exported decoder, numpy + onnxruntime only."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._generate import Stopping, as_ids, as_mask, check_max_new_tokens, decode
from onnx_export.hf._pretrained import ExportedFolder, check_length, read_exported_folder
from onnx_export.hf._session import StepSession

__all__ = ["OrtModelForCausalLM"]

_POSITION_LIMITS = ("max_position_embeddings", "n_positions", "n_ctx")


def _positions(mask: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Position ids as transformers computes them: padding counts no position."""
    positions = np.cumsum(mask, axis=-1) - 1
    return np.where(mask == 0, 0, positions).astype(np.int64)


class OrtModelForCausalLM:
    """A decoder-only language model exported by :func:`onnx_export.hf.export_pretrained`.

    Runs with numpy and onnxruntime only (torch and transformers are not imported). The
    key/value cache stays in ONNX Runtime values between steps.

    Attributes:
        folder: The exported folder's manifest and configs.
        session: The decoder's session (``model.onnx``).

    Example:
        >>> from onnx_export.hf import OrtModelForCausalLM
        >>> model = OrtModelForCausalLM.from_pretrained("out")  # doctest: +SKIP
        >>> model.generate([[1, 2, 3]], max_new_tokens=5)  # doctest: +SKIP
        array([[1, 2, 3, 7, 7, 9, 4, 1]])
    """

    def __init__(self, folder: ExportedFolder, session: StepSession) -> None:
        self.folder = folder
        self.session = session
        self._uses_positions = "position_ids" in session.input_names

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
    ) -> OrtModelForCausalLM:
        """Load an exported ``text-generation`` folder.

        Args:
            path: The folder :func:`onnx_export.hf.export_pretrained` wrote.
            providers: ``"cpu"``, ``"cuda"`` or onnxruntime provider names; CPU when
                ``None``.
            session_options: An ``onnxruntime.SessionOptions`` (threads, ...).

        Returns:
            The model, ready to :meth:`generate`.

        Raises:
            CheckpointError: The folder lacks its manifest, config or model, or holds
                another task.

        Example:
            >>> from onnx_export.hf import OrtModelForCausalLM
            >>> OrtModelForCausalLM.from_pretrained("out", ["cpu"])  # doctest: +SKIP
        """
        folder = read_exported_folder(path, ("text-generation",))
        session = StepSession(folder.path / "model.onnx", providers, session_options)
        return cls(folder, session)

    def _prompt_feed(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
    ) -> dict[str, Any]:
        feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if self._uses_positions:
            feed["position_ids"] = _positions(mask)
        return feed

    def logits(self, input_ids: Any, attention_mask: Any = None) -> npt.NDArray[np.float32]:
        """The logits of a prompt (batch, length, vocab), with an empty cache.

        Example:
            >>> model.logits([[1, 2, 3]]).shape  # doctest: +SKIP
            (1, 3, 32000)
        """
        ids = as_ids(input_ids)
        feed = {**self._prompt_feed(ids, as_mask(attention_mask, ids))}
        results = self.session.run({**feed, **self.session.empty_past(ids.shape[0])}, ["logits"])
        return np.asarray(results["logits"].numpy())

    def generate(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        *,
        max_new_tokens: int,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        seed: int | None = None,
    ) -> npt.NDArray[np.int64]:
        """Continue each prompt by up to ``max_new_tokens`` tokens.

        Greedy decoding (the default) gives the tokens ``transformers``' ``generate()``
        gives; left-padded batches are handled as it handles them (positions from the
        attention mask).

        Args:
            input_ids: Prompts, (batch, length) integers; left-pad prompts of different
                lengths and mark the padding with 0 in ``attention_mask``.
            attention_mask: 1 for tokens, 0 for padding; all ones when ``None``.
            max_new_tokens: How many tokens to add at most.
            do_sample: Sample instead of taking the most likely token.
            temperature: Divides the logits before sampling.
            top_k: Sample among the ``top_k`` most likely tokens.
            top_p: Sample among the most likely tokens whose probabilities reach ``top_p``.
            eos_token_id: Token(s) that end a row; generation_config.json's by default.
            pad_token_id: Written after a row ended; the config's, else the first EOS.
            seed: Seed of the sampling generator (same seed, same tokens).

        Returns:
            int64 array (batch, length + new tokens): the prompts and their continuations.

        Raises:
            GenerationError: Bad shapes or arguments, or a prompt (plus new tokens)
                longer than the model's maximum positions.

        Example:
            >>> model.generate([[1, 2, 3]], max_new_tokens=2).shape  # doctest: +SKIP
            (1, 5)
        """
        max_new_tokens = check_max_new_tokens(max_new_tokens)
        ids = as_ids(input_ids)
        mask = as_mask(attention_mask, ids)
        limit = self.folder.max_positions(*_POSITION_LIMITS)
        check_length("The prompt length", ids.shape[1], limit, "Shorten the prompt.")
        check_length(
            "The prompt length plus max_new_tokens",
            ids.shape[1] + max_new_tokens,
            limit,
            "Lower max_new_tokens or shorten the prompt.",
        )
        stopping = Stopping.resolve(
            max_new_tokens,
            self.folder.setting("eos_token_id") if eos_token_id is None else eos_token_id,
            self.folder.setting("pad_token_id") if pad_token_id is None else pad_token_id,
        )
        chooser = self.folder.chooser(
            do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p
        )
        state = {"mask": mask, "positions": _positions(mask)[:, -1:]}

        def next_feed(tokens: npt.NDArray[np.int64]) -> dict[str, Any]:
            state["mask"] = np.concatenate(
                [state["mask"], np.ones((ids.shape[0], 1), np.int64)], axis=1
            )
            state["positions"] = state["positions"] + 1
            feed: dict[str, Any] = {"input_ids": tokens[:, None], "attention_mask": state["mask"]}
            if self._uses_positions:
                feed["position_ids"] = state["positions"]
            return feed

        first = self._prompt_feed(ids, mask)
        return decode(self.session, first, next_feed, ids, chooser, stopping, seed)
