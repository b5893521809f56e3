"""The decorator that registers one of our own ONNX functions where it is defined.

Usage (adding an op; see "Adding an op" in ``docs/contributing.md``):

1. Write the function in the topic module it belongs to (``ops/math.py``, ``ops/nn.py``...):
   plain Python calling ``op.X(...)`` from ``onnx_export.ops._common`` on ``ir.Value`` inputs,
   parameters named as in the ATen schema (``from`` is ``from_``), returning the outputs.
2. Decorate it: ``@onnx_op("aten::foo", "aten::foo.Scalar")`` (every key it implements,
   as ``OpOverload.name()`` spells it); ``complex=True`` for complex inputs (real view).
   Factory-made functions register with a call: ``aten_bar = onnx_op("aten::bar")(_make())``.
3. A new topic module is imported in ``ops/__init__.py`` (nothing else lists ops).
4. Test it in CI: its OpInfo name in ``CI_OPS`` and the keys in ``OWN_OPS``
   (``tests/ops/ops_test_data.py``), or a case in ``tests/ops/test_own_ops.py``;
   ``tests/ops/test_op_coverage.py`` fails while a registered key has neither.
5. Limits raise (``known_rank``, ``static_shape``, ``unsupported``... in ``_common``),
   never ``assert``; ``op`` is typed (``_opset.py``): add a missing ONNX op there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["OwnOp", "onnx_op", "registered_ops", "target_name"]

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class OwnOp:
    """One of our own functions for one operator key.

    Attributes:
        target: The operator's key as ``OpOverload.name()`` gives it (``"aten::foo.Scalar"``).
        function: The Python function that records the op's ONNX nodes.
        is_complex: Whether it implements the complex variant (inputs as their real view).
    """

    target: str
    function: Callable[..., Any]
    is_complex: bool = False


_REGISTERED: dict[tuple[str, bool], OwnOp] = {}


def onnx_op(*targets: str, complex: bool = False) -> Callable[[_F], _F]:
    """Register the decorated function for every key in ``targets``.

    Raises:
        ValueError: When no key is given, or a key (with the same ``complex``) already
            has one of our functions: each key has exactly one.
    """
    if not targets:
        raise ValueError("onnx_op needs at least one operator key, e.g. onnx_op('aten::foo').")

    def register(function: _F) -> _F:
        for target in targets:
            earlier = _REGISTERED.get((target, complex))
            if earlier is not None:
                raise ValueError(
                    f"{target!r} (complex={complex}) is registered twice: by "
                    f"{earlier.function.__module__}.{earlier.function.__name__} and by "
                    f"{function.__module__}.{function.__name__}; keep one of them."
                )
            _REGISTERED[(target, complex)] = OwnOp(target, function, complex)
        return function

    return register


def registered_ops() -> tuple[OwnOp, ...]:
    """Every registration made so far (the registry imports the topic modules first)."""
    return tuple(_REGISTERED.values())


def target_name(target: object) -> str:
    """The registry key of an FX node target or a user-given target.

    ``OpOverload`` -> ``OpOverload.name()`` (``"aten::relu"``, ``"aten::add.Tensor"``);
    ``OpOverloadPacket`` -> ``"ns::op"``; builtins such as ``operator.add`` ->
    ``"_operator::add"``; strings are normalised (``"ns::op.default"`` -> ``"ns::op"``).

    Example:
        >>> import torch
        >>> from onnx_export import target_name
        >>> target_name(torch.ops.aten.add.Tensor)
        'aten::add.Tensor'
    """
    if isinstance(target, torch._ops.OpOverload):
        return str(target.name())  # type: ignore[no-untyped-call]  # torch leaves it untyped
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name
    opoverload = getattr(target, "_opoverload", None)  # torch.library.custom_op objects
    if isinstance(opoverload, torch._ops.OpOverload):
        return str(opoverload.name())  # type: ignore[no-untyped-call]  # torch leaves it untyped
    if isinstance(target, str):
        return target[: -len(".default")] if target.endswith(".default") else target
    module = getattr(target, "__module__", None) or "builtins"
    return f"{module}::{getattr(target, '__name__', repr(target))}"
