"""Multimodal rotary positions (M-RoPE) captured as tensor ops instead of transformers' loops.

A vision-language model of the Qwen2-VL kind (Qwen2/2.5/3/3.5-VL, GLM-4.1V/4.5V/4.6V,
GLM-OCR, PaddleOCR-VL, ERNIE-4.5-VL...) called without ``position_ids`` computes them in
``get_rope_index``, which groups each row's tokens by modality in Python
(``itertools.groupby`` over ``mm_token_type_ids.tolist()``) and reads grid sizes with
``.item()``. torch.export cannot trace that ("Could not guard on data-dependent
expression").

While :func:`multimodal_rope` is active, the classes of ``model``'s modules whose
``get_rope_index`` follows that scheme get one computed with tensor ops
(:func:`~onnx_export.capture.patches._mrope_index.multimodal_positions`): the graph computes the
positions from the token ids, the mask and the grids it is called with, for any number
of images and grid sizes.

A class is switched only when its code is recognised (the runs grouped by modality, the
vision helper's grid layout, and the known variants: GLM-4V's videos split by frame,
Qwen2.5-VL's seconds per grid, ERNIE-4.5-VL's temporal merge) and when both computations
agree on a small example made from the module's config (a padded batch with images and
videos), checked eagerly before capture. Any other class keeps its code, and a capture
that fails there says to pass ``position_ids`` (see ``_data_dependent.py``).
``rope_deltas``, which the model keeps between calls, is restored after capture (tracing
leaves a traced tensor there).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

from onnx_export.capture.patches._mrope_index import RopeLayout, multimodal_positions
from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "multimodal_rope"]

#: What every recognised ``get_rope_index`` does: runs by modality, a grid per vision run.
_SCHEME = (
    "itertools.groupby(",
    "input_token_type.tolist()",
    "self.get_vision_position_ids(",
    "max(grid_thw[1], grid_thw[2]) // spatial_merge_size",
    "spatial_merge_size = self.config.vision_config.spatial_merge_size",
)
#: What the vision helper it calls does: a (t, h, w) grid offset by the position reached.
_GRID = (
    "(torch.arange(llm_grid_t, device=device) * time_interval).long()",
    "torch.arange(llm_grid_h, device=device) + start_position",
    "torch.arange(llm_grid_w, device=device) + start_position",
    "vision_position_ids[0] += start_position",
)
_SPLIT_VIDEOS = "torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)"
_TEMPORAL_MERGE = "t_merge_size = 1 if modality_type == 1 else temporal_merge_size"
_SECONDS = "time_interval = tokens_per_second * next(second_per_grid_ts)"

#: Layout reader of each class already read (``None``: not of this scheme).
_LAYOUTS: dict[type, Callable[[Any], RopeLayout] | None] = {}
#: Whether a class's code and ours agreed on the example of a layout.
_AGREED: dict[tuple[type, RopeLayout], bool] = {}


def _source(function: Any) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _layout_reader(cls: type) -> Callable[[Any], RopeLayout] | None:
    """How to read the layout of ``cls``'s modules, when its positions follow the scheme."""
    index, grid = (
        getattr(cls, "get_rope_index", None),
        getattr(cls, "get_vision_position_ids", None),
    )
    code, helper = _source(index), _source(grid)
    if not all(m in code for m in _SCHEME) or not all(m in helper for m in _GRID):
        return None
    split, merged, seconds = (m in code for m in (_SPLIT_VIDEOS, _TEMPORAL_MERGE, _SECONDS))

    def read(module: Any) -> RopeLayout:
        vision = module.config.vision_config
        return RopeLayout(
            vision.spatial_merge_size,
            split_videos=split,
            video_temporal_merge=vision.temporal_merge_size if merged else 1,
            tokens_per_second=vision.tokens_per_second if seconds else None,
        )

    return read


