"""Mixtures of experts that loop over the experts that got tokens (#28).

transformers' experts modules without the ``@use_experts_implementation`` switch (DBRX,
and any decorated one run with ``experts_implementation="eager"``) loop in Python over
``nonzero()`` of the experts hit by the router; capture runs that loop over every expert
(``capture/patches/_experts.py``). Each test builds a tiny real transformers model, exports it
with dynamic batch and sequence, and compares ONNX Runtime with eager at two sizes (the
routing, hence the experts hit, differs between them).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnx_export
from tests.helpers import assert_onnx_program_close, export_and_check

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("private_temp_folder")

_DYNAMIC = onnx_export.ExportOptions(dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}})


def _dbrx() -> Any:
    config = transformers.DbrxConfig(
        vocab_size=99, d_model=32, n_heads=2, n_layers=1, max_seq_len=64,
        attn_config={"clip_qkv": 8, "kv_n_heads": 2, "rope_theta": 500000},
        ffn_config={"ffn_hidden_size": 16, "moe_num_experts": 8, "moe_top_k": 2},
        use_cache=False,
    )  # fmt: skip
    return transformers.DbrxForCausalLM(config)


def _mixtral_eager_experts() -> Any:
    config = transformers.MixtralConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=16, num_local_experts=6,
        num_experts_per_tok=2, use_cache=False,
    )  # fmt: skip
    config._experts_implementation = "eager"  # the loop, not transformers' switch
    return transformers.MixtralModel(config)


#: transformers 4.x's DBRX loops over every expert and skips the empty ones
#: (``if token_idx.shape[0] == 0: continue``): a data-dependent branch of another form.
_DBRX_FOUR = pytest.mark.skipif(
    not hasattr(transformers, "masking_utils") or int(transformers.__version__.split(".")[0]) < 5,
    reason="transformers 4.x's DBRX skips experts without tokens (another loop form)",
)


@pytest.mark.parametrize(
    "build",
    [pytest.param(_dbrx, marks=_DBRX_FOUR), _mixtral_eager_experts],
    ids=["dbrx", "mixtral-eager"],
)
def test_a_loop_over_the_hit_experts_runs_over_every_expert(build: Any) -> None:
    torch.manual_seed(0)
    model = build().eval()
    ids = torch.randint(1, 99, (2, 5))
    with torch.no_grad():
        program = export_and_check(model, input_ids=ids, options=_DYNAMIC)
        other = torch.randint(1, 99, (3, 2))  # two tokens: most experts get none
        assert_onnx_program_close(program, model, input_ids=other)
    experts = model.config.ffn_config.moe_num_experts if build is _dbrx else 6
    layers = model.config.n_layers if build is _dbrx else 1
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert ops.count("NonZero") == experts * layers  # one token selection per expert


class Routed(torch.nn.Module):
    """A loop over ``nonzero()`` in a module that is not a mixture of experts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for index in (x > 0).nonzero():
            total = total + x[index[0]]
        return total


def test_a_loop_over_nonzero_elsewhere_is_still_refused_with_its_line() -> None:
    """Only modules with ``num_experts`` are looped over every index: elsewhere the loop
    body need not be a no-op for an index the mask does not hold."""
    with pytest.raises(onnx_export.OnnxExportError) as caught:
        onnx_export.dynamo_export(Routed(), torch.tensor([1.0, -2.0, 3.0]))
    first = str(caught.value).splitlines()[0]
    assert "test_experts_loops.py:" in first and "data-dependent" in first


class NamedExperts(torch.nn.ModuleDict):
    """NLLB-MoE's kind: experts looked up by ``f"expert_{expert_idx[0]}"``, a router cast
    to its own dtype inside ``forward`` (``.to()`` that converts nothing)."""

    def __init__(self, experts: int = 4, width: int = 8) -> None:
        super().__init__({f"expert_{i}": torch.nn.Linear(width, width) for i in range(experts)})
        self.num_experts = experts
        self.router = torch.nn.Linear(width, experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.router = self.router.to(torch.float32)  # a no-op cast, as NLLB-MoE's router
        choice = self.router(x).argmax(-1)
        mask = torch.nn.functional.one_hot(choice, self.num_experts).T  # (experts, tokens)
        out = torch.zeros_like(x)
        for expert_idx in torch.greater(mask.sum(-1), 0).nonzero():
            (tokens,) = torch.where(mask[expert_idx].squeeze(0))
            out.index_add_(0, tokens, self[f"expert_{expert_idx[0]}"](x[tokens]))
        return out


def test_experts_named_by_index_and_a_no_op_module_cast() -> None:
    torch.manual_seed(0)
    model = NamedExperts().eval()
    options = onnx_export.ExportOptions(dynamic_shapes={"x": {0: "tokens"}})
    program = export_and_check(model, torch.randn(6, 8), options=options)
    assert_onnx_program_close(program, model, torch.randn(2, 8))  # most experts get none
    assert model.router.weight.dtype == torch.float32  # the user's model is untouched


def test_a_module_cast_that_converts_is_still_applied() -> None:
    """Only casts that change nothing skip ``_apply``; a real one converts as eagerly."""
    from onnx_export.capture.patches._module_casts import unchanged_module_casts

    layer = torch.nn.Linear(2, 2)
    with unchanged_module_casts():
        assert layer.to(torch.float32) is layer
        assert layer.to(torch.float64).weight.dtype == torch.float64
    assert torch.nn.Linear.to is torch.nn.Module.to  # restored
