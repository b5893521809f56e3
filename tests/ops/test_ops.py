"""OpInfo-driven op tests: every entry of torch's ``op_db``, exported and run in ONNX Runtime.

The expected status of each op (pass, ``skip`` with a reason, ``xfail`` with a reason)
is in ``ops_test_data.py``. CI runs a representative fixed subset (``CI_OPS``) on the
first two float32 samples; ``--runslow`` runs every op in float32, float16, int64 and
bool wherever the op supports them. An expected failure that passes fails the test:
remove its ``xfail`` from the table.
"""

from __future__ import annotations

import pytest
import torch

from tests.ops import ops_test_data as table
from tests.ops.opinfo_harness import OpResult, check_op, op_db_by_key

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

#: The full sweep's dtypes: each op's primary one, then the others it supports.
_DTYPES: dict[str, torch.dtype | None] = {
    "primary": None,
    **{str(d).removeprefix("torch."): d for d in table.SWEEP_DTYPES if d != torch.float32},
}


def _check(key: str, dtype: torch.dtype | None) -> OpResult:
    entry = table.entry_for(key)
    opinfo = op_db_by_key().get(key)
    if opinfo is None:
        pytest.skip(f"torch {torch.__version__}'s op_db has no {key} (see VERSION_SPECIFIC)")
    primary = table.primary_dtype(entry, opinfo)
    if dtype is not None and dtype == primary:
        pytest.skip(f"{dtype} is {key}'s primary dtype, tested as 'primary'")
    if dtype is None:
        dtype = primary
        if dtype is None:
            pytest.skip("the op supports none of the tested dtypes on CPU")
    elif dtype not in opinfo.supported_dtypes("cpu"):
        pytest.skip(f"{key} does not support {dtype} on CPU")
    expectation = entry.expectation(dtype)
    if expectation is not None and expectation.kind == "skip":
        pytest.skip(expectation.reason)
    result = check_op(
        "ours",
        opinfo,
        dtype,
        tolerance=entry.tol,
        shape_only=entry.compare_shape_only,
        skip_samples=entry.skipped_samples,
    )
    if result.status == "skip":
        pytest.skip(result.reason)
    if expectation is not None:  # an expected failure
        if result.status == "pass":
            pytest.fail(f"{key} [{dtype}] passes now: remove its xfail ({expectation.reason})")
        pytest.xfail(f"{expectation.reason} ({result.reason[:200]})")
    assert result.status == "pass", result.reason
    return result


def test_table_lists_every_op_db_entry_once() -> None:
    keys = list(op_db_by_key())
    listed = [entry.key for entry in table.TESTED_OPS_LIST]
    assert len(listed) == len(set(listed)), "an op is listed twice"
    assert sorted(set(keys) - set(listed)) == [], "op_db entries missing from the table"
    unknown = set(listed) - set(keys) - table.VERSION_SPECIFIC
    assert sorted(unknown) == [], "table entries that op_db does not have"


def test_every_skip_and_xfail_has_a_reason() -> None:
    for entry in table.TESTED_OPS_LIST:
        for expectation in entry.expectations:
            assert expectation.kind in ("skip", "xfail"), entry.key
            assert len(expectation.reason) > 10, f"{entry.key}: say why"


def test_ci_subset_is_in_the_table() -> None:
    assert set(table.CI_OPS) <= set(table.TESTED_OPS), set(table.CI_OPS) - set(table.TESTED_OPS)


@pytest.mark.parametrize("key", table.CI_OPS)
def test_op_ci(key: str) -> None:
    result = _check(key, None)
    missing = set(table.OWN_OPS.get(key, ())) - result.own_ops
    assert not missing, (
        f"OWN_OPS claims {sorted(missing)} for {key}, but its export did not dispatch them to "
        f"our functions (it did: {sorted(result.own_ops)}); correct the claim."
    )


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(_DTYPES))
@pytest.mark.parametrize("key", list(table.TESTED_OPS))
def test_op_full_sweep(key: str, dtype: str) -> None:
    _check(key, _DTYPES[dtype])
