"""Input step: tensors passed in a dtype their spec allows (``cast_from``) cast to its dtype.

A half-precision export (``ExportOptions(dtype="float16")``) records that its float inputs
may come as float32: the caller keeps feeding what the float32 model took, and the cast
happens here, on the tensor's own device (torch) or in numpy. Every other dtype still goes
to :class:`~adapters.input_steps.CheckTensors`, which refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._dtypes import numpy_dtype, torch_dtype
from ._errors import InputDtypeError
from ._spec import LeafSpec
from ._torch import torch_module

__all__ = ["CastInputs"]


def _dtype_name(value: object) -> str | None:
    """``value``'s dtype the spec way (``"float32"``), or ``None`` for a non-tensor."""
    if isinstance(value, np.ndarray):
        return str(value.dtype.name)
    torch = torch_module()
    if torch is not None and isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch.")
    return None


class CastInputs:
    """Step 7: cast each tensor that came in a dtype of its spec's ``cast_from`` to its dtype.

    Args:
        tensors: The tensor leaf specs, in graph order (the leaves this step gets).

    Attributes:
        is_identity: True when no input may be cast; the adapter then skips this step.

    Example:
        >>> import numpy as np
        >>> from onnx_export.adapters import LeafSpec, TensorSpec
        >>> x = TensorSpec("x", "float16", (2,), cast_from=("float32",))
        >>> CastInputs([LeafSpec("x", "tensor", tensor=x)])([np.ones(2, np.float32)])
        [array([1., 1.], dtype=float16)]
    """

    def __init__(self, tensors: Sequence[LeafSpec]) -> None:
        self._casts = tuple(
            (i, leaf.path, leaf.tensor.dtype, frozenset(leaf.tensor.cast_from))
            for i, leaf in enumerate(tensors)
            if leaf.tensor is not None and leaf.tensor.cast_from
        )
        self.is_identity = not self._casts

    def __call__(self, leaves: list[object]) -> list[object]:
        """Return the leaves with the allowed dtypes cast; others unchanged (checked next).

        Raises:
            InputDtypeError: A numpy array to be cast to a dtype numpy cannot hold
                (bfloat16 without ``ml_dtypes``).
        """
        out = list(leaves)
        for i, path, dtype, sources in self._casts:
            value = out[i]
            if _dtype_name(value) in sources:
                out[i] = _cast(value, dtype, path)
        return out


def _cast(value: object, dtype: str, path: str) -> object:
    if isinstance(value, np.ndarray):
        target = numpy_dtype(dtype)
        if target is None:
            raise InputDtypeError(
                f"{path}: the model takes {dtype}, and a {value.dtype} numpy array is cast to "
                f"it on the way in, but numpy has no {dtype} here. pip install ml_dtypes, or "
                f"pass a torch tensor (x.to(torch.{dtype}))."
            )
        return value.astype(target)
    return value.to(torch_dtype(dtype))  # type: ignore[attr-defined]  # a torch.Tensor
