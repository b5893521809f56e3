"""The runtime side of ``onnx_export.hf``: exported folders run without torch.

Imports numpy, onnxruntime and (for text in and out) tokenizers and jinja2 only; never
torch, never transformers, never the export side (``tests/hf/test_hf_layering.py`` checks
it). ``models/`` holds one class a task (inputs and outputs by name), ``generation/`` the
decoding loop (sessions with caches, greedy/sampling/beam search, logits processors,
streaming), and the modules here what both share: the ONNX Runtime sessions, the folder's
manifest, the tokenizer and the pipelines.
"""

#: The public names are :mod:`onnx_export.hf`'s; this package holds its private modules.
__all__: list[str] = []
