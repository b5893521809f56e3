"""Severity levels shared by rules, diagnostics and options."""

from __future__ import annotations

import enum
import functools

__all__ = ["Level"]


@functools.total_ordering
class Level(enum.Enum):
    """How serious a diagnostic is; the values are the SARIF ``level`` strings.

    Levels are ordered ``NONE < NOTE < WARNING < ERROR``, so options such as
    ``DiagnosticOptions(verbosity=Level.NOTE)`` can compare them.

    Example:
        >>> Level.NOTE < Level.WARNING < Level.ERROR
        True
        >>> Level("warning") is Level.WARNING
        True
        >>> max([Level.NOTE, Level.ERROR, Level.WARNING])
        <Level.ERROR: 'error'>
    """

    NONE = "none"
    NOTE = "note"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """The position of this level in the order ``NONE, NOTE, WARNING, ERROR``.

        Example:
            >>> Level.NONE.rank, Level.ERROR.rank
            (0, 3)
        """
        return _ORDER.index(self.value)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Level):
            return NotImplemented
        return self.rank < other.rank


_ORDER = ("none", "note", "warning", "error")
