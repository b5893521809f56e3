"""Register library containers with torch's pytree when they show up as inputs.

``transformers`` caches (``DynamicCache``, ``EncoderDecoderCache``, ...) are not pytree
nodes until something registers them. A model exported with a cache input expects one
at call time too, in a process that may never have exported anything: the input
adapter registers the class, with ``transformers``' own helpers, the first time it
meets one. Nothing is imported unless such an object is passed in.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ._torch import pytree_registry

__all__ = [
    "is_transformers_cache",
    "register_library_container",
    "register_transformers_caches",
    "context_as_dicts",
    "mark_rebuilt_cache",
    "slid_cache_in",
    "slid_cache_problem",
]

#: Set on a sliding-window layer rebuilt from a file's outputs that holds a full window:
#: whether it slid, and so how many tokens it has seen, is not in its tensors.
_COUNT_LOST = "_onnx_export_count_lost"


def is_transformers_cache(cls: type) -> bool:
    """Whether ``cls`` derives from ``transformers.cache_utils.Cache``.

    Example:
        >>> is_transformers_cache(dict)
        False
    """
    return any(
        base.__module__ == "transformers.cache_utils" and base.__name__ == "Cache"
        for base in cls.__mro__
    )


def register_library_container(cls: type) -> bool:
    """Register ``cls`` with torch's pytree if it is a known library container.

    Returns whether ``cls`` is registered afterwards (``False`` for other classes, or
    when torch or ``transformers`` is not imported).

    Example:
        >>> register_library_container(int)
        False
    """
    registry = pytree_registry()
    if registry is None or "transformers" not in sys.modules:
        return False
    if cls in registry:
        return True
    if not is_transformers_cache(cls):
        return False
    exporter_dynamo: Any = None  # older transformers: no generic cache flattening
    with contextlib.suppress(ImportError):
        from transformers.exporters import exporter_dynamo
    if cls.__name__ == "DynamicCache" and cls.__module__ == "transformers.cache_utils":
        _register_dynamic_cache(cls, exporter_dynamo)
    elif exporter_dynamo is not None:
        _register_sorted(cls, exporter_dynamo)
    return cls in registry


def _renumbered(context: Any, tensors: list[Any], out: list[Any]) -> Any:
    """``context`` walked in sorted key order, its tensor markers renumbered in that order."""
    if isinstance(context, dict):
        if context.get("_t") in ("tensor", "sym") and isinstance(context.get("i"), int):
            out.append(tensors[context["i"]])
            return {**context, "i": len(out) - 1}
        return {k: _renumbered(context[k], tensors, out) for k in sorted(context)}
    if isinstance(context, list):
        return [_renumbered(item, tensors, out) for item in context]
    return context


def _sorted_flatten(exporter: Any) -> Callable[[Any], tuple[list[Any], Any]]:
    """``transformers``' generic flattening of a cache, its leaves in a stable order.

    ``transformers`` flattens a cache's attributes in ``__dict__`` order, which changes
    once an object is rebuilt from a saved spec (JSON sorts keys): a cache fed back
    would then send its tensors to the wrong inputs. Flattening in sorted attribute
    order gives every object of the class the same leaf order; rebuilding goes by the
    tensor indices in the context, so it does not depend on the order.
    """

    def flatten(obj: Any) -> tuple[list[Any], Any]:
        tensors, context = exporter._pytree_flatten(obj)
        ordered: list[Any] = []
        return ordered, _renumbered(context, list(tensors), ordered)

    return flatten


def _register(
    cls: type, flatten: Any, unflatten: Any, name: str, with_keys: Any | None = None
) -> None:
    """Register ``cls`` with torch's pytree (leaves keyed by position unless ``with_keys``)."""
    pytree = sys.modules["torch.utils._pytree"]  # imported: pytree_registry() said so

    def by_position(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        leaves, context = flatten(obj)
        return [(pytree.SequenceKey(i), leaf) for i, leaf in enumerate(leaves)], context

    flatten_with_keys = with_keys or by_position
    try:
        pytree.register_pytree_node(
            cls,
            flatten,
            unflatten,
            serialized_type_name=name,
            flatten_with_keys_fn=flatten_with_keys,
        )
    except ValueError as e:  # registered meanwhile (by transformers or another thread)
        if "already registered" not in str(e):
            raise


def _register_sorted(cls: type, exporter: Any) -> None:
    """Register ``cls`` with ``transformers``' generic flattening, in a stable leaf order."""
    flatten = _sorted_flatten(exporter)
    _register(cls, flatten, exporter._pytree_unflatten, exporter._class_to_path(cls))


#: The layer types ``transformers``' own ``DynamicCache`` flattening takes.
_KEY_VALUE_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer", "DummyLayer")


def _register_dynamic_cache(cls: type, exporter: Any) -> None:
    """Register ``DynamicCache``: as key and value lists, or attribute by attribute.

    A cache of key/value layers (full or sliding-window attention) flattens as
    ``transformers`` does, to ``key_cache``/``value_cache`` lists. One that holds other
    layers (Mamba's or linear attention's conv and recurrent states, hybrid models'
    mixed layers, DeepSeek's indexed layers), which ``transformers`` refuses, flattens
    attribute by attribute with its generic cache flattening; the context tells the
    two forms apart when the cache is rebuilt.
    """
    from transformers.integrations import executorch

    hf: Any = executorch  # its helpers are untyped
    generic = _sorted_flatten(exporter) if exporter is not None else None

    def key_value(cache: Any) -> bool:
        plain = all(type(layer).__name__ in _KEY_VALUE_LAYERS for layer in cache.layers)
        return plain or generic is None

    def flatten(cache: Any) -> tuple[list[Any], Any]:
        if key_value(cache):
            values, context = hf._flatten_cache_dict(
                hf._get_cache_dict(cache), hf._get_dynamic_cache_layout(cache)
            )
            return list(values), context
        return generic(cache)  # type: ignore[misc]  # key_value() is True without it

    def with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], Any]:
        if key_value(cache):  # leaves named key_cache.0, value_cache.1, ...
            keyed, context = hf._flatten_cache_dict_with_keys(
                hf._get_cache_dict(cache), hf._get_dynamic_cache_layout(cache)
            )
            return list(keyed), context
        pytree = sys.modules["torch.utils._pytree"]
        leaves, context = flatten(cache)
        return [(pytree.SequenceKey(i), leaf) for i, leaf in enumerate(leaves)], context

    def unflatten(values: Any, context: Any) -> Any:
        if isinstance(context, dict):  # the generic form: {"_t": "obj", ...}
            return exporter._pytree_unflatten(values, context)
        return _key_value_cache(cls, values, context)

    _register(cls, flatten, unflatten, f"{cls.__module__}.{cls.__name__}", with_keys)


