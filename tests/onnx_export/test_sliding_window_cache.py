"""Key/value caches through the file: sliding windows shorter than the past, left padding.

A sliding-window layer (Mistral's, Gemma 2's ``sliding_window``) keeps its last
``window - 1`` positions. The export rebuilds a cache from its tensors without replaying
``update`` (which cut the example's past to the window and fixed it), and traces the
window's arithmetic as branches: the file serves every past and number of new tokens
inside the window (``past + seq <= window - 1``, a condition of the file), refuses the
others naming that condition, and refuses a cache that has already slid (its tensors no
longer say how many tokens it has seen). A cache of full layers (``DynamicCache()``)
serves any length. A left-padded batch goes through the cache as eagerly.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import onnx_export
from onnx_export.adapters import InputShapeError
from onnx_export.errors import ExportInputError

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _decoder(family: str, window: int | None = None) -> Any:
    from tests.e2e.zoo_models import small_decoder_config

    torch.manual_seed(0)
    extra: dict[str, Any] = {} if window is None else {"sliding_window": window}
    if family == "mistral":
        config = small_decoder_config("MistralConfig", num_key_value_heads=2, **extra)
        return transformers.MistralForCausalLM(config).eval()
    if family == "gemma2":  # sliding and full layers, alternating
        config = small_decoder_config("Gemma2Config", num_key_value_heads=2, head_dim=8, **extra)
        return transformers.Gemma2ForCausalLM(config).eval()
    config = small_decoder_config("LlamaConfig", num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config).eval()


def _step(
    model: Any, batch: int, past: int, seq: int, padded: int = 0, full_layers: bool = False
) -> tuple[Any, ...]:
    """New token ids, the mask over past and new tokens, and the cache of the past.

    ``padded``: the first rows but one start with that many padding positions (zeros at
    the mask's start), and the cache was filled with that mask. ``full_layers``: a cache
    built without the config, whose layers keep every position. The same sizes give the
    same values: each call gives a cache of its own (eager's call extends its cache).
    """
    draw = torch.Generator().manual_seed(past * 100 + seq * 10 + batch + padded)
    ids = torch.randint(3, 100, (batch, past + seq), generator=draw)
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    mask[: max(batch - 1, 0), :padded] = 0
    empty = transformers.DynamicCache() if full_layers else None
    with torch.no_grad():
        cache = model(
            ids[:, :past], attention_mask=mask[:, :past], past_key_values=empty, use_cache=True
        ).past_key_values
    return ids[:, past:], mask, cache


def _export(model: Any, example: tuple[Any, ...]) -> onnx_export.ONNXProgram:
    ids, mask, cache = example
    layers = len(cache.layers)
    past = {0: "batch", 2: "past"}
    shapes = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "past_key_values": [[past] * layers, [past] * layers],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return onnx_export.dynamo_export(
            model, ids, attention_mask=mask, past_key_values=cache,
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )  # fmt: skip


def _assert_like_eager(program: onnx_export.ONNXProgram, model: Any, *step: Any, **kw: Any) -> None:
    ids, mask, cache = _step(model, *step, **kw)
    _, _, again = _step(model, *step, **kw)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        want = model(ids, attention_mask=mask, past_key_values=cache)
        got = program(ids, attention_mask=mask, past_key_values=again)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-3)
    for mine, theirs in zip(got.past_key_values.layers, want.past_key_values.layers, strict=True):
        torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(
    ("family", "past", "tokens"),
    [("mistral", 2, 1), ("gemma2", 2, 1), ("mistral", 3, 2)],
    ids=["mistral-one-token", "gemma2-one-token", "mistral-two-tokens"],
)
def test_a_window_shorter_than_the_example_serves_inside_it(
    family: str, past: int, tokens: int
) -> None:
    """Window 6: past + new tokens up to 5 serve as eagerly; past that, a clear refusal."""
    model = _decoder(family, window=6)
    program = _export(model, _step(model, 2, past, tokens))
    spec = program.adapter_spec
    assert spec is not None and "past + seq <= 5" in {c.expression for c in spec.conditions}
    for batch, p, seq in ((2, past, tokens), (1, 1, 1), (3, 1, 2), (1, 3, 2), (2, 4, 1)):
        _assert_like_eager(program, model, batch, p, seq)
    ids, mask, cache = _step(model, 2, 2, 1)  # the file's cache fed back: the next step
    _, _, again = _step(model, 2, 2, 1)
    with torch.no_grad():
        eager = model(ids, attention_mask=mask, past_key_values=cache)
        step = torch.full((2, 1), 7)
        longer = torch.ones(2, 4, dtype=torch.long)
        want = model(step, attention_mask=longer, past_key_values=eager.past_key_values)
    mine = program(ids, attention_mask=mask, past_key_values=again)
    got = program(step, attention_mask=longer, past_key_values=mine.past_key_values)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-3)
    ids, mask, cache = _step(model, 2, 4, 2)  # 6 positions: the window would slide
    with pytest.raises(InputShapeError, match=r"where past \+ seq <= 5.*cache_utils"):
        program(ids, attention_mask=mask, past_key_values=cache)
    ids, mask, cache = _step(model, 1, 9, 1)  # slid: holds 5 of 9 positions
    with pytest.raises(InputShapeError, match=r"seen 9 tokens and holds the last 5.*window is 6"):
        program(ids, attention_mask=mask, past_key_values=cache)


def test_an_example_that_fills_the_window_serves_that_branch() -> None:
    """Window 4, past 3 + 1 token: the layer slides during the call. The file has that
    branch (past + seq > 3, a past of at most 3) and refuses the others, and the cache it
    returns has slid, so the next step is refused too: nothing is served wrong."""
    model = _decoder("mistral", window=4)
    program = _export(model, _step(model, 2, 3, 1))
    for batch, past, seq in ((2, 3, 1), (1, 3, 2), (3, 2, 6)):
        _assert_like_eager(program, model, batch, past, seq)
    ids, mask, cache = _step(model, 1, 1, 1)
    with pytest.raises(InputShapeError, match=r"past|seq"):
        program(ids, attention_mask=mask, past_key_values=cache)
    ids, mask, cache = _step(model, 2, 3, 1)
    out = program(ids, attention_mask=mask, past_key_values=cache)
    more = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(InputShapeError, match=r"holds a full sliding window \(3 positions"):
        program(ids, attention_mask=more, past_key_values=out.past_key_values)


def test_a_window_too_small_to_check_the_file_in_is_refused() -> None:
    """Window 5, one token: past + seq <= 4 leaves no other sizes of 2 or more to capture
    at, and the one-token capture fails at two tokens: refused, not a broken file."""
    model = _decoder("mistral", window=5)
    with pytest.raises(onnx_export.ConversionError, match=r"cannot serve.*ONNX Runtime failed"):
        _export(model, _step(model, 2, 2, 1))


def test_a_size_torch_export_loses_is_named_in_the_refusal() -> None:
    """Gemma 2, window 4, past 3 + 1 (found last session): torch.export's own shapes give
    the RMSNorm's ``mean`` ``[batch, seq, 1]`` and the ``add`` of its epsilon ``[batch, 1,
    1]`` with no guard, so the file computes the later layers at one token. The edge probe
    refuses the file; its message names that node and the model's line."""
    model = _decoder("gemma2", window=4)
    with pytest.raises(onnx_export.ConversionError) as caught:
        _export(model, _step(model, 2, 3, 1))
    message = caught.value.details
    assert "fails in ONNX Runtime at the smallest sizes" in message
    assert "torch.export's own shapes lose a dynamic size at node" in message
    assert "modeling_gemma2.py" in message and "and its output [" in message
    assert "lose a dynamic size" in str(caught.value)  # on the user's screen, not cut off


def test_an_example_cache_that_has_slid_is_refused_before_capture() -> None:
    """Its tensors hold 3 of 9 positions: no capture can place the new token at 9."""
    model = _decoder("mistral", window=4)
    with pytest.raises(ExportInputError, match=r"example's past_key_values: .* seen 9 tokens"):
        _export(model, _step(model, 2, 9, 1))


def test_a_cache_of_full_layers_serves_past_the_window() -> None:
    """``DynamicCache()`` keeps every position: the file serves any length, as eagerly."""
    model = _decoder("mistral", window=4)
    program = _export(model, _step(model, 2, 2, 1, full_layers=True))
    for batch, past, seq in ((2, 2, 1), (1, 1, 1), (2, 9, 1), (1, 7, 3)):
        _assert_like_eager(program, model, batch, past, seq, full_layers=True)
    ids, mask, full = _step(model, 1, 9, 2, full_layers=True)
    _, _, sliding = _step(model, 1, 9, 2)
    with torch.no_grad():  # the same numbers as eager with the window's own cache
        want = model(ids, attention_mask=mask, past_key_values=sliding).logits
    got = program(ids, attention_mask=mask, past_key_values=full).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(("family", "window"), [("llama", None), ("mistral", None), ("mistral", 8)])
def test_a_left_padded_batch_goes_through_the_cache(family: str, window: int | None) -> None:
    """Batch 2, one row left-padded by 2, past 3: exported from one token, as eagerly."""
    model = _decoder(family, window)
    program = _export(model, _step(model, 2, 3, 1, padded=2))
    for batch, past, seq, padded in ((2, 3, 1, 2), (2, 5, 2, 3), (3, 4, 1, 1), (1, 1, 1, 0)):
        _assert_like_eager(program, model, batch, past, seq, padded=padded)


class _FixesThePast(torch.nn.Module):
    """Multiplies the cache's keys by a ``(5, 1)`` constant: the past must be 5."""

    def forward(self, x: torch.Tensor, cache: Any) -> torch.Tensor:
        keys = cache.layers[0].keys
        return x + (keys * torch.ones(5, 1)).sum()


def test_a_cache_axis_the_code_fixes_is_named_by_its_own_path() -> None:
    """torch names it ``inputs['cache']['key_cache'][0]``; the message, ``cache.key_cache.0``."""
    from onnx_export.capture._containers import register_library_containers
    from onnx_export.capture._spec_containers import leaf_sources
    from onnx_export.errors import CaptureError

    cache = transformers.DynamicCache([(torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))])
    register_library_containers((), {"cache": cache})
    assert leaf_sources("cache", cache)[0] == (
        "L['cache']['key_cache'][0]",
        "L['cache'][0][0]",
        "cache.key_cache.0",
    )
    shapes = {"x": None, "cache": [[{2: "past"}], [{2: "past"}]]}
    with pytest.raises(CaptureError, match=r"cache\.key_cache\.0\[2\] \(dynamic\) is fixed to 5 "):
        onnx_export.dynamo_export(
            _FixesThePast(), torch.randn(3), cache,
            export_options=onnx_export.ExportOptions(dynamic_shapes=shapes),
        )  # fmt: skip


