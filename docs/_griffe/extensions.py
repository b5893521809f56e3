"""Griffe extensions for the API reference (``mkdocs.yml`` loads them; not pages).

- :class:`ExampleSections`: the project's docstrings use the Google section ``Example:``;
  griffe's Google parser only treats ``Examples:`` as an examples section (doctest lines
  become code blocks) and renders ``Example:`` as an admonition of Markdown text, where
  ``x[0]`` reads as a broken link. The heading is renamed before parsing.
- :class:`SphinxRoles`: the docstrings cross-reference with Sphinx roles
  (``:func:`~onnx_export.load```), which Markdown would show as written; each becomes a
  code span of the name (the last part when the target starts with ``~``).
- :class:`LazyExports`: ``onnx_export`` imports its torch-dependent names on first use,
  through a ``_LAZY = {name: module}`` table and ``__getattr__``. Static analysis sees only
  real imports, so each table entry becomes an alias to the name in its module.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj|const):`(~?)([^`]+)`")


def _role_to_code(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` to ``Examples:`` in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the object's docstring heading (called once per loaded object)."""
        if obj.docstring is not None:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)


class SphinxRoles(griffe.Extension):
    """Turn Sphinx cross-reference roles into code spans in every docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the object's docstring roles (called once per loaded object)."""
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_role_to_code, obj.docstring.value)


class LazyExports(griffe.Extension):
    """Add an alias for each entry of a module's ``_LAZY`` table that is not a member."""

    def on_module_members(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        """Read ``_LAZY`` statically and alias its names (called once per module)."""
        table = mod.members.get("_LAZY")
        if not isinstance(table, griffe.Attribute) or table.value is None:
            return
        for name, module in ast.literal_eval(str(table.value)).items():
            if name not in mod.members:
                mod.set_member(name, griffe.Alias(name, f"{module}.{name}", parent=mod))
