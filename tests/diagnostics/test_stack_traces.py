"""Locations from FX stack traces, frames and tracebacks."""

from __future__ import annotations

import sys
import traceback

import pytest

from onnx_export.diagnostics import (
    ExceptionInfo,
    Location,
    location_from_frame,
    locations_from_stack_trace,
    locations_from_traceback,
)

# The format of torch FX ``node.meta["stack_trace"]``: ``traceback.format_list`` output, outermost
# frame first, with Python 3.11+ marker lines under some source lines.
FX_STACK_TRACE = """\
  File "/home/me/project/train.py", line 88, in <module>
    onnx_program = onnx_export.dynamo_export(model, x)
  File "/home/me/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
  File "/home/me/project/model.py", line 31, in forward
    h = self.block(x)
        ^^^^^^^^^^^^^
  File "/home/me/project/model.py", line 14, in forward
    return torch.special.bessel_j0(self.linear(x)) * 2
           ~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^^^^
"""  # noqa: E501 - a real library path is long


def test_fx_stack_trace_parses_innermost_last_with_snippets() -> None:
    locations = locations_from_stack_trace(FX_STACK_TRACE)
    assert locations == (
        Location(
            "/home/me/project/train.py",
            88,
            snippet="onnx_program = onnx_export.dynamo_export(model, x)",
            function="<module>",
        ),
        Location(
            "/home/me/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
            1775,
            snippet="return forward_call(*args, **kwargs)",
            function="_call_impl",
        ),
        Location("/home/me/project/model.py", 31, snippet="h = self.block(x)", function="forward"),
        Location(
            "/home/me/project/model.py",
            14,
            snippet="return torch.special.bessel_j0(self.linear(x)) * 2",
            function="forward",
        ),
    )


def test_frame_filter_drops_library_frames() -> None:
    locations = locations_from_stack_trace(
        FX_STACK_TRACE, frame_filter=lambda path: "site-packages" not in path
    )
    assert [(loc.uri.rsplit("/", 1)[-1], loc.line) for loc in locations] == [
        ("train.py", 88),
        ("model.py", 31),
        ("model.py", 14),
    ]


def test_real_format_stack_output_round_trips() -> None:
    def innermost() -> str:
        return "".join(traceback.format_stack())

    text = innermost()
    locations = locations_from_stack_trace(text)
    assert locations[-1].function == "innermost"
    assert locations[-1].uri == __file__
    assert locations[-1].snippet == 'return "".join(traceback.format_stack())'


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no frames here\n",
        "Traceback (most recent call last):\nValueError: boom\n",
    ],
    ids=["empty", "prose", "header-and-exception-only"],
)
def test_text_without_frames_gives_no_locations(text: str) -> None:
    assert locations_from_stack_trace(text) == ()


def test_traceback_text_with_header_and_exception_line() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/m/a.py", line 3, in <module>\n'
        "    main()\n"
        '  File "/m/a.py", line 2, in main\n'
        "ValueError: boom\n"
    )
    locations = locations_from_stack_trace(text)
    assert [(loc.line, loc.function, loc.snippet) for loc in locations] == [
        (3, "<module>", "main()"),
        (2, "main", None),  # "ValueError: boom" is not indented, so it is not a snippet
    ]


def test_frame_without_function_name() -> None:
    (location,) = locations_from_stack_trace('  File "/m/a.py", line 5\n    x = 1\n')
    assert (location.line, location.function, location.snippet) == (5, None, "x = 1")


def test_location_from_live_frame() -> None:
    frame = sys._getframe()
    location = location_from_frame(frame)
    assert location.uri == __file__
    assert location.function == "test_location_from_live_frame"
    assert location.snippet == "location = location_from_frame(frame)"
    assert location.line == test_location_from_live_frame.__code__.co_firstlineno + 2
    assert location.column == 16  # the call expression, 1-based


def test_location_from_frame_summary_has_a_column() -> None:
    try:
        {}["missing"]
    except KeyError as error:
        summary = traceback.extract_tb(error.__traceback__)[-1]
    location = location_from_frame(summary)
    assert location.snippet == '{}["missing"]'
    assert location.column == 9  # 1-based column of the failing expression


def test_locations_from_traceback_are_outermost_first() -> None:
    def inner() -> None:
        raise ValueError("x")

    try:
        inner()
    except ValueError as error:
        locations = locations_from_traceback(error.__traceback__)
    assert [loc.function for loc in locations] == [
        "test_locations_from_traceback_are_outermost_first",
        "inner",
    ]


def test_exception_info_keeps_type_message_stack_and_cause() -> None:
    class ModelError(Exception):
        pass

    try:
        try:
            raise KeyError("k")
        except KeyError:
            raise ModelError("wrapped") from None
    except ModelError as error:
        suppressed = ExceptionInfo.from_exception(error)
    assert suppressed.cause is None  # "from None" suppresses the context

    try:
        try:
            raise KeyError("k")
        except KeyError:
            raise ModelError("implicit context")  # noqa: B904 - testing __context__
    except ModelError as error:
        info = ExceptionInfo.from_exception(error, frame_filter=lambda path: path == __file__)
    assert info.type_name.endswith(
        "test_exception_info_keeps_type_message_stack_and_cause.<locals>.ModelError"
    )
    assert info.message == "implicit context"
    assert info.stack is not None and all(f.uri == __file__ for f in info.stack.frames)
    assert info.cause is not None and str(info.cause) == "KeyError: 'k'"


def test_exception_info_survives_a_broken_str() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    info = ExceptionInfo.from_exception(Broken())
    assert info.message.startswith("<str() of the exception raised RuntimeError")
    assert info.stack is None
