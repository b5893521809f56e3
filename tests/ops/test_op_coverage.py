"""Every one of our own op keys (``@onnx_op`` in ``onnx_export/ops``) is exercised in CI.

A key counts as exercised when a CI OpInfo entry claims it in ``OWN_OPS`` of
``ops_test_data.py`` (and ``test_op_ci`` checks the claim: that export dispatches the key
to our function) or when a case of ``test_own_ops.py`` or ``test_own_vs_torchlib.py``
exports it and compares with eager in ONNX Runtime; the few exceptions are listed in
``ELSEWHERE`` with where or why. A newly registered key fails here until one of them
covers it.
"""

from __future__ import annotations

import onnx_export.ops  # noqa: F401  (importing the topic modules registers them)
from onnx_export.ops._registration import registered_ops
from tests.ops import ops_test_data as table
from tests.ops.test_own_ops import CASES
from tests.ops.test_own_vs_torchlib import CASES as OVERLAP_CASES

#: Keys exercised elsewhere, or not reachable from a test, each with where or why.
ELSEWHERE: dict[str, str] = {
    **dict.fromkeys(
        ["aten::sym_size.int", "aten::sym_numel"],
        "tests/onnx_export/test_symbolic.py::test_symbolic_ops_at_two_sizes[numel_size] "
        "(checks the node is in the graph; onnx_export.translation._symbolic dispatches it)",
    ),
    **dict.fromkeys(
        ["onnx_export::lstm", "onnx_export::gru", "onnx_export::rnn"],
        "tests/onnx_export/test_recurrent.py (capture/patches/_rnn.py routes nn.LSTM/GRU/RNN "
        "to these keys; each case is compared with eager at three time lengths)",
    ),
    **dict.fromkeys(
        ["aten::sym_stride.int", "aten::sym_storage_offset"],
        "not reached: torch.export turns the strides and offsets of the tensors it traces "
        "into size expressions; registered so that a graph holding one needs no "
        "decomposition",
    ),
}


def _registered() -> set[str]:
    return {r.target + (" (complex)" if r.is_complex else "") for r in registered_ops()}


def _covered() -> dict[str, str]:
    """Each covered key and where CI exercises it."""
    covered: dict[str, str] = {}
    for op, keys in table.OWN_OPS.items():
        if op in table.CI_OPS:
            for key in keys:
                covered.setdefault(key, f"OpInfo {op}")
    for case in CASES:
        covered.setdefault(case.key, f"test_own_ops.py::{case.name}")
    for overlap in OVERLAP_CASES:  # each also checks that the key dispatched to ours
        if overlap.xfail is None:
            covered.setdefault(overlap.key, f"test_own_vs_torchlib.py::{overlap.name}")
    for key, where in ELSEWHERE.items():
        covered.setdefault(key, where)
    return covered


def test_every_own_op_key_is_exercised_in_ci() -> None:
    uncovered = sorted(_registered() - set(_covered()))
    assert not uncovered, (
        f"{len(uncovered)} of our own op keys are not exercised in CI: "
        + ", ".join(uncovered)
        + ". Add a CI OpInfo entry (CI_OPS and OWN_OPS in tests/ops/ops_test_data.py) "
        "or a case in tests/ops/test_own_ops.py."
    )


def test_coverage_claims_only_registered_keys() -> None:
    stale = sorted(set(_covered()) - _registered())
    assert not stale, f"claimed as covered but not registered by @onnx_op: {stale}"


def test_op_tables_claim_only_ci_entries() -> None:
    assert set(table.OWN_OPS) <= set(table.CI_OPS), set(table.OWN_OPS) - set(table.CI_OPS)
