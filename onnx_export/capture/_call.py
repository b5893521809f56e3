"""The model's call, from the user's arguments to a captured program.

The program is captured with the call exactly as the user made it, so that
``exported_program.module()`` takes that same call; the adapter and the ONNX graph use the
canonical form (see :func:`onnx_export.adapters.canonicalize_inputs`). Dynamic shapes are
checked here, before capture, and repaired as torch.export suggests when it reports a
specialisation.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from onnx_export._options import ExportOptions
from onnx_export.adapters import canonicalize_inputs
from onnx_export.capture._data_dependent import data_dependent_line, failing_line
from onnx_export.capture._dynamic import (
    DynamicShapes,
    dynamic_axes_to_shapes,
    named_inputs,
    resolve_dynamic_shapes,
)
from onnx_export.capture._habits import (
    binding_hint,
    names_a_file,
    signature_text,
    tuple_hint,
    unsupported_input,
)
from onnx_export.capture._shape_fixes import Repair, StaticDim, dynamic_size_one, suggest_repair
from onnx_export.capture._spec_containers import leaf_sources
from onnx_export.capture._specialized import RangeGuard
from onnx_export.capture._strategies import CaptureAttempt, capture, explanation
from onnx_export.capture._user_code import warn_at_user_line
from onnx_export.errors import (
    CaptureError,
    ExportInputError,
    ShapeRangeWarning,
    StaticDimensionWarning,
)

__all__ = [
    "AxisTie",
    "as_module",
    "forward_signature",
    "Call",
    "prepare_call",
    "capture_call",
    "capture_error",
    "made_static",
    "made_static_refused",
    "range_guards",
    "warn_made_static",
    "warn_guarded_ranges",
    "guarded_range_message",
]


def explicit_keywords(
    module: torch.nn.Module, signature: inspect.Signature | None, kwargs: dict[str, Any]
) -> tuple[torch.nn.Module, inspect.Signature | None]:
    """``module`` with its ``**kwargs`` entries as keyword-only parameters of ``forward``.

    torch.export cannot match dynamic shapes to entries of ``**kwargs`` (it fails with
    "Must provide a tree_name when there might be a mismatch"). A shallow copy of the
    module whose class spells those keywords out takes the same call and shares the
    same parameters and submodules, so weights keep their names.
    """
    if signature is None:
        return module, signature
    params = list(signature.parameters.values())
    var_keyword = [p for p in params if p.kind == p.VAR_KEYWORD]
    extra = [k for k in kwargs if k not in signature.parameters]
    if not var_keyword or not extra:
        return module, signature
    new_signature = signature.replace(
        parameters=[
            *(p for p in params if p.kind != p.VAR_KEYWORD),
            *(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in extra),
        ]
    )
    base = type(module)

    def forward(self: torch.nn.Module, *args: Any, **kw: Any) -> Any:
        return base.forward(self, *args, **kw)

    forward.__signature__ = new_signature.replace(  # type: ignore[attr-defined]
        parameters=[
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *new_signature.parameters.values(),
        ]
    )
    wrapper = copy.copy(module)
    wrapper.__class__ = type(base.__name__, (base,), {"forward": forward})
    return wrapper, new_signature


def _function_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """Wrap a plain function in a module whose ``forward`` has the function's signature."""

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    signature = inspect.signature(fn)
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    forward.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self_parameter, *signature.parameters.values()]
    )
    name = getattr(fn, "__name__", "function")
    cls = type(f"FunctionModule_{name}", (torch.nn.Module,), {"forward": forward})
    return cls()  # type: ignore[no-any-return]


def forward_signature(module: torch.nn.Module) -> inspect.Signature | None:
    """``module.forward``'s signature, or ``None`` when Python cannot tell."""
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None


def as_module(
    model: torch.nn.Module | ExportedProgram | Callable[..., Any],
) -> tuple[torch.nn.Module, ExportedProgram | None]:
    """The module to capture (a function wrapped in one), and the program if one was given."""
    if isinstance(model, ExportedProgram):
        return model.module(), model
    return (model if isinstance(model, torch.nn.Module) else _function_module(model)), None


@dataclasses.dataclass(frozen=True)
class AxisTie:
    """An input axis whose size the model ties to others: ``constant + sum(coef * root)``.

    Attributes:
        axis: ``(dotted input path, axis)`` of the dependent axis (``("cache", 1)``).
        roots: ``((path, axis), coefficient)`` of each axis it depends on.
        constant: The constant term.
    """

    axis: tuple[str, int]
    roots: tuple[tuple[tuple[str, int], int], ...]
    constant: int

    def size(self, sizes: Mapping[tuple[str, int], int]) -> int | None:
        """The dependent axis's size for the roots' ``sizes``, or ``None`` if one is missing."""
        if any(root not in sizes for root, _ in self.roots):
            return None
        return self.constant + sum(coef * sizes[root] for root, coef in self.roots)