def _key_value_cache(cls: type, values: list[Any], context: Any) -> Any:
    """A ``DynamicCache`` holding ``values`` as they are, from the key/value context.

    ``transformers``' own unflattening refills each layer with ``update``: a
    sliding-window layer then keeps only its last ``window - 1`` positions, so under
    capture a past of symbolic length ``p`` becomes ``min(p, window - 1)``, and torch
    fixes ``p`` (or fails on the nested ``Max`` arithmetic) whenever the example's past
    plus new tokens reach the window. The layers are built empty here (the constructor
    skips ``update`` for layers without data) and take the key and value tensors as
    given, with the tokens seen counted as the tensors' length, as ``update`` would
    count them for a past that has not slid.
    """
    import itertools

    pytree = sys.modules["torch.utils._pytree"]
    dictionary_keys, layout = context
    tensors = pytree._dict_unflatten(values, dictionary_keys)
    keys, held = tensors["key_cache"], tensors["value_cache"]
    windows = [_window_tensor(w) for w in layout]
    cache = cls([(None, None, w) if w is not None else (None, None) for w in windows])
    for layer, key, value in itertools.zip_longest(cache.layers, keys, held):
        if key is not None and value is not None:
            _fill(layer, key, value)
    return cache


def _window_tensor(window: int | None) -> Any:
    if window is None:
        return None
    torch = sys.modules["torch"]
    return torch.tensor([window])


def _fill(layer: Any, key: Any, value: Any) -> None:
    """Give an empty key/value layer its tensors, without ``update``'s slicing."""
    layer.lazy_initialization(key, value)
    layer.keys, layer.values = key, value
    if hasattr(layer, "cumulative_length"):  # sliding-window layers count tokens seen
        layer.cumulative_length = key.shape[-2]


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    subs: list[type] = cls.__subclasses__()
    for sub in subs:
        found += [sub, *_subclasses(sub)]
    return found


def register_transformers_caches() -> list[type]:
    """Register every ``transformers`` cache class defined so far with torch's pytree.

    A model returns its cache (``use_cache`` defaults to True) before anything has met
    one as an input; registering the classes up front lets torch.export see through
    them in outputs too, in any order. Classes are looked up at call time, so caches
    that ``transformers`` defines lazily (model-specific ones) are found once imported.
    Nothing is imported: without ``transformers`` loaded this does nothing.

    Returns:
        The cache classes registered after the call.

    Example:
        >>> isinstance(register_transformers_caches(), list)
        True
    """
    module = sys.modules.get("transformers.cache_utils")
    base = getattr(module, "Cache", None) if module is not None else None
    if not isinstance(base, type):
        return []
    return [cls for cls in _subclasses(base) if register_library_container(cls)]


def _tagged(context: dict[str, Any], leaves: list[Any]) -> Any:
    """A tagged node of the context: a tensor marker, an object, a sequence, a mapping."""
    tag = context["_t"]
    if tag in ("tensor", "sym"):
        return leaves[context["i"]]
    if tag in ("obj", "map"):
        state = context.get("s", context.get("v")) or {}
        return {k: _plain(v, leaves) for k, v in state.items()}
    if tag == "seq":
        return [_plain(v, leaves) for v in context.get("v", [])]
    if tag == "items":
        return {str(k): _plain(v, leaves) for k, v in context.get("v", [])}
    return context.get("n", context.get("s", context.get("p")))  # dtype, device, type


