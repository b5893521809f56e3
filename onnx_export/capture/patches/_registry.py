"""What a capture patch is: the library code it replaces, for which versions, why, and how.

A patch rewrites library code (torch's, transformers', the standard library's) for the
time of one capture, so that torch.export can trace a model it could not trace as written.
Each patch module ends with one :class:`Patch` record; ``patches/__init__.py`` lists them
in the order capture enters them. Before each capture, :func:`enter_patches` looks every
patch's targets up in the installed libraries: a patch whose target is gone, or whose
signature lost a parameter the patch relies on, is skipped with a reason (a SARIF note,
OXE0027), never entered to fail inside the user's export with a ``TypeError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import inspect
import platform
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, Literal

__all__ = [
    "Patch",
    "PatchCall",
    "PatchOutcome",
    "Target",
    "TargetState",
    "enter_patches",
    "library_version",
    "locate",
    "modules_holding",
    "swapped",
]

#: The state of a target in the installed libraries.
TargetState = Literal[
    "found", "missing", "changed", "not imported", "not installed", "other version"
]


@dataclasses.dataclass(frozen=True)
class Target:
    """One name of library code that a patch replaces or reads.

    Attributes:
        module: The module that holds it (``"transformers.masking_utils"``).
        name: Its name in that module, dotted for attributes (``"Tensor.nonzero"``).
        parameters: Parameters of the callable that the patch passes or reads; a signature
            without one of them is a changed target.
        since: The first release of the library that has it (``"5.0"``); on older ones the
            target is not looked up (nothing to patch there), which is not an error.
        before: The first release that no longer has it; from that one on, likewise.
        example: The patch finds code of this kind in the model itself (a class whose source
            it recognises); this is one such name. Capture does not look it up; ``doctor``
            and the tests do.

    Example:
        >>> t = Target("torch", "cdist", ("x1", "x2", "p", "compute_mode"))
        >>> t.library, t.qualified_name
        ('torch', 'torch.cdist')
    """

    module: str
    name: str
    parameters: tuple[str, ...] = ()
    since: str | None = None
    before: str | None = None
    example: bool = False

    @property
    def library(self) -> str:
        """The distribution the target belongs to (the module's top-level package)."""
        return self.module.split(".")[0]

    @property
    def qualified_name(self) -> str:
        """``module.name``."""
        return f"{self.module}.{self.name}"


@dataclasses.dataclass(frozen=True)
class PatchCall:
    """What a patch's factory is given: the capture it is entered for.

    Attributes:
        model: The module being captured.
        args: Its positional inputs.
        kwargs: Its keyword inputs.
        strict: Whether the capture is strict (dynamo) rather than non-strict.
    """

    model: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    strict: bool = False


@dataclasses.dataclass(frozen=True)
class Patch:
    """A rewrite of library code for the time of one capture.

    Attributes:
        name: Short name, reported in SARIF and by ``onnx-export doctor``.
        targets: The library code it replaces (or reads), looked up before capture.
        tested: The releases it was written and tested against (``"transformers 5.25"``).
        why: What torch.export cannot trace without it.
        apply: Given the capture, the context manager that patches for its time.

    Example:
        >>> import contextlib
        >>> p = Patch("nothing", (Target("math", "sqrt"),), ("python 3.11",), "an example",
        ...           lambda call: contextlib.nullcontext())
        >>> p.libraries
        ('math',)
    """

    name: str
    targets: tuple[Target, ...]
    tested: tuple[str, ...]
    why: str
    apply: Callable[[PatchCall], AbstractContextManager[Any]]

    @property
    def libraries(self) -> tuple[str, ...]:
        """The libraries whose code it patches, in the order of its targets."""
        return tuple(dict.fromkeys(t.library for t in self.targets))


@dataclasses.dataclass(frozen=True)
class PatchOutcome:
    """What became of one patch for one capture.

    Attributes:
        name: The patch's name.
        entered: Whether capture ran with it.
        reason: Why it was skipped (its target missing or changed, or entering it raised);
            empty when it was entered or does not apply.
        applies: Whether it applies at all: ``False`` when its library is not imported or
            is a release the patch's targets are not in (nothing to patch, nothing to say).
    """

    name: str
    entered: bool
    reason: str = ""
    applies: bool = True


def library_version(library: str) -> str | None:
    """The installed release of ``library`` (Python's for standard modules), or ``None``.

    Example:
        >>> library_version("math") == platform.python_version()
        True
    """
    if library in sys.stdlib_module_names:
        return platform.python_version()
    found = _VERSIONS.get(library)
    if found is None:
        try:
            found = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            return None
        _VERSIONS[library] = found
    return found


#: Releases found, by library: ``importlib.metadata`` scans every folder of ``sys.path``
#: on each call (31 look-ups, 0.1-0.5 s an export, #39). A library not found is looked up
#: again next time (it may be installed since).
_VERSIONS: dict[str, str] = {}


def _release(version: str) -> tuple[int, ...]:
    """``"4.57.6"`` -> ``(4, 57, 6)``; local and pre-release tags ignored."""
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+", maxsplit=1)[0])[:3])


def _resolve(target: Target) -> Any:
    """The object the target names; raises ``ImportError``/``AttributeError`` when absent."""
    found: Any = importlib.import_module(target.module)
    for part in target.name.split("."):
        found = getattr(found, part)
    return found


def _lacks(found: Any, parameters: Sequence[str]) -> list[str]:
    """The parameters of ``parameters`` that the callable ``found`` does not take."""
    if not parameters:
        return []
    try:
        taken = inspect.signature(found).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return []
    return [p for p in parameters if p not in taken]


def _outside_release(target: Target, version: str | None) -> str:
    """Why ``target`` is not in release ``version`` of its library; empty when it should be."""
    if version is None:
        return ""
    if target.since and _release(version) < _release(target.since):
        return f"{target.qualified_name} came in {target.library} {target.since}, after {version}"
    if target.before and _release(version) >= _release(target.before):
        return f"{target.qualified_name} left {target.library} in {target.before}"
    return ""


def locate(target: Target, *, import_library: bool = False) -> tuple[TargetState, str]:
    """Look ``target`` up in the installed library: its state and a sentence saying so.

    Args:
        target: What to look up.
        import_library: Import the library when it is not imported yet (``doctor`` and
            the tests); capture leaves a library the model did not import alone.

    Example:
        >>> locate(Target("math", "sqrt"))
        ('found', 'math.sqrt')
    """
    version = library_version(target.library)
    if version is None and target.library not in sys.modules:
        return "not installed", f"{target.library} is not installed"
    if not import_library and target.library not in sys.modules:
        return "not imported", f"{target.library} is not imported"
    outside = _outside_release(target, version)
    if outside:
        return "other version", outside
    try:
        found = _resolve(target)
    except (ImportError, AttributeError) as e:
        return "missing", f"{target.qualified_name} is missing in {target.library} {version} ({e})"
    lacks = _lacks(found, target.parameters)
    if lacks:
        return "changed", (
            f"{target.qualified_name} of {target.library} {version} takes no "
            f"{', '.join(lacks)} (the patch passes or reads them)"
        )
    return "found", target.qualified_name


def _check(patch: Patch) -> PatchOutcome | None:
    """Why ``patch`` is not entered, or ``None`` when every target it replaces is found.

    Targets of other releases than the installed one are passed over; a patch none of whose
    targets is in the installed release, or whose library is not imported, does not apply.
    """
    in_release = 0
    for target in patch.targets:
        if target.example:
            continue
        state, sentence = locate(target)
        if state in ("not installed", "not imported"):
            return PatchOutcome(patch.name, False, sentence, applies=False)
        if state == "other version":
            continue
        if state != "found":
            return PatchOutcome(patch.name, False, sentence)
        in_release += 1
    if not in_release and any(not t.example for t in patch.targets):
        return PatchOutcome(patch.name, False, "no target in this release", applies=False)
    return None


def enter_patches(
    stack: contextlib.ExitStack, patches: Sequence[Patch], call: PatchCall
) -> tuple[PatchOutcome, ...]:
    """Enter each patch whose targets are found on ``stack``; say what became of each.

    A patch whose target is missing or changed, or whose factory raises on entering, is
    skipped (its outcome says why); the capture goes on without it.

    Example:
        >>> import contextlib, math
        >>> p = Patch("nothing", (Target("math", "sqrt"),), (), "an example",
        ...           lambda call: contextlib.nullcontext())
        >>> with contextlib.ExitStack() as stack:
        ...     enter_patches(stack, [p], PatchCall(None))
        (PatchOutcome(name='nothing', entered=True, reason='', applies=True),)
    """
    outcomes: list[PatchOutcome] = []
    for patch in patches:
        refused = _check(patch)
        if refused is not None:
            outcomes.append(refused)
            continue
        try:
            stack.enter_context(patch.apply(call))
        except Exception as e:  # a patch that no longer fits: capture goes on without it
            reason = f"entering it raised {type(e).__name__}: {e}"
            outcomes.append(PatchOutcome(patch.name, False, reason))
            continue
        outcomes.append(PatchOutcome(patch.name, True))
    return tuple(outcomes)


@contextlib.contextmanager
def swapped(*replacements: tuple[Any, str, Any]) -> Iterator[None]:
    """Set each ``(owner, name, value)`` for the block; after it, put back what was there.

    An owner (a module, a class, an instance) that had no attribute of its own by that
    name, one it inherited or none, loses the one set, so that look-ups go where they went
    before. Restored in reverse order: a name set twice ends as it began. The patches'
    one shape of swapping library code, here once.

    Callers hold the export lock: the owners are patched for the process.

    Example:
        >>> import math
        >>> with swapped((math, "tau", 6.0)):
        ...     math.tau
        6.0
        >>> math.tau
        6.283185307179586
    """
    saved: list[tuple[Any, str, bool, Any]] = []
    try:
        for owner, name, value in replacements:
            own = vars(owner) if hasattr(owner, "__dict__") else {name: getattr(owner, name)}
            saved.append((owner, name, name in own, own.get(name)))
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, had_own, before in reversed(saved):
            if had_own:
                setattr(owner, name, before)
            else:
                delattr(owner, name)


def modules_holding(
    name: str, value: Any, library: str | None = "transformers"
) -> list[ModuleType]:
    """The loaded modules of ``library`` whose ``name`` is ``value`` (it or an import of it).

    With ``library=None``, every loaded module (a model's own module that imported a torch
    function by name, too), each read from its ``__dict__``: across every library, a lazy
    module's ``__getattr__`` (which may import) is not called.

    Example:
        >>> import math
        >>> modules_holding("sqrt", math.sqrt, "math") == [math]
        True
    """
    if library is None:
        return [
            module
            for module in list(sys.modules.values())
            if getattr(module, "__dict__", {}).get(name) is value
        ]
    return [
        module
        for module_name, module in list(sys.modules.items())
        if (module_name == library or module_name.startswith(library + "."))
        and getattr(module, name, None) is value
    ]
