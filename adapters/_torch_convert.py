"""Moving tensors between torch and numpy for the CPU path of ``OnnxModule``.

Dtypes numpy lacks natively (``bfloat16``, float8) go through ``ml_dtypes`` via a bit-level
view, so no value is rounded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dtypes import numpy_dtype
from ._torch import torch_module

__all__ = ["torch_to_numpy", "numpy_to_torch"]

_BITS = {1: (np.uint8, "uint8"), 2: (np.int16, "int16")}


def torch_to_numpy(value: object) -> np.ndarray[Any, Any]:
    """Return a CPU numpy array with the data of a torch tensor (or ``value`` as an array).

    Example:
        >>> torch_to_numpy(np.zeros(2)).shape
        (2,)
    """
    torch = torch_module()
    if torch is None or not isinstance(value, torch.Tensor):
        return np.asarray(value)
    tensor = value.detach().cpu().resolve_conj().resolve_neg()
    name = str(tensor.dtype).removeprefix("torch.")
    if name.startswith(("bfloat", "float8")):
        target = numpy_dtype(name)
        if target is None:
            raise TypeError(
                f"expected a tensor dtype numpy can hold, got {name}. Install ml_dtypes, or "
                "cast the tensor before calling the model."
            )
        _, bits_torch = _BITS[tensor.element_size()]
        raw = tensor.view(getattr(torch, bits_torch)).numpy()
        return np.asarray(raw.view(target))
    return np.asarray(tensor.numpy())


def numpy_to_torch(array: object, device: Any) -> object:
    """Return a torch tensor sharing ``array``'s memory (then moved to ``device`` if not CPU).

    Example:
        >>> import sys
        >>> "torch" not in sys.modules or numpy_to_torch(np.zeros(1), "cpu").shape[0] == 1
        True
    """
    torch = torch_module()
    if torch is None or not isinstance(array, np.ndarray):
        return array
    name = array.dtype.name
    if name.startswith(("bfloat", "float8")):
        bits_np, _ = _BITS[array.dtype.itemsize]
        tensor = torch.from_numpy(array.view(bits_np)).view(getattr(torch, name))
    else:
        tensor = torch.from_numpy(array)
    return tensor if str(device) == "cpu" else tensor.to(device)
