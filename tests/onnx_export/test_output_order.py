"""Exported outputs come back with eager's structure: fields, keys and their order (#28).

transformers' ``ModelOutput`` keeps its keys in the order they were set (``capture_outputs``
adds ``hidden_states`` after the output is made; a VLM's ``get_image_features`` sets
``pooler_output`` last), and its pytree ``unflatten_fn`` rebuilds it in field order.
Decomposition re-traces ``program.module()``, so the new graph's outputs came in field
order under a spec in the model's order: InternVL and AyaVision returned the pooled image
features as ``hidden_states``. The parity check also compares the structure.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import onnx_export
from onnx_export.errors import ParityWarning
from onnx_export.program._structure import structure_difference
from tests.helpers import export_and_check

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutputWithPooling  # noqa: E402


def _keys(value: Any) -> Any:
    """The nested keys of mappings, in order (tuples by position)."""
    if isinstance(value, dict):
        return [(k, _keys(v)) for k, v in value.items()]
    if isinstance(value, (tuple, list)):
        return [_keys(v) for v in value]
    return type(value).__name__


class SetsFieldsOutOfOrder(torch.nn.Module):
    """A ``ModelOutput`` whose keys are set in another order than its fields."""

    def forward(self, x: torch.Tensor) -> BaseModelOutputWithPooling:
        out = BaseModelOutputWithPooling(last_hidden_state=x + 1)
        out.hidden_states = (None, x * 3)  # as capture_outputs does, before pooling
        out.pooler_output = x.sum(-1)
        return out


def test_a_model_outputs_keys_keep_the_models_order_through_decomposition() -> None:
    model = SetsFieldsOutOfOrder()
    x = torch.randn(2, 3)
    options = onnx_export.ExportOptions(decompose="always")  # the re-trace that reordered
    program = export_and_check(model, x, options=options)
    got = program(x)
    assert list(got.keys()) == ["last_hidden_state", "hidden_states", "pooler_output"]
    assert got.hidden_states[0] is None
    torch.testing.assert_close(got.hidden_states[1], x * 3)
    torch.testing.assert_close(got.pooler_output, x.sum(-1))


def test_a_tiny_aya_vision_returns_eagers_image_outputs() -> None:
    """AyaVision's testers: ``image_outputs`` is ``(last_hidden_state, hidden_states,
    pooler_output)`` with ``hidden_states`` ``(None, None, t)``; the export returned the
    pooled features as ``hidden_states[0]``."""
    config = transformers.AyaVisionConfig(
        text_config={
            "model_type": "cohere2", "vocab_size": 99, "hidden_size": 32,
            "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 4,
            "num_key_value_heads": 4, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0,
        },
        vision_config={
            "model_type": "siglip_vision_model", "hidden_size": 16, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 32, "image_size": 16,
            "patch_size": 4, "vision_use_head": False,
        },
        image_token_index=2, vision_feature_layer=-1, downsample_factor=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AyaVisionModel(config).eval()
    pixels = torch.randn(1, 3, 16, 16)
    ids = torch.tensor([[1, 2, 2, 2, 2, 5, 6]])  # (16 / (4 * 2))² = 4 image tokens
    with torch.no_grad():
        eager = model(input_ids=ids, pixel_values=pixels, use_cache=False)
        program = export_and_check(
            model, input_ids=ids, pixel_values=pixels, use_cache=False, rtol=1e-3, atol=1e-4
        )
        got = program(input_ids=ids, pixel_values=pixels, use_cache=False)
    assert _keys(got) == _keys(eager)
    assert [h is None for h in got.image_outputs.hidden_states] == [True, True, False]


class OrderUnderExport(torch.nn.Module):
    """Returns its keys in another order while torch.export traces it."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if torch.compiler.is_exporting():
            return {"b": x * 2, "a": x + 1}
        return {"a": x + 1, "b": x * 2}


def test_an_output_structure_other_than_eagers_is_a_parity_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnx_export.dynamo_export(OrderUnderExport(), torch.randn(3))
    parity = [w for w in caught if issubclass(w.category, ParityWarning)]
    assert len(parity) == 1, [str(w.message) for w in caught]
    message = str(parity[0].message)
    assert "output structure differs from eager's" in message
    assert "['a', 'b']" in message and "['b', 'a']" in message
    result = program.verify(torch.randn(3))
    assert not result.ok and result.structure


@pytest.mark.parametrize(
    ("eager", "captured", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1, "b": 2}, ""),
        ((1, None), (1, 2), ""),  # None is a leaf, as in torch.export's specs
        ((1, 2), (1, 2, 3), "output: eager returns 2 items, the export 3"),
        ({"x": (1, 2)}, {"x": [1, 2]}, "output.x: eager returns tuple, the export list"),
        ({"x": {"p": 1, "q": 2}}, {"x": {"q": 2, "p": 1}}, "output.x: eager's ['p', 'q']"),
    ],
    ids=["same", "none-leaf", "count", "container", "key-order"],
)
def test_structure_difference_names_the_first_place(
    eager: Any, captured: Any, expected: str
) -> None:
    from torch.utils import _pytree as pytree

    found = structure_difference(eager, pytree.tree_structure(captured))
    assert found.startswith(expected) if expected else found == ""
