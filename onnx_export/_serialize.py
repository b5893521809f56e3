"""Writing a model to disk atomically, with external data when it is large."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile

import onnx_ir as ir

__all__ = ["PROTOBUF_LIMIT", "initializer_bytes", "save_model"]

#: Protobuf refuses messages of 2 GiB and more; keep a margin for the graph itself.
PROTOBUF_LIMIT = 2**31 - 2**27


def initializer_bytes(model: ir.Model) -> int:
    """Total size of the model's weights."""
    return sum(
        v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None
    )


def save_model(
    model: ir.Model, path: str | os.PathLike[str], *, external_data: bool | None = None
) -> tuple[pathlib.Path, pathlib.Path | None]:
    """Write ``model`` to ``path`` (and ``<name>.data`` beside it when external).

    The files are written in a temporary folder beside the destination and moved into
    place only when complete, so a failure leaves any earlier file intact.
    """
    target = pathlib.Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    if external_data is None:
        external_data = initializer_bytes(model) > PROTOBUF_LIMIT
    data_name = f"{target.name}.data" if external_data else None
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        ir.save(model, staging / target.name, external_data=data_name)
        data_path = None
        if data_name is not None:
            data_path = target.parent / data_name
            os.replace(staging / data_name, data_path)
        os.replace(staging / target.name, target)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    return target, data_path
