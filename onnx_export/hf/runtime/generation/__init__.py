"""The torch-free decoding loop: decoders and seq2seq models, their settings and processors."""

#: The public names are :mod:`onnx_export.hf`'s; this package holds its private modules.
__all__: list[str] = []