@dataclasses.dataclass(frozen=True)
class Call:
    """One export's inputs in both forms, and its dynamic shapes.

    Attributes:
        args: Positional inputs as the user passed them (the captured form).
        kwargs: Keyword inputs as the user passed them.
        canonical: ``(args, kwargs)`` in the adapter's canonical form.
        signature: ``forward``'s signature, or ``None``.
        shapes: The checked dynamic shapes, or ``None`` for a static export.
        module: The module to capture (``**kwargs`` entries spelled out when dynamic).
        size_one: Dynamic dimensions whose example size is 1 (``"x[0]"``).
        ties: Axes the captured model ties to others (found after capture): other
            example sizes keep them.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    canonical: tuple[tuple[Any, ...], dict[str, Any]]
    signature: inspect.Signature | None
    shapes: DynamicShapes | None
    size_one: tuple[str, ...]
    module: torch.nn.Module
    ties: tuple[AxisTie, ...] = ()


def _user_dynamic_shapes(
    options: ExportOptions,
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> Any:
    if options.dynamic_axes is None:
        return options.dynamic_shapes
    return dynamic_axes_to_shapes(
        options.dynamic_axes, options.input_names, options.output_names, signature, args, kwargs
    )


def prepare_call(
    module: torch.nn.Module,
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: ExportOptions,
) -> Call:
    """Bind and check the inputs and the dynamic shapes, before anything is captured.

    Raises:
        ExportInputError: The inputs do not bind to ``forward``, or the dynamic shapes
            name something that is not an input, an axis the input does not have, an
            axis twice, or an empty name.
    """
    if names_a_file(args):  # refused even where forward would bind the path as an input
        raise ExportInputError(binding_hint(signature, args, kwargs))
    try:
        canonical = canonicalize_inputs(signature, args, kwargs)
    except (TypeError, ValueError) as e:
        text = str(e).replace(
            "Call the model the way it was called at export.",
            "Pass the inputs the way you call the model.",
        )
        hint = binding_hint(signature, args, kwargs)
        raise ExportInputError(f"{hint} {text}" if hint else text) from e
    unsupported = unsupported_input(named_inputs(signature, args, kwargs))
    if unsupported:
        raise ExportInputError(unsupported)
    try:
        user = _user_dynamic_shapes(options, signature, args, kwargs)
        if user is not None:
            module, signature = explicit_keywords(module, signature, kwargs)
        shapes = resolve_dynamic_shapes(user, signature, args, kwargs)
    except (TypeError, ValueError) as e:
        hint = binding_hint(signature, args, kwargs)
        takes = signature_text(signature, args, kwargs)
        raise ExportInputError(" ".join(t for t in (hint, str(e), takes) if t)) from e
    size_one: list[str] = []
    if shapes is not None:
        size_one = dynamic_size_one(shapes.names, named_inputs(signature, args, kwargs))
    return Call(tuple(args), dict(kwargs), canonical, signature, shapes, tuple(size_one), module)


def _var_keyword(signature: inspect.Signature | None) -> list[str]:
    if signature is None:
        return []
    return [p.name for p in signature.parameters.values() if p.kind == p.VAR_KEYWORD]


def capture_call(
    call: Call, options: ExportOptions
) -> tuple[ExportedProgram | None, list[CaptureAttempt]]:
    """Capture ``module`` with the user's call; repair the dynamic shapes as torch suggests."""
    var_keyword = _var_keyword(call.signature)

    aliases = _flat_sources(call)
    display = {
        ours: dotted
        for name, value in named_inputs(call.signature, call.args, call.kwargs).items()
        for theirs, ours, dotted in leaf_sources(name, value)
        if theirs != ours
    }

    def repair(spec: Any, failed: CaptureAttempt, oblivious: bool) -> Repair | None:
        assert failed.exception is not None
        found = {}
        for seen in failed.specializations:
            head, dot, tail = seen.source.partition(".size()")
            found[aliases.get(head, head) + dot + tail] = seen
        return suggest_repair(
            spec,
            failed.exception,
            size_oblivious=oblivious,
            var_keyword=var_keyword,
            found=found,
            sources=aliases,
            display=display,
        )

    return capture(
        call.module,
        call.args,
        call.kwargs,
        dynamic_shapes=call.shapes.torch if call.shapes else None,
        strategies=options.capture_strategies,
        size_oblivious=bool(call.size_one),
        repair=repair,
        allow_static=options.allow_static_fallback,
    )


