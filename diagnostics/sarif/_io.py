"""Reading and (atomically) writing SARIF files."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
from collections.abc import Mapping

from .._errors import SarifFormatError, SarifWriteError

__all__ = ["load_sarif", "write_json_atomic"]


def write_json_atomic(data: Mapping[str, object], path: str | os.PathLike[str]) -> pathlib.Path:
    """Writes ``data`` as JSON to ``path`` through a temporary file and :func:`os.replace`.

    Readers never see a half-written file: the data goes to a temporary file in the same
    folder, which then replaces ``path`` in one step. Missing parent folders are created.

    Raises:
        SarifWriteError: If the folder or file cannot be written; the message names the path.
    """
    target = pathlib.Path(path).expanduser().resolve()
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    temporary: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = _create_temporary(target)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
        temporary = None
    except OSError as error:
        raise SarifWriteError(
            f"Could not write the SARIF report to '{target}': {error.strerror or error}. "
            "Choose a writable path (for example DiagnosticOptions(report_path=...)) "
            "or check the folder's permissions and free space."
        ) from error
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return target


def _create_temporary(target: pathlib.Path) -> tuple[int, str]:
    """A new file beside ``target`` with the permissions ``open`` would give it (the umask's).

    ``tempfile.mkstemp`` creates files readable by their owner only; a report the user
    asked for gets the same permissions as the other files they write.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        name = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue
    raise FileExistsError(f"No free temporary name beside {target}.")


def load_sarif(path: str | os.PathLike[str]) -> dict[str, object]:
    """Reads a SARIF file and checks that it is a SARIF 2.1.0 log.

    Only the outline is checked: a JSON object with ``version`` ``"2.1.0"`` and a ``runs``
    list. Validate against the schema for more.

    Args:
        path: The ``.sarif`` file.

    Raises:
        OSError: If the file cannot be read.
        SarifFormatError: If it is not JSON or not a SARIF 2.1.0 log; the message says what
            was found.

    Example:
        >>> import pathlib, tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     report = pathlib.Path(folder, "r.sarif")
        ...     _ = report.write_text('{"version": "2.1.0", "runs": []}')
        ...     load_sarif(report)["version"]
        '2.1.0'
    """
    try:
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as error:
        raise SarifFormatError(f"'{path}' is not UTF-8 text: {error}.") from error
    except json.JSONDecodeError as error:
        raise SarifFormatError(f"'{path}' is not valid JSON: {error}.") from error
    if not isinstance(data, dict):
        raise SarifFormatError(
            f"'{path}' holds a JSON {type(data).__name__}; a SARIF log is a JSON object."
        )
    version = data.get("version")
    if version != "2.1.0":
        raise SarifFormatError(
            f"'{path}' has SARIF version {version!r}; expected '2.1.0', the only version "
            "this reader supports. Convert the log to SARIF 2.1.0 first."
        )
    if not isinstance(data.get("runs"), list):
        raise SarifFormatError(f"'{path}' has no 'runs' list, which every SARIF log needs.")
    return data
