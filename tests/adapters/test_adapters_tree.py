"""tree_flatten / tree_unflatten / TreeSpec: properties over random nested structures."""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnx_export.adapters import (
    AdapterSpecError,
    LeafCountError,
    TreeSpec,
    UnsupportedValueError,
    leaf_paths,
    tree_flatten,
    tree_unflatten,
)

Pair = collections.namedtuple("Pair", ["first", "second"])


@dataclasses.dataclass
class Point:
    x: Any
    y: Any


ALLOWED = (Pair, Point)

leaves = st.one_of(
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)
keys = st.one_of(st.text(max_size=3), st.integers(-3, 3))


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3),
        st.dictionaries(keys, children, max_size=3),
        st.builds(Pair, children, children),
        st.builds(Point, children, children),
    )


nested = st.recursive(leaves, containers, max_leaves=12)


def assert_same(actual: object, expected: object) -> None:
    """Same containers, same keys, and the very same leaf objects."""
    assert type(actual) is type(expected)
    if isinstance(expected, Point):
        assert_same(actual.x, expected.x)  # type: ignore[attr-defined]
        assert_same(actual.y, expected.y)  # type: ignore[attr-defined]
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)  # type: ignore[call-overload]
        for k in expected:
            assert_same(actual[k], expected[k])  # type: ignore[index]
    elif isinstance(expected, tuple | list):
        assert len(actual) == len(expected)  # type: ignore[arg-type]
        for a, e in zip(actual, expected, strict=True):  # type: ignore[call-overload]
            assert_same(a, e)
    else:
        assert actual is expected


def contains_dataclass(value: object) -> bool:
    if isinstance(value, Point):
        return True
    if isinstance(value, dict):
        return any(contains_dataclass(v) for v in value.values())
    if isinstance(value, tuple | list):
        return any(contains_dataclass(v) for v in value)
    return False


@settings(max_examples=200, deadline=None)
@given(nested)
def test_round_trip_with_allowed_classes(value: object) -> None:
    flat, spec = tree_flatten(value)
    assert len(flat) == spec.num_leaves
    assert all(leaf is not None for leaf in flat)
    assert_same(tree_unflatten(spec, flat, allowed_classes=ALLOWED), value)


@settings(max_examples=200, deadline=None)
@given(nested)
def test_spec_survives_json(value: object) -> None:
    _, spec = tree_flatten(value)
    text = json.dumps(spec.to_json_obj())
    assert TreeSpec.from_json_obj(json.loads(text)) == spec


@settings(max_examples=200, deadline=None)
@given(nested)
def test_display_paths_reach_each_leaf(value: object) -> None:
    flat, spec = tree_flatten(value)
    paths = leaf_paths(spec, "value")
    assert len(paths) == len(flat)
    for path, leaf in zip(paths, flat, strict=True):
        assert eval(path, {"value": value}) is leaf  # our own generated paths


@settings(max_examples=200, deadline=None)
@given(nested)
def test_leaf_order_matches_torch_pytree(value: object) -> None:
    import torch.utils._pytree as pytree

    if contains_dataclass(value):  # torch treats unregistered dataclasses as leaves
        return
    flat, _ = tree_flatten(value)
    torch_leaves = [leaf for leaf in pytree.tree_leaves(value) if leaf is not None]
    assert len(flat) == len(torch_leaves)
    assert all(a is b for a, b in zip(flat, torch_leaves, strict=True))


def test_classes_not_allowed_come_back_as_dicts() -> None:
    value = {"p": Pair(1, Point(2, None))}
    flat, spec = tree_flatten(value)
    assert tree_unflatten(spec, flat) == {"p": {"first": 1, "second": {"x": 2, "y": None}}}


def test_allowed_classes_match_module_and_qualname() -> None:
    Impostor = collections.namedtuple("Pair", ["first", "second"])  # same name, other module
    Impostor.__module__ = "somewhere.else"
    flat, spec = tree_flatten(Pair(1, 2))
    assert tree_unflatten(spec, flat, allowed_classes=[Impostor]) == {"first": 1, "second": 2}


def test_class_named_in_a_spec_is_never_imported() -> None:
    spec = TreeSpec.from_json_obj(
        {
            "kind": "namedtuple",
            "type": "evil_module_xyz.Boom",
            "fields": ["a"],
            "children": [{"kind": "leaf"}],
        }
    )
    assert tree_unflatten(spec, [1]) == {"a": 1}
    assert "evil_module_xyz" not in sys.modules


@pytest.mark.parametrize(
    ("value", "expected_keys"),
    [
        ({"a": 1, 2: 2, True: 3, None: 4}, ("a", 2, True, None)),
        (collections.OrderedDict(b=1, a=2), ("b", "a")),
        (collections.defaultdict(int, z=1), ("z",)),
    ],
    ids=["json-typed-keys", "ordered-dict", "defaultdict"],
)
def test_dict_keys_keep_their_json_type(
    value: dict[Any, Any], expected_keys: tuple[Any, ...]
) -> None:
    _, spec = tree_flatten(value)
    assert spec.kind == "dict" and spec.keys == expected_keys
    again = TreeSpec.from_json_obj(json.loads(json.dumps(spec.to_json_obj())))
    assert [type(k) for k in again.keys] == [type(k) for k in expected_keys]