def _example(layout: RopeLayout) -> dict[str, torch.Tensor]:
    """Two rows (one left-padded) with an image and a video each, laid out for ``layout``."""
    m, tm = layout.spatial_merge, layout.video_temporal_merge
    images = [[1, 2 * m, m], [1, m, 3 * m]]
    videos = [[2 * tm, m, 2 * m], [tm, 2 * m, 2 * m]]

    def row(image: list[int], video: list[int]) -> list[int]:
        frames, tokens = video[0] // tm, video[1] * video[2] // (m * m)
        if layout.split_videos:  # frames run apart (timestamps between them)
            clip = [t for _ in range(video[0]) for t in (0, *[2] * tokens)]
        else:
            clip = [2] * (frames * tokens)
        return [0, 0, *[1] * (image[1] * image[2] // (m * m)), 0, *clip, 0, 0]

    rows = [row(images[0], videos[0]), row(images[1], videos[1])]
    length = max(len(r) for r in rows) + 1
    types = torch.zeros(2, length, dtype=torch.long)
    mask = torch.zeros(2, length, dtype=torch.long)
    for b, r in enumerate(rows):
        first = length - len(r) if b else 0  # the second row left-padded, the first right-padded
        types[b, first : first + len(r)] = torch.tensor(r)
        mask[b, first : first + len(r)] = 1
    example = {
        "input_ids": torch.arange(2 * length).reshape(2, length) + 10,
        "mm_token_type_ids": types,
        "image_grid_thw": torch.tensor(images),
        "video_grid_thw": torch.tensor(videos),
        "attention_mask": mask,
    }
    if layout.tokens_per_second is not None:
        example["second_per_grid_ts"] = torch.tensor([0.5, 1.7])
    return example


def _agrees(module: Any, original: Any, layout: RopeLayout) -> bool:
    """Whether ``original`` and ours give the same positions on a small example."""
    example = _example(layout)
    try:
        with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.no_grad():
            expected = original(module, **example)
            ours = multimodal_positions(layout, **example)
    except Exception:  # a scheme we misread: its code stays
        return False
    return all(torch.equal(e, o) for e, o in zip(expected, ours, strict=True))


def _tensor_index(original: Any, read: Callable[[Any], RopeLayout]) -> Any:
    """A ``get_rope_index`` with ``original``'s signature that calls ours."""
    signature = inspect.signature(original)

    def get_rope_index(self: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        return multimodal_positions(
            read(self),
            given["input_ids"],
            given["mm_token_type_ids"],
            given.get("image_grid_thw"),
            given.get("video_grid_thw"),
            given.get("attention_mask"),
            given.get("second_per_grid_ts"),
        )

    return get_rope_index


def _classes_to_switch(model: torch.nn.Module) -> dict[type, Any]:
    """The classes of ``model``'s modules to switch, with the function to switch to."""
    switch: dict[type, Any] = {}
    for module in model.modules():
        cls = type(module)
        if cls in switch or not hasattr(cls, "get_rope_index"):
            continue
        if cls not in _LAYOUTS:
            _LAYOUTS[cls] = _layout_reader(cls)
        read = _LAYOUTS[cls]
        if read is None:
            continue
        original, layout = getattr(cls, "get_rope_index"), read(module)  # noqa: B009
        if (cls, layout) not in _AGREED:
            _AGREED[cls, layout] = _agrees(module, original, layout)
        if _AGREED[cls, layout]:
            switch[cls] = _tensor_index(original, read)
    return switch


@contextlib.contextmanager
def multimodal_rope(model: torch.nn.Module) -> Iterator[None]:
    """``model``'s multimodal rotary positions computed with tensor ops while active.

    Example:
        >>> with multimodal_rope(torch.nn.Linear(2, 2)):
        ...     pass
    """
    try:
        switch = _classes_to_switch(model)
        kept = [(m, m.rope_deltas) for m in model.modules() if hasattr(m, "rope_deltas")]
    except Exception:  # a model whose modules cannot be read: nothing to switch
        switch, kept = {}, []
    if not switch:
        yield
        return
    indexes = ((cls, "get_rope_index", index) for cls, index in switch.items())
    try:
        with swapped(*indexes):  # patched while capturing (under EXPORT_LOCK)
            yield
    finally:
        for module, deltas in kept:
            module.rope_deltas = deltas


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="mrope",
    targets=(
        Target(
            "transformers.models.qwen2_vl.modeling_qwen2_vl",
            "Qwen2VLModel.get_rope_index",
            example=True,
        ),
    ),
    tested=("torch 2.13.0", "torch 2.15.0", "transformers 5.25"),
    why="multimodal rotary positions group tokens by modality in Python, grids read by .item()",
    apply=lambda call: multimodal_rope(call.model),
)
