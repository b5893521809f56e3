"""Weight quantization of an exported folder, with ONNX Runtime's own quantization tools.

``int4``: weight-only, block-wise 4-bit ``com.microsoft.MatMulNBits`` for every MatMul by a
constant weight (``onnxruntime.quantization.matmul_nbits_quantizer``); the embedding
table (a ``Gather``) becomes ``GatherBlockQuantized`` only when asked, the output head
(the MatMul that writes ``logits``) stays float when asked. ``int8``: dynamic int8
quantization of MatMul/Gemm/Attention weights (``quantize_dynamic``), the usual choice for
encoders. Nothing here quantizes by itself: a missing tool is a :class:`CheckpointError`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import tempfile
from typing import Literal

from onnx_export.hf._errors import CheckpointError

__all__ = ["QuantizeOptions", "quantize_model_file", "QUANTIZE_MODES"]

#: What ``quantize=`` takes.
QUANTIZE_MODES = ("int4", "int8")


@dataclasses.dataclass(frozen=True)
class QuantizeOptions:
    """How to quantize the weights of an exported model.

    Attributes:
        mode: ``"int4"`` (MatMulNBits, weight-only) or ``"int8"`` (dynamic quantization).
        block_size: int4 block size along the input dimension (16 to 256, a power of 2).
        accuracy_level: int4 ``accuracy_level`` of MatMulNBits (``None``: ORT's default;
            4 computes with int8 activations, the fastest on CPU).
        embeddings: int4: quantize the embedding table (``Gather``) too.
        head: int4: quantize the output head (the MatMul that writes ``logits``).

    Example:
        >>> from onnx_export.hf.export._quantize import QuantizeOptions
        >>> QuantizeOptions("int4", block_size=64).block_size
        64
    """

    mode: Literal["int4", "int8"]
    block_size: int = 32
    accuracy_level: int | None = 4
    embeddings: bool = False
    head: bool = True

    def __post_init__(self) -> None:
        if self.mode not in QUANTIZE_MODES:
            raise CheckpointError(
                f"quantize must be one of {', '.join(QUANTIZE_MODES)}, got {self.mode!r}."
            )
        size = self.block_size
        if size < 16 or size > 256 or size & (size - 1):
            raise CheckpointError(f"block_size must be a power of 2 from 16 to 256, got {size}.")
        if self.accuracy_level not in (None, 0, 1, 2, 3, 4):
            raise CheckpointError(
                f"accuracy_level must be 0 to 4 or None, got {self.accuracy_level}."
            )

    def as_manifest(self) -> dict[str, object]:
        """What ``onnx_export.json`` records of the quantization (``"quantization"``).

        int4 records its block size, ``accuracy_level`` (ORT's default when ``None``),
        and whether the head and the embedding table were quantized; int8 the mode only.

        Example:
            >>> QuantizeOptions("int4").as_manifest()["accuracy_level"]
            4
        """
        if self.mode != "int4":
            return {"mode": self.mode}
        return {
            "mode": self.mode,
            "block_size": self.block_size,
            "accuracy_level": self.accuracy_level,
            "head": self.head,
            "embeddings": self.embeddings,
        }


def _head_nodes(model: object) -> list[str]:
    """Names of the nodes that write the ``logits`` output (the output head)."""
    graph = model.graph  # type: ignore[attr-defined]
    outputs = {o.name for o in graph.output if o.name == "logits"}
    return [n.name for n in graph.node if n.op_type == "MatMul" and set(n.output) & outputs]


def _name_nodes(model: object) -> None:
    """Give unnamed nodes a name: the quantizer excludes and reports nodes by name."""
    for i, node in enumerate(model.graph.node):  # type: ignore[attr-defined]
        if not node.name:
            node.name = f"{node.op_type}_{i}"


def _import_quantizer() -> type:
    """ORT's ``MatMulNBitsQuantizer``, imported without touching the user's root logger.

    Its module calls ``logging.basicConfig(level=INFO)`` on import, which would add a
    handler to the root logger and print every INFO record of the user's program.
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
    return MatMulNBitsQuantizer  # type: ignore[no-any-return]


def _int4(path: pathlib.Path, options: QuantizeOptions) -> object:
    import onnx

    MatMulNBitsQuantizer = _import_quantizer()

    model = onnx.load(os.fspath(path))
    _name_nodes(model)
    ops = ("MatMul", "Gather") if options.embeddings else ("MatMul",)
    quantizer = MatMulNBitsQuantizer(
        model,
        bits=4,
        block_size=options.block_size,
        is_symmetric=True,
        accuracy_level=options.accuracy_level,
        nodes_to_exclude=[] if options.head else _head_nodes(model),
        op_types_to_quantize=ops,
        quant_axes=(("MatMul", 0), ("Gather", 1)),
    )
    logger = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = logger.level
    logger.setLevel(logging.WARNING)  # one INFO line per node otherwise
    try:
        quantizer.process()
    finally:
        logger.setLevel(level)
    return quantizer.model.model


def _int8(path: pathlib.Path) -> object:
    """Dynamic int8; a decoder's activations get a scale per row (``_int8_rows.py``)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    probe = onnx.load(os.fspath(path), load_external_data=False)
    if any(i.name.startswith("past_key_values.") for i in probe.graph.input):
        from onnx_export.hf.export._int8_rows import quantize_rows_int8

        # rows decoded together get their tokens alone
        return quantize_rows_int8(onnx.load(os.fspath(path)))

    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        target = pathlib.Path(scratch) / path.name
        quantize_dynamic(path, target, weight_type=QuantType.QInt8)
        return onnx.load(os.fspath(target))


def quantize_model_file(path: str | os.PathLike[str], options: QuantizeOptions) -> None:
    """Quantize the ONNX file at ``path`` in place (its external data rewritten beside it).

    Raises:
        CheckpointError: onnxruntime's quantization tools are missing.
    """
    import onnx

    file = pathlib.Path(path)
    before = onnx.load(os.fspath(file), load_external_data=False)
    locations = {
        entry.value
        for tensor in before.graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    try:
        quantized = _int4(file, options) if options.mode == "int4" else _int8(file)
    except ImportError as e:
        raise CheckpointError(
            f"quantize={options.mode!r} needs onnxruntime's quantization tools ({e}); "
            "install onnxruntime (and its quantization extras: pip install onnx sympy)."
        ) from e
    data = file.with_name(file.name + ".data")
    for old in (file, data, *(file.parent / name for name in sorted(locations))):
        old.unlink(missing_ok=True)
    large = quantized.ByteSize() > (1 << 31) - (1 << 26)  # type: ignore[attr-defined]
    onnx.save_model(
        quantized,  # type: ignore[arg-type]
        os.fspath(file),
        save_as_external_data=large,
        all_tensors_to_one_file=True,
        location=data.name,
    )
