"""Inputs for the task cases (other batch and sequence sizes than the export's examples) and
what eager transformers returns for them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tests.hf.task_cases import TaskCase


def _ids(shape: tuple[int, ...], seed: int, high: int = 90) -> torch.Tensor:
    return torch.randint(4, high, shape, generator=torch.Generator().manual_seed(seed))


def _vision_config(config: Any) -> Any:
    return getattr(config, "vision_config", None) or getattr(config, "encoder", None) or config


def pixels(config: Any, batch: int) -> torch.Tensor:
    """Random images of the config's size."""
    vision = _vision_config(config)
    size = getattr(vision, "image_size", 32)
    height, width = (size[0], size[-1]) if isinstance(size, (list, tuple)) else (size, size)
    generator = torch.Generator().manual_seed(7)
    return torch.randn(
        batch, getattr(vision, "num_channels", 3), height, width, generator=generator
    )


def _text(model: Any, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    import inspect

    ids = _ids(shape, seed=5)
    mask = torch.ones_like(ids)
    mask[-1, ..., -3:] = 0  # the last row padded
    inputs = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        types = torch.zeros_like(ids)
        types[..., shape[-1] // 2 :] = 1  # a second segment
        inputs["token_type_ids"] = types
    return inputs


def task_inputs(case: TaskCase, model: Any) -> dict[str, torch.Tensor]:
    """The inputs of one call: 3 rows (1 image for detection) of other sizes than the export's."""
    if case.task == "multiple-choice":
        return _text(model, (3, 3, 5))
    if case.family in ("encoder", "decoder"):
        return _text(model, (3, 11))
    if case.task == "zero-shot-image-classification":
        ids = _ids((2, 5), seed=6)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "pixel_values": pixels(model.config, 3)}  # fmt: skip
    if case.family == "audio":
        return {"input_values": torch.randn(3, 3200, generator=torch.Generator().manual_seed(8))}
    return {"pixel_values": pixels(model.config, 3)}


_OUTPUTS = {
    "feature-extraction": ("last_hidden_state",),
    "question-answering": ("start_logits", "end_logits"),
    "object-detection": ("logits", "pred_boxes"),
    "depth-estimation": ("predicted_depth",),
    "zero-shot-image-classification": (
        "logits_per_image", "logits_per_text", "text_embeds", "image_embeds"),
}  # fmt: skip


def eager_outputs(case: TaskCase, model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What transformers returns, by output name, as numpy."""
    with torch.no_grad():
        out = model(**inputs)
    if case.task == "sentence-similarity":
        hidden = out.last_hidden_state
        weights = inputs["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * weights).sum(1) / weights.sum(1)
        return {"token_embeddings": hidden.numpy(), "sentence_embedding": pooled.numpy()}
    return {name: getattr(out, name).numpy() for name in _OUTPUTS.get(case.task, ("logits",))}


def numpy_inputs(inputs: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The inputs as numpy arrays."""
    return {k: v.numpy() for k, v in inputs.items()}
