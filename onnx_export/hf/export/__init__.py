"""The export side of ``onnx_export.hf``: a checkpoint folder to ONNX graphs.

Imports torch and transformers. It loads a checkpoint (config + safetensors), builds each
task's graphs (``graphs/``: text, vision, audio, seq2seq), exports them through
:func:`onnx_export.dynamo_export`, fuses them for ONNX Runtime (``--target onnxruntime``:
GroupQueryAttention, ...), quantizes them (int4/int8), checks them against transformers
and writes the folder the runtime side reads. The public entry point is
:func:`onnx_export.hf.export_pretrained`.
"""

#: The public names are :mod:`onnx_export.hf`'s; this package holds its private modules.
__all__: list[str] = []