def _plain(context: Any, leaves: list[Any]) -> Any:
    if isinstance(context, list):
        return [_plain(item, leaves) for item in context]
    if isinstance(context, dict):
        if "_t" in context:
            return _tagged(context, leaves)
        return {k: _plain(v, leaves) for k, v in context.items()}
    return context  # None, bool, int, float, str


def context_as_dicts(context: object, leaves: list[Any]) -> dict[str, Any] | None:
    """A ``transformers`` cache rebuilt from its saved context as plain nested dicts.

    A loaded model that may not import the cache's class (it is not in
    ``allowed_classes``) returns the cache by its attribute names instead:
    ``{"self_attention_cache": {"layers": [{"keys": ..., "values": ...}, ...]}, ...}``.
    Returns ``None`` for a context that is not ``transformers``' generic cache context.

    Example:
        >>> ctx = {"_t": "obj", "p": "C", "s": {"keys": {"_t": "tensor", "i": 0}}}
        >>> context_as_dicts(ctx, ["k"])
        {'keys': 'k'}
    """
    if not (isinstance(context, dict) and context.get("_t") == "obj"):
        return None
    plain = _plain(context, leaves)
    return plain if isinstance(plain, dict) else None


def mark_rebuilt_cache(cache: Any) -> Any:
    """``cache`` (rebuilt from a file's outputs), its full sliding-window layers marked.

    A layer holding fewer than ``window - 1`` positions never slid: it has seen as many
    tokens as it holds, as rebuilt. One holding ``window - 1`` may have seen more, which
    its tensors do not say; :func:`slid_cache_problem` refuses it as an input.

    Example:
        >>> mark_rebuilt_cache({"keys": None})
        {'keys': None}
    """
    for layer in getattr(cache, "layers", None) or ():
        window, keys = getattr(layer, "sliding_window", None), getattr(layer, "keys", None)
        shape = getattr(keys, "shape", None)
        if not (isinstance(window, int) and shape is not None and len(shape) >= 2):
            continue
        if int(shape[-2]) >= window - 1:
            setattr(layer, _COUNT_LOST, True)
    return cache


def slid_cache_problem(value: object, path: str) -> str | None:
    """Why a ``transformers`` cache in the inputs cannot be served from its tensors, or None.

    A sliding-window layer keeps its last ``window - 1`` positions and counts the tokens
    it has seen apart. Flattened, the count is lost: the exported model takes the held
    positions for the whole past. Until the layer first slides the two agree; after, the
    model would place the new tokens at the wrong positions and mask the wrong columns.

    Example:
        >>> slid_cache_problem({"past": 1}, "past") is None
        True
    """
    cls = type(value)
    if not cls.__module__.startswith("transformers") or not is_transformers_cache(cls):
        return None
    for name in ("self_attention_cache", "cross_attention_cache"):  # EncoderDecoderCache
        inner = getattr(value, name, None)
        found = slid_cache_problem(inner, f"{path}.{name}") if inner is not None else None
        if found is not None:
            return found
    for index, layer in enumerate(getattr(value, "layers", None) or ()):
        seen, window = (
            getattr(layer, "cumulative_length", None),
            getattr(layer, "sliding_window", None),
        )
        keys = getattr(layer, "keys", None)
        shape = getattr(keys, "shape", None)
        if not (type(seen) is int and type(window) is int and shape is not None and len(shape)):
            continue
        held = int(shape[-2]) if len(shape) >= 2 else 0
        advice = (
            f"A sliding-window cache is served until it first slides (past + new tokens < "
            f"{window}). To decode past the window, build the cache without the config "
            "(transformers.DynamicCache(), whose layers keep every position), export with "
            "such a cache, and pass one on each call."
        )
        if getattr(layer, _COUNT_LOST, False):
            return (
                f"{path}: layer {index} of the cache holds a full sliding window ({held} "
                f"positions, window {window}) and came from an exported model's outputs, "
                "which carry only the positions held: how many tokens it has seen (where "
                f"the new ones go) is lost. {advice}"
            )
        if seen > held:
            return (
                f"{path}: layer {index} of the cache has seen {seen} tokens and holds the last "
                f"{held} (its sliding window is {window}); the exported model receives only "
                f"the positions held, so it would place the new tokens at {held} instead of "
                f"{seen}. {advice}"
            )
    return None


def slid_cache_in(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
    """:func:`slid_cache_problem` for the first cache of a call that has one, or None.

    Example:
        >>> slid_cache_in((1,), {"past": None}) is None
        True
    """
    named = [*((f"args[{i}]", v) for i, v in enumerate(args)), *kwargs.items()]
    for path, value in named:
        problem = slid_cache_problem(value, path)
        if problem is not None:
            return problem
    return None
