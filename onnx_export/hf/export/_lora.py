"""LoRA adapters as graph inputs: one export of the base model, any adapter at run time.

``export_pretrained(..., lora=["q_proj", "v_proj"])`` (or ``lora=ADAPTER_DIR``, which takes
the module names from a PEFT adapter) exports the text-generation graph with two more
inputs per target ``nn.Linear``: ``lora.<module path>.A`` (rank, in features) and
``lora.<module path>.B`` (out features, rank), float32, the rank a dynamic dimension
(``lora_rank``). Each target then computes ``base(x) + (x @ A^T) @ B^T``: the runtime
feeds an adapter's factors (the scaling folded into B, see ``hf/_peft.py``), or a rank-0
pair for the base model, so switching adapters is feeding other tensors.

The update is added by a forward hook on each target module, registered for the length of
one call of :class:`LoraCausalLM` and removed after it: the model's own modules, names and
weights stay as they are (the default and the fused decoder wrap the same model), and
peft is not needed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from onnx_export.hf._errors import CheckpointError
from onnx_export.hf._peft import read_lora_adapter
from onnx_export.hf.export.graphs._base import GraphSpec

__all__ = ["LORA_INPUT", "RANK_DIM", "LoraCausalLM", "lora_target_names", "with_lora"]

#: The graph's LoRA inputs are ``lora.<module path>.A`` and ``.B``.
LORA_INPUT = "lora"
#: The name of every LoRA input's rank dimension.
RANK_DIM = "lora_rank"
#: PEFT's name for every Linear layer but the output head.
ALL_LINEAR = "all-linear"

# The example's rank: not 0 or 1 (torch.export specialises those), unlike the other sizes.
_EXAMPLE_RANK = 5


def lora_target_names(lora: Sequence[str] | str | os.PathLike[str]) -> tuple[str, ...]:
    """The target module names ``export_pretrained``'s ``lora`` asks for.

    A sequence of module names (``["q_proj", "v_proj"]``, ``["all-linear"]``), or a PEFT
    adapter folder whose LoRA modules name them (every layer's module of those names
    becomes a target, so adapters on other layers fit the same export).
    """
    if isinstance(lora, (str, os.PathLike)):
        return read_lora_adapter(lora).target_names
    names = tuple(str(n) for n in lora)
    if not names or not all(n.strip() for n in names):
        raise CheckpointError(
            f"lora={list(lora)!r}: give target module names such as ['q_proj', 'v_proj'] "
            "(or 'all-linear'), or a PEFT adapter folder."
        )
    return names


def _target_modules(model: nn.Module, names: Sequence[str]) -> dict[str, nn.Linear]:
    """Each Linear module whose path is, or ends with, one of ``names`` (PEFT's rule)."""
    linear = {p: m for p, m in model.named_modules() if isinstance(m, nn.Linear)}
    head = getattr(model, "get_output_embeddings", lambda: None)()
    found: dict[str, nn.Linear] = {}
    for name in names:
        if name == ALL_LINEAR:
            found.update({p: m for p, m in linear.items() if m is not head})
            continue
        matched = {p: m for p, m in linear.items() if p == name or p.endswith("." + name)}
        if not matched:
            others = sorted(
                {type(m).__name__ for p, m in model.named_modules() if p.endswith("." + name)}
            )
            what = f"is a {', '.join(others)}, not nn.Linear" if others else "is not in it"
            known = sorted({p.rpartition(".")[2] for p in linear})
            raise CheckpointError(
                f"LoRA target {name!r} {what} in {type(model).__name__}; its Linear modules "
                f"are named {', '.join(known)}."
            )
        found.update(matched)
    return dict(sorted(found.items()))


def _add_update(
    pair: Mapping[str, torch.Tensor], module: nn.Module, args: tuple[Any, ...], output: Any
) -> torch.Tensor:
    """``output + (x @ A^T) @ B^T``: the low-rank update of the module's input ``x``."""
    x = args[0]
    a, b = pair["A"].to(x.dtype), pair["B"].to(x.dtype)
    return output + nn.functional.linear(nn.functional.linear(x, a), b)  # type: ignore[no-any-return]


@contextlib.contextmanager
def _updates(
    targets: Mapping[str, nn.Module], lora: Mapping[str, Mapping[str, torch.Tensor]]
) -> Iterator[None]:
    handles = [
        module.register_forward_hook(functools.partial(_add_update, lora[path]))
        for path, module in targets.items()
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class LoraCausalLM(nn.Module):
    """A decoder wrapper (default or fused) that takes the targets' LoRA factors as inputs.

    ``lora`` maps each target module's path to ``{"A": (rank, in), "B": (out, rank)}``.
    """

    def __init__(self, inner: nn.Module, targets: Mapping[str, nn.Linear]) -> None:
        super().__init__()
        self.inner = inner
        self.targets = dict(targets)  # a plain dict: the modules stay registered in inner only

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: list[dict[str, torch.Tensor]],
        lora: dict[str, dict[str, torch.Tensor]],
    ) -> Any:
        """The inner wrapper's step, each target module adding ``(x @ A^T) @ B^T``."""
        with _updates(self.targets, lora):
            return self.inner(input_ids, attention_mask, position_ids, past_key_values)


def _example(targets: Mapping[str, nn.Linear]) -> dict[str, dict[str, torch.Tensor]]:
    """Random non-zero factors: the parity check then covers the update itself."""
    generator = torch.Generator().manual_seed(2)
    example = {}
    for path, module in targets.items():
        a = torch.randn(_EXAMPLE_RANK, module.in_features, generator=generator)
        b = torch.randn(module.out_features, _EXAMPLE_RANK, generator=generator)
        example[path] = {"A": a * 0.1, "B": b * 0.1}
    return example


def with_lora(model: nn.Module, spec: GraphSpec, names: Sequence[str]) -> GraphSpec:
    """``spec`` (the decoder's, default or fused) with the targets' LoRA factors as inputs."""
    targets = _target_modules(model, names)
    example = _example(targets)
    dims = {path: {"A": {0: RANK_DIM}, "B": {1: RANK_DIM}} for path in targets}
    changes: dict[str, Any] = {
        "module": LoraCausalLM(spec.module, targets),
        "args": (*spec.args, example),
        "dynamic_shapes": {**spec.dynamic_shapes, LORA_INPUT: dims},
    }
    if spec.fallback is not None:
        changes["fallback"] = {**spec.fallback, LORA_INPUT: dims}
    if getattr(spec, "check_args", ()):  # the fused decoder's own check inputs
        changes["check_args"] = (*spec.check_args, example)  # type: ignore[attr-defined]
    return dataclasses.replace(spec, **changes)
