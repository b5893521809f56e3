"""The heap that existed before an export is left out of the garbage collector's scans.

An export allocates hundreds of thousands of objects (fake tensors, sympy expressions, FX
and ONNX graphs), which trigger full (generation 2) collections, and each full collection
walks every object of the process: torch's modules and registries, ``transformers``,
the user's models. With about 480k objects that is 1-2 s a collection, two or three per
export, landing in whatever stage runs (measured in ``bench/bench_families.py``, #39).
``gc.freeze()`` at the start of the export moves the objects that existed before it to
the permanent generation, so collections during the export walk the export's own
objects only; ``gc.unfreeze()`` at the end gives them back to the oldest generation,
where the next full collection sees them as before. Reference counting frees memory as
always; only cycles among the older objects wait until the export returns.

A process that froze objects itself (``gc.freeze()`` before forking workers) keeps its
own freeze: nothing is frozen or unfrozen then. Nor when the collector is disabled.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["older_objects_frozen"]

_LOCK = threading.Lock()


class _State:
    depth = 0  # nested blocks (an export inside an export's hooks)
    froze = False  # whether the outermost block froze (and so unfreezes)


@contextlib.contextmanager
def older_objects_frozen() -> Iterator[None]:
    """Freeze the objects tracked now for the block (the outermost block of nested ones)."""
    with _LOCK:
        _State.depth += 1
        if _State.depth == 1 and gc.isenabled() and gc.get_freeze_count() == 0:
            gc.freeze()
            _State.froze = True
    try:
        yield
    finally:
        with _LOCK:
            _State.depth -= 1
            if _State.depth == 0 and _State.froze:
                gc.unfreeze()
                _State.froze = False
