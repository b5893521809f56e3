"""Calls written the way ``torch.onnx.export`` takes them, recognised and explained.

``torch.onnx.export(model, (x,), "m.onnx", opset_version=17)`` takes the inputs as one
tuple, the output file and its options as arguments; ``dynamo_export`` takes the inputs
the way the model is called, returns a program to save, and takes its options in
``ExportOptions``. Each function here returns one sentence that names the habit and the
spelling that works, or ``""`` when the call shows no such habit.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from onnx_export.capture._spec_containers import container, describe

__all__ = [
    "binding_hint",
    "names_a_file",
    "signature_text",
    "tuple_hint",
    "tuple_of_inputs",
    "unsupported_input",
]

#: torch.onnx.export's options that ExportOptions takes under the same name.
_SAME_NAME = ("opset_version", "input_names", "output_names", "dynamic_axes", "dynamic_shapes")
#: The rest of torch.onnx.export's parameters, and what to do instead.
_OTHER = {
    "f": "save the returned program with program.save(path)",
    "export_params": "weights are always exported",
    "do_constant_folding": "the optimizer folds constants (ExportOptions(optimize=...))",
    "optimize": "use ExportOptions(optimize=...)",
    "verify": "use ExportOptions(verify=...) or program.verify()",
    "report": "the SARIF report is ExportOptions(diagnostic_options=DiagnosticOptions(...))",
    "verbose": "the SARIF report has the details (DiagnosticOptions(verbosity=...))",
    "training": "call model.train() or model.eval() before exporting",
    "dynamo": "dynamo_export always captures with torch.export",
    "external_data": "program.save writes external data when the model is large",
    "keep_initializers_as_inputs": "weights are always initializers",
    "custom_opsets": "register functions for custom ops with OnnxRegistry.register_op",
    "operator_export_type": "register functions for ops with OnnxRegistry.register_op",
}


def _accepts(signature: inspect.Signature | None, name: str) -> bool:
    if signature is None:
        return True
    parameters = signature.parameters.values()
    return name in signature.parameters or any(p.kind is p.VAR_KEYWORD for p in parameters)


def _option_hint(signature: inspect.Signature | None, kwargs: Mapping[str, Any]) -> str:
    same = [k for k in kwargs if k in _SAME_NAME and not _accepts(signature, k)]
    other = [k for k in kwargs if k in _OTHER and not _accepts(signature, k)]
    if same:
        spelled = ", ".join(f"{k}=..." for k in same)
        what = "is an option" if len(same) == 1 else "are options"
        inputs = "an input" if len(same) == 1 else "inputs"
        return (
            f"{', '.join(map(repr, same))} {what} of torch.onnx.export, not {inputs} of "
            f"forward: pass export_options=onnx_export.ExportOptions({spelled})."
        )
    if other:
        name = other[0]
        return (
            f"{name!r} is an argument of torch.onnx.export, not an input of forward, and "
            f"dynamo_export has no such argument: {_OTHER[name]}."
        )
    return ""


def _path_hint(args: Sequence[Any]) -> str:
    paths = [a for a in args if isinstance(a, (str, os.PathLike))]
    if any(os.fspath(p).endswith(".onnx") for p in paths):
        return (
            "An argument names an .onnx file, as torch.onnx.export's `f` does: dynamo_export "
            "takes only the model's inputs and returns a program; save it with "
            "program.save(path)."
        )
    return ""


def names_a_file(args: Sequence[Any]) -> bool:
    """Whether a positional argument is an ``.onnx`` path (torch.onnx.export's ``f``)."""
    return bool(_path_hint(args))


def _takes_a_sequence(signature: inspect.Signature | None) -> bool:
    """Whether ``forward``'s first parameter is annotated as a tuple, list or sequence."""
    if signature is None:
        return False
    first = next(iter(signature.parameters.values()), None)
    if first is None or first.annotation is inspect.Parameter.empty:
        return False
    annotation = first.annotation
    if isinstance(annotation, str):
        head = annotation.split("[")[0].split(".")[-1].lower()
        return head in ("tuple", "list", "sequence", "iterable")
    origin = getattr(annotation, "__origin__", annotation)
    return isinstance(origin, type) and issubclass(origin, (tuple, list, Sequence))


def tuple_of_inputs(args: Sequence[Any], signature: inspect.Signature | None = None) -> bool:
    """Whether ``args`` is one tuple (or list) of tensors, as torch.onnx.export's ``args``.

    A namedtuple is the model's own input, not that habit; so is a tuple where ``forward``'s
    first parameter is annotated as a tuple, list or sequence.
    """
    if len(args) != 1 or type(args[0]) not in (tuple, list) or not args[0]:
        return False
    if _takes_a_sequence(signature):
        return False
    return all(isinstance(a, torch.Tensor) for a in args[0])


def tuple_hint(args: Sequence[Any], signature: inspect.Signature | None = None) -> str:
    """The sentence for inputs passed as one tuple, or ``""``.

    Example:
        >>> tuple_hint([(torch.zeros(1),)])[:40]
        'The inputs came as one tuple of 1 tensor'
    """
    if not tuple_of_inputs(args, signature):
        return ""
    count = len(args[0])
    spelled = "x" if count == 1 else ", ".join(f"x{i}" for i in range(count))
    as_tuple = f"({spelled},)" if count == 1 else f"({spelled})"
    return (
        f"The inputs came as one tuple of {count} tensor(s), the way torch.onnx.export takes "
        f"`args`; dynamo_export takes them the way you call the model: "
        f"dynamo_export(model, {spelled}) (or dynamo_export(model, *args)), not "
        f"dynamo_export(model, {as_tuple})."
    )


def binding_hint(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """The torch.onnx habit that explains why the call does not fit ``forward``, or ``""``."""
    path = _path_hint(args)
    inputs = [a for a in args if not isinstance(a, (str, os.PathLike))] if path else args
    hints = (_option_hint(signature, kwargs), path, tuple_hint(inputs, signature))
    return " ".join(h for h in hints if h)


def unsupported_input(inputs: Mapping[str, Any]) -> str:
    """The sentence that names an input torch.export refuses in every strategy, or ``""``.

    A dataclass torch's pytree does not know, a numpy array ("Unsupported input type") and a
    sparse tensor are refused before capture, with what to pass instead (numpy scalars
    pass: torch.export takes them as constants).
    """
    pending = list(inputs.items())
    while pending:
        path, value = pending.pop(0)
        node = container(value)
        if node is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = type(value).__name__
            return (
                f"input {path!r} is {_describe_input(value)}, so torch.export cannot take it: "
                f"call torch.export.register_dataclass({cls}) once before exporting (for the "
                "command line, in the factory's module), or pass its fields as a dict."
            )
        if isinstance(value, torch.Tensor) and value.layout != torch.strided:
            return (
                f"input {path!r} is a {str(value.layout).removeprefix('torch.')} tensor of "
                f"shape {list(value.shape)}; an ONNX graph's inputs are dense tensors (and "
                "torch.export's support for sparse inputs is partial): pass a dense tensor "
                "(.to_dense()), and build the sparse tensor inside forward if the model needs "
                "one (torch.sparse.mm also takes a dense matrix)."
            )
        if node is None and type(value).__module__ == "numpy" and type(value).__name__ == "ndarray":
            return (
                f"input {path!r} is a numpy array ({value.dtype}, shape {list(value.shape)}), "
                "which torch.export cannot take: pass a torch tensor, torch.from_numpy(...) "
                "(the exported model takes numpy arrays once saved and loaded)."
            )
        if node is not None:
            pending.extend(
                (f"{path}.{t}", c) for t, c in zip(node.texts, node.children, strict=True)
            )
    return ""


def _describe_input(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    node = container(value)
    if node is None and dataclasses.is_dataclass(value):
        fields = ", ".join(f.name for f in dataclasses.fields(value))
        return f"a dataclass {type(value).__name__}({fields}), not registered with torch's pytree"
    if node is None:
        name = type(value).__name__
        return f"an {name}" if name[0] in "aeiou" else f"a {name}"
    if node.named:
        kind = "a namedtuple" if node.kind == "namedtuple" else "a dataclass"
        return f"{kind} {node.cls.__name__}({', '.join(node.texts)})"
    return describe(node)


def signature_text(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """What ``forward`` takes and what this call gives each parameter, or ``""``.

    Example:
        >>> def forward(x, scale=2): ...
        >>> signature_text(inspect.signature(forward), (torch.zeros(2),), {})
        'forward(x, scale=2) takes x = a tensor of shape [2], scale = an int.'
    """
    if signature is None:
        return ""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return f"forward{signature} takes {len(signature.parameters)} parameter(s)."
    bound.apply_defaults()
    given = ", ".join(f"{k} = {_describe_input(v)}" for k, v in bound.arguments.items())
    plain = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
    return f"forward{plain} takes {given}."
