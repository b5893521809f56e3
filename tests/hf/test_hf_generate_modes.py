"""Every deterministic mode of generate() gives transformers' tokens, on batch 1 and on a
left-padded batch 2: beam search, repetition penalty, no-repeat n-grams, minimum lengths,
bad words; sampling keeps transformers' distribution; streaming and continuous decoding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from onnx_export import hf
from tests.hf.conftest import Exported


def _prompts(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(2, 90, (2, 7), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # row 1 is left-padded
    return (ids[:1], mask[:1]) if batch == 1 else (ids, mask)


def _compare(case: Exported, batch: int, **kwargs: Any) -> np.ndarray:
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ids, mask = _prompts(batch)
    with torch.no_grad():
        theirs = case.model.generate(
            ids, attention_mask=mask, do_sample=False, pad_token_id=0, **kwargs
        )
    ours = model.generate(ids.numpy(), mask.numpy(), pad_token_id=0, **kwargs)
    np.testing.assert_array_equal(ours, theirs.numpy())
    return ours


def _eos(case: Exported, offset: int) -> int:
    """A token the greedy continuation of row 0 makes ``offset`` tokens in (so EOS fires)."""
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ids, mask = _prompts(1)
    return int(model.generate(ids.numpy(), mask.numpy(), max_new_tokens=offset + 1)[0, -1])


MODES: dict[str, dict[str, Any]] = {
    "beams": {"num_beams": 3, "max_new_tokens": 8},
    "beams-return-2": {"num_beams": 4, "num_return_sequences": 2, "max_new_tokens": 6},
    "beams-length-penalty": {"num_beams": 3, "length_penalty": 0.3, "max_new_tokens": 6},
    "repetition": {"repetition_penalty": 1.8, "max_new_tokens": 12},
    "no-repeat-ngram": {"no_repeat_ngram_size": 2, "max_new_tokens": 14},
    "bad-words": {"bad_words_ids": [[7], [40, 41], [12, 13, 14]], "max_new_tokens": 10},
    "beams-processors": {
        "num_beams": 2,
        "repetition_penalty": 1.3,
        "no_repeat_ngram_size": 3,
        "max_new_tokens": 8,
    },
}


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_mode_gives_transformers_tokens(
    exported: Callable[[str], Exported], name: str, mode: str, batch: int
) -> None:
    _compare(exported(name), batch, **MODES[mode])


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize(
    "mode",
    [
        {},  # plain greedy: rows that ended take pad_token_id, the loop stops when all have
        {"num_beams": 3, "early_stopping": True},
        {"num_beams": 3, "early_stopping": False},
        {"num_beams": 3, "early_stopping": "never"},
        {"num_beams": 3, "num_return_sequences": 3, "length_penalty": 2.0},
        {"min_new_tokens": 6},
        {"min_length": 12},
        {"bad_words_ids": [[1]]},  # EOS alone stays allowed, as in transformers
    ],
    ids=[
        "greedy",
        "beams-early",
        "beams-late",
        "beams-never",
        "beams-all",
        "min-new",
        "min-len",
        "bad-eos",
    ],
)
def test_modes_with_eos_give_transformers_tokens(
    exported: Callable[[str], Exported], mode: dict[str, Any], batch: int
) -> None:
    case = exported("llama")
    eos = _eos(case, 2)
    _compare(case, batch, max_new_tokens=10, eos_token_id=eos, **mode)


def test_sampling_keeps_transformers_distribution(exported: Callable[[str], Exported]) -> None:
    """top_k=1 is greedy; top-k and top-p keep the set transformers' warpers keep."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from onnx_export.hf.runtime.generation._logits import TokenChooser

    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    ids, mask = _prompts(2)
    greedy = model.generate(ids.numpy(), mask.numpy(), max_new_tokens=10)
    top1 = model.generate(
        ids.numpy(), mask.numpy(), max_new_tokens=10, do_sample=True, top_k=1, seed=1
    )
    np.testing.assert_array_equal(top1, greedy)
    logits = model.logits(ids.numpy(), mask.numpy())[:, -1, :] * np.float32(4.0)
    for top_k, top_p in ((5, None), (None, 0.3), (None, 0.9), (20, 0.8)):
        ours = TokenChooser(do_sample=True, top_k=top_k, top_p=top_p, temperature=0.7).warp(
            logits.copy()
        )
        theirs = torch.from_numpy(logits.copy()) / 0.7
        if top_k is not None:
            theirs = TopKLogitsWarper(top_k)(None, theirs)
        if top_p is not None:
            theirs = TopPLogitsWarper(top_p)(None, theirs)
        np.testing.assert_array_equal(np.isfinite(ours), torch.isfinite(theirs).numpy())
        np.testing.assert_allclose(ours[np.isfinite(ours)], theirs[torch.isfinite(theirs)], 1e-6)
    # the sampled tokens follow softmax of the warped scores: frequencies over many draws
    chooser = TokenChooser(do_sample=True, top_k=4)
    warped = chooser.warp(logits[:1].repeat(20000, axis=0) / np.float32(4.0))
    drawn = chooser.choose(warped, np.random.default_rng(0))
    expected = torch.softmax(torch.from_numpy(warped[0]), -1).numpy()
    frequencies = np.bincount(drawn, minlength=expected.size) / 20000
    np.testing.assert_allclose(frequencies, expected, atol=0.02)


