"""Where ONNX functions for torch operators come from: torchlib, plus the user's own.

Torchlib's table is built once per process (importing it takes seconds) and shared,
read-only, by every registry; a registry adds the user's functions in front of it.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import onnx_ir as ir

from onnx_export.ops._registration import registered_ops, target_name

__all__ = ["OnnxFunctionEntry", "OnnxRegistry", "target_name"]


@dataclasses.dataclass(frozen=True)
class OnnxFunctionEntry:
    """One ONNX implementation of a torch operator.

    Attributes:
        target: The operator's qualified name, e.g. ``"aten::add.Tensor"``.
        function: The onnxscript function (scripted ``OnnxFunction`` or traced).
        is_complex: Whether it implements the complex-number variant.
        is_custom: Whether the user registered it (custom functions win over torchlib).
        is_own: Whether it is one of onnx-export's own functions (``onnx_export.ops``).

    Example:
        >>> import onnx_export
        >>> entry = onnx_export.OnnxRegistry().get("aten::relu")[0]
        >>> entry.target, entry.is_custom
        ('aten::relu', False)
    """

    target: str
    function: Any
    is_complex: bool = False
    is_custom: bool = False
    is_own: bool = False

    @property
    def origin(self) -> str:
        """Where it comes from: ``"user-registered"``, ``"onnx-export"`` or ``"torchlib"``.

        Example:
            >>> import onnx_export
            >>> onnx_export.OnnxRegistry().get("aten::relu")[0].origin
            'torchlib'
        """
        if self.is_custom:
            return "user-registered"
        return "onnx-export" if self.is_own else "torchlib"

    @property
    def signature(self) -> ir.schemas.OpSignature | None:
        """The function's parameters and types, as onnxscript describes them."""
        return getattr(self.function, "op_signature", None)

    @property
    def name(self) -> str:
        """A readable name of the function, for messages."""
        return str(getattr(self.function, "name", None) or getattr(self.function, "__name__", ""))


_TORCHLIB_LOCK = threading.Lock()


@functools.cache
def _torchlib_table() -> Mapping[str, tuple[OnnxFunctionEntry, ...]]:
    with _TORCHLIB_LOCK:
        import onnxscript.function_libs.torch_lib.ops  # noqa: F401  (registers the functions)
        from onnxscript.function_libs.torch_lib.registration import default_registry

        table: dict[str, tuple[OnnxFunctionEntry, ...]] = {}
        for name, overloaded in default_registry.items():
            entries = [OnnxFunctionEntry(name, f) for f in overloaded.overloads]
            entries += [OnnxFunctionEntry(name, f, is_complex=True) for f in overloaded.complex]
            table[name] = tuple(entries)
        return MappingProxyType(table)


@functools.cache
def _own_table() -> Mapping[str, tuple[OnnxFunctionEntry, ...]]:
    import onnx_export.ops  # noqa: F401  (importing the topic modules registers them)

    table: dict[str, tuple[OnnxFunctionEntry, ...]] = {}
    for own in sorted(registered_ops(), key=lambda r: r.is_complex):  # real ones first
        entry = OnnxFunctionEntry(own.target, own.function, is_complex=own.is_complex, is_own=True)
        table[own.target] = (*table.get(own.target, ()), entry)
    return MappingProxyType(table)


class OnnxRegistry:
    """ONNX functions for torch operators: the user's, then onnx-export's, then torchlib's.

    Register an onnxscript function for a ``torch.library`` custom op, or to override
    a built-in, and pass the registry in :class:`onnx_export.ExportOptions`.

    Example:
        >>> import onnx_export
        >>> from onnxscript import opset18 as op
        >>> def my_relu(x):
        ...     return op.Relu(x)
        >>> registry = onnx_export.OnnxRegistry()
        >>> registry.register_op("aten::relu", my_relu)
        >>> registry.is_registered("aten::relu")
        True
    """

    def __init__(self) -> None:
        self._custom: dict[str, list[OnnxFunctionEntry]] = {}

    def register_op(
        self, target: object, function: Callable[..., Any], *, is_complex: bool = False
    ) -> None:
        """Use ``function`` for ``target``, ahead of torchlib's functions and earlier ones.

        Args:
            target: An ``OpOverload`` (``torch.ops.mylib.foo.default``), an
                ``OpOverloadPacket`` (all its overloads), a ``torch.library.custom_op``
                object, or a qualified name such as ``"mylib::foo"``.
            function: An onnxscript function (``@onnxscript.script()``) or a plain
                Python function that calls ``onnxscript.opset18`` ops on its inputs.
            is_complex: Register it for complex-valued inputs.

        Example:
            >>> import onnx_export
            >>> from onnxscript import opset18 as op
            >>> reg = onnx_export.OnnxRegistry()
            >>> reg.register_op("mylib::double", lambda x: op.Add(x, x))
            >>> len(reg.get("mylib::double"))
            1
        """
        if not callable(function):
            raise TypeError(f"function must be callable, got {type(function).__name__}.")
        key = target_name(target)
        entry = OnnxFunctionEntry(key, function, is_complex=is_complex, is_custom=True)
        self._custom.setdefault(key, []).insert(0, entry)

    def get(self, target: object) -> tuple[OnnxFunctionEntry, ...]:
        """All functions for ``target``: the user's (newest first), then torchlib's.

        Example:
            >>> import onnx_export
            >>> [e.name for e in onnx_export.OnnxRegistry().get("aten::relu")]
            ['aten_relu']
        """
        key = target_name(target)
        found = list(self._custom.get(key, ()))
        packet = key.split(".", 1)[0]
        if packet != key:
            found += self._custom.get(packet, ())
        found += _own_table().get(key, ())
        found += _torchlib_table().get(key, ())
        return tuple(found)

    def is_registered(self, target: object) -> bool:
        """Whether any function (user's or torchlib's) implements ``target``.

        Example:
            >>> import onnx_export
            >>> onnx_export.OnnxRegistry().is_registered("aten::not_an_op")
            False
        """
        return bool(self.get(target))

    @property
    def custom_targets(self) -> tuple[str, ...]:
        """Targets with a user-registered function, in registration order.

        Example:
            >>> import onnx_export
            >>> onnx_export.OnnxRegistry().custom_targets
            ()
        """
        return tuple(self._custom)
