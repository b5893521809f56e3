"""Reporting: what an export records in its ``DiagnosticContext``, and its SARIF files.

- ``_records``: one function per kind of event (capture attempts, decomposition, dispatch
  decisions, unsupported and failed nodes), locations at the user's code, the report
  written on success and on failure.

The pipeline hands this stage the values the other stages return; no earlier stage calls it.
"""

__all__: list[str] = []  # the stage is private: its modules are `_module.py` files
