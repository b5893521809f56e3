"""The exported program: ``ONNXProgram``, how it is saved, and how it is verified.

- ``_program``: ``ONNXProgram`` (run, save, verify, the records of the export);
- ``_adapter``: the adapter spec stored inside the ``.onnx`` file;
- ``_serialize``, ``_save_errors``: atomic, streamed saves (fake weights filled at save
  time) and what a failed save tells the user;
- ``_verify``: ONNX Runtime against eager PyTorch, and the first FX node that diverges.

The last stage: it may import every earlier one.
"""

__all__: list[str] = []  # the stage is private: its modules are `_module.py` files