def _without(monkeypatch: pytest.MonkeyPatch, patch: str) -> None:
    import onnx_export.capture._strategies as strategies

    kept = tuple(p for p in strategies.PATCHES if p.name != patch)
    assert len(kept) == len(strategies.PATCHES) - 1, patch
    monkeypatch.setattr(strategies, "PATCHES", kept)


def test_without_the_window_patch_the_one_token_export_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``capture/patches/_sliding_window_cache.py`` is what makes the window exportable."""
    model = _decoder("mistral", window=6)
    _without(monkeypatch, "sliding_window_cache")
    try:
        _export(model, _step(model, 2, 2, 1))
    except onnx_export.OnnxExportError as error:
        assert "ONNX Runtime" in str(error) or "Max(" in str(error), error
    else:
        pytest.skip("exported without the sliding_window_cache patch: it may be retired")


def test_a_mask_longer_than_the_tokens_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers slices a longer mask only to decide a skip it never takes under export
    (``capture/patches/_causal_skip.py``): the file serves it; without the patch, refused."""
    model = _decoder("llama")
    example = _step(model, 2, 3, 1)
    program = _export(model, example)
    ids, _, cache = _step(model, 2, 3, 1)
    longer = torch.ones(2, 6, dtype=torch.long)  # past 3 + 1 new token, and 2 more
    _, _, again = _step(model, 2, 3, 1)
    with torch.no_grad():
        want = model(ids, attention_mask=longer, past_key_values=cache).logits
    got = program(ids, attention_mask=longer, past_key_values=again).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)
    _without(monkeypatch, "causal_skip")
    refusing = _export(model, example)
    _, _, fresh = _step(model, 2, 3, 1)
    with pytest.raises(InputShapeError, match=r"where total <= past \+ seq.*masking_utils"):
        refusing(ids, attention_mask=longer, past_key_values=fresh)
