"""Where the model's code fixed a dimension: the user's line behind a specialisation.

torch.export says *that* a dimension marked dynamic was specialised ("You marked
L['x'].size()[0] as dynamic but your code specialized it to be a constant (2)"), but in
non-strict capture, and with deferred runtime asserts in either mode, not *where*. While
:func:`recording_specializations` is active, the shape environment's log records are
read as they are made: a symbol's creation names its input (``L['x'].size()[0]``), and a
guard ``Eq(s77, 2)`` or a replacement ``s77 = 2`` is a specialisation, located at the
innermost frame of the live stack outside torch and this package (the model's own line).
Records keep reaching torch's own handlers as before (nothing new is printed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterator
from typing import Any, Literal

from onnx_export.capture._size_one import SizeOneComparison, watching_size_one
from onnx_export.capture._user_code import innermost_user_frame, is_user_code, traced_stack

__all__ = [
    "Specialization",
    "RangeGuard",
    "GuardKind",
    "recording_specializations",
    "recording_guards",
    "SHAPES_LOGGER",
    "model_file",
    "guard_fails_at",
    "guard_interval",
]

SHAPES_LOGGER = "torch.fx.experimental.symbolic_shapes"
_EQ = re.compile(r"^Eq\((?:(?P<s1>s\d+), (?P<v1>-?\d+)|(?P<v2>-?\d+), (?P<s2>s\d+))\)$")
#: A guard's location as the shape env writes it: ``code  # file.py:12 in forward``.
_SLOC = re.compile(r"^(?P<code>.*?)\s+# (?P<path>\S+?):(?P<line>\d+) in ")
#: Non-strict capture writes only ``(file.py:12 in forward)``.
_PLOC = re.compile(r"^\((?P<code>)(?P<path>\S+?):(?P<line>\d+) in ")
#: A guard that bounds one size: ``s77 > 2``, ``2 < s77``, ``s77 <= 8``.
_BOUND = re.compile(r"^(?:s\d+ [<>]=? -?\d+|-?\d+ [<>]=? s\d+)$")


@dataclasses.dataclass(frozen=True)
class Specialization:
    """One dimension the model's code fixed to a constant while being captured.

    Attributes:
        source: torch's name of the dimension, e.g. ``"L['x'].size()[0]"``.
        value: The constant it was fixed to.
        location: ``"file.py:12"`` of the model's line that fixed it, or ``""``.
        code: That line's text, or ``""``.
    """

    source: str
    value: int
    location: str
    code: str

    def where(self) -> str:
        """``file.py:12 (return x.view(2, -1))``, or ``""`` when no line was found."""
        if not self.location:
            return ""
        return f"{self.location} ({self.code})" if self.code else self.location


def model_file(path: str) -> str | None:
    """The full path of ``path`` (maybe shortened) if it is the model's code, else ``None``.

    Torch's files, this package's (its capture patches too) and the standard library's
    are not the model's (:mod:`onnx_export.capture._user_code`).

    Example:
        >>> model_file(logging.__file__) is None
        True
    """
    full = _full_path(path)
    return full if is_user_code(full) else None


def _full_path(short: str) -> str:
    """The file a shape-env location names by a shortened path (``mp/x/model.py``).

    torch shortens a path relative to the folder it shares with torch's own; the file is
    the loaded module's whose path ends with the short one at a folder boundary.
    """
    if os.path.isabs(short) and os.path.exists(short):
        return short
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path == short or path.endswith(os.sep + short):
            return str(path)
    return short


def _dynamo_frame() -> traceback.FrameSummary | None:
    """The innermost user frame of the model dynamo is tracing, if it is tracing one."""
    return next((f for f in reversed(traced_stack()) if is_user_code(f.filename)), None)


@dataclasses.dataclass(frozen=True)
class RangeGuard:
    """A bound the model's code put on a dynamic size while being captured (``s77 > 2``).

    Attributes:
        symbol: torch's symbol of the size (``"s77"``), as the program's
            ``range_constraints`` name it.
        source: torch's name of the dimension, e.g. ``"L['x'].size()[0]"``.
        guard: The guard's text (``"s77 > 2"``).
        location: ``"file.py:12"`` of the model's line that set it, or ``""``.
        code: That line's text, or ``""``.
        kind: What the guard says of the size (:data:`GuardKind`).
        hinted: For a ``narrowing`` candidate, the guard with the other sizes at the
            example's values: the adapter's builder finds the one that fails just below
            the range torch gave.
    """

    symbol: str
    source: str
    guard: str
    location: str
    code: str
    kind: GuardKind = "bound"
    hinted: str = ""

    @property
    def key(self) -> str:
        """What tells two guards apart: ``kind:symbol:guard``."""
        return f"{self.kind}:{self.symbol}:{self.guard}"


#: What a recorded guard says of its size: a ``bound`` (``s77 > 2``), an ``excluded`` size
#: (``Ne(s77, 4)``), a ``multiple`` (``Eq(Mod(s77, 4), 0)``), ``size_one`` (the model's code
#: compared the size with 1, a branch torch decided by assuming sizes of 2 or more), or a
#: ``narrowing`` (a guard of torch's own code, ``max_pool2d``'s kernel, that raised the
#: size's lower bound), or an ``interval`` (a guard of the model's on one size, such as
#: ``(s77//8) <= 4``, that holds only for the sizes in ``hinted``: ``"s77 <= 39"``).
#: A ``joint`` guard compares several sizes (``s53 > s31 + s70``: a mask longer than the past
#: plus the new tokens); its ``symbol`` lists them, comma-separated. ``example`` is no guard
#: of torch's: the export's own check found the file off at another size inside the range
#: torch gave (a size-1 example's branch), so the axis holds at the example's size only;
#: its ``guard`` says what the check found.
GuardKind = Literal[
    "bound", "excluded", "multiple", "size_one", "narrowing", "interval", "joint", "example"
]
#: ``Ne(s77, 4)``; ``Eq(Mod(s77, 4), 0)``.
_NE = re.compile(r"^Ne\((?:(?P<s1>s\d+), (?P<v1>-?\d+)|(?P<v2>-?\d+), (?P<s2>s\d+))\)$")
_MOD = re.compile(r"^Eq\((?:Mod|PythonMod)\((?P<s>s\d+), (?P<v>\d+)\), 0\)$")
#: Guards of torch's own code kept per size as candidates for what narrowed its range.
_NARROWING_CANDIDATES = 16
#: Guards over several sizes kept per capture (each a call-time condition of the file).
_JOINT_GUARDS = 64
#: A guard torch's own code added that bounds sizes (``(s0//5) >= 1``).
_COMPARES = re.compile(r"[<>]=?")


class _Recorder(logging.Handler):
    """Reads the shape environment's records; hands on those its parents would see."""

    def __init__(self, forward_level: int, handlers: list[logging.Handler], up: bool) -> None:
        super().__init__(logging.DEBUG)
        self.forward_level, self.handlers, self.up = forward_level, handlers, up
        self.sources: dict[str, str] = {}
        self.found: dict[str, Specialization] = {}
        self.guards: dict[str, RangeGuard] = {}
        self.bounded: set[str] = set()
        self.hints: dict[str, int] = {}
        self.joint = 0  # joint guards kept

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a record in another format: nothing to learn
            self._read(record)
        if record.levelno < self.forward_level:
            return  # torch's handlers would not have seen it
        for handler in self.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        parent = logging.getLogger(SHAPES_LOGGER).parent
        if self.up and parent is not None:
            parent.handle(record)

    def _read(self, record: logging.LogRecord) -> None:
        template, args = str(record.msg), record.args
        if not isinstance(args, tuple):
            return
        if template.startswith("create_symbol %s = %s for"):
            self.sources.setdefault(str(args[0]), str(args[2]))
            if str(args[1]).isdigit():
                self.hints.setdefault(str(args[0]), int(str(args[1])))
        elif template.startswith("set_replacement"):
            if str(args[1]).lstrip("-").isdigit():
                self._found(str(args[0]), int(str(args[1])))
        elif "[guard added]" in template:
            match = _EQ.match(str(args[1]))
            where_text = str(args[2]) if len(args) > 2 else ""
            if _BOUND.match(str(args[1])):
                self._bound(str(args[1]), where_text)
            else:
                self._condition(str(args[1]), where_text)
            if match:
                symbol = match.group("s1") or match.group("s2")
                where = _SLOC.search(str(args[2])) if len(args) > 2 else None
                self._found(symbol, int(match.group("v1") or match.group("v2")), where)

    def _bound(self, guard: str, where: str) -> None:
        symbol = re.findall(r"s\d+", guard)[0]
        source = self.sources.get(symbol)
        if source is None or symbol in self.bounded:
            return
        self.bounded.add(symbol)
        location, code = self._where(_SLOC.search(where) or _PLOC.search(where))
        self._add(RangeGuard(symbol, source, guard, location, code))

    def _add(self, guard: RangeGuard) -> None:
        self.guards.setdefault(guard.key, guard)

    def size_one(self, found: SizeOneComparison) -> None:
        """Record the model's comparison of a size with 1 (``_size_one``) as a guard."""
        source = self.sources[found.symbol]
        guard = f"Ne({found.symbol}, 1)"
        self._add(RangeGuard(found.symbol, source, guard, found.location, found.code, "size_one"))

    def _condition(self, guard: str, where: str) -> None:
        """Record a guard that excludes a size, asks for a multiple, or narrows a range.

        Excluded sizes and multiples count when the model's own code set them; any
        other guard that compares sizes is a candidate for what narrowed a range.
        """
        sloc = _SLOC.search(where) or _PLOC.search(where)
        excluded, multiple = _NE.match(guard), _MOD.match(guard)
        if (excluded or multiple) and _own(where, sloc):
            found = excluded or multiple
            assert found is not None  # one of the two matched
            symbol = found.group("s1") or found.group("s2") if excluded else found.group("s")
            source = self.sources.get(symbol)
            if source is not None:
                location, code = self._where(sloc)
                kind: GuardKind = "excluded" if excluded else "multiple"
                self._add(RangeGuard(symbol, source, guard, location, code, kind))
            return
        symbols = sorted(set(re.findall(r"s\d+", guard)))
        if len(symbols) == 1 and _own(where, sloc) and _EQ.match(guard) is None:
            self._interval(symbols[0], guard, sloc)
        if len(symbols) > 1:
            self._joint(symbols, guard, sloc)
        if not _COMPARES.search(guard):
            return
        for symbol in symbols:
            source = self.sources.get(symbol)
            seen = sum(g.symbol == symbol and g.kind == "narrowing" for g in self.guards.values())
            if source is None or seen >= _NARROWING_CANDIDATES:
                continue
            hinted = guard
            for other in symbols:
                if other != symbol and other in self.hints:
                    hinted = re.sub(rf"\b{other}\b", str(self.hints[other]), hinted)
            location, code = self._where(sloc)
            self._add(RangeGuard(symbol, source, guard, location, code, "narrowing", hinted))

    def _joint(self, symbols: list[str], guard: str, sloc: re.Match[str] | None) -> None:
        """Record a guard that compares several input sizes: the file holds only under it."""
        sources = [self.sources.get(s) for s in symbols]
        if None in sources or self.joint >= _JOINT_GUARDS or re.search(r"\b[a-rt-z]\d+\b", guard):
            return  # a size not of the inputs (an unbacked one): nothing to check it with
        location, code = self._where(sloc)
        source = ";".join(str(s) for s in sources)
        joint = RangeGuard(",".join(symbols), source, guard, location, code, "joint")
        self.joint += joint.key not in self.guards
        self._add(joint)

    def _found(self, symbol: str, value: int, sloc: re.Match[str] | None = None) -> None:
        source = self.sources.get(symbol)
        if source is None or source in self.found:
            return
        location, code = self._where(sloc)
        self.found[source] = Specialization(source, value, location, code)

    def _interval(self, symbol: str, guard: str, sloc: re.Match[str] | None) -> None:
        """Record a guard of the model's own code on one size as the sizes it holds for.

        ``(s77//8) <= 4`` at an example of 32 holds for sizes up to 39.
        """
        source, hint = self.sources.get(symbol), self.hints.get(symbol)
        if source is None or hint is None or "Mod" in guard:
            return
        found = guard_interval(guard, symbol, hint)
        if found is None:
            return
        low, high = found
        text = f"{low if low is not None else 0} <= {symbol}" + (
            f" <= {high}" if high is not None else ""
        )
        location, code = self._where(sloc)
        self._add(RangeGuard(symbol, source, guard, location, code, "interval", text))

    def _where(self, sloc: re.Match[str] | None) -> tuple[str, str]:
        """The model's line a shape-env record was made at: its own text, dynamo's, the stack."""
        location = code = ""
        traced = _dynamo_frame()
        frame = innermost_user_frame(sys._getframe(1))
        if sloc is not None and is_user_code(_full_path(sloc.group("path"))):  # the guard's line
            path = _full_path(sloc.group("path"))
            location, code = f"{path}:{sloc.group('line')}", sloc.group("code")
        elif traced is not None:  # strict capture: dynamo's stack of the model's frames
            location, code = f"{traced.filename}:{traced.lineno}", (traced.line or "").strip()
        elif frame is not None:  # non-strict: the model runs, its frame is on the stack
            path, line = frame.f_code.co_filename, frame.f_lineno
            location, code = f"{path}:{line}", linecache.getline(path, line).strip()
        if location and not code:
            path, _, line = location.rpartition(":")
            code = linecache.getline(path, int(line)).strip()
        return location, code.strip()


