"""Binding call arguments to ``forward``'s signature, and their canonical form.

The canonical form is what the exporter hands to ``torch.export`` and what the input tree
records: positional-only parameters and ``*args`` by position; every other parameter by
keyword, in signature order, defaults filled in; ``**kwargs`` entries after them, in the
order given. One exception keeps the call valid Python: when ``*args`` receives values, the
positional-or-keyword parameters before it are passed by position too.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._errors import InputBindingError
from ._json import is_constant
from ._spec import ParameterKind, ParameterSpec

__all__ = [
    "Binder",
    "canonicalize_inputs",
    "parameters_from_signature",
    "describe_parameters",
    "argument_roots",
    "VAR_PARAMETERS",
]

_NO_DEFAULT = object()
_KIND_NAMES: dict[inspect._ParameterKind, ParameterKind] = {
    inspect.Parameter.POSITIONAL_ONLY: "positional_only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}

VAR_PARAMETERS = (
    ParameterSpec("args", "var_positional"),
    ParameterSpec("kwargs", "var_keyword"),
)
"""The parameters recorded when there is no signature: everything passes through as given."""


def parameters_from_signature(signature: inspect.Signature | None) -> tuple[ParameterSpec, ...]:
    """Describe a signature's parameters; defaults that are not JSON constants are dropped.

    Args:
        signature: ``inspect.signature(model.forward)``, or ``None`` for "keep as given".

    Returns:
        One :class:`ParameterSpec` per parameter (:data:`VAR_PARAMETERS` for ``None``).

    Example:
        >>> def forward(x, *, scale=2.0, mask=object()): ...
        >>> [(p.name, p.has_default) for p in parameters_from_signature(inspect.signature(forward))]
        [('x', False), ('scale', True), ('mask', False)]
    """
    if signature is None:
        return VAR_PARAMETERS
    out = []
    for p in signature.parameters.values():
        default = p.default
        has_default = default is not inspect.Parameter.empty and (
            default is None or is_constant(default)
        )
        out.append(
            ParameterSpec(
                p.name, _KIND_NAMES[p.kind], has_default, default if has_default else None
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class _Param:
    name: str
    kind: ParameterKind
    default: object  # _NO_DEFAULT when there is none


class Binder:
    """Binds ``(args, kwargs)`` to parameters and returns the canonical ``(args, kwargs)``.

    Everything that depends only on the signature is worked out here, once.

    Args:
        params: ``(name, kind, default)`` triples in signature order; ``default`` is the
            binder's "no default" marker (see :meth:`from_signature`) when there is none.

    Example:
        >>> def forward(x, y=1, *, z=2): ...
        >>> Binder.from_signature(inspect.signature(forward))((0,), {"z": 3})
        ((), {'x': 0, 'y': 1, 'z': 3})
    """

    def __init__(self, params: Sequence[tuple[str, ParameterKind, object]]) -> None:
        self._params = tuple(_Param(*p) for p in params)
        kinds = [p.kind for p in self._params]
        self._positional = tuple(
            p for p in self._params if p.kind in ("positional_only", "positional_or_keyword")
        )
        self._n_posonly = kinds.count("positional_only")
        self._var_positional = "var_positional" in kinds
        self._var_keyword = "var_keyword" in kinds
        self._by_name = {p.name: p for p in self._params if not p.kind.startswith("var_")}
        self._keyword = tuple(
            p for p in self._params if p.kind in ("positional_or_keyword", "keyword_only")
        )
        self._describe = describe_parameters(
            [(p.name, p.kind, p.default is not _NO_DEFAULT, p.default) for p in self._params]
        )
        self._plans = self._positional_plans()

    def _positional_plans(self) -> dict[int, tuple[tuple[str, ...], dict[str, object]]]:
        """Precompute binding for calls with only positional arguments (the common case).

        Returns:
            ``{number of args: (keyword names the args after the positional-only ones fill,
            the defaults of every parameter after them)}`` for each count that binds.
        """
        plans: dict[int, tuple[tuple[str, ...], dict[str, object]]] = {}
        keyword_only = [p for p in self._params if p.kind == "keyword_only"]
        for n in range(self._n_posonly, len(self._positional) + 1):
            rest = [*self._positional[n:], *keyword_only]
            if all(p.default is not _NO_DEFAULT for p in rest):
                names = tuple(p.name for p in self._positional[self._n_posonly : n])
                plans[n] = (names, {p.name: p.default for p in rest})
        return plans

    @classmethod
    def from_signature(cls, signature: inspect.Signature) -> Binder:
        """Build a binder from ``inspect.Signature`` (real default objects kept).

        Example:
            >>> Binder.from_signature(inspect.signature(lambda a, /, b: 0))((1, 2), {})
            ((1,), {'b': 2})
        """
        return cls(
            [
                (p.name, _KIND_NAMES[p.kind], _NO_DEFAULT if p.default is p.empty else p.default)
                for p in signature.parameters.values()
            ]
        )

    @classmethod
    def from_specs(cls, parameters: Sequence[ParameterSpec]) -> Binder:
        """Build a binder from recorded :class:`ParameterSpec` s.

        Example:
            >>> Binder.from_specs([ParameterSpec("x", "positional_or_keyword")])((1,), {})
            ((), {'x': 1})
        """
        return cls(cls.triples(parameters))

    @staticmethod
    def triples(parameters: Sequence[ParameterSpec]) -> list[tuple[str, ParameterKind, object]]:
        """The ``(name, kind, default)`` triples that :class:`Binder` takes, from specs.

        Example:
            >>> Binder.triples([ParameterSpec("x", "keyword_only", True, 1)])
            [('x', 'keyword_only', 1)]
        """
        return [(p.name, p.kind, p.default if p.has_default else _NO_DEFAULT) for p in parameters]

    def __call__(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        """Bind and return the canonical ``(args, kwargs)``.

        Raises:
            InputBindingError: Too many positional arguments, an unexpected or repeated
                keyword, or a missing required argument.
        """
        plan = None if kwargs else self._plans.get(len(args))
        if plan is not None:
            names, defaults = plan
            if self._n_posonly:
                posonly, args = tuple(args[: self._n_posonly]), args[self._n_posonly :]
            else:
                posonly = ()
            out = dict(zip(names, args))  # noqa: B905  # same length; strict= is slow
            if defaults:
                out.update(defaults)
            return posonly, out
        return self._bind_general(args, kwargs)

    def _bind_general(
        self, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        bound, extra_args = self._bind_positional(args)
        extra_kwargs = self._bind_keywords(args, kwargs, bound)
        for p in self._params:
            if p.name not in bound and not p.kind.startswith("var_"):
                if p.default is _NO_DEFAULT:
                    raise self._error(f"missing required argument {p.name!r}", args, kwargs)
                bound[p.name] = p.default
        n_positional = len(self._positional) if extra_args else self._n_posonly
        out_args = tuple(bound[p.name] for p in self._positional[:n_positional]) + extra_args
        out_kwargs = {
            p.name: bound[p.name] for p in self._keyword[n_positional - self._n_posonly :]
        }
        out_kwargs.update(extra_kwargs)
        return out_args, out_kwargs

    def _bind_positional(
        self, args: Sequence[object]
    ) -> tuple[dict[str, object], tuple[object, ...]]:
        n = len(self._positional)
        if len(args) > n and not self._var_positional:
            raise self._error(
                f"takes {n} positional arguments but {len(args)} were given", args, {}
            )
        bound = {p.name: a for p, a in zip(self._positional, args, strict=False)}
        return bound, tuple(args[n:])

    def _bind_keywords(
        self, args: Sequence[object], kwargs: Mapping[str, object], bound: dict[str, object]
    ) -> dict[str, object]:
        extra: dict[str, object] = {}
        for name, value in kwargs.items():
            p = self._by_name.get(name)
            if p is not None and p.kind != "positional_only":
                if name in bound:
                    raise self._error(f"got multiple values for argument {name!r}", args, kwargs)
                bound[name] = value
            elif self._var_keyword:
                extra[name] = value
            elif p is not None:
                raise self._error(
                    f"argument {name!r} is positional-only; pass it by position", args, kwargs
                )
            else:
                raise self._error(f"got an unexpected keyword argument {name!r}", args, kwargs)
        return extra

    def _error(
        self, problem: str, args: Sequence[object], kwargs: Mapping[str, object]
    ) -> InputBindingError:
        return InputBindingError(
            f"forward() {problem}. Expected a call matching forward({self._describe}); got "
            f"{len(args)} positional and keywords {list(kwargs)}. Call the model the way it "
            "was called at export."
        )


def describe_parameters(params: Sequence[tuple[str, ParameterKind, bool, object]]) -> str:
    """Write parameters the way Python shows a signature, with ``/`` and ``*`` markers.

    Args:
        params: ``(name, kind, has_default, default)`` in signature order.

    Returns:
        E.g. ``"a, /, b, *, c=1"``.

    Example:
        >>> describe_parameters(
        ...     [("a", "positional_only", False, None), ("c", "keyword_only", True, 1)]
        ... )
        'a, /, *, c=1'
    """
    parts: list[str] = []
    kinds = [p[1] for p in params]
    for i, (name, kind, has_default, default) in enumerate(params):
        if kind == "keyword_only" and "var_positional" not in kinds and "*" not in parts:
            parts.append("*")
        prefix = {"var_positional": "*", "var_keyword": "**"}.get(kind, "")
        parts.append(f"{prefix}{name}" + (f"={default!r:.20}" if has_default else ""))
        if kind == "positional_only" and (i + 1 == len(params) or kinds[i + 1] != kind):
            parts.append("/")
    return ", ".join(parts)


def argument_roots(
    parameters: Sequence[ParameterSpec], n_args: int, keywords: Sequence[object]
) -> list[tuple[str, str]]:
    """Name each top-level child of the canonical ``(args, kwargs)``: ``(display, dotted)``.

    Positional slots take their parameter's name, ``*args`` values ``args[i]`` (``args.i``),
    keywords their key.

    Args:
        parameters: The recorded parameters.
        n_args: Length of the canonical ``args``.
        keywords: Keys of the canonical ``kwargs``.

    Returns:
        One pair per argument, args first.

    Example:
        >>> params = [
        ...     ParameterSpec("a", "positional_only"),
        ...     ParameterSpec("rest", "var_positional"),
        ... ]
        >>> argument_roots(params, 3, ["k"])
        [('a', 'a'), ('rest[0]', 'rest.0'), ('rest[1]', 'rest.1'), ('k', 'k')]
    """
    positional = [
        p.name for p in parameters if p.kind in ("positional_only", "positional_or_keyword")
    ]
    n_posonly = sum(p.kind == "positional_only" for p in parameters)
    var = next((p.name for p in parameters if p.kind == "var_positional"), "args")
    named = positional[:n_args] if n_args > n_posonly else positional[:n_posonly]
    roots = [(n, n) for n in named[:n_args]]
    roots += [(f"{var}[{j}]", f"{var}.{j}") for j in range(n_args - len(roots))]
    return roots + [(str(k), str(k)) for k in keywords]


def canonicalize_inputs(
    signature: inspect.Signature | None, args: Sequence[object], kwargs: Mapping[str, object]
) -> tuple[tuple[object, ...], dict[str, object]]:
    """Bind ``args``/``kwargs`` to ``forward``'s signature and return the canonical form.

    Positional-only parameters and ``*args`` go by position; every other parameter by keyword
    in signature order with defaults filled in; ``**kwargs`` entries follow in the order given.
    When ``*args`` receives values, the positional-or-keyword parameters before it go by
    position as well (otherwise the call would not be valid Python).

    Args:
        signature: The signature of ``forward`` (without ``self``); ``None`` keeps the
            arguments as given.
        args: Positional arguments as the user passed them.
        kwargs: Keyword arguments as the user passed them.

    Returns:
        The canonical ``(args, kwargs)``.

    Raises:
        InputBindingError: A ``TypeError`` naming the missing, unexpected or repeated argument.

    Example:
        >>> def forward(a, /, b, c=3, *, d=4, **rest): ...
        >>> canonicalize_inputs(inspect.signature(forward), (1, 2), {"e": 5, "d": 0})
        ((1,), {'b': 2, 'c': 3, 'd': 0, 'e': 5})
    """
    if signature is None:
        return tuple(args), dict(kwargs)
    return Binder.from_signature(signature)(args, kwargs)
