"""``OrtModelForCausalLM``: generation with an exported decoder, numpy + onnxruntime only."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError
from onnx_export.hf.runtime._pretrained import ExportedFolder, check_length, read_exported_folder
from onnx_export.hf.runtime._session import DecodeSession, StepSession, host_float32
from onnx_export.hf.runtime._tokenizer import TextTokenizer, left_pad
from onnx_export.hf.runtime.generation._adapters import AdapterSet, pop_adapter
from onnx_export.hf.runtime.generation._batching import ContinuousBatcher
from onnx_export.hf.runtime.generation._beam import BeamSettings, beam_search
from onnx_export.hf.runtime.generation._generate import (
    NextFeed,
    StopCheck,
    Stopping,
    Streamer,
    as_ids,
    as_mask,
    as_rng,
    check_vocab,
    decode,
    decode_steps,
    new_token_budget,
)
from onnx_export.hf.runtime.generation._live import LiveSequence
from onnx_export.hf.runtime.generation._logits import TokenChooser
from onnx_export.hf.runtime.generation._settings import (
    GenerationSettings,
    make_chooser,
    resolve_settings,
)
from onnx_export.hf.runtime.generation._shared_cache import SharedCache
from onnx_export.hf.runtime.generation._speculative import (
    LOGITS_TO_KEEP,
    ChunkRunner,
    Drafter,
    DraftLength,
    DraftSource,
    PromptLookup,
    keeps_logits,
    make_drafter,
    speculative_decode,
)
from onnx_export.hf.runtime.generation._static_cache import StaticCaches
from onnx_export.hf.runtime.generation._structured import (
    GrammarMasks,
    GrammarTokenizer,
    OutputConstraint,
    constrain,
)
from onnx_export.hf.runtime.models._base import ModelOutput

__all__ = ["OrtModelForCausalLM"]

_POSITION_LIMITS = ("max_position_embeddings", "n_positions", "n_ctx")
#: ``num_logits_to_keep`` at a prompt step: its vocabulary head runs on the last position.
_LAST_ONLY = np.array([1], np.int64)


def _positions(mask: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Position ids as transformers computes them: padding counts no position."""
    positions = np.cumsum(mask, axis=-1) - 1
    return np.where(mask == 0, 0, positions).astype(np.int64)


def _right_aligned(
    ids: npt.NDArray[np.int64],
    mask: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64] | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """A prompt's rows with their tokens first (GQA's convention), the padding after them.

    The tokens keep their order and positions; the mask then counts each row's tokens.
    The decoding steps after it need nothing else: each row's new token goes after its
    own count, and a mask grown by ones still counts right.
    """
    order = np.argsort(mask == 0, axis=1, kind="stable")  # tokens first
    real = np.arange(mask.shape[1])[None, :] < (mask != 0).sum(axis=1, keepdims=True)
    aligned = np.where(real, np.take_along_axis(ids, order, axis=1), 0)
    moved = (
        None
        if positions is None
        else np.where(real, np.take_along_axis(positions, order, axis=1), 0)
    )
    return aligned.astype(np.int64), real.astype(np.int64), moved


