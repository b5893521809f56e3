"""Where a diagnostic points: source locations and call stacks (pure data)."""

from __future__ import annotations

import dataclasses

__all__ = ["Location", "Stack"]


@dataclasses.dataclass(frozen=True)
class Location:
    """A place in a source file, usually the user's line that created a node.

    Attributes:
        uri: An absolute file-system path (``/home/me/model.py``), a URI
            (``file:///home/me/model.py``, ``https://...``) or a pseudo file name such as
            ``<eval_with_key>.3``. The SARIF writer makes paths under the context's
            ``source_root`` relative to ``SRCROOT`` and turns other paths into ``file://`` URIs.
            An empty string means "no file"; only the message and function are written.
        line: 1-based line number, or ``None`` when unknown. Values below 1 are not written.
        column: 1-based column (in characters), or ``None`` when unknown.
        snippet: The source text of the line, when known.
        message: What happens at this place (shown for related locations and stack frames).
        function: The enclosing function, written as a SARIF logical location.

    Example:
        >>> loc = Location("/home/me/model.py", line=12, snippet="y = torch.relu(x)")
        >>> loc.line, loc.column
        (12, None)
        >>> str(loc)
        '/home/me/model.py:12'
    """

    uri: str
    line: int | None = None
    column: int | None = None
    snippet: str | None = None
    message: str | None = None
    function: str | None = None

    def __str__(self) -> str:
        parts = [self.uri or "<unknown>"]
        if self.line is not None and self.line >= 1:
            parts.append(str(self.line))
            if self.column is not None and self.column >= 1:
                parts.append(str(self.column))
        return ":".join(parts)


@dataclasses.dataclass(frozen=True)
class Stack:
    """A call stack, in Python traceback order: outermost frame first, innermost last.

    The SARIF writer reverses the order, because SARIF lists the innermost frame first.

    Attributes:
        frames: The frames, outermost first.
        message: What the stack shows, for example ``"Stack at the failing call"``.

    Example:
        >>> stack = Stack(
        ...     (Location("/m/train.py", 40, function="main"), Location("/m/model.py", 12)),
        ...     message="Traceback",
        ... )
        >>> stack.frames[-1].line
        12
    """

    frames: tuple[Location, ...]
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "frames", tuple(self.frames))
