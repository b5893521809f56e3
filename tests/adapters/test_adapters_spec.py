"""AdapterSpec: building from examples, JSON round trip, and every kind of tampering."""

from __future__ import annotations

import collections
import inspect
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from onnx_export.adapters import (
    AdapterSpec,
    AdapterSpecError,
    LeafSpec,
    TensorSpec,
    UnsupportedValueError,
    build_adapter_spec,
    flat_input_names,
    flat_output_names,
)

Out = collections.namedtuple("Out", ["logits", "aux"])


def forward(x, past_key_values, mask=None, *, scale=2.0, mode="fast"): ...  # type: ignore[no-untyped-def]


def example_spec() -> AdapterSpec:
    x = {"ids": np.zeros((2, 5), np.int64), "z": np.zeros(3, np.complex64)}
    past = [(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32))] * 2
    outputs = Out(np.zeros((2, 5), np.float32), (3, np.zeros(1, np.bool_)))
    return build_adapter_spec(
        inspect.signature(forward),
        (x, past),
        {"scale": 0.5},
        outputs,
        input_shapes={0: ("batch", "seq")},
    )


def test_built_spec_describes_every_leaf() -> None:
    spec = example_spec()
    assert [(leaf.path, leaf.kind) for leaf in spec.inputs] == [
        ("x['ids']", "tensor"),
        ("x['z']", "tensor"),
        ("past_key_values[0][0]", "tensor"),
        ("past_key_values[0][1]", "tensor"),
        ("past_key_values[1][0]", "tensor"),
        ("past_key_values[1][1]", "tensor"),
        ("scale", "constant"),
        ("mode", "constant"),
    ]
    assert spec.inputs[0].tensor == TensorSpec("x.ids", "int64", ("batch", "seq"))
    assert spec.inputs[1].tensor == TensorSpec("x.z", "complex64", (3,))
    assert (spec.inputs[6].value, spec.inputs[7].value) == (0.5, "fast")
    assert flat_input_names(spec) == [
        "x.ids",
        "x.z",
        "past_key_values.0.0",
        "past_key_values.0.1",
        "past_key_values.1.0",
        "past_key_values.1.1",
    ]
    assert flat_output_names(spec) == ["output.logits", "output.aux.1"]
    assert spec.outputs[1] == LeafSpec("output.aux[0]", "constant", value=3)


def test_json_round_trip() -> None:
    spec = example_spec()
    assert AdapterSpec.from_json(spec.to_json()) == spec


def test_name_and_shape_overrides() -> None:
    spec = build_adapter_spec(
        None,
        (np.zeros((2, 3), np.float32), np.zeros(2, np.float32)),
        {},
        [np.zeros(1)],
        input_names=lambda i, path: f"in_{i}_{path}",
        output_names=["y"],
        output_shapes={0: ("n",)},
    )
    assert flat_input_names(spec) == ["in_0_args[0]", "in_1_args[1]"]
    assert spec.outputs[0].tensor == TensorSpec("y", "float64", ("n",))


