"""Turns Python frames, tracebacks and traceback-style text into :class:`Location` values."""

from __future__ import annotations

import linecache
import re
import traceback
import types
from collections.abc import Callable, Iterable

from ._locations import Location

__all__ = ["location_from_frame", "locations_from_stack_trace", "locations_from_traceback"]

# '  File "/path/x.py", line 12, in forward' as written by traceback.format_list/format_stack.
_FILE_LINE = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+)(?:, in (?P<function>.*))?$')
# The marker lines Python 3.11+ prints under a source line, such as '    ~~~~~^^^^^'.
_MARKERS = re.compile(r"^\s*[~^]+\s*$")


def location_from_frame(frame: types.FrameType | traceback.FrameSummary) -> Location:
    """Returns the location of a live frame or of a frame summary from a traceback.

    The snippet is the stripped source line when the file can be read; the column is the
    1-based character position of the executing expression when Python records it.

    Args:
        frame: A frame object (``sys._getframe()``, ``inspect.currentframe()``) or a
            :class:`traceback.FrameSummary` (from ``traceback.extract_tb`` and friends).

    Example:
        >>> import sys
        >>> loc = location_from_frame(sys._getframe())
        >>> loc.function, loc.line is not None
        ('<module>', True)
    """
    if isinstance(frame, traceback.FrameSummary):
        line = frame.lineno
        byte_offset = getattr(frame, "colno", None)
        return _make_location(frame.filename, line, byte_offset, frame.name)
    code = frame.f_code
    byte_offset = None
    positions = list(code.co_positions())
    index = frame.f_lasti // 2
    if 0 <= index < len(positions) and positions[index][0] == frame.f_lineno:
        byte_offset = positions[index][2]
    return _make_location(code.co_filename, frame.f_lineno, byte_offset, code.co_name)


def locations_from_traceback(
    tb: types.TracebackType | None, *, frame_filter: Callable[[str], bool] | None = None
) -> tuple[Location, ...]:
    """Returns the locations of a traceback's frames, outermost first.

    Args:
        tb: A traceback, usually ``exception.__traceback__``.
        frame_filter: Keeps only frames whose file name it accepts.

    Example:
        >>> try:
        ...     int("x")
        ... except ValueError as error:
        ...     frames = locations_from_traceback(error.__traceback__)
        >>> frames[-1].snippet
        'int("x")'
    """
    if tb is None:
        return ()
    return _filtered(
        (location_from_frame(summary) for summary in traceback.extract_tb(tb)), frame_filter
    )


def locations_from_stack_trace(
    text: str, *, frame_filter: Callable[[str], bool] | None = None
) -> tuple[Location, ...]:
    r"""Parses traceback-style text into locations, innermost last.

    The text is what :func:`traceback.format_stack` writes, which is also the format of
    ``node.meta["stack_trace"]`` on torch FX nodes. Lines that are not frames (a
    ``Traceback ...`` header, the exception line, ``~~^^`` markers) are skipped, and the
    source line under each frame becomes its snippet.

    Args:
        text: The stack trace text; an empty string gives no locations.
        frame_filter: Keeps only frames whose file name it accepts, for example
            ``lambda path: "site-packages/torch" not in path``.

    Example:
        >>> text = (
        ...     '  File "/home/me/model.py", line 12, in forward\n'
        ...     "    y = torch.relu(x)\n"
        ... )
        >>> (loc,) = locations_from_stack_trace(text)
        >>> loc.uri, loc.line, loc.function, loc.snippet
        ('/home/me/model.py', 12, 'forward', 'y = torch.relu(x)')
    """
    locations: list[Location] = []
    lines = text.splitlines()
    for index, raw in enumerate(lines):
        match = _FILE_LINE.match(raw)
        if match is None:
            continue
        snippet = _snippet_after(lines, index)
        locations.append(
            Location(
                uri=match["file"],
                line=int(match["line"]),
                snippet=snippet,
                function=match["function"],
            )
        )
    return _filtered(locations, frame_filter)


def _snippet_after(lines: list[str], index: int) -> str | None:
    if index + 1 >= len(lines):
        return None
    candidate = lines[index + 1]
    if not candidate.startswith((" ", "\t")) or _FILE_LINE.match(candidate):
        return None
    if _MARKERS.match(candidate):
        return None
    return candidate.strip() or None


def _filtered(
    locations: Iterable[Location], frame_filter: Callable[[str], bool] | None
) -> tuple[Location, ...]:
    if frame_filter is None:
        return tuple(locations)
    return tuple(location for location in locations if frame_filter(location.uri))


def _make_location(
    filename: str, line: int | None, byte_offset: int | None, function: str
) -> Location:
    source = linecache.getline(filename, line) if line else ""
    column = None
    if byte_offset is not None and source:
        prefix = source.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace")
        column = len(prefix) + 1
    return Location(
        uri=filename,
        line=line,
        column=column,
        snippet=source.strip() or None,
        function=function,
    )
