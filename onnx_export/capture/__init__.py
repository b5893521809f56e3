"""Capture: the user's model and call, to a decomposed ``ExportedProgram``.

Two parts, apart at a glance: the generic machinery in this folder, and the patches of
library code in ``patches/``.

The machinery, in the order an export runs it:

- ``_call``: bind the call to ``forward`` (functions become modules), check the
  ``dynamic_shapes`` and run the strategies; ``_habits``: calls written the way
  ``torch.onnx.export`` takes them, recognised and explained;
- ``_onnx_flag``: ``torch.onnx.is_in_onnx_export()`` true while capturing (the export
  itself enters it: the flag is part of this exporter's contract, not a workaround);
- ``_dynamic``: the user's ``dynamic_shapes`` (and torch.onnx's ``dynamic_axes``), checked
  and put in torch.export's format;
- ``_shape_fixes``: the repair torch.export suggests when a dynamic dim is specialised
  (a dim made static only with ``allow_static_fallback``);
- ``_specialized``: the model's line that fixed a dynamic dim, read as torch traces;
  ``_size_one``: the model's comparisons of a dynamic size with 1, which torch decides;
  ``_user_code``: which frames are the user's (never torch's, the stdlib's or ours), for
  every location, warning and report;
  ``_data_dependent``, ``_random_draws``: where the model needs a tensor's value, and how
  to get past it; ``_resize``: other example sizes for the dynamic axes;
- ``_half``: ``ExportOptions(dtype=...)``'s converted copy (modules a model keeps in
  float32 stay so);
- ``_containers``: library containers (transformers caches) made flattenable;
- ``_strategies``: the ``torch.export`` strategies, each attempt recorded, each entering
  the patches (``patches.PATCHES``) whose targets are found;
- ``_dynamo_caches``: a clean torch.compile cache per capture;
- ``_devices``: weights and inputs on devices that cannot meet;
- ``_decomp``, ``_local_decomp``, ``_inplace``: decomposition only where ONNX needs it
  (node by node), and in-place ops on
  fresh tensors rewritten out of place; ``_output_order``: its re-trace with flat outputs,
  so a ``ModelOutput``'s keys keep the order the model set them in.

``patches/``: library code (torch's, transformers', the standard library's) rewritten for
the time of one capture, where torch.export cannot trace it as written: one module per
patch, each ending with a ``Patch`` record of its targets (library, qualified name, the
parameters it relies on), the releases it was tested against, why, and how it is applied.
A patch whose target is missing or changed in the installed library is skipped with a
note (OXE0027); the report lists the patches an export ran with (OXE0026);
``onnx-export doctor`` prints the table.

This stage imports no later stage (translation, optimization, reporting, program).
"""

__all__: list[str] = []  # the stage is private: its modules are `_module.py` files
