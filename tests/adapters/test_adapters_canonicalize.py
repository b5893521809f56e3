"""canonicalize_inputs: binding to forward's signature, canonical form, binding errors."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from onnx_export.adapters import InputBindingError, canonicalize_inputs
from onnx_export.adapters._binding import parameters_from_signature
from onnx_export.adapters.input_steps import BindToSignature


def f_plain(x, y): ...  # type: ignore[no-untyped-def]
def f_defaults(x, y=3, *, k=4): ...  # type: ignore[no-untyped-def]
def f_keyword_only(x, *, k): ...  # type: ignore[no-untyped-def]
def f_positional_only(a, /, b, c=5): ...  # type: ignore[no-untyped-def]
def f_var_positional(a, *rest): ...  # type: ignore[no-untyped-def]
def f_before_var(a, b, *rest, k=0): ...  # type: ignore[no-untyped-def]
def f_var_keyword(x, **extra): ...  # type: ignore[no-untyped-def]
def f_everything(a, /, b, *rest, k, m=1, **extra): ...  # type: ignore[no-untyped-def]
def f_object_default(x, mask=object()): ...  # type: ignore[no-untyped-def]  # noqa: B008


CASES: list[
    tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], tuple[Any, ...], dict[str, Any]]
] = [
    (f_plain, (1, 2), {}, (), {"x": 1, "y": 2}),
    (f_plain, (), {"y": 2, "x": 1}, (), {"x": 1, "y": 2}),
    (f_plain, (1,), {"y": 2}, (), {"x": 1, "y": 2}),
    (f_defaults, (1,), {}, (), {"x": 1, "y": 3, "k": 4}),
    (f_defaults, (1,), {"k": 0}, (), {"x": 1, "y": 3, "k": 0}),
    (f_keyword_only, (1,), {"k": 2}, (), {"x": 1, "k": 2}),
    (f_positional_only, (1, 2), {}, (1,), {"b": 2, "c": 5}),
    (f_var_positional, (1, 2, 3), {}, (1, 2, 3), {}),
    (f_var_positional, (1,), {}, (), {"a": 1}),
    (f_before_var, (1, 2, 3), {}, (1, 2, 3), {"k": 0}),
    (f_before_var, (1, 2), {}, (), {"a": 1, "b": 2, "k": 0}),
    (f_var_keyword, (), {"z": 1, "x": 2, "y": 3}, (), {"x": 2, "z": 1, "y": 3}),
    (f_everything, (1, 2, 3), {"k": 4, "q": 5}, (1, 2, 3), {"k": 4, "m": 1, "q": 5}),
    (f_everything, (1,), {"k": 4, "b": 2, "a": 9}, (1,), {"b": 2, "k": 4, "m": 1, "a": 9}),
]
IDS = [
    "positional",
    "keywords-in-any-order",
    "mixed",
    "defaults-filled",
    "keyword-only-default",
    "keyword-only",
    "positional-only",
    "var-positional",
    "var-positional-empty",
    "var-positional-forces-positional",
    "no-extra-positional",
    "var-keyword-order-kept",
    "everything",
    "positional-only-name-in-kwargs",
]


@pytest.mark.parametrize(("fn", "args", "kwargs", "want_args", "want_kwargs"), CASES, ids=IDS)
def test_canonical_form(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    want_args: tuple[Any, ...],
    want_kwargs: dict[str, Any],
) -> None:
    got_args, got_kwargs = canonicalize_inputs(inspect.signature(fn), args, kwargs)
    assert got_args == want_args
    assert list(got_kwargs.items()) == list(want_kwargs.items())  # order matters


@pytest.mark.parametrize(("fn", "args", "kwargs", "want_args", "want_kwargs"), CASES, ids=IDS)
def test_canonical_form_is_a_valid_call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    want_args: tuple[Any, ...],
    want_kwargs: dict[str, Any],
) -> None:
    bound = inspect.signature(fn).bind(*args, **kwargs)
    again = inspect.signature(fn).bind(*want_args, **want_kwargs)
    again.apply_defaults()
    bound.apply_defaults()
    assert bound.arguments == again.arguments


@pytest.mark.parametrize(("fn", "args", "kwargs", "want_args", "want_kwargs"), CASES, ids=IDS)
def test_runtime_binder_agrees(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    want_args: tuple[Any, ...],
    want_kwargs: dict[str, Any],
) -> None:
    step = BindToSignature(parameters_from_signature(inspect.signature(fn)))
    assert step(args, kwargs) == canonicalize_inputs(inspect.signature(fn), args, kwargs)


def test_no_signature_keeps_arguments_as_given() -> None:
    assert canonicalize_inputs(None, [1, 2], {"b": 1, "a": 2}) == ((1, 2), {"b": 1, "a": 2})


def test_unsaved_default_is_required_at_run_time() -> None:
    params = parameters_from_signature(inspect.signature(f_object_default))
    assert [(p.name, p.has_default) for p in params] == [("x", False), ("mask", False)]
    with pytest.raises(InputBindingError, match="missing required argument 'mask'"):
        BindToSignature(params)((1,), {})


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "message"),
    [
        (f_plain, (1,), {}, "missing required argument 'y'"),
        (f_keyword_only, (1,), {}, "missing required argument 'k'"),
        (f_plain, (1, 2, 3), {}, "takes 2 positional arguments but 3 were given"),
        (f_plain, (1,), {"x": 2}, "got multiple values for argument 'x'"),
        (f_plain, (1, 2), {"z": 3}, "got an unexpected keyword argument 'z'"),
        (f_positional_only, (), {"a": 1, "b": 2}, "argument 'a' is positional-only"),
    ],
    ids=[
        "missing-positional",
        "missing-keyword-only",
        "too-many",
        "multiple-values",
        "unexpected",
        "positional-only-by-keyword",
    ],
)
def test_binding_errors_name_the_argument(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputBindingError, match=message) as info:
        canonicalize_inputs(inspect.signature(fn), args, kwargs)
    assert isinstance(info.value, TypeError)
    assert "Expected a call matching forward(" in str(info.value)
    assert "Call the model the way it was called at export" in str(info.value)
    # The count of positional arguments is the call's, for keyword errors too.
    assert f"got {len(args)} positional and keywords {list(kwargs)}" in str(info.value)


def test_error_shows_the_signature_with_markers() -> None:
    with pytest.raises(InputBindingError, match=r"forward\(a, /, b, \*rest, k, m=1, \*\*extra\)"):
        canonicalize_inputs(inspect.signature(f_everything), (1, 2), {})
