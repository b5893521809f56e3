"""The :class:`Rule` type: one kind of diagnostic, with a stable id and a message template."""

from __future__ import annotations

import dataclasses
import re
import string

from ._levels import Level

__all__ = ["Rule", "field_root"]

_FORMATTER = string.Formatter()
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class Rule:
    """A kind of diagnostic: stable id, kebab-case name, message template and documentation.

    Attributes:
        id: Stable identifier written to SARIF as ``ruleId``, for example ``"OXE0006"``.
        name: Kebab-case name, for example ``"unsupported-op"``.
        message_template: A :meth:`str.format` template with named fields only,
            for example ``"No ONNX function for {op}."``.
        short_description: One sentence that says what the rule reports.
        full_description: A paragraph: what it means, and the meaning of each template field.
        help_uri: Where the rule's documentation page lives.
        default_level: The level a diagnostic of this rule gets unless told otherwise.

    Example:
        >>> rule = Rule(
        ...     id="XMP0001",
        ...     name="slow-op",
        ...     message_template="{op} took {seconds:.1f} s.",
        ...     short_description="An operator was slow.",
        ...     full_description="Fields: op (operator name), seconds (wall time).",
        ...     help_uri="https://example.com/rules/XMP0001/",
        ...     default_level=Level.NOTE,
        ... )
        >>> rule.format_message(op="aten::mm", seconds=2.25)
        'aten::mm took 2.2 s.'
        >>> rule.fields
        ('op', 'seconds')
    """

    id: str
    name: str
    message_template: str
    short_description: str
    full_description: str
    help_uri: str
    default_level: Level

    def __repr__(self) -> str:
        return f"Rule(id={self.id!r}, name={self.name!r}, ...)"

    def __post_init__(self) -> None:
        if not self.id or not self.name:
            raise ValueError(
                f"A rule needs a non-empty id and name; got id={self.id!r}, name={self.name!r}."
            )
        if not isinstance(self.default_level, Level):
            raise TypeError(
                f"Rule {self.id}: default_level must be a Level, got {self.default_level!r}."
            )
        _ = self.fields  # parses the template, so a malformed one fails where it is defined

    @property
    def fields(self) -> tuple[str, ...]:
        """The named fields of :attr:`message_template`, in order of first use.

        Raises:
            ValueError: If the template is malformed or uses positional fields such as ``{0}``.

        Example:
            >>> from onnx_export.diagnostics.rules import UNSUPPORTED_OP
            >>> UNSUPPORTED_OP.fields
            ('op', 'node', 'module')
        """
        names: list[str] = []
        try:
            parsed = list(_FORMATTER.parse(self.message_template))
        except ValueError as error:
            raise ValueError(
                f"Rule {self.id}: message_template {self.message_template!r} is malformed: "
                f"{error}. Double literal braces as '{{{{' and '}}}}'."
            ) from error
        for _, field_name, _, _ in parsed:
            if field_name is None:
                continue
            root = field_root(field_name)
            if not root:
                raise ValueError(
                    f"Rule {self.id}: message_template field {{{field_name}}} is not a name; "
                    "templates use named fields such as {op}."
                )
            if root not in names:
                names.append(root)
        return tuple(names)

    def format_message(self, **kwargs: object) -> str:
        """Fills :attr:`message_template` with ``kwargs``; extra arguments are ignored.

        Raises:
            KeyError: If an argument the template needs is missing; the message names the
                rule, the missing fields and the ones that were given.

        Example:
            >>> from onnx_export.diagnostics.rules import DISPATCH_FALLBACK
            >>> DISPATCH_FALLBACK.format_message(op="aten::add.Tensor")
            Traceback (most recent call last):
            ...
            KeyError: "Rule OXE0005 (dispatch-fallback) needs message argument(s) 'function', ..."
        """
        missing = [name for name in self.fields if name not in kwargs]
        if missing:
            given = ", ".join(repr(key) for key in sorted(kwargs)) or "none"
            wanted = ", ".join(repr(name) for name in missing)
            raise KeyError(
                f"Rule {self.id} ({self.name}) needs message argument(s) {wanted}; "
                f"got {given}. Pass them in message_args."
            )
        return self.message_template.format(**kwargs)


def field_root(field_name: str) -> str:
    """The argument name of a template field: ``"op"`` for ``op``, ``op.name`` or ``op[0]``.

    Returns an empty string for positional fields such as ``0`` or ``""``.

    Example:
        >>> field_root("node.name"), field_root("0")
        ('node', '')
    """
    match = _IDENTIFIER.match(field_name)
    return match.group() if match else ""
