"""The exporter's error hierarchy: one base class and one subclass per pipeline stage.

Every message says which stage failed, why, and what to try next. When a SARIF report
was written for the failed export, its path is in the message and in ``report_path``.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from onnx_export.diagnostics import DiagnosticContext

__all__ = [
    "SCREEN_CHARS",
    "SCREEN_LINES",
    "SourceLine",
    "fit_to_screen",
    "OnnxExportError",
    "ExportInputError",
    "CaptureError",
    "ConversionError",
    "UnsupportedOpsError",
    "UnsupportedOpInputError",
    "OptimizationError",
    "SerializationError",
    "VerificationError",
    "InvalidGraphError",
    "ParityWarning",
    "TrainingModeWarning",
    "StaticDimensionWarning",
    "DimensionNameWarning",
    "ShapeRangeWarning",
    "DimensionRelationWarning",
]


class SourceLine(NamedTuple):
    """A line of the user's code that an error points at (the SARIF report's location).

    Attributes:
        path: The file.
        line: The line number (1-based).
        code: The line's text, when known.

    Example:
        >>> from onnx_export.errors import SourceLine
        >>> SourceLine("model.py", 12, "h = self.time(emb)").line
        12
    """

    path: str
    line: int
    code: str = ""


#: One screen: an error's message, up to the SARIF path, has at most this many lines...
SCREEN_LINES = 15
#: ...and this many characters.
SCREEN_CHARS = 1200
_LINE_WIDTH = 200


def _clip(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def fit_to_screen(message: str, lines: int = SCREEN_LINES, chars: int = SCREEN_CHARS) -> str:
    r"""``message`` cut to one screen: its first line, the next steps, and what else fits.

    The first line (what failed) and the ``Next steps:`` paragraph are kept; detail lines
    between them are kept by indentation (bullets before their continuation lines) while
    they fit, each cut to one terminal line; a last line says how many were left out
    (the SARIF report and the CLI's ``-v`` have them all).

    Example:
        >>> from onnx_export.errors import fit_to_screen
        >>> text = "Boom.\n" + "\n".join(f"  - detail {i}" for i in range(40)) + "\nNext steps: x."
        >>> fitted = fit_to_screen(text)
        >>> len(fitted.splitlines()) <= 15 and fitted.endswith("Next steps: x.")
        True
    """
    if len(message.splitlines()) <= lines and len(message) <= chars:
        return message
    all_lines = []
    for text in message.rstrip().splitlines():  # "... Next steps: ..." as its own line
        before, found, after = text.partition(" Next steps:")
        all_lines += [before, f"Next steps:{after}"] if found else [text]
    start = next((i for i, t in enumerate(all_lines) if t.startswith("Next steps:")), None)
    head, steps = (all_lines, []) if start is None else (all_lines[:start], all_lines[start:])
    steps = [_clip(" ".join(t.strip() for t in steps), 500)] if steps else []
    first = [_clip(head[0], 700)] if head else []  # what failed, where, and why
    middle = head[1:]
    note_room = 1
    room_lines = lines - len(first) - len(steps) - note_room
    room_chars = chars - sum(len(t) + 1 for t in first + steps) - 90
    order = sorted(range(len(middle)), key=lambda i: (len(middle[i]) - len(middle[i].lstrip()), i))
    kept: set[int] = set()
    for i in order:
        text = _clip(middle[i], _LINE_WIDTH)
        if len(kept) >= room_lines or len(text) + 1 > room_chars:
            break  # no deeper line before every shallower one
        kept.add(i)
        room_chars -= len(text) + 1
    body = [_clip(middle[i], _LINE_WIDTH) for i in sorted(kept)]
    left_out = len(middle) - len(kept)
    if left_out:
        body.append(
            f"  ... {left_out} more line(s) of detail: in the SARIF report (CLI: -v prints them)"
        )
    return "\n".join(first + body + steps)


class OnnxExportError(RuntimeError):
    """Base class of every error raised by :func:`onnx_export.dynamo_export` and friends.

    Attributes:
        stage: The pipeline stage that failed (``"capture"``, ``"conversion"``, ...).
        diagnostic_context: The export's diagnostics, when the export got that far.
        report_path: Where the SARIF report of the failed export was written, if it was.
        report_problem: Why the report could not be written, when it could not.
        source: The line of the user's code that caused the failure, when known (the
            report's location).
        details: The whole message; ``str()`` fits it to one screen.

    Example:
        >>> import onnx_export
        >>> try:
        ...     raise onnx_export.CaptureError("torch.export failed")
        ... except onnx_export.OnnxExportError as e:
        ...     print(e.stage)
        capture
    """

    stage: str = "export"

    def __init__(
        self,
        message: str,
        *,
        diagnostic_context: DiagnosticContext | None = None,
        report_path: pathlib.Path | None = None,
        source: SourceLine | None = None,
    ) -> None:
        super().__init__(message)
        self.diagnostic_context = diagnostic_context
        self.report_path = report_path
        self.report_problem: str | None = None
        self.source = source

    @property
    def details(self) -> str:
        """The whole message, before it is fitted to one screen (the SARIF report keeps it)."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        text = fit_to_screen(self.details)
        if self.report_path is not None:
            text += f"\nThe full diagnostic report (SARIF) is at: {self.report_path}"
        elif self.report_problem is not None:
            text += f"\n{self.report_problem}"
        return text


class ExportInputError(OnnxExportError, ValueError):
    """The example inputs or options do not fit the model (checked before capture).

    Also a ``ValueError``, so code that catches that keeps working.

    Example:
        >>> import onnx_export
        >>> issubclass(onnx_export.ExportInputError, ValueError)
        True
    """

    stage = "input"


class CaptureError(OnnxExportError):
    """No capture strategy could turn the model into an ``ExportedProgram``.

    Example:
        >>> import onnx_export
        >>> issubclass(onnx_export.CaptureError, onnx_export.OnnxExportError)
        True
    """

    stage = "capture"


class StaticDimensionWarning(UserWarning):
    """A dimension asked to be dynamic was exported static (``allow_static_fallback=True``).

    One warning per dimension: it names the input and axis, the size the model's code
    fixes it to, the line that does, and torch.export's reason.

    Example:
        >>> from onnx_export.errors import StaticDimensionWarning
        >>> issubclass(StaticDimensionWarning, UserWarning)
        True
    """


class DimensionNameWarning(UserWarning):
    """A dynamic axis name is not used: torch.export found the axis equal to another one.

    Two axes named differently (``{"x": {0: "batch"}, "y": {0: "batch2"}}``) that the
    model requires to be equal (it adds ``x`` and ``y``) are one dimension to torch.export,
    so the ONNX graph gives both the first name. One warning per unused name: it names
    the axis, the name kept and the axis that has it.

    Example:
        >>> from onnx_export.errors import DimensionNameWarning
        >>> issubclass(DimensionNameWarning, UserWarning)
        True
    """


class ShapeRangeWarning(UserWarning):
    """A dynamic dimension holds only for a range, set by a guard in the model's code.

    ``if x.shape[0] > 2:`` traced at a batch of 4 exports the branch for batches of 3 and
    more; the file keeps that range and refuses other sizes with an ``InputShapeError``.
    The warning points at the model's line that set the range.

    Example:
        >>> from onnx_export.errors import ShapeRangeWarning
        >>> issubclass(ShapeRangeWarning, UserWarning)
        True
    """


class DimensionRelationWarning(UserWarning):
    """Dynamic dimensions given as independent are tied by the model (``c = 32 - t``).

    ``torch.cat([tokens, cache], 1)`` feeding ``nn.Linear(32, ...)`` holds only when the
    two lengths sum to 32. The export applies the relation torch.export finds, records it
    in the adapter (calls whose sizes break it get an ``InputShapeError`` naming it) and
    warns once per relation.

    Example:
        >>> from onnx_export.errors import DimensionRelationWarning
        >>> issubclass(DimensionRelationWarning, UserWarning)
        True
    """


class ConversionError(OnnxExportError):
    """Translating the FX graph to ONNX failed (dispatch or an ONNX function raised).

    Example:
        >>> import onnx_export
        >>> onnx_export.ConversionError("boom").stage
        'conversion'
    """

    stage = "conversion"


class UnsupportedOpsError(ConversionError):
    """One or more operators have no ONNX function; all of them are listed.

    Attributes:
        unsupported: One entry per FX node: ``(op, node_name, module_path, source_line)``.

    Example:
        >>> import onnx_export
        >>> err = onnx_export.UnsupportedOpsError("2 ops", unsupported=())
        >>> err.unsupported
        ()
    """

    def __init__(
        self,
        message: str,
        *,
        unsupported: tuple[tuple[str, str, str, str], ...],
        diagnostic_context: DiagnosticContext | None = None,
        report_path: pathlib.Path | None = None,
    ) -> None:
        super().__init__(message, diagnostic_context=diagnostic_context, report_path=report_path)
        self.unsupported = unsupported


class UnsupportedOpInputError(ConversionError):
    """One of onnx-export's own ONNX functions cannot translate a node with these inputs.

    Raised inside the op library (``onnx_export.ops``) where a function has a limit, such
    as static shapes; the export then fails with a :class:`ConversionError` at the user's
    line whose cause is this error.

    Attributes:
        op: The operator (``"aten::im2col"``), or ``"this op"`` outside an export.
        expected: What the function needs.
        got: What the node had.

    Example:
        >>> from onnx_export.errors import UnsupportedOpInputError
        >>> err = UnsupportedOpInputError("aten::im2col", "static input shapes", "[s0, 3, 8, 8]")
        >>> err.expected
        'static input shapes'
    """

    def __init__(self, op: str, expected: str, got: str, hint: str | None = None) -> None:
        next_step = hint or (
            "export with static shapes for this op's inputs (leave them out of "
            "dynamic_shapes), or register your own ONNX function for it with "
            "OnnxRegistry.register_op"
        )
        super().__init__(f"{op} needs {expected}, but got {got}. Next step: {next_step}.")
        self.op = op
        self.expected = expected
        self.got = got


class OptimizationError(OnnxExportError):
    """The ONNX optimizer failed on the translated model.

    Example:
        >>> import onnx_export
        >>> onnx_export.OptimizationError("x").stage
        'optimization'
    """

    stage = "optimization"


class SerializationError(OnnxExportError):
    """Writing the model (or its external data) to disk failed.

    Example:
        >>> import onnx_export
        >>> onnx_export.SerializationError("disk full").stage
        'serialization'
    """

    stage = "serialization"


class VerificationError(OnnxExportError):
    """ONNX Runtime's results differ from PyTorch's (``ExportOptions(verify=True)``).

    Example:
        >>> import onnx_export
        >>> onnx_export.VerificationError("x").stage
        'verification'
    """

    stage = "verification"


class InvalidGraphError(OnnxExportError):
    """The exported graph fails the ONNX checker or ONNX Runtime's graph checks.

    Raised by :meth:`onnx_export.ONNXProgram.save` before anything is written (and by the
    export, when its parity check builds the session), instead of a file ONNX Runtime
    refuses: it names the ONNX node, its operator, the model's line it was translated
    from, and the checker's reason. It is a bug of the translation (or of an edit to
    ``program.model``), not of the model.

    Attributes:
        node: The ONNX node's name (``""`` when the checker named none).
        op: Its operator (``""`` when unknown).
        where: The model's ``file:line`` the node came from (``""`` when unknown).
        reason: The checker's or ONNX Runtime's message.

    Example:
        >>> from onnx_export.errors import InvalidGraphError
        >>> error = InvalidGraphError("bad", node="n", op="Add", where="m.py:3", reason="type")
        >>> error.stage, error.op
        ('check', 'Add')
    """

    stage = "check"

    def __init__(
        self,
        message: str,
        *,
        node: str = "",
        op: str = "",
        where: str = "",
        reason: str = "",
        diagnostic_context: DiagnosticContext | None = None,
        report_path: pathlib.Path | None = None,
    ) -> None:
        super().__init__(message, diagnostic_context=diagnostic_context, report_path=report_path)
        self.node = node
        self.op = op
        self.where = where
        self.reason = reason


class ParityWarning(UserWarning):
    """ONNX Runtime's outputs differ from eager PyTorch on the export's example inputs.

    Issued by :func:`onnx_export.dynamo_export`'s default parity check
    (``ExportOptions(verify=None)``), located at the model's line of the first node that
    diverges when one is found. The message names the outputs and their errors and the
    cause: that node and its ONNX function, the model's eager path that differs from the
    traced one (PyTorch's fast paths), or training mode. ``verify=True`` raises a
    :class:`VerificationError` instead.

    Example:
        >>> from onnx_export.errors import ParityWarning
        >>> issubclass(ParityWarning, UserWarning)
        True
    """


class TrainingModeWarning(UserWarning):
    """The model was exported in training mode, and the graph computes what ``train()`` does.

    Issued at the user's call of :func:`onnx_export.dynamo_export` when submodules in
    training mode put training computations into the graph (batch statistics in batch
    norm, random dropout masks); each is named. Call ``model.eval()`` before exporting.

    Example:
        >>> from onnx_export.errors import TrainingModeWarning
        >>> issubclass(TrainingModeWarning, UserWarning)
        True
    """
