"""The modules traced for each task: a transformers model wrapped into one graph's call."""

#: The public names are :mod:`onnx_export.hf`'s; this package holds its private modules.
__all__: list[str] = []
