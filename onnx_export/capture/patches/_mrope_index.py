"""Multimodal rotary positions (M-RoPE) computed from the token ids with tensor ops only.

transformers' vision-language models of the Qwen2-VL kind give each token three rotary
positions (temporal, height, width). Their ``get_rope_index`` walks the batch row by row
in Python: it groups the row's (unpadded) tokens into runs of one modality
(``itertools.groupby`` over ``mm_token_type_ids.tolist()``), gives a text run the next
positions on all three axes, and an image or video run the positions of its grid (the
next row of ``image_grid_thw`` or ``video_grid_thw``, taken in order over the whole batch)
offset by the position reached; a vision run advances the position by the larger side of
its merged grid. It returns the positions and, per row, the largest position + 1 minus
the row's length (the delta generation adds later).

:func:`multimodal_positions` computes the same integers with cumulative sums and gathers,
for any token ids, masks and grids, so torch.export traces it without reading values:

* the row's tokens are compacted (padding removed) with a scatter; a run starts where a
  token's modality differs from the previous token's;
* an image (video) run's grid is the row of the grid tensor whose index is the count of
  image (video) runs before it, over the batch in row order;
* each token adds 1 to the position reached (text) or the run's advance (the first token
  of a vision run), so a cumulative sum gives the text positions and each vision run's
  start; the offset of a vision token inside its run comes from two more cumulative sums
  (vision tokens seen, grid sizes of the runs seen).

It assumes what transformers' processors produce and eager's code needs: a vision run has
as many tokens as its merged grid (eager fails otherwise, or lays the positions out
shifted).
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["RopeLayout", "multimodal_positions"]


@dataclasses.dataclass(frozen=True)
class RopeLayout:
    """How a model's ``get_rope_index`` lays vision grids out, beyond the common scheme.

    Attributes:
        spatial_merge: The vision config's ``spatial_merge_size`` (height and width of a
            grid are divided by it).
        split_videos: Each frame of a video is a run of its own (GLM-4V's timestamps
            between frames): ``video_grid_thw`` row ``(t, h, w)`` stands for ``t`` runs of
            grid ``(1, h, w)``.
        video_temporal_merge: A video's frames are divided by it (ERNIE-4.5-VL's
            ``temporal_merge_size``); images are not.
        tokens_per_second: A video's temporal positions are its frame index times
            ``tokens_per_second * second_per_grid_ts[video]`` (times 1 without
            ``second_per_grid_ts``), truncated (Qwen2.5-VL); ``None``: the frame index.

    Example:
        >>> RopeLayout(2).split_videos
        False
    """

    spatial_merge: int
    split_videos: bool = False
    video_temporal_merge: int = 1
    tokens_per_second: int | float | None = None


def _grid_of_each(grid: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor:
    """``grid[index]`` (one row per token, ``index`` clamped into range): (B, L, 3)."""
    if grid is None:
        return torch.zeros(*index.shape, 3, dtype=torch.long, device=index.device)
    clamped = index.clamp(min=0, max=grid.shape[0] - 1)
    return grid.long()[clamped]


def _video_grids(layout: RopeLayout, grid: torch.Tensor | None, run: torch.Tensor) -> torch.Tensor:
    """The grid of each token's video run, ``run`` the run's index over the batch."""
    if grid is None or not layout.split_videos:
        return _grid_of_each(grid, run)
    frames_end = grid[:, 0].long().cumsum(0)  # run k is a frame of video (#ends <= k)
    video = (frames_end[None, None, :] <= run[..., None]).sum(-1)
    rows = _grid_of_each(grid, video)
    return torch.cat([torch.ones_like(rows[..., :1]), rows[..., 1:]], dim=-1)


def _compacted(kinds: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's modalities without padding (-1 after the row's tokens), token indices.

    The second result is each valid token's index in its compacted row.
    """
    order = valid.long().cumsum(-1) - 1
    length = kinds.shape[1]
    slot = order.masked_fill(~valid, length)  # padding goes to a slot that is dropped
    values = torch.where(valid, kinds.long() + 1, 0)
    room = torch.zeros(kinds.shape[0], length + 1, dtype=torch.long, device=kinds.device)
    return room.scatter_add(1, slot, values)[:, :length] - 1, order


