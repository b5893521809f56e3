"""Qwen2-VL's index computations, with numpy: M-RoPE position ids and vision windows.

The exported graphs take these as inputs (``hf/export/graphs/_qwen_vl.py``): they are
loops over the values of the images' grids and of the token ids, which a graph cannot
hold as transformers writes them.

- :func:`rope_index`: the decoder's (3, batch, length) position ids for a prompt, as
  transformers' ``get_rope_index`` computes them: text tokens count up on all three rows;
  an image's tokens take (frame, row, column) offsets of its merged grid from the
  position where the image starts, and the text after it resumes at that start plus the
  grid's longer side. The per-prompt delta (last position + 1 - unpadded length) is
  what decoding steps add to the text position on all three rows.
- :func:`vision_window_index`: Qwen2.5-VL's window attention: the order of the merged
  patches window by window and the cumulative window lengths (in patches), as
  transformers' ``get_vision_window_index``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from onnx_export.hf._errors import GenerationError

__all__ = ["rope_index", "vision_window_index", "image_token_count", "grids_per_prompt"]

Int64Array = npt.NDArray[np.int64]


def image_token_count(grid_thw: Sequence[int], merge_size: int) -> int:
    """How many tokens an image of grid (frames, rows, columns) has after merging."""
    frames, rows, columns = (int(v) for v in grid_thw)
    return frames * rows * columns // (merge_size * merge_size)


def _image_positions(start: int, grid_thw: Sequence[int], merge_size: int) -> Int64Array:
    """(3, tokens): an image's (frame, row, column) positions, offset by ``start``."""
    frames, rows, columns = (int(v) for v in grid_thw)
    rows, columns = rows // merge_size, columns // merge_size
    t, h, w = np.meshgrid(np.arange(frames), np.arange(rows), np.arange(columns), indexing="ij")
    return np.stack([t, h, w]).reshape(3, -1).astype(np.int64) + start


def _runs(is_image: npt.NDArray[np.bool_]) -> list[tuple[bool, int, int]]:
    """The runs of equal values in ``is_image``: (image?, start, end)."""
    edges = np.flatnonzero(np.diff(is_image.astype(np.int8))) + 1
    bounds = [0, *edges.tolist(), len(is_image)]
    return [(bool(is_image[a]), a, b) for a, b in itertools.pairwise(bounds) if b > a]


def rope_index(
    input_ids: Int64Array,
    attention_mask: Int64Array,
    image_grid_thw: Sequence[Sequence[int]],
    image_token_id: int,
    merge_size: int,
) -> tuple[Int64Array, Int64Array]:
    """The prompt's M-RoPE position ids (3, batch, length) and deltas (batch, 1).

    Args:
        input_ids: (batch, length) token ids, each image's tokens already repeated (one
            per merged patch), left-padded.
        attention_mask: (batch, length), 0 on padding (whose positions are 0).
        image_grid_thw: The images' (frames, rows, columns) in patches, in the order
            their tokens appear (row by row).
        image_token_id: The image placeholder's id.
        merge_size: The vision config's ``spatial_merge_size``.

    Returns:
        The position ids and, per prompt, the delta the next positions add to the
        number of its tokens.
    """
    batch, length = input_ids.shape
    positions = np.zeros((3, batch, length), np.int64)
    deltas = np.zeros((batch, 1), np.int64)
    grids = iter(image_grid_thw)
    for row in range(batch):
        kept = attention_mask[row].astype(bool)
        ids = input_ids[row][kept]
        pieces, start = [], 0
        for image, begin, end in _runs(ids == image_token_id):
            if not image:
                pieces.append(np.broadcast_to(np.arange(end - begin) + start, (3, end - begin)))
                start += end - begin
                continue
            grid = next(grids)
            pieces.append(_image_positions(start, grid, merge_size))
            start += max(int(grid[1]), int(grid[2])) // merge_size
        found = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
        positions[:, row, kept] = found
        deltas[row, 0] = (int(found.max()) + 1 if found.size else 0) - len(ids)
    return positions, deltas


def vision_window_index(
    grid_thw: Sequence[Sequence[int]], merge_size: int, window_size: int, patch_size: int
) -> tuple[Int64Array, Int64Array]:
    """Qwen2.5-VL's window order of the merged patches and cumulative window lengths.

    Returns:
        ``window_index`` (merged patches,): the merged patches window by window, and
        ``cu_window_seqlens`` (windows + 1,): where each window starts, in patches
        (empty windows dropped, as transformers' ``unique_consecutive`` does).
    """
    side = window_size // merge_size // patch_size
    unit = merge_size * merge_size
    order: list[Int64Array] = []
    starts, offset = [0], 0
    for grid in grid_thw:
        frames, rows, columns = int(grid[0]), int(grid[1]) // merge_size, int(grid[2]) // merge_size
        index = np.arange(frames * rows * columns).reshape(frames, rows, columns)
        tall, wide = rows + side - rows % side, columns + side - columns % side
        padded = np.full((frames, tall, wide), -1, np.int64)
        padded[:, :rows, :columns] = index
        windows = padded.reshape(frames, tall // side, side, wide // side, side)
        windows = windows.transpose(0, 1, 3, 2, 4).reshape(frames, -1, side * side)
        lengths = (windows != -1).sum(-1).reshape(-1)
        flat = windows.reshape(-1)
        order.append(flat[flat != -1] + offset)
        starts.extend((np.cumsum(lengths) * unit + starts[-1]).tolist())
        offset += frames * rows * columns
    bounds = np.asarray(starts, np.int64)
    keep = np.concatenate([[True], bounds[1:] != bounds[:-1]])
    return np.concatenate(order).astype(np.int64), bounds[keep]


def grids_per_prompt(
    counts: Sequence[int], image_grid_thw: Sequence[Sequence[int]], merge_size: int
) -> list[list[tuple[int, int, int]]]:
    """The images' grids of each prompt, given how many image tokens each prompt holds."""
    grids = [(int(t), int(h), int(w)) for t, h, w in image_grid_thw]
    out: list[list[tuple[int, int, int]]] = []
    at = 0
    for count in counts:
        mine: list[tuple[int, int, int]] = []
        left = count
        while left > 0 and at < len(grids):
            mine.append(grids[at])
            left -= image_token_count(grids[at], merge_size)
            at += 1
        if left != 0:
            raise GenerationError(
                f"A prompt's image tokens do not add up to its images' grids {mine} (merge "
                f"{merge_size}): give image_grid_thw as the processor wrote it, one row per "
                "image in the order the images appear."
            )
        out.append(mine)
    if at != len(grids):
        raise GenerationError(
            f"image_grid_thw has {len(grids)} rows but the prompts' image tokens take "
            f"{at}: one row per image."
        )
    return out
