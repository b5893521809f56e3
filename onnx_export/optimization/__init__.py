"""Optimization: the translated model made lean and put at the asked opset.

- ``_stage``: the passes of ``passes/`` in the order an export runs them, each change a note.

This stage imports no later stage (reporting, program).
"""

__all__: list[str] = []  # the stage is private: its modules are `_module.py` files
