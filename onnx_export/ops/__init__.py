"""onnx-export's own ONNX functions for ATen ops, grouped by topic like torchlib's ``ops/``.

Consulted after the user's functions and before torchlib's (see ``onnx_export._registry``).
"""
