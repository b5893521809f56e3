"""Capture: the user's model and call, to a decomposed ``ExportedProgram``.

In the order an export runs them:

- ``_call``: bind the call to ``forward`` (functions become modules), check the
  ``dynamic_shapes`` and run the strategies;
- ``_dynamic``: the user's ``dynamic_shapes`` (and torch.onnx's ``dynamic_axes``), checked
  and put in torch.export's format;
- ``_shape_fixes``: the repair torch.export suggests when a dynamic dim is specialised
  (a dim made static only with ``allow_static_fallback``);
- ``_specialized``: the model's line that fixed a dynamic dim, read as torch traces;
- ``_rnn``: ``nn.LSTM``/``GRU``/``RNN`` as one op each, so the time axis stays dynamic;
- ``_half``: ``ExportOptions(dtype=...)``'s converted copy (modules a model keeps in
  float32 stay so); ``_finite_branches``: float16 overflow guards
  (``if not isfinite(x).all(): clamp``) traced as selects;
- ``_experts``: a mixture of experts' loop over the experts that got tokens, over every
  expert (the number of hit experts is data);
- ``_module_casts``: ``module.to(...)`` in ``forward`` that converts nothing, a no-op;
- ``_transformers_masks``: transformers' masks with extra patterns built without ``vmap``;
  ``_mask_skip``: no bidirectional mask without padding, as eagerly;
- ``_anyres``: any-resolution image grids (LLaVA-NeXT's ``image_sizes``) in tensor ops;
  ``_sqrt``: ``math.sqrt`` of sizes read from data, with their bounds;
  ``_small_constants``: small constant tensors keep their values while traced;
  ``_distributions``: ``torch.distributions`` built without argument validation;
- ``_containers``: library containers (transformers caches) made flattenable;
- ``_strategies``: the ``torch.export`` strategies, each attempt recorded;
- ``_dynamo_caches``, ``_stack_traces``: a clean torch.compile cache per capture, and
  stack traces that reach each op's line;
- ``_devices``: weights and inputs on devices that cannot meet;
- ``_decomp``, ``_inplace``: decomposition only where ONNX needs it, and in-place ops on
  fresh tensors rewritten out of place; ``_output_order``: its re-trace with flat outputs,
  so a ``ModelOutput``'s keys keep the order the model set them in.

This stage imports no later stage (translation, optimization, reporting, program).
"""

__all__: list[str] = []  # the stage is private: its modules are `_module.py` files
