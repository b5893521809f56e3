"""Which code is the user's: the frames that locations, warnings and reports may name.

An export runs the user's model through torch's tracing machinery, this exporter's own
code (the stages, and the capture patches that replace library functions for the time of
a capture) and the standard library (``contextlib``, ``logging``). A guard, a node, a
warning or a report located at one of those frames points the user at code they did not
write: ``patches/_cdist.py``'s call of the original ``torch.cdist`` rather than the
model's line that called ``torch.cdist``. Every place that locates something in the
user's code asks this module, so that they all skip the same frames:

- :func:`is_exporter_code`: this package's files (and the ``adapters``/``diagnostics``
  folders it links to, as given and resolved);
- :func:`is_user_code`: neither that, nor torch's, nor the standard library's, nor a
  pseudo-file (``<string>``). Other libraries' files (a transformers model) are the
  model's code, so they count as the user's;
- :func:`innermost_user_frame` and :func:`traced_stack`: the model's frames on the live
  stack (non-strict capture runs them) and in dynamo's (strict capture traces them);
- :func:`user_stacklevel` and :func:`warn_at_user_line`: a warning raised by the exporter
  names the innermost frame of the caller that is the user's.

Importing it imports neither torch nor the exporter's libraries.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
import traceback
import warnings
from types import FrameType

__all__ = [
    "exporter_dirs",
    "innermost_user_frame",
    "is_exporter_code",
    "is_user_code",
    "traced_stack",
    "user_stacklevel",
    "warn_at_user_line",
]

#: ``onnx_export/`` (this module's package's parent).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _both(folder: str) -> tuple[str, ...]:
    """``folder/`` as given and with links resolved (once each)."""
    resolved = os.path.realpath(folder)
    return tuple(dict.fromkeys((os.path.join(folder, ""), os.path.join(resolved, ""))))


@functools.cache
def exporter_dirs() -> tuple[str, ...]:
    """This package's folders, each ending in a separator: ``onnx_export/`` and its links.

    ``onnx_export/adapters`` and ``onnx_export/diagnostics`` link to top-level folders in a
    checkout; frames there may carry either path.

    Example:
        >>> any(__file__.startswith(d) for d in exporter_dirs())
        True
    """
    linked = (os.path.join(_PACKAGE_DIR, name) for name in ("adapters", "diagnostics"))
    return tuple(dict.fromkeys((*_both(_PACKAGE_DIR), *(d for f in linked for d in _both(f)))))


@functools.cache
def _not_user_dirs() -> tuple[str, ...]:
    """The exporter's folders, the stdlib's, torch's and sympy's (as given and resolved).

    sympy is torch's symbolic machinery here: its frames sit between torch's.
    """
    found = [*exporter_dirs(), *_both(sysconfig.get_paths()["stdlib"])]
    for library in ("torch", "sympy"):
        spec = importlib.util.find_spec(library)
        if spec is not None and spec.origin:  # found without importing it
            found.extend(_both(os.path.dirname(spec.origin)))
    return tuple(dict.fromkeys(found))


def is_exporter_code(path: str) -> bool:
    """Whether the file ``path`` is one of this package's (a stage, a capture patch...).

    Example:
        >>> is_exporter_code(__file__), is_exporter_code("/home/me/model.py")
        (True, False)
    """
    return path.startswith(exporter_dirs())


def is_user_code(path: str) -> bool:
    """Whether the file ``path`` is the user's: not ours, torch's, the stdlib's or ``<...>``.

    Example:
        >>> is_user_code("/home/me/model.py"), is_user_code(os.__file__), is_user_code("<string>")
        (True, False, False)
    """
    return bool(path) and not path.startswith(("<", *_not_user_dirs()))


def traced_stack() -> list[traceback.FrameSummary]:
    """The frames of the code dynamo is tracing (strict capture), outermost first.

    Empty when dynamo is not tracing (non-strict capture runs the model's frames live).
    """
    try:
        from torch._guards import TracingContext

        return list(TracingContext.extract_stack())
    except Exception:  # not tracing, or another torch
        return []


def innermost_user_frame(frame: FrameType | None) -> FrameType | None:
    """``frame`` or the first of its callers whose file is the user's; ``None`` if none is.

    Example:
        >>> innermost_user_frame(None) is None
        True
    """
    while frame is not None:
        if is_user_code(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning of the caller name the user's innermost line.

    Counted as ``warnings.warn`` counts in the function that calls this one (that
    function's own line is ``stacklevel=1``); where no frame is the user's (a command-line
    run), the outermost frame.
    """
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and not is_user_code(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def warn_at_user_line(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` at the innermost line of the user's code that led here.

    The exporter's frames, torch's and the standard library's are passed over, however
    deep the exporter called this from (a function called by ``dynamo_export``, or by the
    command line's ``export``).
    """
    warnings.warn(message, category, stacklevel=user_stacklevel())