#: How far from the example's size a guard's interval is searched.
_INTERVAL_REACH = 4096


def _readable(guard: str, symbol: str) -> tuple[Any, Any]:
    """``guard`` as a sympy expression over ``symbol`` (an integer), and that symbol."""
    import sympy  # type: ignore[import-untyped]  # sympy ships no stubs

    names = {"FloorDiv": lambda a, b: sympy.floor(a / b), "PythonMod": sympy.Mod}
    variable = sympy.Symbol(symbol, integer=True)
    return sympy.sympify(guard, locals={**names, symbol: variable}), variable


def guard_fails_at(guard: str, symbol: str, size: int) -> bool:
    """Whether ``guard`` (over ``symbol`` only) is false at ``size``; unreadable: ``False``.

    Example:
        >>> guard_fails_at("((s0//5)) >= 1", "s0", 4)
        True
    """
    try:
        expr, variable = _readable(guard, symbol)
        return not bool(expr.subs(variable, size))
    except Exception:  # a form sympy cannot read or decide
        return False


def guard_interval(guard: str, symbol: str, hint: int) -> tuple[int | None, int | None] | None:
    """The sizes around ``hint`` for which ``guard`` holds, as ``(low, high)``.

    ``None`` on a side means no bound there; the result is ``None`` when the guard bounds
    nothing (or cannot be read).

    Example:
        >>> guard_interval("(s7//8) <= 4", "s7", 32)
        (None, 39)
    """
    import sympy

    try:
        expr, variable = _readable(guard, symbol)
        holds = sympy.lambdify(variable, expr, modules="math")
        if not holds(hint):
            return None
        low = next((n + 1 for n in range(hint - 1, -1, -1) if not holds(n)), None)
        top = hint + _INTERVAL_REACH
        high = next((n - 1 for n in range(hint + 1, top) if not holds(n)), None)
    except Exception:  # a form sympy or math cannot evaluate: no interval
        return None
    low = None if low is not None and low <= 2 else low
    if (low is None and high is None) or (high is not None and high - (low or 0) < 1):
        return None
    return low, high


