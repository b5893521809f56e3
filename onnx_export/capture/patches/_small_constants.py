"""Small tensors made from Python numbers keep their values while torch.export traces.

``torch.tensor([[height, width]])`` of sizes that are plain ints (a static export) is the
same tensor at every call. torch's fake tensors remember the values of such constants
only up to one element (``fake_tensor.CONSTANT_NUMEL_LIMIT``); a larger one is traced as
unknown, and reading it back (``spatial_shapes[0, 0]`` handed to ``torch.arange``, which
reads it with ``.item()``) gives a size computed from data, an unbacked size. SAM 3's DETR
decoder builds its box position bias over ``arange(spatial_shapes[0, 0])`` this way,
then adds it to attention over ``height * width`` keys: ``Eq(u0*u1, 1024)`` cannot be
decided ("Could not guard on data-dependent expression", in ``scaled_dot_product_attention``).

While :func:`small_constants_kept` is active, constants of up to :data:`NUMEL` elements
keep their values, and ops whose every input is such a constant compute theirs (torch's
own constant propagation, with a larger limit). A value is only read from tensors that
depend on no input: they hold the same numbers at every call, so what the trace reads
from them holds for every input. torch drops a constant's value when an op writes to it.
Sizes that are dynamic (``torch.SymInt``) make no constant: read back, they are still
unbacked, and such a capture is refused as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch._subclasses import fake_tensor

from onnx_export.capture.patches._registry import Patch, Target, swapped

__all__ = ["PATCH", "NUMEL", "small_constants_kept"]

#: The most elements of a constant whose values are kept (torch's default keeps 1).
NUMEL = 64


@contextlib.contextmanager
def small_constants_kept() -> Iterator[None]:
    """Fake tensors keep the values of constants of up to :data:`NUMEL` elements, while active.

    Example:
        >>> with small_constants_kept():
        ...     fake_tensor.CONSTANT_NUMEL_LIMIT
        64
    """
    limit = max(fake_tensor.CONSTANT_NUMEL_LIMIT, NUMEL)
    with swapped((fake_tensor, "CONSTANT_NUMEL_LIMIT", limit)):
        yield


#: The record capture enters this patch from (``patches/__init__.py``).
PATCH = Patch(
    name="small_constants",
    targets=(Target("torch._subclasses.fake_tensor", "CONSTANT_NUMEL_LIMIT"),),
    tested=("torch 2.13.0", "torch 2.15.0"),
    why="fake tensors forget the values of constants of more than one element",
    apply=lambda call: small_constants_kept(),
)