class OrtModelForCausalLM:
    """A decoder-only language model exported by :func:`onnx_export.hf.export_pretrained`.

    Runs with numpy and onnxruntime only (torch and transformers are not imported). The
    key/value cache stays in ONNX Runtime values between steps.

    Attributes:
        folder: The exported folder's manifest and configs.
        session: The decoder's session (``model.onnx``), feeding the active LoRA adapter
            when the folder was exported with ``lora=`` (:meth:`set_adapter`).
        active_adapter: The name of the LoRA adapter calls use by default; ``None`` for
            the base model.

    Example:
        >>> from onnx_export.hf import OrtModelForCausalLM
        >>> model = OrtModelForCausalLM.from_pretrained("out")  # doctest: +SKIP
        >>> model.generate([[1, 2, 3]], max_new_tokens=5)  # doctest: +SKIP
        array([[1, 2, 3, 7, 7, 9, 4, 1]])
    """

    def __init__(self, folder: ExportedFolder, session: StepSession) -> None:
        self.folder = folder
        self._base_session = session
        self._adapters = AdapterSet(session)
        self.session = self._adapters.session(session, None)
        self.active_adapter: str | None = None
        self._uses_positions = "position_ids" in session.input_names
        self._tokenizer: TextTokenizer | None = None
        self._grammars: dict[tuple[int, ...], GrammarTokenizer] = {}
        self._static: StaticCaches | None = None  # cuda_graph=True's buffers, by shape

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        providers: Sequence[str] | None = None,
        session_options: Any = None,
        *,
        upcast: Sequence[str] = (),
        cuda_graph: bool = False,
    ) -> OrtModelForCausalLM:
        """Load an exported ``text-generation`` folder.

        Args:
            path: The folder :func:`onnx_export.hf.export_pretrained` wrote.
            providers: ``"cpu"``, ``"cuda"`` or onnxruntime provider names; CPU when
                ``None``.
            session_options: An ``onnxruntime.SessionOptions`` (threads, ...).
            upcast: ``["bfloat16"]`` (or ``["float16"]``) computes a half-precision folder
                in float32 where ONNX Runtime lacks the kernels (bfloat16 on the CPU); the
                cache and the logits keep the folder's dtype. Needs the ``onnx`` package.
            cuda_graph: Record greedy and sampled decode steps once as a CUDA graph and
                replay them (ONNX Runtime's ``enable_cuda_graph``; every step's inputs and
                outputs at fixed addresses). Needs ``providers=["cuda"]`` and a folder
                exported with ``--target onnxruntime``. See docs/gpu.md.

        Returns:
            The model, ready to :meth:`generate`.

        Raises:
            CheckpointError: The folder lacks its manifest, config or model, or holds
                another task.
            MissingKernelError: ONNX Runtime has no kernel for the folder's dtype on these
                providers (bfloat16 on the CPU: pass ``upcast=["bfloat16"]``).
            CudaGraphError: ``cuda_graph=True`` without the CUDA provider, or with a
                decoder whose cache is not one fixed buffer.

        Example:
            >>> from onnx_export.hf import OrtModelForCausalLM
            >>> OrtModelForCausalLM.from_pretrained("out", ["cpu"])  # doctest: +SKIP
        """
        folder = read_exported_folder(path, ("text-generation",))
        model = folder.path / "model.onnx"
        session = StepSession(model, providers, session_options, upcast, cuda_graph)
        return cls(folder, session)

    def __repr__(self) -> str:
        config = self.folder.config
        layers = config.get("num_hidden_layers", config.get("n_layer"))
        architecture = ",".join(config.get("architectures") or [str(config.get("model_type"))])
        return (
            f"OrtModelForCausalLM(folder={os.fspath(self.folder.path)!r}, "
            f"architecture={architecture!r}, layers={layers}, "
            f"providers={self.session.session.get_providers()})"
        )

    def load_adapter(self, path: str | os.PathLike[str], name: str | None = None) -> str:
        """Load a PEFT LoRA adapter folder, to use by name; the graph is not exported again.

        The folder needs the model exported with ``export_pretrained(..., lora=...)``
        naming the adapter's modules. Its factors are read once (no torch: numpy reads the
        safetensors file), the scaling folded in, and kept on the session's device; using
        it costs only the low-rank products of each step.

        Args:
            path: The folder PEFT's ``save_pretrained`` wrote (``adapter_config.json``,
                ``adapter_model.safetensors``).
            name: The adapter's name; the folder's name by default. Loading a name again
                replaces that adapter.

        Returns:
            The name, for :meth:`set_adapter` and ``generate(..., adapter=name)``.

        Raises:
            AdapterError: Not a LoRA adapter (IA3, prompt tuning), a variant beyond
                ``B @ A`` (DoRA, trained biases, ``modules_to_save``), modules the export
                did not make targets, factors for other sizes (another base model), or a
                model exported without LoRA inputs.

        Example:
            >>> model.load_adapter("adapters/french", name="fr")  # doctest: +SKIP
            'fr'
            >>> model.generate([[1, 2, 3]], max_new_tokens=4, adapter="fr")  # doctest: +SKIP
            array([[1, 2, 3, 41, 9, 9, 17]])
        """
        chosen = os.path.basename(os.path.normpath(os.fspath(path))) if name is None else name
        self._adapters.load(path, chosen)
        if chosen == self.active_adapter:  # replaced: the active one is the new one
            self.set_adapter(chosen)
        return chosen

    def set_adapter(self, name: str | None) -> None:
        """Make adapter ``name`` (or ``None``: the base model) the default of every call.

        :meth:`generate`, :meth:`stream`, :meth:`logits`, and the :meth:`batcher` and
        :meth:`live` sequences made after this call use it; ``generate(..., adapter=...)``
        picks another for one call.

        Raises:
            AdapterError: No adapter of that name is loaded.

        Example:
            >>> model.set_adapter("fr")  # doctest: +SKIP
            >>> model.set_adapter(None)  # doctest: +SKIP
        """
        self.session = self._adapters.session(self._base_session, name)
        self.active_adapter = name

    def unload_adapter(self, name: str) -> None:
        """Forget adapter ``name`` (the base model becomes the default if it was active).

        Example:
            >>> model.unload_adapter("fr")  # doctest: +SKIP
        """
        self._adapters.unload(name)
        if name == self.active_adapter:
            self.set_adapter(None)

    @property
    def adapters(self) -> tuple[str, ...]:
        """The names of the LoRA adapters loaded, in load order.

        Example:
            >>> model.adapters  # doctest: +SKIP
            ('fr', 'de')
        """
        return self._adapters.names

    def _session_for(self, settings: dict[str, Any]) -> StepSession:
        """The session for one call: its ``adapter`` (taken out of ``settings``) or the active."""
        given, name = pop_adapter(settings)
        return self._adapters.session(self._base_session, name) if given else self.session

    def _ids(self, input_ids: Any) -> npt.NDArray[np.int64]:
        ids = as_ids(input_ids)
        check_vocab(ids, self.folder.config.get("vocab_size"))
        return ids

    def _prompt_feed(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
    ) -> dict[str, Any]:
        positions = _positions(mask) if self._uses_positions else None
        if self.session.pads_right and not mask.all():  # GQA's rows: tokens first
            ids, mask, positions = _right_aligned(ids, mask, positions)
        feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if positions is not None:
            feed["position_ids"] = positions
        return feed

    def logits(self, input_ids: Any, attention_mask: Any = None) -> npt.NDArray[np.float32]:
        """The logits of a prompt (batch, length, vocab), with an empty cache.

        Example:
            >>> model.logits([[1, 2, 3]]).shape  # doctest: +SKIP
            (1, 3, 32000)
        """
        ids = self._ids(input_ids)
        feed = {**self._prompt_feed(ids, as_mask(attention_mask, ids))}
        results = self.session.run({**feed, **self.session.empty_past(ids.shape[0])}, ["logits"])
        return host_float32(results["logits"])

    def __call__(self, input_ids: Any, attention_mask: Any = None) -> ModelOutput:
        """Run a prompt as transformers' ``model(input_ids)`` does: its ``logits``.

        ``model(ids).logits`` is :meth:`logits` (batch, length, vocab), with an empty cache;
        use :meth:`generate` to continue the prompt.

        Example:
            >>> model([[1, 2, 3]]).logits.shape  # doctest: +SKIP
            (1, 3, 32000)
        """
        return ModelOutput({"logits": self.logits(input_ids, attention_mask)})

    def generate(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        *,
        max_new_tokens: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        seed: int | np.random.Generator | None = None,
        streamer: Streamer | None = None,
        json_schema: Mapping[str, Any] | str | None = None,
        regex: str | None = None,
        grammar: str | None = None,
        prompt_lookup_num_tokens: int | None = None,
        max_matching_ngram_size: int = 2,
        assistant_model: OrtModelForCausalLM | None = None,
        num_assistant_tokens: int = 5,
        **settings: Any,
    ) -> npt.NDArray[np.int64]:
        """Continue each prompt by up to ``max_new_tokens`` tokens, as transformers would.

        Greedy decoding, beam search and every processor below give the tokens
        ``transformers``' ``generate()`` gives, left-padded batches included (positions
        come from the attention mask). A setting left ``None`` is taken from the folder's
        ``generation_config.json``, else from transformers' defaults.

        Args:
            input_ids: Prompts, (batch, length) integers; left-pad prompts of different
                lengths and mark the padding with 0 in ``attention_mask``. A text (or a
                list of texts, or chat messages) goes to :meth:`generate_text` and the
                result is text.
            attention_mask: 1 for tokens, 0 for padding; all ones when ``None``.
            max_new_tokens: How many tokens to add at most. By default, as transformers:
                ``max_length`` (the prompt included) less the prompt's length, else
                generation_config.json's ``max_new_tokens``, else its ``max_length`` (20).
            eos_token_id: Token(s) that end a row; generation_config.json's by default.
            pad_token_id: Written after a row ended; the config's, else the first EOS.
            seed: Seed of the sampling generator, or a ``numpy.random.Generator``.
            streamer: Called with each step's new tokens, (batch,) int64, as they come
                (not with beam search, whose beams change until the end).
            json_schema: The output must be a JSON document valid under this schema (a
                dict or its JSON text); compact JSON, each row ends when it is complete.
                Needs the folder's ``tokenizer.json`` and the ``structured`` extra
                (llguidance); not with beam search.
            regex: The output must match this regular expression (as ``json_schema``).
            grammar: The output must match this grammar, in Lark syntax (llguidance's).
            prompt_lookup_num_tokens: Speculative decoding: draft up to this many tokens
                from the n-grams of the sequence itself, verified in one model step (greedy,
                one prompt; the same tokens as without it). A step verifies as many of
                them as pay off, from the measured cost of a step of that many tokens and
                the share of drafts kept so far (``DraftLength`` in ``_speculative.py``).
            max_matching_ngram_size: The longest n-gram prompt lookup matches.
            assistant_model: Speculative decoding with drafts from this smaller exported
                model (same vocabulary), verified in one model step each.
            num_assistant_tokens: The assistant's first draft length (then adapted).
            **settings: transformers' names: ``do_sample``, ``temperature``, ``top_k``,
                ``top_p``, ``num_beams``, ``num_return_sequences``, ``length_penalty``,
                ``early_stopping``, ``repetition_penalty``, ``no_repeat_ngram_size``,
                ``min_new_tokens``, ``min_length``, ``bad_words_ids``, ``stop_strings``;
                and ``adapter``: for this call only, the LoRA adapter of that name
                (:meth:`load_adapter`), or ``None`` for the base model (by default the
                :attr:`active_adapter`).

        Returns:
            int64 array (batch * num_return_sequences, length + new tokens): the prompts
            and their continuations (beam search: each prompt's best first).

        Raises:
            GenerationError: Bad shapes, ids or arguments, or a prompt (plus new tokens)
                longer than the model's maximum positions.

        Example:
            >>> model.generate([[1, 2, 3]], max_new_tokens=2).shape  # doctest: +SKIP
            (1, 5)
            >>> model.generate([[1, 2, 3]], max_new_tokens=2, num_beams=3)  # doctest: +SKIP
            array([[1, 2, 3, 9, 4]])
        """
        extra: dict[str, Any] = {
            "json_schema": json_schema,
            "regex": regex,
            "grammar": grammar,
            "prompt_lookup_num_tokens": prompt_lookup_num_tokens,
            "max_matching_ngram_size": max_matching_ngram_size,
            "assistant_model": assistant_model,
            "num_assistant_tokens": num_assistant_tokens,
        }
        if _is_text(input_ids):
            return self.generate_text(  # type: ignore[return-value]  # adapter is in settings
                input_ids,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos_token_id,
                pad_token_id=pad_token_id,
                seed=seed,
                streamer=streamer,
                **extra,
                **settings,
            )
        session = self._session_for(settings)
        plan = self._plan(
            input_ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id, settings
        )
        plan, masks = self._constrained(
            plan, OutputConstraint.from_arguments(json_schema, regex, grammar)
        )
        drafter = self._drafter(
            session,
            plan,
            prompt_lookup_num_tokens,
            max_matching_ngram_size,
            assistant_model,
            num_assistant_tokens,
        )
        rng = as_rng(seed)
        if drafter is not None:
            capacity = plan.ids.shape[1] + plan.stopping.max_new_tokens
            chunks = ChunkRunner(session, uses_positions=self._uses_positions, capacity=capacity)
            # prompt lookup's drafts cost nothing to make: verify as many as pay off
            schedule = DraftLength() if isinstance(drafter, PromptLookup) else None
            sequences, _ = speculative_decode(
                chunks,
                drafter,
                plan.ids,
                plan.chooser,
                plan.stopping,
                streamer=streamer,
                schedule=schedule,
            )
            return _complete(sequences, masks, plan)
        if plan.settings.num_beams > 1:
            if streamer is not None:
                raise GenerationError(
                    "streamer works with greedy or sampled decoding, not with num_beams > 1 "
                    "(beams change until the end): drop one of them."
                )
            beams = BeamSettings(
                num_beams=plan.settings.num_beams,
                length_penalty=plan.settings.length_penalty,
                early_stopping=plan.settings.early_stopping,
                num_return_sequences=plan.settings.num_return_sequences,
                do_sample=plan.settings.do_sample,
            )
            first, next_feed = self._feeds(plan.ids, plan.mask)
            return beam_search(
                session,
                first,
                next_feed,
                plan.ids,
                plan.chooser,
                plan.stopping,
                beams,
                rng,
                plan.padding,
            )
        runner, first, next_feed = self._decoder(plan, session)
        sequences = decode(
            runner,
            first,
            next_feed,
            plan.ids,
            plan.chooser,
            plan.stopping,
            rng,
            padding=plan.padding,
            streamer=streamer,
        )
        return _complete(sequences, masks, plan)

    def _constrained(
        self, plan: _Plan, constraint: OutputConstraint | None
    ) -> tuple[_Plan, GrammarMasks | None]:
        """``plan`` with its tokens masked by ``constraint`` (``_structured.py``)."""
        if constraint is None:
            return plan, None
        if plan.settings.num_beams > 1:
            raise GenerationError(
                f"{constraint.kind}= works with greedy or sampled decoding, not with "
                "num_beams > 1: drop one of them."
            )
        eos = plan.stopping.eos_token_id
        if not eos:
            found = self.tokenizer.token_id("eos_token")
            eos = () if found is None else (found,)
        if eos not in self._grammars:
            vocab = int(
                self.folder.config.get("vocab_size") or self.tokenizer.tokenizer.get_vocab_size()
            )
            self._grammars[eos] = GrammarTokenizer(self.folder.path / "tokenizer.json", vocab, eos)
        masks = self._grammars[eos].masks(constraint, plan.ids.shape[0])
        chooser, stopping = constrain(plan.chooser, plan.stopping, masks)
        return dataclasses.replace(plan, chooser=chooser, stopping=stopping), masks

    def _drafter(
        self,
        session: StepSession,
        plan: _Plan,
        lookup: int | None,
        ngram: int,
        assistant: OrtModelForCausalLM | None,
        assistant_tokens: int,
    ) -> Drafter | None:
        """What drafts tokens for speculative decoding (``_speculative.py``), if asked."""
        if assistant is not None and not isinstance(assistant, OrtModelForCausalLM):
            raise GenerationError(
                "assistant_model must be an OrtModelForCausalLM (a smaller exported model), "
                f"got {type(assistant).__name__}."
            )
        return make_drafter(
            session,
            plan.ids.shape[0],
            plan.mask,
            plan.chooser,
            beams=plan.settings.num_beams,
            lookup=lookup,
            ngram=ngram,
            assistant=None
            if assistant is None
            else DraftSource(
                assistant.session,
                assistant._uses_positions,
                (self.folder.config.get("vocab_size"), assistant.folder.config.get("vocab_size")),
            ),
            assistant_tokens=assistant_tokens,
        )

    def stream(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        *,
        max_new_tokens: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        seed: int | np.random.Generator | None = None,
        **settings: Any,
    ) -> Iterator[npt.NDArray[np.int64]]:
        """:meth:`generate`'s new tokens, one step at a time: (batch,) int64 each.

        Greedy or sampled decoding (not beam search); the same settings as :meth:`generate`,
        ``json_schema``, ``regex``, ``grammar`` and ``adapter`` included (not speculative
        decoding).

        Example:
            >>> for tokens in model.stream([[1, 2, 3]], max_new_tokens=3):  # doctest: +SKIP
            ...     print(tokens)
            [7]
            [7]
            [9]
        """
        constraint = OutputConstraint.from_arguments(
            settings.pop("json_schema", None),
            settings.pop("regex", None),
            settings.pop("grammar", None),
        )
        session = self._session_for(settings)
        plan = self._plan(
            input_ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id, settings
        )
        if plan.settings.num_beams > 1:
            raise GenerationError("stream() does greedy or sampled decoding: drop num_beams.")
        plan, masks = self._constrained(plan, constraint)
        runner, first, next_feed = self._decoder(plan, session)
        steps = decode_steps(
            runner,
            first,
            next_feed,
            plan.ids,
            plan.chooser,
            plan.stopping,
            as_rng(seed),
            plan.padding,
        )
        for sequences in steps:
            yield sequences[:, -1].copy()
        if masks is not None:
            masks.check_complete(plan.stopping.max_new_tokens)

    def _plan(
        self,
        input_ids: Any,
        attention_mask: Any,
        max_new_tokens: int | None,
        eos_token_id: Any,
        pad_token_id: int | None,
        given: dict[str, Any],
    ) -> _Plan:
        ids = self._ids(input_ids)
        max_length = given.pop("max_length", None)
        max_new_tokens = new_token_budget(max_new_tokens, max_length, ids.shape[1], self.folder)
        mask = as_mask(attention_mask, ids)
        limit = self.folder.max_positions(*_POSITION_LIMITS)
        check_length("The prompt length", ids.shape[1], limit, "Shorten the prompt.")
        check_length(
            "The prompt length plus max_new_tokens",
            ids.shape[1] + max_new_tokens,
            limit,
            "Lower max_new_tokens or shorten the prompt.",
        )
        settings = resolve_settings(self.folder.generation, **given)
        stopping = Stopping.resolve(
            max_new_tokens,
            self.folder.setting("eos_token_id") if eos_token_id is None else eos_token_id,
            self.folder.setting("pad_token_id") if pad_token_id is None else pad_token_id,
            self._stop_check(settings),
        )
        expand = settings.expand
        ids, mask = np.repeat(ids, expand, axis=0), np.repeat(mask, expand, axis=0)
        padding = (mask != 0).argmax(axis=1).astype(np.int64) if (mask == 0).any() else None
        chooser = make_chooser(self.folder.chooser, settings, stopping.eos_token_id, ids.shape[1])
        return _Plan(ids, mask, settings, stopping, chooser, padding)

    def _decoder(
        self, plan: _Plan, session: StepSession
    ) -> tuple[DecodeSession, dict[str, Any], NextFeed]:
        """What runs a greedy or sampled decoding's steps: a shared cache when it can.

        A fused decoder (``session.shares_buffer``) gets one preallocated cache for the
        prompt plus ``max_new_tokens``, updated in place, and a next-step feed that writes
        into its bound inputs; other graphs (and beam search, which reorders the cache's
        rows) run on the session with per-step presents. Returns the step runner, the
        prompt's feed and the next-step feed.
        """
        first, next_feed = self._feeds(plan.ids, plan.mask)
        if not (session.shares_buffer or session.cuda_graph):
            if keeps_logits(session):  # the prompt's last position only (rows padded left)
                first[LOGITS_TO_KEEP] = _LAST_ONLY
            return session, first, next_feed
        capacity = plan.ids.shape[1] + plan.stopping.max_new_tokens
        moves = self._uses_positions and "position_ids" not in session.unread_inputs
        positions = _positions(plan.mask)[:, -1:] if moves else None
        # Fixed addresses, recorded on CUDA (_static_cache.py); a LoRA adapter's factors
        # are not among the recorded bindings, so a call with one runs on the shared cache.
        if session.cuda_graph and not session.fixed_inputs:
            if self._static is None:
                self._static = StaticCaches(self.session, self.session.device == "cuda")
            static = self._static.get(plan.ids.shape[0], capacity)
            return static, first, static.stepper(plan.mask, positions)
        cache = SharedCache(session, plan.ids.shape[0], capacity)
        return cache, first, cache.stepper(plan.mask, positions)

    def batcher(self) -> ContinuousBatcher:
        """A loop that decodes many requests at once, admitting and retiring them per step.

        Greedy decoding; each request gets the tokens :meth:`generate` gives it alone
        (``hf/runtime/generation/_batching.py``). On the default ``target="onnx"`` graph
        the batch cache is left-padded; on the fused ``target="onnxruntime"`` decoder (CPU)
        each request has a slot of one shared buffer (``_slots.py``).

        Returns:
            A :class:`ContinuousBatcher`: ``submit(prompt, max_new_tokens=...)`` (also
            while it runs), then ``run()`` yields each request as it ends.

        Example:
            >>> batcher = model.batcher()  # doctest: +SKIP
            >>> a = batcher.submit([1, 2, 3], max_new_tokens=4)  # doctest: +SKIP
            >>> b = batcher.submit([4, 5], max_new_tokens=2)  # doctest: +SKIP
            >>> {r.id: r.tokens for r in batcher.run()}  # doctest: +SKIP
            {1: [9, 9], 0: [7, 7, 9, 4]}
        """
        return ContinuousBatcher(
            self.session,
            uses_positions=self._uses_positions,
            vocab=self.folder.config.get("vocab_size"),
            limit=self.folder.max_positions(*_POSITION_LIMITS),
        )

    def live(self, input_ids: Any = None) -> LiveSequence:
        """A sequence whose cache lives between calls (continuous decoding), batch 1.

        Args:
            input_ids: The first tokens (1-D), or ``None`` to start empty.

        Returns:
            A :class:`LiveSequence`: ``append`` tokens, ``generate`` from the cache,
            ``rewind`` it.

        Example:
            >>> live = model.live([1, 2, 3])  # doctest: +SKIP
            >>> live.generate(max_new_tokens=3)  # doctest: +SKIP
            array([7, 7, 9])
        """

        def plan_for(
            start: int, max_new_tokens: int, eos: Any, given: dict[str, Any]
        ) -> tuple[TokenChooser, Stopping]:
            settings = resolve_settings(self.folder.generation, **given)
            stopping = Stopping.resolve(
                max_new_tokens,
                self.folder.setting("eos_token_id") if eos is None else eos,
                None,
                self._stop_check(settings),
            )
            chooser = make_chooser(self.folder.chooser, settings, stopping.eos_token_id, start)
            return chooser, stopping

        sequence = LiveSequence(
            self.session,
            plan_for,
            uses_positions=self._uses_positions,
            limit=self.folder.max_positions(*_POSITION_LIMITS),
            vocab=self.folder.config.get("vocab_size"),
        )
        if input_ids is not None:
            sequence.append(input_ids)
        return sequence

    def _stop_check(self, settings: GenerationSettings) -> StopCheck | None:
        if not settings.stop_strings:
            return None
        check: StopCheck = self.tokenizer.stop_check(settings.stop_strings)
        return check

    @property
    def tokenizer(self) -> TextTokenizer:
        """The folder's ``tokenizer.json`` and chat template (the ``text`` extra), loaded once.

        Example:
            >>> model.tokenizer.decode([5, 6])  # doctest: +SKIP
            'hello world'
        """
        if self._tokenizer is None:
            self._tokenizer = TextTokenizer.from_folder(self.folder.path)
        return self._tokenizer

    def generate_text(
        self,
        prompt: str | Sequence[str] | Sequence[Mapping[str, Any]],
        *,
        max_new_tokens: int | None = None,
        skip_special_tokens: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str | list[str]:
        """Text in, text out: tokenize, :meth:`generate`, decode the new tokens.

        Uses the folder's ``tokenizer.json`` (the ``tokenizers`` library) and, for chat
        messages, its chat template (``jinja2``, as transformers renders it); no torch.

        Args:
            prompt: A text, a list of texts (left-padded into one batch), or chat messages
                (``[{"role": "user", "content": "..."}]``) put through the chat template
                with the generation prompt added.
            max_new_tokens: How many tokens to add at most. By default, as transformers:
                ``max_length`` (the prompt included) less the prompt's length, else
                generation_config.json's ``max_new_tokens``, else its ``max_length`` (20).
            skip_special_tokens: Leave special tokens (EOS, padding) out of the text.
            tools: With chat messages: the functions the model may call, as JSON schemas
                (``{"type": "function", "function": {...}}``), given to the chat template
                as ``tools`` (transformers' ``apply_chat_template(tools=...)``).
            documents: With chat messages: documents for retrieval-augmented templates.
            **kwargs: :meth:`generate`'s other arguments (``num_beams``, ``stop_strings``...).

        Returns:
            The continuation's text for one prompt or messages, a list for a list of texts
            (``num_return_sequences`` per prompt, in order).

        Raises:
            GenerationError: No ``tokenizer.json`` (or chat template), the ``text`` extra
                missing, or what :meth:`generate` raises.

        Example:
            >>> model.generate_text("Once upon a time", max_new_tokens=8)  # doctest: +SKIP
            ' there was a little girl'
        """
        tokenizer = self.tokenizer
        rows, single = tokenizer.encode_prompt(prompt, tools=tools, documents=documents)
        pad = self.folder.setting("pad_token_id")
        ids, mask = left_pad(rows, tokenizer.token_id("pad_token") if pad is None else int(pad))
        sequences = self.generate(ids, mask, max_new_tokens=max_new_tokens, **kwargs)
        texts = [
            tokenizer.decode(row[ids.shape[1] :], skip_special_tokens=skip_special_tokens)
            for row in sequences
        ]
        return texts[0] if single and len(texts) == 1 else texts

    def _feeds(
        self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]
    ) -> tuple[dict[str, Any], Any]:
        """The prompt's feed and the function that builds each next step's feed."""
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

        return self._prompt_feed(ids, mask), next_feed


def _complete(
    sequences: npt.NDArray[np.int64], masks: GrammarMasks | None, plan: _Plan
) -> npt.NDArray[np.int64]:
    """``sequences``, once every row matched its constraint (when there is one)."""
    if masks is not None:
        masks.check_complete(plan.stopping.max_new_tokens)
    return sequences


def _is_text(value: Any) -> bool:
    """A text, a list of texts, or chat messages (rather than token ids)."""
    if isinstance(value, str):
        return True
    if isinstance(value, list | tuple) and value:
        return all(isinstance(v, str) for v in value) or all(isinstance(v, Mapping) for v in value)
    return False


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One generate() call, checked: its (expanded) inputs, settings and processors."""

    ids: npt.NDArray[np.int64]
    mask: npt.NDArray[np.int64]
    settings: GenerationSettings
    stopping: Stopping
    chooser: TokenChooser
    padding: npt.NDArray[np.int64] | None