def test_default_names_are_made_unique() -> None:
    spec = build_adapter_spec(None, (), {"a": {"b": np.zeros(1)}, "a.b": np.zeros(1)}, 0)
    assert flat_input_names(spec) == ["a.b", "a.b_1"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_shapes": {0: ("n",)}}, r"input_shapes\[0\]: expected 2 dims for args\[0\]"),
        ({"output_names": ["a", "b"]}, r"output_names: expected 1 names"),
    ],
    ids=["rank-of-shape-override", "count-of-output-names"],
)
def test_bad_overrides(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(AdapterSpecError, match=match):
        build_adapter_spec(None, (np.zeros((2, 3), np.float32),), {}, np.zeros(1), **kwargs)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((object(),), r"args\[0\]: expected a tensor .* got object"),
        (
            (np.zeros(1, np.str_),),
            r"args\[0\]: expected a tensor dtype ONNX can carry .* got str32",
        ),
        ((float("nan"),), r"args\[0\]: expected a tensor .* got float nan"),
    ],
    ids=["object", "string-array", "nan-constant"],
)
def test_unsupported_leaves(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(UnsupportedValueError, match=match):
        build_adapter_spec(None, args, {}, 0)


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``obj[a][b]...`` (path like ``inputs.0.tensor.dtype``)."""

    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target: Any = obj
        for p in parents:
            target = target[p]
        target[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target: Any = obj
        for p in parents:
            target = target[p]
        del target[last]

    return mutate


TAMPERING = [
    (_set("version", 2), "version"),
    (_set("version", "1"), "version"),
    (_set("version", True), "version"),
    (_delete("inputs"), "spec.inputs"),
    (_set("extra", 1), "spec.extra"),
    (_set("parameters", {}), "parameters"),
    (_set("parameters.0.kind", "weird"), "parameters[0].kind"),
    (_set("parameters.1.name", "x"), "parameters[1].name"),
    (_set("parameters.0.name", "not an identifier"), "parameters[0].name"),
    (_set("parameters.3.kind", "positional_only"), "parameters[3].kind"),
    (_set("parameters.3.default", [1]), "parameters[3].default"),
    (_set("input_tree.kind", "list"), "input_tree"),
    (
        _set("input_tree.children.1.children.0.kind", "set"),
        "input_tree.children[1].children[0].kind",
    ),
    (_set("input_tree.children.1.keys.0", "nope"), "input_tree.children[1].keys[0]"),
    (
        _set("input_tree.children.1.children.0.keys.0", 1.5),
        "input_tree.children[1].children[0].keys[0]",
    ),
    (_delete("inputs.0"), "inputs"),
    (_set("inputs.0.kind", "blob"), "inputs[0].kind"),
    (_set("inputs.0.tensor.dtype", "float33"), "inputs[0].tensor.dtype"),
    (_set("inputs.0.tensor.shape.0", -1), "inputs[0].tensor.shape[0]"),
    (_set("inputs.0.tensor.shape.0", 1.5), "inputs[0].tensor.shape[0]"),
    (_set("inputs.0.tensor.shape", "2x3"), "inputs[0].tensor.shape"),
    (_set("inputs.0.tensor.name", ""), "inputs[0].tensor.name"),
    (_set("inputs.1.tensor.name", "x.ids"), "inputs[1].tensor.name"),
    (_set("inputs.0.tensor.code", "import os"), "inputs[0].tensor.code"),
    (_set("inputs.6.value", None), "inputs[6].value"),
    (_set("inputs.6.value", {"a": 1}), "inputs[6].value"),
    (_set("outputs.0.path", 3), "outputs[0].path"),
    (_set("output_tree.fields", ["logits"]), "output_tree"),
    (_set("output_tree.type", 7), "output_tree.type"),
]


@pytest.mark.parametrize(("mutate", "field"), TAMPERING, ids=[f for _, f in TAMPERING])
def test_tampered_json_names_the_field(
    mutate: Callable[[dict[str, Any]], None], field: str
) -> None:
    obj = json.loads(example_spec().to_json())
    mutate(obj)
    with pytest.raises(
        AdapterSpecError, match=rf"adapter spec field '{re.escape(field)}': expected"
    ) as info:
        AdapterSpec.from_json(json.dumps(obj))
    assert "re-export the model" in str(info.value)


@pytest.mark.parametrize(
    "text",
    ["{", "", "[" * 100_000 + "]" * 100_000, '{"version": NaN}'],
    ids=["truncated", "empty", "deeply-nested", "nan-version"],
)
def test_text_that_is_not_a_spec(text: str) -> None:
    with pytest.raises(AdapterSpecError, match="adapter spec"):
        AdapterSpec.from_json(text)


def test_constructing_an_inconsistent_spec_fails() -> None:
    spec = example_spec()
    with pytest.raises(AdapterSpecError, match="adapter spec field 'outputs'"):
        AdapterSpec(
            spec.version,
            spec.parameters,
            spec.input_tree,
            spec.inputs,
            spec.output_tree,
            spec.outputs[:1],
        )
