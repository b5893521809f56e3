"""``check_environment``: which versions are installed here, and whether export works here.

The check imports each library (a broken install counts as missing) but changes nothing.
``onnx-export doctor`` prints its result.
"""

from __future__ import annotations

import dataclasses
import importlib
import platform
import re
from collections.abc import Mapping

__all__ = [
    "EnvironmentReport",
    "check_environment",
    "MIN_TORCH",
    "MIN_ONNXSCRIPT",
    "TESTED_TORCH",
    "TORCH_INSTALL",
]

MIN_TORCH = (2, 13)
"""The oldest torch release the exporter supports (it relies on torch.export's API)."""

TESTED_TORCH = "2.13.0"
"""The torch release the exporter's test suite runs on."""

TORCH_INSTALL = (
    f"pip install torch=={TESTED_TORCH} --index-url https://download.pytorch.org/whl/cpu"
)
"""How to install the tested torch, CPU build (a plain ``pip install torch`` on Linux brings
the multi-GB CUDA build; for a GPU, use the CUDA index of https://pytorch.org instead)."""

MIN_ONNXSCRIPT = (0, 7)
"""The oldest onnxscript release whose torchlib and optimizer the exporter supports."""

# Distribution label -> module imported to find the version.
_MODULES = {
    "torch": "torch",
    "onnxscript": "onnxscript",
    "onnx-ir": "onnx_ir",
    "onnx": "onnx",
    "onnxruntime": "onnxruntime",
}


@dataclasses.dataclass(frozen=True)
class EnvironmentReport:
    """The libraries onnx-export uses, as installed here, and what that allows.

    ``str(report)`` is a readable table (what ``onnx-export doctor`` prints).

    Attributes:
        onnx_export: The onnx-export version.
        python: The Python version.
        platform: The operating system and machine, e.g. ``"Linux-6.8-x86_64"``.
        torch: The torch version, or ``None`` when torch cannot be imported.
        onnxscript: The onnxscript version, or ``None``.
        onnx_ir: The onnx-ir version, or ``None``.
        onnx: The onnx version, or ``None``.
        onnxruntime: The onnxruntime version, or ``None``.
        execution_providers: ONNX Runtime's available execution providers, in its
            priority order (empty without onnxruntime).
        export_supported: Whether :func:`onnx_export.dynamo_export` can run here: torch
            importable and at least 2.13, onnxscript at least 0.7, onnx-ir and onnx
            importable.
        problems: One sentence per problem found, each saying what to do about it.

    Example:
        >>> import onnx_export
        >>> report = onnx_export.check_environment()
        >>> report.export_supported
        True
        >>> "CPUExecutionProvider" in report.execution_providers
        True
    """

    onnx_export: str
    python: str
    platform: str
    torch: str | None
    onnxscript: str | None
    onnx_ir: str | None
    onnx: str | None
    onnxruntime: str | None
    execution_providers: tuple[str, ...]
    export_supported: bool
    problems: tuple[str, ...] = ()

    def __str__(self) -> str:
        rows = [
            ("onnx-export", self.onnx_export),
            ("Python", f"{self.python} ({self.platform})"),
            ("torch", self.torch),
            ("onnxscript", self.onnxscript),
            ("onnx-ir", self.onnx_ir),
            ("onnx", self.onnx),
            ("onnxruntime", self.onnxruntime),
            ("providers", ", ".join(self.execution_providers) or "none"),
        ]
        lines = [f"{label:<12} {value or 'not installed'}" for label, value in rows]
        lines.append(f"Export supported here: {'yes' if self.export_supported else 'no'}")
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


def check_environment() -> EnvironmentReport:
    """Report the installed torch, onnxscript, onnx-ir, onnx and onnxruntime, and what works.

    Each library is imported to read its version, so the first call may take a few
    seconds (torch); a library that fails to import is reported as not installed, with
    the reason among :attr:`EnvironmentReport.problems`.

    Returns:
        The report; ``print(report)`` shows it as a table.

    Example:
        >>> import onnx_export
        >>> report = onnx_export.check_environment()
        >>> report.torch is not None
        True
        >>> print(report)  # doctest: +ELLIPSIS
        onnx-export  ...
        Export supported here: yes
    """
    versions: dict[str, str | None] = {}
    problems: list[str] = []
    for label, module_name in _MODULES.items():
        versions[label], problem = _import_version(label, module_name)
        if problem:
            problems.append(problem)
    providers = _execution_providers() if versions["onnxruntime"] else ()
    problems += _version_problems(versions)
    return _report(versions, providers, tuple(problems))


def _report(
    versions: Mapping[str, str | None], providers: tuple[str, ...], problems: tuple[str, ...]
) -> EnvironmentReport:
    from onnx_export import __version__

    blocking = ("torch", "onnxscript", "onnx-ir", "onnx")
    supported = all(versions.get(label) for label in blocking) and not _version_problems(versions)
    return EnvironmentReport(
        onnx_export=__version__,
        python=platform.python_version(),
        platform=platform.platform(terse=True),
        torch=versions.get("torch"),
        onnxscript=versions.get("onnxscript"),
        onnx_ir=versions.get("onnx-ir"),
        onnx=versions.get("onnx"),
        onnxruntime=versions.get("onnxruntime"),
        execution_providers=providers,
        export_supported=supported,
        problems=problems,
    )


def _import_version(label: str, module_name: str) -> tuple[str | None, str | None]:
    """``(version, None)``, or ``(None, problem)`` when the module cannot be imported."""
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # any import failure means "not usable here"
        reason = f"{type(e).__name__}: {e}".splitlines()[0]
        return None, f"{label} cannot be imported ({reason}); install it with `{_install(label)}`."
    return str(getattr(module, "__version__", "unknown")), None


def _execution_providers() -> tuple[str, ...]:
    try:
        ort = importlib.import_module("onnxruntime")
        return tuple(str(p) for p in ort.get_available_providers())
    except Exception:  # a broken runtime has no providers
        return ()


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``"2.13.0+cpu"`` -> ``(2, 13, 0)``."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def _version_problems(versions: Mapping[str, str | None]) -> list[str]:
    problems = []
    for label, minimum in (("torch", MIN_TORCH), ("onnxscript", MIN_ONNXSCRIPT)):
        version = versions.get(label)
        if version and _release(version) < minimum:
            wanted = ".".join(map(str, minimum))
            problems.append(
                f"{label} {version} is older than {wanted}, the oldest onnx-export supports; "
                f"upgrade with `{_install(label, wanted)}`."
            )
    return problems


def _install(label: str, wanted: str = "") -> str:
    """The pip command line that installs ``label``: torch's tested CPU build for torch."""
    if label == "torch":
        return TORCH_INSTALL
    return f"pip install '{label}>={wanted}'" if wanted else f"pip install {label}"
