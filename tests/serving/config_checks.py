"""Check a written ``config.pbtxt`` with Triton's own ``ModelConfig`` and against its graph."""

from __future__ import annotations

import pathlib
from typing import Any

import onnx
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

_TYPES = {
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.BOOL: "TYPE_BOOL",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.INT32: "TYPE_INT32",
}


def parse_config(path: pathlib.Path) -> Any:
    """Parse with Triton's protobuf: unknown fields and bad enums raise ParseError."""
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def instance_groups(config: Any) -> list[tuple[str, int]]:
    """``[(kind name, count)]`` of the configuration's instance groups."""
    kind = model_config_pb2.ModelInstanceGroup.Kind
    return [(kind.Name(group.kind), group.count) for group in config.instance_group]


def graph_dims(value: Any) -> list[int | str]:
    return [
        d.dim_value if d.HasField("dim_value") else d.dim_param
        for d in value.type.tensor_type.shape.dim
    ]


def check_against_graph(config: Any, model_path: pathlib.Path) -> bool:
    """Names, order, dtypes and dims of ``config`` match the graph; returns whether batched.

    Batched (``max_batch_size > 0``): every tensor's first graph axis is one named axis,
    left out of ``dims``. Else ``dims`` are the graph's full shape.
    """
    graph = onnx.load(model_path, load_external_data=False).graph
    batched = config.max_batch_size > 0
    for entries, values in ((config.input, graph.input), (config.output, graph.output)):
        assert [e.name for e in entries] == [v.name for v in values]
        for entry, value in zip(entries, values, strict=True):
            kind = model_config_pb2.DataType.Name(entry.data_type)
            assert kind == _TYPES[value.type.tensor_type.elem_type], entry.name
            shape = graph_dims(value)
            if batched:
                assert isinstance(shape[0], str), (entry.name, shape)
                shape = shape[1:]
            expected = [d if isinstance(d, int) else -1 for d in shape] or [1]
            assert list(entry.dims) == expected, (entry.name, list(entry.dims), shape)
    if batched:
        firsts = {graph_dims(v)[0] for v in [*graph.input, *graph.output]}
        assert len(firsts) == 1 and isinstance(next(iter(firsts)), str)
        assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    else:
        assert config.WhichOneof("scheduling_choice") is None
    return batched
