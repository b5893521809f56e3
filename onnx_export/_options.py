"""Options of one export, as a frozen dataclass: the single source of configuration."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from onnx_export.diagnostics import DiagnosticOptions

if TYPE_CHECKING:
    import torch

    from onnx_export._registry import OnnxRegistry

__all__ = ["ExportOptions", "CaptureStrategyName", "DEFAULT_OPSET", "SUPPORTED_OPSETS", "Target"]

CaptureStrategyName = Literal["non_strict", "strict"]
#: What the model is for: any ONNX runtime, or ONNX Runtime with its fused kernels.
Target = Literal["onnx", "onnxruntime"]
#: A half-precision export dtype, by name (``torch.float16``/``torch.bfloat16`` work too).
HalfDtype = Literal["float16", "bfloat16"]


#: Opset 20, as torch.onnx: it has ``Gelu`` (one node instead of five), ONNX Runtime runs it
#: since 1.17, and torchlib's opset-18 functions need only a version bump to reach it
#: (docs/performance.md).
class _DefaultOpset(int):
    """The default opset: equal to 20, but it remembers that the user did not choose it.

    An export whose model needs a newer opset (``float4_e2m1fn_x2`` tensors need 23) raises
    an opset the user left at its default; one the user chose is refused instead.
    """

    def __repr__(self) -> str:
        return repr(int(self))


DEFAULT_OPSET: int = _DefaultOpset(20)
SUPPORTED_OPSETS = range(13, 24)


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """How :func:`onnx_export.dynamo_export` captures, translates and optimizes a model.

    Attributes:
        dynamic_shapes: Which input dimensions stay symbolic. Either torch.export's own
            format (``{"x": {0: torch.export.Dim("batch")}}``, tuples, ``Dim.AUTO``...)
            or the simple form ``{"input_name": {axis: "dim_name"}}``. Every string in
            the structure names a dimension; equal strings are the same dimension.
            Named dimensions keep their names in the ONNX graph.
        opset_version: ONNX opset of the model, 13 to 23. Left at its default, it is
            raised where the model needs a newer one (``float4_e2m1fn_x2`` tensors: 23);
            one you choose is kept, or the export refused with the reason. At 18
            torchlib's functions need no conversion; higher opsets are reached with
            onnxscript's version converter, 13 to 17 by rewriting each op that changed
            into its older form (an op without one is refused with the user's line and
            the lowest opset that has it).
        optimize: Run onnxscript's optimizer (constant folding, dead code removal,
            function inlining) on the translated model.
        onnx_registry: A registry with the user's own ONNX functions for custom ops
            or overrides of built-ins; ``None`` uses torchlib's functions only.
        capture_strategies: Capture strategies, tried in this order until one works:
            ``"non_strict"`` (torch.export tracing Python directly; fast) and
            ``"strict"`` (torch.export through dynamo's bytecode analysis).
        decompose: ``"auto"`` decomposes only when the graph has an op without an
            ONNX function or an in-place op; ``"always"`` always runs
            ``run_decompositions``.
        diagnostic_options: Verbosity, ``warnings_as_errors`` and where the SARIF report
            goes (``report_path``, ``write_report``); ``None`` uses the defaults: warnings
            and errors kept, report written only when the export fails.
        verify: After exporting, compare ONNX Runtime with eager PyTorch on the example
            inputs, the model run as it is deployed (eval mode, ``torch.no_grad()``; see
            :meth:`ONNXProgram.verify`). ``None`` (default): where it is cheap, that is for
            models with at most 64 MB of weights, real (not fake) and on the CPU, that draw
            no random numbers; a mismatch is a ``ParityWarning`` at the model's line of the
            first node that diverges (and an OXE0022 entry), a skipped check an OXE0023
            note. ``True``: always, and a mismatch fails the export with a
            ``VerificationError``. ``False``: never. Either way the graph then goes
            through ONNX's checker and an ONNX Runtime session build, so an invalid graph
            is an ``InvalidGraphError`` here rather than at ``save()``.
        target: ``"onnx"`` (default): standard ONNX ops only, for any runtime.
            ``"onnxruntime"``: after the optimizer, onnxscript's ONNX Runtime fusions
            replace attention, rotary embeddings, skip/simplified layer norms and
            bias-GELU with ``com.microsoft`` ops (CPU and CUDA providers); the model then
            runs only in ONNX Runtime. See docs/performance.md.
        input_names: Names for the graph's tensor inputs, in the order the model takes
            them (as torch.onnx's ``input_names``); fewer names rename the first ones.
            The adapter uses them too, so the model is still called as in PyTorch.
        output_names: Names for the graph's tensor outputs, in order (torch.onnx's
            ``output_names``).
        dynamic_axes: torch.onnx's legacy form, ``{"input": {0: "batch"}}`` or
            ``{"input": [0, 1]}``, keyed by input name (``input_names`` when given);
            entries for outputs are accepted and ignored (output shapes follow from the
            inputs). Translated to ``dynamic_shapes``; give one or the other.
        allow_static_fallback: What happens when the model's code fixes the size of a
            dimension you asked to be dynamic (``x.view(2, -1)`` on a dynamic batch,
            a ``Linear`` on a dynamic feature axis). ``False`` (default): the export fails
            with a ``CaptureError`` that names the input and axis, the model's line that
            fixed it and torch.export's suggested fix. ``True``: torch.export's fix is
            applied and the dimension is exported static, with a
            ``StaticDimensionWarning`` (a ``UserWarning``) per dimension, an OXE0020 entry
            in the report, and the loaded model's shape errors saying so. Dimensions tied
            to another dynamic dimension (``Dim("b")`` is ``Dim("a")``) stay dynamic
            either way.
        dtype: ``None`` (default): the model as it is. ``"float16"`` or ``"bfloat16"``
            (or ``torch.float16``/``torch.bfloat16``): a copy of the model with its floating
            weights and buffers in that dtype, and the float32/float64 example inputs too,
            is exported (the model itself is left as it was). Softmax, log-softmax and the
            reductions are computed in float32 (Cast nodes around them), as torch's CUDA
            kernels accumulate; ``LayerNormalization`` computes in float32 by itself
            (``stash_type=1``). The adapter takes the converted inputs in float32 too, cast
            at call time; ``verify`` compares within 1e-2. See docs/gpu.md.

    Example:
        >>> import onnx_export
        >>> opts = onnx_export.ExportOptions(
        ...     dynamic_shapes={"x": {0: "batch"}}, opset_version=18
        ... )
        >>> opts.optimize
        True
    """

    dynamic_shapes: Mapping[str, Any] | Sequence[Any] | None = None
    opset_version: int = DEFAULT_OPSET
    optimize: bool = True
    onnx_registry: OnnxRegistry | None = None
    capture_strategies: tuple[CaptureStrategyName, ...] = ("non_strict", "strict")
    decompose: Literal["auto", "always"] = "auto"
    diagnostic_options: DiagnosticOptions | None = None
    verify: bool | None = None
    input_names: Sequence[str] | None = None
    output_names: Sequence[str] | None = None
    dynamic_axes: Mapping[str, Mapping[int, str] | Sequence[int]] | None = None
    target: Target = "onnx"
    allow_static_fallback: bool = False
    dtype: HalfDtype | torch.dtype | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None:
            object.__setattr__(self, "dtype", _half_dtype_name(self.dtype))
        if self.opset_version not in SUPPORTED_OPSETS:
            raise ValueError(
                f"opset_version must be between {SUPPORTED_OPSETS.start} and "
                f"{SUPPORTED_OPSETS.stop - 1}, got {self.opset_version}. "
                "Opsets 13 to 17 are reached by rewriting the opset-18 model op by op; "
                "opset 20 is the default."
            )
        known = {"non_strict", "strict"}
        bad = [s for s in self.capture_strategies if s not in known]
        if bad or not self.capture_strategies:
            raise ValueError(
                f"capture_strategies must be a non-empty tuple of {sorted(known)}, "
                f"got {self.capture_strategies!r}."
            )
        if not any(self.verify is allowed for allowed in (None, True, False)):
            raise ValueError(
                f"verify must be None (check where cheap), True (always; a mismatch fails "
                f"the export) or False (never), got {self.verify!r}."
            )
        if self.decompose not in ("auto", "always"):
            raise ValueError(f"decompose must be 'auto' or 'always', got {self.decompose!r}.")
        if self.target not in ("onnx", "onnxruntime"):
            raise ValueError(
                f"target must be 'onnx' (standard ONNX, any runtime) or 'onnxruntime' (ONNX "
                f"Runtime's fused com.microsoft ops), got {self.target!r}."
            )
        if self.dynamic_axes is not None and self.dynamic_shapes is not None:
            raise ValueError(
                "Give dynamic_shapes or dynamic_axes, not both: dynamic_axes is torch.onnx's "
                "legacy form of the same thing."
            )
        for field in ("input_names", "output_names"):
            names = getattr(self, field)
            if isinstance(names, str):
                raise ValueError(f"{field} must be a list of names, got the string {names!r}.")


def _half_dtype_name(dtype: object) -> HalfDtype:
    """``"float16"`` or ``"bfloat16"`` for ``dtype`` given by name or as ``torch.<dtype>``."""
    name = str(dtype).removeprefix("torch.")
    if name == "half":
        name = "float16"
    if name not in ("float16", "bfloat16"):
        raise ValueError(
            f"dtype must be 'float16' or 'bfloat16' (or torch.float16/torch.bfloat16), got "
            f"{dtype!r}. Leave it None to export the model in its own dtypes."
        )
    return name  # type: ignore[return-value]  # one of the two, checked above


def is_default_opset(opset_version: int) -> bool:
    """Whether ``opset_version`` is :data:`DEFAULT_OPSET` itself (not chosen by the user)."""
    return type(opset_version) is _DefaultOpset
