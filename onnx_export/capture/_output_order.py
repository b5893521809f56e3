"""Decomposition re-traces the program with its outputs as one flat tuple.

``run_decompositions`` re-traces ``program.module()``, whose result is the program's
outputs unflattened with the captured output spec, and keeps that spec for the new
graph. A container whose unflattening does not give back its flattening order then
permutes the new graph's outputs against the spec it keeps: a ``transformers``
``ModelOutput`` is rebuilt by its dataclass constructor, in field order, while the
model's own object has its keys in the order they were set (``capture_outputs`` adds
``hidden_states`` after the output is made; a VLM sets ``pooler_output`` last). The
pooled features then came out under ``hidden_states``. With a flat tuple as the output
spec during the re-trace, the graph's outputs keep the captured order; the model's own
spec is put back on the decomposed program.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

__all__ = ["flat_outputs"]


@contextlib.contextmanager
def flat_outputs(program: ExportedProgram) -> Iterator[list[ExportedProgram]]:
    """Give ``program`` a flat tuple output spec; restore its own on it and on the results.

    Append each program derived from ``program`` inside the block (the decomposed one) to
    the yielded list; each gets ``program``'s output spec back on exit.

    Example:
        >>> import torch
        >>> class M(torch.nn.Module):
        ...     def forward(self, x):
        ...         return {"b": x + 1, "a": x * 2}
        >>> program = torch.export.export(M(), (torch.ones(2),))
        >>> with flat_outputs(program) as derived:
        ...     derived.append(program.run_decompositions({}))
        >>> list(derived[0].module()(torch.ones(2)))
        ['b', 'a']
    """
    entry = program.module_call_graph[0] if program.module_call_graph else None
    signature = entry.signature if entry is not None else None
    own = signature.out_spec if signature is not None else None
    derived: list[ExportedProgram] = []
    flat = None if own is None else pytree.treespec_tuple([pytree.treespec_leaf()] * own.num_leaves)
    if signature is None or own is None or own == flat:
        yield derived
        return
    signature.out_spec = flat
    try:
        yield derived
    finally:
        signature.out_spec = own
        for other in derived:
            other_signature = other.module_call_graph[0].signature
            if other_signature is not None:
                other_signature.out_spec = own