def _flat_sources(call: Call) -> dict[str, str]:
    """Map torch's names of the inputs to the spec's.

    ``L['flat_args'][0]`` (strict capture's name) and ``L['pair'].left`` (a namedtuple's
    field) both become ``L['pair'][0]``.
    """
    positional = [
        p.name
        for p in (call.signature.parameters.values() if call.signature else ())
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    roots: list[tuple[Any, Any]] = [
        (positional[i] if i < len(positional) else i, a) for i, a in enumerate(call.args)
    ]
    roots += list(call.kwargs.items())
    aliases: dict[str, str] = {}
    index = 0
    for name, value in roots:
        for theirs, ours, _ in leaf_sources(name, value):
            aliases[f"L['flat_args'][{index}]"] = ours
            if theirs != ours:
                aliases[theirs] = ours
            index += 1
    return aliases


def made_static(attempts: Sequence[CaptureAttempt]) -> tuple[StaticDim, ...]:
    """The requested dynamic dimensions the last successful capture made static."""
    return next((a.made_static for a in reversed(attempts) if a.succeeded), ())


def made_static_refused(attempts: Sequence[CaptureAttempt]) -> bool:
    """Whether a capture failed because a repair would have made a dynamic dimension static."""
    return any(a.made_static for a in attempts if not a.succeeded)


def range_guards(attempts: Sequence[CaptureAttempt]) -> tuple[RangeGuard, ...]:
    """The guards of the model's code that bounded a dynamic size in the successful capture."""
    return next((a.range_guards for a in reversed(attempts) if a.succeeded), ())


def guarded_range_message(where: str, text: str, guard: RangeGuard) -> str:
    """What a guard of the model's code (or torch's) did to a dynamic axis, and what to do."""
    code = guard.code or guard.guard
    refuses = (
        "the exported model holds only for those sizes and refuses others with an InputShapeError"
    )
    if guard.kind == "size_one":
        return (
            f"{where} is dynamic, but the model's code compares it with 1 ({code}): "
            "torch.export traces dynamic sizes as 2 or more, so the size-1 branch is not in "
            "the file, which differs from eager PyTorch at size 1 (the export's edge probe ran "
            f"it): it holds for {text} and refuses size 1 with an InputShapeError. "
            "Write the branch with torch.cond to keep both, or export with that axis static "
            "if size 1 is all you need there."
        )
    if guard.kind == "example":
        return (
            f"{where} is dynamic, but the file captured at the example's size differs from "
            f"eager PyTorch at other sizes inside the range torch gave ({guard.guard}), and a "
            "capture at other sizes is not right at the example: the model takes a path of "
            f"its own at the example's size (often a branch on size 1). The file holds "
            f"only for {text} and refuses other sizes with an InputShapeError. Export "
            "with an example of 2 or more to serve the other sizes, or write the branch with "
            "torch.cond to keep both."
        )
    if guard.kind == "narrowing":
        return (
            f"{where} is dynamic, but torch's code for this line narrows it to {text} "
            f"({code}; torch's guard {guard.guard}): {refuses}. Export with an example and "
            "bounds in the range you need, or change the op (a kernel, a window) that needs "
            "those sizes."
        )
    return (
        f"{where} is dynamic, but the model's code bounds it to {text} ({code}): {refuses} "
        "(the other branch was not traced). Export with an example in the range you need, "
        "or write the branch with torch.cond to keep both."
    )


def warn_guarded_ranges(guarded: Sequence[tuple[str, str, RangeGuard]]) -> None:
    """One ``ShapeRangeWarning`` per range a guard in the model's code set, at that line.

    Args:
        guarded: ``(input and axis, range, guard)``, e.g. ``("x[0]", "[3, inf)", guard)``.
    """
    for where, text, guard in guarded:
        path, _, line = guard.location.rpartition(":")
        message = guarded_range_message(where, text, guard)
        if path and line.isdigit():
            warnings.warn_explicit(message, ShapeRangeWarning, path, int(line))
        else:
            warn_at_user_line(message, ShapeRangeWarning)


def warn_made_static(attempts: Sequence[CaptureAttempt]) -> None:
    """One ``StaticDimensionWarning`` per requested dynamic dimension exported static.

    Called after the export's recording block, so that the user sees the warnings.
    """
    for dim in made_static(attempts):
        warn_at_user_line(
            f"{dim.input}[{dim.axis}] was asked to be dynamic but is exported static "
            f"(allow_static_fallback=True): {dim}",
            StaticDimensionWarning,
        )


def _next_steps(error: BaseException | None, call: Call) -> str:
    text = str(error)
    if "not a known type" in text or "Unsupported input type" in text or "pytree" in text:
        return (
            "a container class in the inputs or outputs is not registered with torch's "
            "pytree. transformers caches are registered automatically now; for your own "
            "class call torch.utils._pytree.register_pytree_node (or return a dict/tuple)."
        )
    if "data-dependent" in text or "GuardOnDataDependent" in text:
        return (
            "the model branches on a tensor's value (data-dependent control flow): write "
            "the `if` as torch.cond(pred, true_fn, false_fn, operands), or compute the "
            "value outside the model."
        )
    if "not in range" in text:
        return (
            "an example size is outside the range of its torch.export.Dim (min/max): widen "
            "the range or export with an example inside it."
        )
    mismatch = "mismatch between the structure" in text or "Node type" in text
    if call.shapes is not None and mismatch:
        return (
            "dynamic_shapes does not follow the containers of the inputs: give each input's "
            "spec in the input's own form (a namedtuple's class or a tuple, a dataclass's "
            "class, a dict of its fields or a list), or name nested leaves by dotted path "
            "('pair.left')."
        )
    if call.shapes is not None and (
        "Constraints violated" in text or "specialized" in text or "dynamic" in text
    ):
        return (
            "a dimension marked dynamic is tied by the model to a constant or to another "
            "input, and torch.export's suggested fixes (above) could not be applied "
            "automatically: apply them to dynamic_shapes, make the related inputs dynamic "
            "too, or leave the dimension static."
        )
    return (
        "look for data-dependent Python control flow (an `if` on a tensor value: use "
        "torch.cond), unsupported Python constructs, or inputs torch.export cannot flatten."
    )


def _static_error(refused: Sequence[StaticDim], last: BaseException | None) -> Exception:
    """The ``CaptureError`` of a capture that would lose requested dynamic dimensions."""
    unique: dict[tuple[str, int], StaticDim] = {}
    for dim in refused:  # one per axis: the first that names the model's line, if any
        seen = unique.get((dim.input, dim.axis))
        if seen is None or (dim.location and not seen.location):
            unique[(dim.input, dim.axis)] = dim
    lines = "\n".join(f"  - {d}" for d in unique.values())
    error = CaptureError(
        "The model's code fixes the size of "
        + ("a dimension" if len(unique) == 1 else f"{len(unique)} dimensions")
        + " you asked to be dynamic, so the model cannot be exported with "
        + ("it" if len(unique) == 1 else "them")
        + f" dynamic:\n{lines}\nNext steps: change that code so the size follows the input "
        "(x.view(x.size(0), -1) rather than x.view(2, -1)), or apply torch.export's fix to "
        "dynamic_shapes, or pass ExportOptions(allow_static_fallback=True) (CLI: "
        "--allow-static) to export those dimensions static with a warning. torch's error is "
        "chained below."
    )
    error.__cause__ = last
    return error


def _first_line_at(error: BaseException | None, where: tuple[str, int, str]) -> str:
    """The first line of a failure raised at the model's line ``where``: what, where."""
    path, line, code = where
    text = explanation(error).splitlines() if error is not None else []
    what = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    code_text = f" (`{code}`)" if code else ""
    return (
        f"torch.export could not capture the model: {what}, at {path}:{line}{code_text}; "
        "that line runs eagerly, so tracing took another path or an op's shape rule "
        "differs there (rewrite the line, or report it); every strategy failed:"
    )


def capture_error(attempts: Sequence[CaptureAttempt], call: Call) -> Exception:
    """The ``CaptureError`` of a failed capture: every attempt, torch's explanation, what next."""
    refused = [d for a in attempts for d in a.made_static]
    if refused:
        last = next((a.exception for a in attempts if a.made_static), None)
        return _static_error(refused, last)
    lines = "\n".join(
        "  - "
        + a.summary().replace("\n", "\n      ")
        + "".join(f"\n      after changing {fix}" for fix in a.shape_fixes)
        for a in attempts
    )
    last = attempts[-1].exception if attempts else None
    branch = data_dependent_line([a.exception for a in attempts])
    first = "torch.export could not capture the model; every strategy failed:"
    steps = _next_steps(last, call)
    habit = tuple_hint(call.args, call.signature) if not call.kwargs else ""
    if habit:  # torch.onnx.export's `args` tuple: torch's error is about the tuple
        first = f"{habit}\nWith the tuple as the model's first input, every strategy failed:"
        steps = "pass the tensors themselves, not a tuple of them."
    elif branch is not None:
        first, steps = f"{branch.first_line()}\nEvery strategy failed:", branch.next_steps()
    elif attempts and (where := failing_line(attempts[0].exception)) is not None:
        first = _first_line_at(attempts[0].exception, where)
    error = CaptureError(
        f"{first}\n{lines}\nNext steps: {steps} The last strategy's error is chained below."
    )
    error.__cause__ = last
    return error
