"""Where the model's code needs a tensor's value while it is traced, and how to get past it.

``if x.sum() > 0:`` asks Python for a tensor's value; torch.export traces with symbolic
values and stops there ("Could not guard on data-dependent expression", "Data-dependent
branching"). ``np.frexp(t.numpy())`` asks numpy for it (I-BERT's quantizer), which fails
the same way ("``.numpy()`` is not supported for tensor subclasses"). Torch names the
line deep in its message (non-strict capture: the frame of the model that asked;
strict: its user stack), under each strategy's attempt. :func:`data_dependent_line`
finds that line so that the capture error can say, on its first line, the cause, the
model's file and line, and the fixes.

Numpy calls are not folded at export time even where their input derives from weights
only (I-BERT's scales): non-strict capture traces with fake weights, so the value is
unknown where numpy is called, and strict capture refuses numpy functions that
``torch._numpy`` lacks (``frexp``). The fix is the model's: the torch op (``torch.frexp``)
or a value computed before export (I-BERT's own ``batch_frexp`` is replaced
while capturing: ``capture/patches/_quant_frexp.py``).

No rewrite to ``torch.cond`` is made automatically: the two branches of a Python ``if``
may return different structures, mutate state or call code torch cannot trace twice,
and only the model's author knows that they may both run.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import traceback
from collections.abc import Sequence

from onnx_export.capture._random_draws import random_draw_near
from onnx_export.capture._specialized import model_file

__all__ = ["DataDependentLine", "data_dependent_line", "failing_line"]

#: What torch says when the model asks for a tensor's value during tracing.
_MARKERS = (
    "Could not guard on data-dependent expression",
    "Data-dependent branching",
    "GuardOnDataDependentSymNode",
    "data dependent operator",
)
#: What torch says when the model hands a traced tensor to numpy.
_NUMPY_MARKERS = (
    ".numpy() is not supported for tensor subclasses",
    "attempted to trace numpy function",
    "Can't find numpy",
)
_FILE_LINE = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_SHORT_LINE = re.compile(r"(?P<path>[^\s()#]+\.py):(?P<line>\d+) in ")
_BRANCHES = re.compile(r"^\s*(if|elif|while|assert)\b|\bif\b.*\belse\b|\b(and|or|not)\b")


@dataclasses.dataclass(frozen=True)
class DataDependentLine:
    """The model's line that needs a tensor's value, where torch.export stopped.

    Attributes:
        path: The model's file.
        line: The line number.
        code: The line's text (stripped), or ``""``.
        numpy: Whether the value was asked for by numpy (``t.numpy()``, ``np.frexp(t)``).
        positions: Whether the line is in transformers' multimodal rotary positions
            (``get_rope_index``), which a ``position_ids`` input skips.

    Example:
        >>> line = DataDependentLine("/m/model.py", 4, "if x.sum() > 0:")
        >>> line.first_line().split(" (data-dependent")[0].split(": ", 1)[1]
        "it branches on a tensor's value at /m/model.py:4 (`if x.sum() > 0:`)"
    """

    path: str
    line: int
    code: str
    numpy: bool = False
    positions: bool = False

    @property
    def branches(self) -> bool:
        """Whether the line is a Python branch (``if``, ``while``, ``and``/``or``...)."""
        return bool(_BRANCHES.search(self.code))

    def next_steps(self) -> str:
        """What the fixes of the first line need."""
        if self.positions:
            return (
                "compute the positions eagerly on the example, e.g. "
                "`position_ids, _ = model.model.get_rope_index(input_ids, ...)` with the "
                "arguments it names, and pass position_ids=... to dynamo_export; a deployment "
                "computes them the same way before each call."
            )
        if self.numpy:
            return (
                "rewrite the line named first with torch ops, which torch.export traces; a "
                "value that depends on the weights only can also be computed once, before "
                "export, and registered as a buffer (module.register_buffer)."
            )
        return (
            "rewrite the line named first. torch.cond traces both branches, which must "
            "take tensors and return tensors of the same shapes and dtypes; "
            "torch._check(value >= 0) and the like tell torch.export what it may assume "
            "about a value used as a size or index. Where a model option avoids that "
            "branch (a config flag, an input that fixes it), export with it."
        )

    def first_line(self) -> str:
        """The error's first line: the cause, the model's line and how to get past it."""
        code = f" (`{self.code}`)" if self.code else ""
        if self.positions:
            return (
                "torch.export could not capture the model: transformers computes its "
                "multimodal rotary positions (get_rope_index) from the token ids in Python, "
                f"at {self.path}:{self.line}{code}; pass position_ids to the export (and to "
                "each call), which skips that code."
            )
        if self.numpy:
            return (
                "torch.export could not capture the model: it hands a traced tensor to "
                f"numpy at {self.path}:{self.line}{code} (numpy needs values, tracing has "
                "none); compute it with torch ops (torch.frexp for np.frexp, ...), or "
                "compute it before export and keep the result as a buffer."
            )
        if not self.branches:
            return (
                "torch.export could not capture the model: it uses a tensor's value as a "
                f"Python number at {self.path}:{self.line}{code} (data-dependent value); "
                "take the number from a shape or a Python argument instead, or bound the "
                "value with torch._check(...) right after it is read (.item())."
                + _random_note(self.path, self.line)
            )
        return (
            "torch.export could not capture the model: it branches on a tensor's value at "
            f"{self.path}:{self.line}{code} (data-dependent control flow); write that `if` "
            "as torch.cond(pred, true_fn, false_fn, operands), make it branchless "
            "(torch.where), or bound the value with torch._check(...)."
            + _random_note(self.path, self.line)
        )


def _random_note(path: str, line: int) -> str:
    draw = random_draw_near(path, line)
    if draw is None:
        return ""
    return (
        f" The same function draws random numbers ({path}:{draw[0]}: `{draw[1]}`): where "
        "that runs in eval mode, eager's outputs differ from call to call and no export "
        "can match them."
    )


def _cause(error: BaseException) -> str | None:
    """``"numpy"``, ``"value"`` (data-dependent control flow) or ``None``."""
    text = f"{type(error).__name__}: {error}"
    if any(marker in text for marker in _NUMPY_MARKERS):
        return "numpy"
    return "value" if any(marker in text for marker in _MARKERS) else None


#: transformers' functions that compute multimodal rotary positions from the token ids.
_POSITION_FUNCTIONS = ("get_rope_index", "compute_3d_position_ids")


def _in_positions(error: BaseException) -> bool:
    """Whether ``error`` was raised under transformers' multimodal rotary positions."""
    names = [f.name for f in traceback.extract_tb(error.__traceback__)]
    text = str(error)
    return any(n in _POSITION_FUNCTIONS for n in names) or any(
        f" in {n}" in text or f"{n}(" in text for n in _POSITION_FUNCTIONS
    )