def _temporal(
    layout: RopeLayout,
    frame: torch.Tensor,
    video: torch.Tensor,
    run: torch.Tensor,
    seconds: torch.Tensor | None,
) -> torch.Tensor:
    """Temporal position of each vision token inside its grid (before the run's start)."""
    if layout.tokens_per_second is None:
        return frame
    if seconds is None:
        spaced = (frame * layout.tokens_per_second).long()
    else:
        clamped = run.clamp(min=0, max=seconds.shape[0] - 1)
        spaced = (frame * (layout.tokens_per_second * seconds[clamped])).long()
    return torch.where(video, spaced, frame)


def multimodal_positions(
    layout: RopeLayout,
    input_ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``get_rope_index``'s positions (3, B, L) and deltas (B, 1), with tensor ops only.

    ``mm_token_type_ids``: 0 text, 1 image, 2 video. Padding (``attention_mask`` 0) gets
    position 0 and is skipped when runs are formed, as eager does.

    Example:
        >>> ids = torch.tensor([[7, 7, 8, 8, 8, 8, 7]])
        >>> types = torch.tensor([[0, 0, 1, 1, 1, 1, 0]])
        >>> positions, delta = multimodal_positions(
        ...     RopeLayout(1), ids, types, image_grid_thw=torch.tensor([[1, 2, 2]])
        ... )
        >>> positions[:, 0].tolist(), delta.tolist()
        ([[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]], [[-2]])
    """
    valid = (
        attention_mask.bool()
        if attention_mask is not None
        else torch.ones_like(mm_token_type_ids, dtype=torch.bool)
    )
    kinds, order = _compacted(mm_token_type_ids, valid)
    batch, length = kinds.shape
    inside = torch.arange(length, device=kinds.device)[None, :] < valid.long().sum(-1, True)
    before = torch.cat([torch.full_like(kinds[:, :1], -2), kinds[:, :-1]], dim=1)
    start = inside & (kinds != before)
    image, video = kinds == 1, kinds == 2
    vision = image | video
    image_run = (image & start).long().reshape(-1).cumsum(0).reshape(batch, length) - 1
    video_run = (video & start).long().reshape(-1).cumsum(0).reshape(batch, length) - 1
    grid = torch.where(
        video[..., None],
        _video_grids(layout, video_grid_thw, video_run),
        _grid_of_each(image_grid_thw, image_run),
    )
    merge = layout.spatial_merge
    frames = torch.where(video, grid[..., 0] // layout.video_temporal_merge, grid[..., 0])
    height, width = grid[..., 1] // merge, grid[..., 2] // merge
    size = frames * height * width
    advance = torch.maximum(grid[..., 1], grid[..., 2]) // merge

    # Each text token moves the position by 1, each vision run by its advance (at its start).
    step = torch.where(vision, torch.where(start, advance, 0), 1) * inside
    reached = step.cumsum(-1)
    seen = (vision & inside).long().cumsum(-1)
    sizes = torch.where(vision & start, size, 0).cumsum(-1)
    offset = seen - 1 - (sizes - size)  # index of a vision token inside its run's grid
    area, across = (height * width).clamp(min=1), width.clamp(min=1)
    base = reached - advance
    temporal = _temporal(layout, offset // area, video, video_run, second_per_grid_ts)
    axes = (temporal, (offset // across) % height.clamp(min=1), offset % across)
    text = reached - 1
    compact = torch.stack([torch.where(vision, axis + base, text) for axis in axes])

    lowest = torch.iinfo(torch.long).min
    largest = compact.masked_fill(~inside[None], lowest).amax(dim=(0, 2))
    deltas = (largest + 1 - valid.long().sum(-1))[:, None]
    gather = order.clamp(min=0)[None].expand(3, batch, length)
    positions = compact.gather(2, gather).masked_fill(~valid[None], 0)
    return positions.to(input_ids.dtype), deltas
