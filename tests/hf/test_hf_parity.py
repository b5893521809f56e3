"""Every task end to end: a tiny checkpoint folder, ``export_pretrained``, then the runtime in
a process where torch cannot be imported, compared with eager ``transformers``.

Generation tasks compare the greedy tokens of ``generate()`` (20 new tokens, a batch of two
prompts of different lengths, left-padded for decoders) token for token; decoders also run
prompts of length 1 and 17 at batch 1 and 3 from the same file. CI exports a subset of the
architectures; ``--runslow`` (or ``ONNX_EXPORT_RUNSLOW=1``) runs all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pytest
import torch

from tests.hf.checkpoints import CASES
from tests.hf.conftest import Exported
from tests.hf.torch_free import Call, run_without_torch

CI = ("llama", "gpt2", "bart", "whisper", "bert", "roberta", "vit", "convnext")
NEW_TOKENS = 20


def _skip_unless_slow(request: pytest.FixtureRequest, name: str) -> None:
    if name in CI:
        return
    if not request.config.getoption("--runslow", default=False) and (
        os.environ.get("ONNX_EXPORT_RUNSLOW") != "1"
    ):
        pytest.skip("slow: run with --runslow (or ONNX_EXPORT_RUNSLOW=1)")


def _ids(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(2, 90, (batch, length), generator=torch.Generator().manual_seed(seed))


def _left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts, of 4 and 7 tokens, left-padded (pad id 0) to 7."""
    ids = _ids(2, 7, seed=1)
    mask = torch.ones_like(ids)
    ids[0, :3], mask[0, :3] = 0, 0
    return ids, mask


def _right_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """Two encoder inputs, of 5 and 9 tokens (the padding is masked, on the right)."""
    ids = _ids(2, 9, seed=2)
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    return ids, mask


def _causal_lm(case: Exported) -> None:
    model = case.model
    prompts = {"short": _ids(1, 1, seed=3), "long": _ids(3, 17, seed=4)}
    ids, mask = _left_padded()
    calls = [Call(name, "logits", {"input_ids": p.numpy()}) for name, p in prompts.items()]
    calls.append(
        Call(
            "greedy",
            "generate",
            {"input_ids": ids.numpy(), "attention_mask": mask.numpy()},
            {"max_new_tokens": NEW_TOKENS},
        )
    )
    got = run_without_torch(case.folder, calls)
    with torch.no_grad():
        for name, prompt in prompts.items():
            want = model(input_ids=prompt).logits.numpy()
            np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-4, err_msg=name)
        expected = model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False
        )
    np.testing.assert_array_equal(got["greedy"], expected.numpy())


def _seq2seq_inputs(case: Exported) -> dict[str, torch.Tensor]:
    if case.result.task == "automatic-speech-recognition":
        config = case.model.config
        frames = 2 * config.max_source_positions
        generator = torch.Generator().manual_seed(5)
        return {"input_features": torch.randn(2, config.num_mel_bins, frames, generator=generator)}
    ids, mask = _right_padded()
    return {"input_ids": ids, "attention_mask": mask}


def _seq2seq(case: Exported) -> None:
    model = case.model
    inputs = _seq2seq_inputs(case)
    arrays = {k: v.numpy() for k, v in inputs.items()}
    decoder_ids = _ids(2, 3, seed=6)
    calls = [
        Call("logits", "logits", {**arrays, "decoder_input_ids": decoder_ids.numpy()}),
        Call("greedy", "generate", arrays, {"max_new_tokens": NEW_TOKENS}),
    ]
    got = run_without_torch(case.folder, calls)
    with torch.no_grad():
        want = model(**inputs, decoder_input_ids=decoder_ids).logits.numpy()
        expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    np.testing.assert_allclose(got["logits"], want, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(got["greedy"], expected.numpy())


def _text_encoder(case: Exported) -> None:
    output = "last_hidden_state" if case.result.task == "feature-extraction" else "logits"
    batches = {"one": _ids(1, 1, seed=7), "three": _ids(3, 17, seed=8)}
    calls = [
        Call(name, "run", {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy())})
        for name, ids in batches.items()
    ]
    got = run_without_torch(case.folder, calls)
    with torch.no_grad():
        for name, ids in batches.items():
            want = getattr(case.model(input_ids=ids), output).numpy()
            np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-4, err_msg=name)


def _image_classifier(case: Exported) -> None:
    config = case.model.config
    generator = torch.Generator().manual_seed(9)
    batches = {
        f"batch{b}": torch.randn(b, config.num_channels, 32, 32, generator=generator)
        for b in (1, 3)
    }
    got = run_without_torch(
        case.folder, [Call(n, "run", {"pixel_values": p.numpy()}) for n, p in batches.items()]
    )
    with torch.no_grad():
        for name, pixels in batches.items():
            want = case.model(pixel_values=pixels).logits.numpy()
            np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-4, err_msg=name)


_CHECKS: dict[str, Callable[[Exported], None]] = {
    "text-generation": _causal_lm,
    "text2text-generation": _seq2seq,
    "automatic-speech-recognition": _seq2seq,
    "feature-extraction": _text_encoder,
    "text-classification": _text_encoder,
    "image-classification": _image_classifier,
}


@pytest.mark.parametrize("name", list(CASES))
def test_export_then_run_without_torch(
    name: str, exported: Callable[[str], Exported], request: pytest.FixtureRequest
) -> None:
    _skip_unless_slow(request, name)
    case = exported(name)
    assert case.result.task == CASES[name].task  # inferred from config.json
    expected_files = (
        ("encoder_model.onnx", "decoder_model.onnx")
        if case.result.task in ("text2text-generation", "automatic-speech-recognition")
        else ("model.onnx",)
    )
    assert case.result.onnx_files == expected_files
    assert all((case.folder / f).is_file() for f in (*expected_files, "config.json"))
    _CHECKS[case.result.task](case)
