"""``onnx_export/ops/_opset.py`` says what ONNX says: each op, its inputs and attributes."""

from __future__ import annotations

import inspect
import keyword

import onnx.defs
import pytest

from onnx_export.ops._opset import Opset

_OPS = sorted(name for name in vars(Opset) if name[:1].isupper())


def test_the_facade_lists_ops() -> None:
    assert len(_OPS) > 50


@pytest.mark.parametrize("name", _OPS)
def test_op_matches_its_opset_18_schema(name: str) -> None:
    schema = onnx.defs.get_schema(name, 18)
    parameters = list(inspect.signature(getattr(Opset, name)).parameters.values())[1:]
    inputs = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
    ]
    attributes = {p.name for p in parameters if p.kind == inspect.Parameter.KEYWORD_ONLY}
    expected = [f"{i.name}_" if keyword.iskeyword(i.name) else i.name for i in schema.inputs]
    assert inputs == expected
    assert attributes == set(schema.attributes)
