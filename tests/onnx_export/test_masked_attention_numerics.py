"""Fully masked attention rows give what eager gives (0), and NaN does not spread.

torch (since 2.5) computes ``scaled_dot_product_attention`` through a safe softmax: a query
whose keys are all masked (bool ``False`` or float ``-inf``) gets 0. ONNX's ``Softmax`` of
a row of ``-inf`` is NaN, and the next layer multiplies that masked value by a weight of 0,
so NaN reached every row. The exported files here are run in ONNX Runtime against eager at
the edge inputs: left-padded batches, rows that are all padding, at opsets 13, 18 and 23.

``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` have a fast path in eager
(``torch._native_multi_head_attention``, taken in eval mode under ``torch.no_grad()``)
that gives NaN for a row whose keys are all padding; the path torch.export captures, and
the one eager takes otherwise, gives 0. The files follow the captured path: they are
compared with eager outside ``no_grad`` (docs/numerics.md).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnx_export
from tests.helpers import assert_onnx_program_close

pytestmark = pytest.mark.usefixtures("private_temp_folder")

NEG_INF = float("-inf")


def _assert_matches_captured_path(
    program: onnx_export.ONNXProgram, model: nn.Module, *inputs: torch.Tensor
) -> None:
    """ONNX Runtime against eager with grad on (not the no_grad fast path), and no NaN."""
    with torch.enable_grad():
        expected = model(*inputs).detach()
    actual = program(*inputs)
    assert not expected.isnan().any(), "eager's captured path gave NaN: the case is wrong"
    assert not actual.isnan().any(), f"{int(actual.isnan().sum())} NaN values in ONNX's output"
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)


class Attend(nn.Module):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


def _float_mask(shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    mask = torch.zeros(*shape).masked_fill(torch.rand(*shape, generator=g) > 0.6, NEG_INF)
    mask[..., 0] = 0.0  # every row attends somewhere ...
    mask[..., 1, :] = NEG_INF  # ... but query 1, which attends nowhere
    return mask


_SDPA = [
    pytest.param((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 4, 5), {}, id="4d"),
    pytest.param((2, 3, 4, 8), (2, 3, 5, 8), (4, 5), {"scale": 0.3}, id="4d_mask_2d_scale"),
    pytest.param((3, 4, 8), (3, 5, 8), (3, 4, 5), {}, id="3d"),
    pytest.param((2, 4, 4, 8), (2, 2, 5, 8), (2, 1, 4, 5), {"enable_gqa": True}, id="gqa"),
]


@pytest.mark.parametrize("opset", [13, 18, 23])
@pytest.mark.parametrize(("q", "kv", "mask", "kwargs"), _SDPA)
def test_a_float_mask_row_of_minus_inf_gives_zero(
    q: Any, kv: Any, mask: Any, kwargs: Any, opset: int
) -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(*q), torch.randn(*kv), torch.randn(*kv), _float_mask(mask))
    model = Attend(**kwargs)
    assert model(*inputs)[..., 1, :].abs().max() == 0  # what eager gives
    options = onnx_export.ExportOptions(opset_version=opset)
    program = onnx_export.dynamo_export(model, *inputs, export_options=options)
    assert_onnx_program_close(program, model, *inputs, atol=1e-4)


@pytest.mark.parametrize("opset", [13, 18])
def test_a_causal_attention_and_a_finfo_min_mask_are_unchanged(opset: int) -> None:
    """No row is fully masked by ``is_causal``; a ``finfo.min`` row is eager's mean of values."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8)
    options = onnx_export.ExportOptions(opset_version=opset)
    causal = Attend(is_causal=True, scale=0.5)

    class Causal(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return causal(q, k, v, None)  # type: ignore[no-any-return]

    program = onnx_export.dynamo_export(Causal(), q, k, v, export_options=options)
    assert_onnx_program_close(program, Causal(), q, k, v, atol=1e-4)
    lowest = torch.zeros(2, 1, 4, 4)
    lowest[0, ..., 2, :] = torch.finfo(torch.float32).min
    program = onnx_export.dynamo_export(Attend(), q, k, v, lowest, export_options=options)
    assert_onnx_program_close(program, Attend(), q, k, v, lowest, atol=1e-4)


class TwoLayers(nn.Module):
    """Two attention layers sharing one padding mask: layer 1's masked rows feed layer 2."""

    def __init__(self, bool_mask: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bool_mask = bool_mask
        self.qkv1, self.qkv2 = nn.Linear(8, 24), nn.Linear(8, 24)

    def _layer(self, x: torch.Tensor, qkv: nn.Linear, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + out.transpose(1, 2).flatten(2)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        allowed = causal & keep[:, None, None, :]  # (batch, 1, length, length)
        mask = (
            allowed if self.bool_mask else torch.zeros(allowed.shape).masked_fill(~allowed, NEG_INF)
        )
        return self._layer(self._layer(x, self.qkv1, mask), self.qkv2, mask)


def _left_padded(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 100 + length)
    keep = torch.ones(batch, length, dtype=torch.bool)
    for row in range(batch):
        keep[row, : row % length] = False  # row i is left-padded by i tokens
    return torch.randn(batch, length, 8, generator=g), keep


@pytest.mark.parametrize("opset", [13, 18, 23])
@pytest.mark.parametrize("bool_mask", [False, True], ids=["float_mask", "bool_mask"])
def test_nan_does_not_spread_through_a_second_layer(bool_mask: bool, opset: int) -> None:
    model = TwoLayers(bool_mask).eval()
    dynamic = {"x": {0: "batch", 1: "length"}, "keep": {0: "batch", 1: "length"}}
    options = onnx_export.ExportOptions(dynamic_shapes=dynamic, opset_version=opset)
    program = onnx_export.dynamo_export(model, *_left_padded(3, 6), export_options=options)
    for batch, length in ((3, 6), (4, 5), (1, 3)):
        inputs = _left_padded(batch, length)
        assert_onnx_program_close(program, model, *inputs, atol=1e-4)
        assert not program(*inputs).isnan().any()


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        out, _ = self.attention(x, x, x, key_padding_mask=padding, need_weights=False)
        return out


@pytest.mark.parametrize("opset", [13, 18])
def test_multihead_attention_with_a_row_that_is_all_padding(opset: int) -> None:
    model = SelfAttention().eval()
    x = torch.randn(3, 4, 8)
    padding = torch.tensor([[False] * 4, [True] * 4, [True, True, False, False]])
    dynamic = {"x": {0: "batch", 1: "length"}, "padding": {0: "batch", 1: "length"}}
    options = onnx_export.ExportOptions(dynamic_shapes=dynamic, opset_version=opset)
    program = onnx_export.dynamo_export(model, x, padding, export_options=options)
    _assert_matches_captured_path(program, model, x, padding)
    _assert_matches_captured_path(program, model, torch.randn(2, 6, 8), torch.ones(2, 6) > 0)


class Encoder(nn.Module):
    """A causal two-layer encoder (a decoder-only LM's body) fed left-padded batches."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        padding_float = torch.zeros(padding.shape).masked_fill(padding, NEG_INF)
        return self.encoder(x, mask=causal, src_key_padding_mask=padding_float, is_causal=True)


class Decoder(nn.Module):
    """A two-layer decoder over a memory, both left-padded."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        padding_float = torch.zeros(padding.shape).masked_fill(padding, NEG_INF)
        return self.decoder(
            x, x, tgt_mask=causal, tgt_key_padding_mask=padding_float,
            memory_key_padding_mask=padding_float, tgt_is_causal=True,
        )  # fmt: skip


def _left_padding(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, keep = _left_padded(batch, length)
    return x, ~keep


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("model_class", [Encoder, Decoder])
def test_transformer_layers_on_left_padded_batches(model_class: type, opset: int) -> None:
    model = model_class().eval()
    dynamic = {"x": {0: "batch", 1: "length"}, "padding": {0: "batch", 1: "length"}}
    options = onnx_export.ExportOptions(dynamic_shapes=dynamic, opset_version=opset)
    program = onnx_export.dynamo_export(model, *_left_padding(3, 6), export_options=options)
    for batch, length in ((3, 6), (4, 5), (2, 2)):
        _assert_matches_captured_path(program, model, *_left_padding(batch, length))


_ORT = onnx_export.ExportOptions(target="onnxruntime", verify=False)


def test_onnxruntime_target_float_masks_keep_the_fusion_and_give_zero() -> None:
    """A float ``-inf`` mask: fused into ``MultiHeadAttention`` (bias), rows of -inf give 0."""
    model = TwoLayers(bool_mask=False).eval()
    program = onnx_export.dynamo_export(model, *_left_padded(3, 6), export_options=_ORT)
    assert "MultiHeadAttention" in {n.op_type for n in program.model.graph}
    assert_onnx_program_close(program, model, *_left_padded(3, 6), atol=1e-4)
    encoder = Encoder().eval()
    program = onnx_export.dynamo_export(encoder, *_left_padding(3, 6), export_options=_ORT)
    _assert_matches_captured_path(program, encoder, *_left_padding(3, 6))


def test_onnxruntime_target_bool_masks_differ_only_at_rows_with_no_key() -> None:
    """GPT-2 on a left-padded batch, ``target="onnxruntime"``: the documented difference.

    transformers gives SDPA a bool mask; for this target the check is left out (it cost
    fusions), so a padding query, which sees no key, gets a finite value of ONNX
    Runtime's fused kernel where eager gives 0. Every real token matches eager, and no
    NaN appears.
    """
    pytest.importorskip("transformers")
    from tests.e2e.zoo_models import ZOO

    entry = ZOO["gpt2"]
    model = entry.build()
    args, kwargs = entry.inputs(2, 6)
    kwargs["attention_mask"][0, :3] = 0  # the first row left-padded by 3
    program = onnx_export.dynamo_export(model, *args, export_options=_ORT, **kwargs)
    assert "MultiHeadAttention" in {n.op_type for n in program.model.graph}
    actual = program(*args, **kwargs)
    with torch.no_grad():
        expected = model(*args, **kwargs)
    assert not actual.isnan().any()
    real = kwargs["attention_mask"].bool()
    torch.testing.assert_close(actual[real], expected[real], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_transformers_attention_on_a_left_padded_batch(implementation: str) -> None:
    """transformers' eager (``finfo.min`` mask, softmax) and SDPA (bool mask) attentions.

    Padding queries see no key: eager's softmax spreads them evenly, SDPA gives 0; the file
    gives what each gives, at every position, padding included.
    """
    transformers = pytest.importorskip("transformers")
    from tests.e2e.zoo_models import small_config

    torch.manual_seed(0)
    config = small_config("llama", use_cache=False, attn_implementation=implementation)
    model = _Logits(transformers.LlamaForCausalLM(config)).eval()
    ids = torch.randint(0, 100, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :3] = 0
    program = onnx_export.dynamo_export(model, ids, mask)
    assert_onnx_program_close(program, model, ids, mask, atol=1e-4)
    assert not program(ids, mask).isnan().any()


class _Logits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits  # type: ignore[no-any-return]
