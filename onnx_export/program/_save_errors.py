"""What a failed save tells the user: the real cause, and advice only where it helps."""

from __future__ import annotations

import errno

__all__ = ["save_cause", "save_advice"]


def save_cause(error: BaseException) -> str:
    """The cause of a failed save in a few words (an OS error's text and its path)."""
    if isinstance(error, OSError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror}{where}"
    return str(error).rstrip(".")


_OS_ADVICE = {
    errno.EACCES: "Check that the folder is writable. ",
    errno.EPERM: "Check that the folder is writable. ",
    errno.EROFS: "The file system is read-only; choose another folder. ",
    errno.ENOSPC: "Free some space or choose another disk. ",
    errno.EDQUOT: "Free some space (the disk quota is reached) or choose another disk. ",
    errno.ENOTDIR: "A part of the path is a file, not a folder; choose another path. ",
    errno.EEXIST: "A part of the path is a file, not a folder; choose another path. ",
    errno.EISDIR: "The path is a folder; give a file name such as model.onnx. ",
}


def save_advice(error: BaseException) -> str:
    """What to do about a failed save, when the cause itself does not say."""
    if isinstance(error, OSError):
        return _OS_ADVICE.get(error.errno or 0, "")
    return ""
