"""The patches capture enters: library code rewritten for the time of one capture.

Each module here rewrites one piece of library code (torch's, transformers', the standard
library's) that torch.export cannot trace as written, and ends with its :class:`Patch`
record: the targets it replaces (library, qualified name, the parameters it relies on),
the releases it was written and tested against, why it exists, and the factory that
applies it. :data:`PATCHES` lists them in the order capture enters them; a patch whose
target is missing or changed in the installed library is skipped with a note (OXE0027),
the patches an export ran with are listed in its report (OXE0026), and
``onnx-export doctor`` prints the table. ``docs/contributing.md`` says how to add one.

The generic capture machinery (binding the call, dynamic shapes, strategies,
decomposition) lives beside this package, in ``capture/``.
"""

from __future__ import annotations

from onnx_export.capture.patches import (
    _anyres,
    _causal_skip,
    _cdist,
    _distributions,
    _experts,
    _finite_branches,
    _fixed_size_composites,
    _global_attention,
    _mask_skip,
    _module_casts,
    _mrope,
    _packed_attention,
    _quant_frexp,
    _rnn,
    _sdpa_causal,
    _sdpa_flag,
    _sliding_window_cache,
    _small_constants,
    _sqrt,
    _stack_traces,
    _tensor_data,
    _torch_int,
    _transformers_masks,
    _unfold,
    _value_checked_composites,
    _vision_windows,
)
from onnx_export.capture.patches._registry import (
    Patch,
    PatchCall,
    PatchOutcome,
    Target,
    enter_patches,
    library_version,
    locate,
)

__all__ = [
    "PATCHES",
    "Patch",
    "PatchCall",
    "PatchOutcome",
    "Target",
    "enter_patches",
    "library_version",
    "locate",
]

#: Every patch, in the order capture enters them (one line per patch module).
PATCHES: tuple[Patch, ...] = (
    _stack_traces.PATCH,
    _rnn.PATCH,
    _finite_branches.PATCH,
    _fixed_size_composites.PATCH,
    _value_checked_composites.PATCH,
    _experts.PATCH,
    _packed_attention.PATCH,
    _mrope.PATCH,
    _vision_windows.PATCH,
    _torch_int.PATCH,
    _module_casts.PATCH,
    _transformers_masks.PATCH,
    _sliding_window_cache.PATCH,
    _causal_skip.PATCH,
    _sdpa_causal.PATCH,
    _sdpa_flag.PATCH,
    _cdist.PATCH,
    _unfold.PATCH,
    _anyres.PATCH,
    _distributions.PATCH,
    _mask_skip.PATCH,
    _small_constants.PATCH,
    _sqrt.PATCH,
    _global_attention.PATCH,
    _quant_frexp.PATCH,
    _tensor_data.PATCH,
)