def test_unsupported_dict_key_names_the_path() -> None:
    with pytest.raises(
        UnsupportedValueError, match=r"value\['x'\]: expected dict keys .* got dict key \(1, 2\)"
    ):
        tree_flatten({"x": {(1, 2): 0}})


def test_wrong_leaf_count_is_reported() -> None:
    _, spec = tree_flatten((1, [2, 3]))
    with pytest.raises(LeafCountError, match="expected 3 leaves for this spec, got 2"):
        tree_unflatten(spec, [1, 2])


def test_repr_is_compact() -> None:
    _, spec = tree_flatten({"a": (1, None), "b": [Pair(1, 2)]})
    assert repr(spec) == "TreeSpec({'a': (*, None), 'b': [Pair(first=*, second=*)]})"


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"kind": "set", "children": []}, "tree.kind"),
        ({"kind": "leaf", "children": []}, "tree.children"),
        ({"kind": "tuple"}, "tree.children"),
        ({"kind": "dict", "keys": ["a"], "children": []}, "tree"),
        ({"kind": "dict", "keys": [[1]], "children": [{"kind": "leaf"}]}, "tree.keys[0]"),
        ({"kind": "dict", "keys": ["a", "a"], "children": [{"kind": "leaf"}] * 2}, "tree"),
        ({"kind": "namedtuple", "type": "", "fields": [], "children": []}, "tree.type"),
        ({"kind": "list", "children": [{"kind": "leaf", "x": 1}]}, "tree.children[0].x"),
        ({"kind": "list", "children": {"kind": "leaf"}}, "tree.children"),
        ([], "tree"),
    ],
    ids=[
        "unknown-kind",
        "leaf-with-children",
        "missing-children",
        "keys-count",
        "list-key",
        "duplicate-keys",
        "empty-type",
        "unknown-field",
        "children-not-list",
        "not-object",
    ],
)
def test_malformed_tree_json_names_the_field(obj: object, field: str) -> None:
    with pytest.raises(AdapterSpecError, match=rf"adapter spec field '{re.escape(field)}'"):
        TreeSpec.from_json_obj(obj)


def test_too_deep_tree_is_rejected() -> None:
    obj: dict[str, Any] = {"kind": "leaf"}
    for _ in range(300):
        obj = {"kind": "list", "children": [obj]}
    with pytest.raises(AdapterSpecError, match="levels deep"):
        TreeSpec.from_json_obj(obj)


def test_model_output_is_a_custom_node_with_its_keys() -> None:
    torch = pytest.importorskip("torch")
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")
    import torch.utils._pytree as pytree

    out = modeling_outputs.BaseModelOutput(
        last_hidden_state=torch.ones(1), hidden_states=(torch.zeros(1),)
    )
    flat, spec = tree_flatten(out)
    assert spec.kind == "custom" and spec.context_value == ["last_hidden_state", "hidden_states"]
    assert all(a is b for a, b in zip(flat, pytree.tree_leaves(out), strict=True))
    assert leaf_paths(spec, "out") == ["out.last_hidden_state", "out.hidden_states[0]"]
    plain = tree_unflatten(spec, flat)
    assert list(plain) == ["last_hidden_state", "hidden_states"]  # type: ignore[call-overload]
    rebuilt = tree_unflatten(spec, flat, allowed_classes=[modeling_outputs.BaseModelOutput])
    assert type(rebuilt) is modeling_outputs.BaseModelOutput
    assert rebuilt.hidden_states[0] is flat[1]  # type: ignore[attr-defined]


def test_torch_structseq_is_a_custom_node() -> None:
    torch = pytest.importorskip("torch")
    result = torch.max(torch.ones(2, 3), 0)
    flat, spec = tree_flatten(result)
    assert spec.kind == "custom" and spec.type_name == "torch.return_types.max"
    assert tree_unflatten(spec, flat) == tuple(flat)
    assert type(tree_unflatten(spec, flat, allowed_classes=[type(result)])) is type(result)


@settings(max_examples=200, deadline=None)
@given(nested, nested)
def test_fast_path_flattens_like_the_generic_flattener(exported: object, value: object) -> None:
    from onnx_export.adapters._flatten import flatten_arguments, key_from_spec
    from onnx_export.adapters.input_steps import FlattenInputs

    _, tree = tree_flatten(((exported,), {"k": exported}))
    step = FlattenInputs(tree)
    for candidate in (exported, value):
        canonical = ((candidate,), {"k": candidate})
        generic: list[object] = []
        key = flatten_arguments(*canonical, generic)
        leaves, got_key = step(canonical)
        assert got_key == key
        assert len(leaves) == len(generic) and all(
            a is b for a, b in zip(leaves, generic, strict=True)
        )
    assert step(((exported,), {"k": exported}))[1] is key_from_spec(tree)
