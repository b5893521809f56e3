"""OpInfo ops at opsets 13, 14 and 15: a file that matches eager, or a refusal that says why.

Exporting below opset 18 rewrites each op that changed into its older form
(``onnx_export/passes/_older_forms.py``). For every op the contract is the same: the
export gives a file that ONNX Runtime runs and that matches eager, or it refuses with a
``ConversionError`` that names the op, the line and the lowest opset that has it. A file
that ORT refuses or that differs from eager fails the test. CI runs a sample of the op
table (``SAMPLE``); ``--runslow`` runs every CI op at each opset.
"""

from __future__ import annotations

import pytest

from tests.ops import ops_test_data as table
from tests.ops.opinfo_harness import check_op, op_db_by_key

pytestmark = pytest.mark.usefixtures("private_temp_folder")  # failed exports' reports

OPSETS = (13, 14, 15)
#: Ops whose forms changed between 13 and 18 (Trilu, CumSum, Shape, Reshape, Split,
#: Reduce*, Pad, Resize, BatchNorm, LayerNorm, Scatter, Where), one sample each.
SAMPLE = (
    "add", "pow", "where", "cumsum", "amax", "mean", "tril", "scatter", "reshape",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.pad.circular",
    "nn.functional.interpolate.bilinear", "nn.functional.adaptive_max_pool2d",
    "softmax", "nn.functional.gelu",
)  # fmt: skip
#: What a refusal says: the lowest opset that has the op.
REFUSAL = "the lowest opset that has"


def _check_at(key: str, opset: int) -> None:
    entry = table.entry_for(key)
    opinfo = op_db_by_key()[key]
    dtype = table.primary_dtype(entry, opinfo)
    if dtype is None:
        pytest.skip("the op supports none of the tested dtypes on CPU")
    expectation = entry.expectation(dtype)
    if expectation is not None:
        pytest.skip(f"fails at the default opset too: {expectation.reason}")
    result = check_op(
        f"ours@{opset}",
        opinfo,
        dtype,
        count=1,
        tolerance=entry.tol,
        shape_only=entry.compare_shape_only,
        skip_samples=entry.skipped_samples,
    )
    if result.status == "skip":
        pytest.skip(result.reason)
    if result.status == "fail":
        assert "export]" in result.reason and REFUSAL in result.reason, result.reason


def test_sample_is_in_the_ci_table() -> None:
    assert set(SAMPLE) <= set(table.CI_OPS), set(SAMPLE) - set(table.CI_OPS)


@pytest.mark.parametrize("opset", OPSETS, ids=lambda o: f"opset{o}")
@pytest.mark.parametrize("key", SAMPLE)
def test_op_at_older_opset(key: str, opset: int) -> None:
    _check_at(key, opset)


@pytest.mark.slow
@pytest.mark.parametrize("opset", OPSETS, ids=lambda o: f"opset{o}")
@pytest.mark.parametrize("key", [k for k in table.CI_OPS if k not in SAMPLE])
def test_op_at_older_opset_full(key: str, opset: int) -> None:
    _check_at(key, opset)
