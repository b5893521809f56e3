"""One runtime class a task (classification, embeddings, vision, audio): names in, names out."""

#: The public names are :mod:`onnx_export.hf`'s; this package holds its private modules.
__all__: list[str] = []
