"""Classes behind wrong numbers and invalid files in transformers' tester set (#28).

Each class was met by a tiny random model of transformers' own test configs (the
``bench/bench_transformers_testers.py`` sweep); each test here rebuilds it from the real
transformers class or the smallest module with the same pattern, and checks the export
in ONNX Runtime against eager.
"""

from __future__ import annotations

import pathlib

import onnx
import pytest
import torch

import onnx_export
from tests.helpers import export_and_check

transformers = pytest.importorskip("transformers")


class RMSNorm(torch.nn.Module):
    """transformers' RMSNorm, with Helium's testers' ``eps=1e-8``."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * 1.000001


@pytest.mark.parametrize("eps", [1e-8, 1e-20], ids=["eps-1e-8", "eps-1e-20"])
def test_a_tiny_epsilon_is_not_taken_for_zero(eps: float) -> None:
    """onnxscript's no-op rules matched ``x + 1e-8`` as ``x + 0`` (and ``x * 1.000001``
    as ``x * 1``) and removed them: a zero row (a padding token's embedding) then gave
    NaN where eager gives 0."""
    x = torch.randn(3, 8)
    x[1] = 0.0
    program = export_and_check(RMSNorm(eps), x)
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert ops.count("Add") == 1 and ops.count("Mul") == 2


def test_helium_with_a_padding_token_matches_eager() -> None:
    """Helium's testers (``rms_norm_eps=1e-8``, padding row of the embedding zero)."""
    config = transformers.HeliumConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, intermediate_size=32, rms_norm_eps=1e-8,
        pad_token_id=0, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.HeliumModel(config).eval()
    ids = torch.randint(1, 99, (2, 5))
    ids[0, 0] = 0  # the padding token: a zero embedding
    with torch.no_grad():
        export_and_check(model, input_ids=ids, rtol=1e-3, atol=1e-4)


class SplitBySizes(torch.nn.Module):
    """A mixture of experts' grouping: sizes read from data (JetMoE's ``expert_size``)."""

    def forward(self, x: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        parts = x.split(sizes.tolist(), dim=0)
        return torch.cat([part * (i + 1) for i, part in enumerate(parts)])


def test_a_split_into_a_sequence_is_typed_as_a_sequence() -> None:
    """``split_with_sizes`` becomes one ``SplitToSequence`` value; it was typed as the
    first chunk's tensor, a file ONNX Runtime refused ("Type Error: Type (tensor(float))
    of output arg ... does not match expected type (seq(tensor(float)))"). The optimizer
    rewrites it to ``Split``, so the unoptimized graph (``optimize=False``, and what
    ``verify`` runs to find a culprit) showed it."""
    x, sizes = torch.randn(6, 3), torch.tensor([1, 2, 3])
    options = onnx_export.ExportOptions(optimize=False)
    program = onnx_export.dynamo_export(SplitBySizes(), x, sizes, export_options=options)
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert "SplitToSequence" in [n.op_type for n in program.model_proto.graph.node]
    for other in ([3, 0, 3], [6, 0, 0]):
        got = program(x, torch.tensor(other))
        torch.testing.assert_close(got, SplitBySizes()(x, torch.tensor(other)))
    assert program.verify(x, torch.tensor([2, 2, 2])).ok


class MaskOfIntAndBool(torch.nn.Module):
    """CPM-Ant's attention mask: an int ``context`` or'ed with bool masks."""

    def forward(self, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        causal = torch.ones(mask.shape[-1], mask.shape[-1], dtype=torch.bool).tril()
        return context[:, None, :] | (mask & causal) ^ context[:, :, None]


def test_bitwise_ops_promote_a_bool_operand_as_torch_does() -> None:
    """``int32 | bool`` is int32 in torch; the bool operand went to ``BitwiseOr`` as it
    was, and ONNX Runtime refused the file ("Type 'tensor(bool)' of input parameter ...
    of operator (BitwiseOr) ... is invalid")."""
    context = torch.randint(0, 3, (2, 5), dtype=torch.int32)
    mask = torch.rand(2, 5, 5) > 0.5
    program = export_and_check(MaskOfIntAndBool(), context, mask)
    other = torch.randint(0, 3, (2, 5), dtype=torch.int32), torch.rand(2, 5, 5) > 0.3
    torch.testing.assert_close(program(*other), MaskOfIntAndBool()(*other))


class InterpolatedPositions(torch.nn.Module):
    """SAM's (GOT-OCR2's vision tower's) relative positions, resized from the weight."""

    def __init__(self) -> None:
        super().__init__()
        self.rel_pos = torch.nn.Parameter(torch.randn(27, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = self.rel_pos.reshape(1, 27, -1).permute(0, 2, 1)
        resized = torch.nn.functional.interpolate(table, size=14, mode="linear")
        return x @ resized.reshape(-1, 14)


def test_a_resized_weight_is_folded_and_saved(tmp_path: pathlib.Path) -> None:
    """The weight-only chain (Reshape, Transpose, Resize) is folded into an initializer
    computed at save time by a small ONNX model; its constants were fed as inputs, so
    ONNX Runtime could not infer the Resize's sizes and the save failed (``SerdeError``:
    "Number of elements of input 'sizes' (0) must be same as rank of input 'X'")."""
    model, x = InterpolatedPositions(), torch.randn(3, 8)
    program = export_and_check(model, x)
    program.save(tmp_path / "m.onnx")
    loaded = onnx_export.load(tmp_path / "m.onnx")
    torch.testing.assert_close(torch.as_tensor(loaded(x)), model(x).detach(), rtol=1e-4, atol=1e-5)


class Power(torch.nn.Module):
    def forward(self, base: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
        return base**exponent


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_integer_powers_are_exact_and_wrap_as_torch_does(dtype: torch.dtype) -> None:
    """BLT's rolling hash, ``1000000007 ** arange(n)``: ONNX Runtime's integer ``Pow``
    went through floating point (49 off at the square, no wrap-around beyond)."""
    base = torch.tensor([1000000007, 3, 2, 7, -5], dtype=dtype)
    exponent = torch.tensor([3, 4, 30, 0, 3], dtype=dtype)
    program = export_and_check(Power(), base, exponent)
    other = torch.tensor([31, 1000003, 9, 1, 0], dtype=dtype), torch.tensor([5, 2, 7, 62, 0])
    other = other[0], other[1].to(dtype)
    torch.testing.assert_close(program(*other), Power()(*other), rtol=0, atol=0)


def test_float_powers_keep_pow() -> None:
    base, exponent = torch.rand(4) + 0.5, torch.randn(4)
    program = export_and_check(Power(), base, exponent)
    assert [n.op_type for n in program.model_proto.graph.node] == ["Pow"]


class OtherPathWhenTraced(torch.nn.Module):
    """Autoformer's attention: a line that fails only as traced (its mask is None eagerly)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            return x.view(7, -1)  # the line that fails as traced
        return x * 2


def test_a_failure_at_a_models_line_names_it_first() -> None:
    """A capture failure that is not data-dependent (``shape '[...]' is invalid``): the
    first line said only "every strategy failed"; it names the model's line now."""
    with pytest.raises(onnx_export.CaptureError) as caught:
        onnx_export.dynamo_export(OtherPathWhenTraced(), torch.randn(3, 5))
    first = str(caught.value).splitlines()[0]
    source = pathlib.Path(__file__).read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(source, 1) if "the line that fails as" in text)
    assert f"test_transformers_testers_classes.py:{line}" in first, first
    assert "RuntimeError: shape '[7, -1]' is invalid" in first, first


class ByteGroupHash(torch.nn.Module):
    """BLT's hashed n-gram ids: a rolling hash that overflows int64 from three bytes on."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = group_size

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from transformers.models.blt.modeling_blt import byte_group_hash_function

        return byte_group_hash_function(ids, self.group_size)  # type: ignore[no-any-return]


@pytest.mark.parametrize("group_size", [3, 8])
def test_an_int64_sum_wraps_around_as_torch_does(group_size: int) -> None:
    """ONNX Runtime's int64 ``ReduceSum`` saturated at 2**63 - 1; BLT's hash ids were off
    (its hashed embeddings by up to 5, with a parity warning)."""
    options = onnx_export.ExportOptions(dynamic_shapes={"ids": {0: "batch", 1: "seq"}})
    ids = torch.randint(0, 256, (3, 7))
    program = export_and_check(ByteGroupHash(group_size), ids=ids, options=options)
    other = torch.randint(0, 256, (2, 5))
    torch.testing.assert_close(program(ids=other), ByteGroupHash(group_size)(other), rtol=0, atol=0)


class BranchOnValue(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # the data-dependent line
            return x * 2
        return x


def test_a_data_dependent_failure_while_decomposing_names_the_models_line() -> None:
    """FLAVA's pre-training head: torch.export captured it, and its re-trace for
    decomposition failed on an unbacked size ("The export failed unexpectedly:
    GuardOnDataDependentSymNode"). Such a failure becomes a ``CaptureError`` whose first
    line names the model's line; torch's own error of that kind stands in here."""
    from onnx_export.capture._decomp import _retrace_error

    try:
        torch.export.export(BranchOnValue(), (torch.randn(3),), strict=False)
    except Exception as e:
        error = _retrace_error(e)
    assert isinstance(error, onnx_export.CaptureError)
    first = str(error).splitlines()[0]
    source = pathlib.Path(__file__).read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(source, 1) if "# the data-dependent line" in text)
    assert f"test_transformers_testers_classes.py:{line}" in first, first
    assert "re-tracing" in first
    other = ValueError("not data-dependent")
    assert _retrace_error(other) is other
