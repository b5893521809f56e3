"""Diagnostics and the exceptions they carry (pure data)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import NoReturn

from ._frames import locations_from_traceback
from ._levels import Level
from ._locations import Location, Stack
from ._rules import Rule

__all__ = ["Diagnostic", "ExceptionInfo"]

_MAX_CAUSES = 8


@dataclasses.dataclass(frozen=True)
class ExceptionInfo:
    """What is kept of an exception: its type, message, stack and cause.

    Attributes:
        type_name: Qualified class name (``"ValueError"``, ``"torch._dynamo.exc.Unsupported"``).
        message: ``str(exception)``.
        stack: Where it was raised, outermost frame first, or ``None`` without a traceback.
        cause: The exception it was raised from (``__cause__``, else an unsuppressed
            ``__context__``), if any.

    Example:
        >>> try:
        ...     raise KeyError("weight")
        ... except KeyError as error:
        ...     info = ExceptionInfo.from_exception(error)
        >>> info.type_name, info.message
        ('KeyError', "'weight'")
        >>> str(info)
        "KeyError: 'weight'"
    """

    type_name: str
    message: str
    stack: Stack | None
    cause: ExceptionInfo | None = None

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name

    @classmethod
    def from_exception(
        cls,
        exc: BaseException,
        *,
        frame_filter: Callable[[str], bool] | None = None,
    ) -> ExceptionInfo:
        """Captures an exception's type, message, traceback and (up to 8 levels of) cause.

        Args:
            exc: The exception.
            frame_filter: Keeps only frames whose file name it accepts, e.g. to hide
                PyTorch internals: ``lambda path: "/torch/" not in path``.

        Example:
            >>> try:
            ...     try:
            ...         {}["x"]
            ...     except KeyError as inner:
            ...         raise RuntimeError("lookup failed") from inner
            ... except RuntimeError as error:
            ...     info = ExceptionInfo.from_exception(error)
            >>> str(info), str(info.cause)
            ('RuntimeError: lookup failed', "KeyError: 'x'")
        """
        return _exception_info(exc, frame_filter, depth=0)


def _exception_info(
    exc: BaseException, frame_filter: Callable[[str], bool] | None, depth: int
) -> ExceptionInfo:
    frames = locations_from_traceback(exc.__traceback__, frame_filter=frame_filter)
    stack = Stack(frames) if exc.__traceback__ is not None else None
    cause_exc = exc.__cause__
    if cause_exc is None and not exc.__suppress_context__:
        cause_exc = exc.__context__
    cause = None
    if cause_exc is not None and cause_exc is not exc and depth < _MAX_CAUSES:
        cause = _exception_info(cause_exc, frame_filter, depth + 1)
    return ExceptionInfo(
        type_name=_qualified_name(type(exc)),
        message=_safe_str(exc),
        stack=stack,
        cause=cause,
    )


def _qualified_name(cls: type) -> str:
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as error:  # an exception's __str__ can itself raise
        return f"<str() of the exception raised {type(error).__name__}>"


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    """One finding of one rule: a SARIF ``result``.

    Most code creates diagnostics with :meth:`DiagnosticContext.emit`, which fills
    ``message`` from the rule's template; build one directly to pass to
    :meth:`DiagnosticContext.log`.

    Attributes:
        rule: The rule this diagnostic is an instance of.
        level: Its level (the context may raise a warning to an error).
        message: Plain-text message.
        markdown: The message in Markdown, if richer than the text.
        locations: Where the problem is (usually one location: the user's source line).
        related_locations: Other relevant places, each with a message.
        stacks: Call stacks, each outermost frame first.
        code_flow: A sequence of steps (for example the chain of calls that led to a node);
            written as SARIF ``codeFlows`` only when non-empty.
        properties: Extra JSON-able data, written as the result's property bag.
        exception: The exception behind the diagnostic, if any.

    Example:
        >>> from onnx_export.diagnostics.rules import UNSUPPORTED_OP
        >>> diagnostic = Diagnostic(
        ...     UNSUPPORTED_OP,
        ...     Level.ERROR,
        ...     UNSUPPORTED_OP.format_message(op="aten::foo", node="foo_1", module="net.block"),
        ...     locations=(Location("/home/me/model.py", line=12),),
        ...     properties={"node_target": "aten::foo"},
        ... )
        >>> diagnostic.properties["node_target"]
        'aten::foo'
    """

    rule: Rule
    level: Level
    message: str
    markdown: str | None = None
    locations: tuple[Location, ...] = ()
    related_locations: tuple[Location, ...] = ()
    stacks: tuple[Stack, ...] = ()
    code_flow: tuple[Location, ...] = ()
    properties: Mapping[str, object] = dataclasses.field(default_factory=dict, hash=False)
    exception: ExceptionInfo | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.level, Level):
            raise TypeError(f"Diagnostic level must be a Level, got {self.level!r}.")
        for name in ("locations", "related_locations", "stacks", "code_flow"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "properties", _ReadOnlyDict(self.properties))


class _ReadOnlyDict(dict[str, object]):
    """A dict that refuses changes, yet pickles, deep-copies and serializes like a dict."""

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("Diagnostic.properties is read-only; build a new Diagnostic instead.")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[_ReadOnlyDict], tuple[dict[str, object]]]:
        return (type(self), (dict(self),))
