"""The error hierarchy of :mod:`onnx_export.adapters`.

Every error raised on purpose by this package derives from :class:`AdapterError`. Messages
follow one pattern: *where* (a display path such as ``past_key_values[1][0]`` or a spec field
such as ``inputs[2].tensor.dtype``), *what was expected*, *what came*, and *what to do next*.

Several classes also derive from a builtin (``ValueError``/``TypeError``) so that code written
against plain Python conventions keeps working.
"""

from __future__ import annotations

import errno

__all__ = [
    "AdapterError",
    "AdapterSpecError",
    "UnsupportedValueError",
    "LeafCountError",
    "InputError",
    "InputBindingError",
    "InputStructureError",
    "InputDtypeError",
    "InputShapeError",
    "ConstantMismatchError",
    "ModelNotFoundError",
    "InvalidModelError",
    "MissingKernelError",
    "ModelRunError",
]


class AdapterError(Exception):
    """Base class of every error raised by :mod:`onnx_export.adapters`.

    Example:
        >>> try:
        ...     raise InputDtypeError("x: expected dtype float32, got float64")
        ... except AdapterError as e:
        ...     print(type(e).__name__)
        InputDtypeError
    """


class AdapterSpecError(AdapterError, ValueError):
    """An adapter spec (or its JSON in a model's metadata) is malformed or does not fit the model.

    Raised while reading or validating a spec, never while running a model. The message names
    the offending field, e.g. ``inputs[2].tensor.dtype``.

    Example:
        >>> from onnx_export.adapters import AdapterSpec
        >>> try:
        ...     AdapterSpec.from_json("{")
        ... except AdapterSpecError as e:
        ...     print(str(e).split(":")[0])
        adapter spec
    """


class UnsupportedValueError(AdapterError, TypeError):
    """A value cannot be described by a spec (an unsupported leaf, dict key or context).

    Example:
        >>> from onnx_export.adapters import tree_flatten
        >>> try:
        ...     tree_flatten({(1, 2): 0})
        ... except UnsupportedValueError as e:
        ...     print("dict key" in str(e))
        True
    """


class LeafCountError(AdapterError, ValueError):
    """The number of leaves handed over does not match the tree spec (or the model's outputs).

    Example:
        >>> from onnx_export.adapters import tree_flatten, tree_unflatten
        >>> _, spec = tree_flatten((1, 2))
        >>> try:
        ...     tree_unflatten(spec, [1])
        ... except LeafCountError as e:
        ...     print("expected 2" in str(e))
        True
    """


class InputError(AdapterError, ValueError):
    """Base class of the errors raised while adapting call-time inputs.

    Example:
        >>> issubclass(InputShapeError, InputError)
        True
    """


class InputBindingError(InputError, TypeError):
    """The call's arguments do not bind to the exported ``forward`` signature.

    It is a ``TypeError`` too, like the error Python raises for a bad call.

    Example:
        >>> import inspect
        >>> from onnx_export.adapters import canonicalize_inputs
        >>> def forward(x, y): ...
        >>> try:
        ...     canonicalize_inputs(inspect.signature(forward), (1,), {})
        ... except InputBindingError as e:
        ...     print("'y'" in str(e))
        True
    """


class InputStructureError(InputError):
    """The nesting of the inputs differs from the export: missing keys, other lengths, types.

    Example:
        >>> str(InputStructureError("inputs: expected dict keys ['a'], got ['b']"))[:6]
        'inputs'
    """


class InputDtypeError(InputError):
    """A tensor input has another dtype than the exported model expects.

    Example:
        >>> str(InputDtypeError("x: expected dtype float32, got float64"))
        'x: expected dtype float32, got float64'
    """


class InputShapeError(InputError):
    """A tensor input has another rank, static dimension, or inconsistent symbolic dimension.

    Also raised for a Python int exported dynamic that is outside its exported range.

    Example:
        >>> str(InputShapeError("x: expected rank 2, got rank 3"))
        'x: expected rank 2, got rank 3'
    """


class ConstantMismatchError(InputError):
    """A non-tensor input differs from the constant the model was exported with.

    Example:
        >>> str(ConstantMismatchError("scale: expected 2.0, got 3.0"))
        'scale: expected 2.0, got 3.0'
    """


class ModelNotFoundError(AdapterError, FileNotFoundError):
    """The model file to load does not exist; the message and ``filename`` name the path.

    It is a ``FileNotFoundError`` too, like the error ``open`` raises.

    Example:
        >>> from onnx_export.adapters import load
        >>> try:
        ...     load("no/such/model.onnx")
        ... except FileNotFoundError as e:
        ...     print(type(e).__name__, e.filename)
        ModelNotFoundError no/such/model.onnx
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(errno.ENOENT, message, path)

    def __str__(self) -> str:
        return str(self.strerror)


class InvalidModelError(AdapterError, ValueError):
    """The file (or bytes) to load is no ONNX model ONNX Runtime can read.

    An empty file, one cut short (an interrupted save or copy), a Git LFS pointer or any
    other file that is not a serialized ``ModelProto``. The message names the file, its
    size, what ONNX Runtime said, and what to do.

    Attributes:
        path: The file, or ``None`` when the model came as bytes.

    Example:
        >>> from onnx_export.adapters import OnnxModule
        >>> try:
        ...     OnnxModule(b"not a model")  # load("broken.onnx") raises it for a file
        ... except InvalidModelError as e:
        ...     print(type(e).__name__, e.path)
        InvalidModelError None
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ModelRunError(AdapterError, RuntimeError):
    """ONNX Runtime failed on inputs the adapter accepted: the file cannot serve them.

    The inputs matched the file's declared dtypes, shapes and ranges, yet a node failed
    (typically a file exported elsewhere, or before dynamic axes were checked, whose
    ``Reshape`` holds the example's sizes). The message names the node, the input
    shapes, what ONNX Runtime said and what to do; ONNX Runtime's own exception is
    chained.

    Example:
        >>> issubclass(ModelRunError, RuntimeError)
        True
    """


class MissingKernelError(AdapterError, NotImplementedError):
    """ONNX Runtime has no kernel for an op of the model with its dtype on these providers.

    Typical case: a bfloat16 model on the CPU provider, which lacks bfloat16 ``Gemm``,
    ``Mul`` and most other ops. The message names the dtype, the op and the ways out
    (``upcast=["bfloat16"]``, CUDA, a float32 export).

    Attributes:
        dtype: The dtype of the op's inputs (``"bfloat16"``...), or ``""`` if not known.

    Example:
        >>> issubclass(MissingKernelError, NotImplementedError)
        True
    """

    def __init__(self, message: str, dtype: str = "") -> None:
        super().__init__(message)
        self.dtype = dtype