def test_seed_and_generator_reproduce_samples(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("gpt2").folder)
    ids, mask = _prompts(2)
    kwargs: dict[str, Any] = {"max_new_tokens": 8, "do_sample": True, "top_p": 0.9}
    first = model.generate(ids.numpy(), mask.numpy(), seed=np.random.default_rng(7), **kwargs)
    again = model.generate(ids.numpy(), mask.numpy(), seed=np.random.default_rng(7), **kwargs)
    np.testing.assert_array_equal(first, again)
    beams = model.generate(ids.numpy(), mask.numpy(), num_beams=2, seed=3, **kwargs)
    assert beams.shape[0] == 2 and (beams[:, : ids.shape[1]] == ids.numpy()).all()
    several = model.generate(ids.numpy(), mask.numpy(), num_return_sequences=3, seed=3, **kwargs)
    assert several.shape[0] == 6 and (several[3:, : ids.shape[1]] == ids[1].numpy()).all()


def test_streaming_gives_the_tokens_of_generate(exported: Callable[[str], Exported]) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    ids, mask = _prompts(2)
    full = model.generate(ids.numpy(), mask.numpy(), max_new_tokens=6)
    streamed = list(model.stream(ids.numpy(), mask.numpy(), max_new_tokens=6))
    np.testing.assert_array_equal(np.stack(streamed, axis=1), full[:, ids.shape[1] :])
    seen: list[np.ndarray] = []
    called = model.generate(ids.numpy(), mask.numpy(), max_new_tokens=6, streamer=seen.append)
    np.testing.assert_array_equal(called, full)
    np.testing.assert_array_equal(np.stack(seen, axis=1), full[:, ids.shape[1] :])
    with pytest.raises(hf.GenerationError, match="streamer"):
        model.generate(ids.numpy(), max_new_tokens=2, num_beams=2, streamer=seen.append)


def test_ragged_and_out_of_vocabulary_ids_are_generation_errors(
    exported: Callable[[str], Exported],
) -> None:
    model = hf.OrtModelForCausalLM.from_pretrained(exported("llama").folder)
    with pytest.raises(hf.GenerationError, match=r"different lengths.*left-pad"):
        model.generate([[1, 2, 3], [4, 5]], max_new_tokens=2)
    with pytest.raises(hf.GenerationError, match=r"\[96, 500\] outside.*\[0, 96\)"):
        model.generate([[1, 96, 500]], max_new_tokens=2)
    with pytest.raises(hf.GenerationError, match="outside"):
        model.logits([[-1, 2]])
    with pytest.raises(hf.GenerationError, match="num_return_sequences"):
        model.generate([[1, 2]], max_new_tokens=2, num_return_sequences=2)
    with pytest.raises(hf.GenerationError, match="early_stopping"):
        model.generate([[1, 2]], max_new_tokens=2, num_beams=2, early_stopping="soon")


def test_repr_names_folder_architecture_layers_providers(
    exported: Callable[[str], Exported],
) -> None:
    case = exported("llama")
    text = repr(hf.OrtModelForCausalLM.from_pretrained(case.folder))
    assert str(case.folder) in text and "LlamaForCausalLM" in text
    assert "layers=2" in text and "CPUExecutionProvider" in text


def test_continuous_decoding_appends_and_rewinds_the_live_cache(
    exported: Callable[[str], Exported],
) -> None:
    case = exported("llama")
    model = hf.OrtModelForCausalLM.from_pretrained(case.folder)
    prompt = _prompts(1)[0][0].numpy()
    full = model.generate(prompt, max_new_tokens=8)[0]
    live = model.live(prompt[:4])
    live.append(prompt[4:])
    np.testing.assert_array_equal(live.generate(max_new_tokens=8), full[len(prompt) :])
    live.rewind(3)  # the cache is cut to match; the same greedy tokens come back
    np.testing.assert_array_equal(live.generate(max_new_tokens=3), full[-3:])
    turn = np.array([11, 12, 13], np.int64)
    live.append(turn)
    got = live.generate(max_new_tokens=5, repetition_penalty=1.3)
    history = torch.from_numpy(np.concatenate([full, turn]))[None]
    with torch.no_grad():
        theirs = case.model.generate(
            history, max_new_tokens=5, do_sample=False, repetition_penalty=1.3, pad_token_id=0
        )
    np.testing.assert_array_equal(got, theirs[0, history.shape[1] :].numpy())
    np.testing.assert_array_equal(live.tokens, theirs[0].numpy())
    with pytest.raises(hf.GenerationError, match="rewind"):
        live.rewind(len(live.tokens) + 1)
    with pytest.raises(hf.GenerationError, match="outside the vocabulary"):
        live.append([96])
