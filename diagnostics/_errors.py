"""The exceptions raised by the diagnostics package."""

from __future__ import annotations

__all__ = ["DiagnosticsError", "SarifFormatError", "SarifWriteError"]


class DiagnosticsError(Exception):
    """Base class of every exception the diagnostics package raises on purpose.

    Example:
        >>> issubclass(SarifFormatError, DiagnosticsError)
        True
    """


class SarifFormatError(DiagnosticsError, ValueError):
    """A file or dict is not a SARIF 2.1.0 log this package can read.

    Example:
        >>> raise SarifFormatError("'r.sarif' has version '2.0.0'; expected '2.1.0'.")
        ... # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        SarifFormatError: 'r.sarif' has version '2.0.0'; expected '2.1.0'.
    """


class SarifWriteError(DiagnosticsError, OSError):
    """A SARIF report could not be written to the requested path.

    It is an :class:`OSError`, so code that already handles file-system errors handles it too.

    Example:
        >>> isinstance(SarifWriteError("cannot write"), OSError)
        True
    """