def _own(where: str, sloc: re.Match[str] | None) -> bool:
    """Whether a guard's record names the model's own line as the one that added it.

    Non-strict capture writes ``(model.py:12 in forward)``; strict capture writes the
    model's line and then dynamo's frame that evaluated it (``_dynamo/...``) for the
    model's own condition, or the library's (``_meta_registrations.py``) for torch's.
    """
    if sloc is None or not is_user_code(_full_path(sloc.group("path"))):
        return False
    inner = re.search(r"\((?P<path>[^()\s]+?):\d+ in \w+\)[^()]*$", where[sloc.end() :])
    return inner is None or "_dynamo" in inner.group("path")


@contextlib.contextmanager
def recording_specializations() -> Iterator[dict[str, Specialization]]:
    """Collect the specialisations of the block, by torch's source name of the dimension.

    Callers hold the export lock: the logger's level and handlers are process-global.
    """
    with recording_guards() as (found, _guards):
        yield found


@contextlib.contextmanager
def recording_guards() -> Iterator[tuple[dict[str, Specialization], dict[str, RangeGuard]]]:
    """Specialisations by source name, and the guards that bound a size, by symbol.

    The guards include the model's comparisons of a size with 1 that torch decided
    (``_size_one``), as ``size_one`` guards.

    Callers hold the export lock: the logger's level and handlers are process-global.
    """
    logger = logging.getLogger(SHAPES_LOGGER)
    level, propagate, handlers = logger.level, logger.propagate, list(logger.handlers)
    recorder = _Recorder(logger.getEffectiveLevel(), handlers, propagate)
    logger.handlers = [recorder]
    logger.setLevel(min(logging.INFO, logger.getEffectiveLevel()))
    logger.propagate = False
    try:
        with watching_size_one(recorder.sources, recorder.size_one):
            yield recorder.found, recorder.guards
    finally:
        logger.handlers = handlers
        logger.setLevel(level)
        logger.propagate = propagate
