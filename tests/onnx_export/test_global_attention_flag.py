"""Longformer's and LED's "is any token global?" flag, exported as the global branch (#28).

Their encoders compute ``is_global_attn = is_index_global_attn.flatten().any().item()``
and each self-attention branches on it; capture takes the global branch, which gives the
local branch's numbers when no token is global (``capture/patches/_global_attention.py``). Each
test exports a tiny real transformers model with one kind of input and compares ONNX
Runtime with eager on both kinds: with global tokens, and without any (where the global
part has zero columns: ONNX Runtime's ``Einsum`` crashed on that before ``ops/einsum.py``).
The local attention's overlapping chunks (``as_strided`` of a transposed view) are read in
memory order (``ops/strided.py``); they were 4e-3 off before.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("private_temp_folder")


def _longformer() -> Any:
    config = transformers.LongformerConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=37, attention_window=4, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.LongformerModel(config)


def _inputs(global_tokens: int, batch: int = 2) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 99, (batch, 8), generator=torch.Generator().manual_seed(1))
    marks = torch.zeros_like(ids)
    marks[0, :global_tokens] = 1  # the other rows have none: both kinds in one batch
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "global_attention_mask": marks,
    }


_BATCH = onnx_export.ExportOptions(dynamic_shapes={name: {0: "batch"} for name in _inputs(0)})


@pytest.mark.parametrize("example_globals", [0, 2], ids=["local-example", "global-example"])
def test_longformer_matches_eager_with_and_without_global_tokens(example_globals: int) -> None:
    """With a dynamic batch too: the chunks' strides are then symbolic."""
    torch.manual_seed(0)
    model = _longformer().eval()
    with torch.no_grad():
        program = export_and_check(model, **_inputs(example_globals), options=_BATCH)
        for other, batch in ((0, 2), (1, 3), (3, 1), (0, 1)):
            assert_onnx_program_close(program, model, **_inputs(other, batch))


def test_led_encoder_matches_eager_with_and_without_global_tokens() -> None:
    config = transformers.LEDConfig(
        vocab_size=99, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=8,
        decoder_ffn_dim=8, max_encoder_position_embeddings=32,
        max_decoder_position_embeddings=32, attention_window=[4], use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LEDModel(config).eval()
    decoder = {"decoder_input_ids": torch.tensor([[2, 5, 7], [2, 9, 4]])}
    with torch.no_grad():
        program = export_and_check(model, **_inputs(0), **decoder)
        assert_onnx_program_close(program, model, **_inputs(2), **decoder)


def test_a_plain_flag_is_left_to_the_model() -> None:
    """Outside capture (eager), the flag is a bool and the model's own branch runs."""
    from onnx_export.capture.patches._global_attention import global_attention_flag

    torch.manual_seed(0)
    model = _longformer().eval()
    with torch.no_grad():
        expected = model(**_inputs(0)).last_hidden_state
        with global_attention_flag(model):
            assert torch.equal(model(**_inputs(0)).last_hidden_state, expected)
    assert "forward" not in model.encoder.layer[0].attention.self.__dict__  # restored


def test_global_attentions_as_outputs_stay_refused_at_the_encoders_line() -> None:
    """With ``output_attentions=True`` the outputs' structure depends on the flag (global
    attentions only when a token is global): no single program has it, capture refuses."""
    torch.manual_seed(0)
    model = _longformer().eval()
    with pytest.raises(onnx_export.OnnxExportError) as caught:
        onnx_export.dynamo_export(model, **_inputs(0), output_attentions=True)
    first = str(caught.value).splitlines()[0]
    assert "modeling_longformer.py" in first and "is_global_attn" in first