def _from_traceback(error: BaseException) -> tuple[str, int] | None:
    """The innermost frame of the model's code in the traceback (non-strict capture)."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = model_file(frame.filename)
        if path is not None and frame.lineno is not None:
            return path, frame.lineno
    return None


def _from_message(error: BaseException) -> tuple[str, int] | None:
    """The innermost line of the model's code torch's message names (its user stack)."""
    text = str(error)
    found = [*_FILE_LINE.finditer(text)] or [*_SHORT_LINE.finditer(text)]
    for match in reversed(found):
        path = model_file(match.group("path"))
        if path is not None:
            return path, int(match.group("line"))
    return None


def data_dependent_line(errors: Sequence[BaseException | None]) -> DataDependentLine | None:
    """The model's line behind the first data-dependent failure among ``errors``, if any.

    Example:
        >>> data_dependent_line([ValueError("something else")]) is None
        True
    """
    for error in errors:
        cause = _cause(error) if error is not None else None
        if error is None or cause is None:
            continue
        where = _from_traceback(error) or _from_message(error)
        if where is not None:
            path, line = where
            code = linecache.getline(path, line).strip()
            positions = cause == "value" and _in_positions(error)
            return DataDependentLine(path, line, code, cause == "numpy", positions)
    return None


def failing_line(error: BaseException | None) -> tuple[str, int, str] | None:
    """The model's file, line and code where ``error`` (any capture failure) was raised.

    Example:
        >>> failing_line(ValueError("no traceback")) is None
        True
    """
    if error is None:
        return None
    where = _from_traceback(error) or _from_message(error)
    if where is None:
        return None
    path, line = where
    return path, line, linecache.getline(path, line).strip()
