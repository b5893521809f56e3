"""The export's parity check: ONNX Runtime against the model as deployed, where it is cheap.

``ExportOptions(verify=None)`` (the default) runs it when the model's weights are at most
:data:`PARITY_CHECK_LIMIT` bytes, real (not fake or meta), on the CPU, and the graph draws
no random numbers; a mismatch is a :class:`~onnx_export.errors.ParityWarning` at the
model's line of the first node that diverges, and an OXE0022 entry. ``verify=True`` runs it
always and raises a :class:`~onnx_export.errors.VerificationError` on a mismatch.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnx_export._fake import WeightPlaceholder, weight_values
from onnx_export.capture._user_code import warn_at_user_line
from onnx_export.diagnostics import DiagnosticContext, Location, rules
from onnx_export.errors import ParityWarning, TrainingModeWarning, VerificationError
from onnx_export.program._check import session_check_wanted
from onnx_export.program._modes import DEPLOYED_MODE, TrainingComputation, random_nodes
from onnx_export.program._program import ONNXProgram
from onnx_export.program._serialize import initializer_bytes
from onnx_export.program._verify import OnnxRuntimeRunError, VerificationResult
from onnx_export.reporting._records import call_site, origin_locations

__all__ = [
    "PARITY_CHECK_LIMIT",
    "PARITY_RTOL",
    "PARITY_ATOL",
    "ParityOutcome",
    "skip_reason",
    "check_parity",
    "record_parity",
    "record_parity_failed",
    "record_parity_skipped",
    "record_training_mode",
    "mismatch_summary",
    "verification_error",
    "warn_parity",
    "warn_training",
]

#: The default check runs for models with at most this many bytes of weights. Measured on
#: the benchmark models (docs/performance.md): it adds an eager run and an ONNX Runtime
#: session (which later calls reuse) to the export.
PARITY_CHECK_LIMIT = 64 * 2**20

#: Tolerances of the default check: float32 drift through a deep graph stays below them,
#: a wrong translation does not (the mismatches that cost users are 1e-2 and more).
PARITY_RTOL = 1e-3
PARITY_ATOL = 1e-4

#: ``verify=True``'s tolerances: those of :meth:`ONNXProgram.verify`.
_VERIFY_RTOL, _VERIFY_ATOL = 1e-4, 1e-5


@dataclasses.dataclass(frozen=True)
class ParityOutcome:
    """What the export's parity check found.

    Attributes:
        result: The comparison, or ``None`` when the check did not run.
        skipped: Why it did not run (empty when it ran).
        training: What training mode put into the graph (empty in eval mode).
        failed: ONNX Runtime's error when it could not run the model on the example
            inputs (empty otherwise): a mismatch of the worst kind.
    """

    result: VerificationResult | None = None
    skipped: str = ""
    training: tuple[TrainingComputation, ...] = ()
    failed: str = ""


def _leaves_on(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Why the example inputs cannot be run eagerly here (fake, meta, not CPU), or ``""``."""
    for leaf in pytree.tree_leaves((args, kwargs)):
        if not isinstance(leaf, torch.Tensor):
            continue
        if isinstance(leaf, torch._subclasses.FakeTensor) or leaf.device.type == "meta":
            return "the example inputs are fake or meta tensors"
        if leaf.device.type != "cpu":
            return f"the example inputs are on {leaf.device.type}, and the check runs on the CPU"
    return ""


_RANDOM_DRAWS = "the model draws random numbers"


def skip_reason(program: ONNXProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Why the default check should not run for this export (``""`` when it should)."""
    if program.exported_program is None or program.adapter_spec is None:
        return "the program has no captured program or adapter to run"
    weights = weight_values(program.model).values()
    if any(isinstance(v.const_value, WeightPlaceholder) for v in weights):
        return "the weights are fake or meta tensors (enable_fake_mode); there is nothing to run"
    size = initializer_bytes(program.model)
    if size > PARITY_CHECK_LIMIT or not session_check_wanted(program.model):
        return (
            f"the model has {size / 2**20:.0f} MB of weights, above the "
            f"{PARITY_CHECK_LIMIT // 2**20} MB for which the export checks by default (an "
            "eager run and an ONNX Runtime session more); pass ExportOptions(verify=True) or "
            "call program.verify(...)"
        )
    randoms = random_nodes(program.exported_program)
    if randoms:
        ops = sorted({str(n.target) for n in randoms})
        return (
            f"{_RANDOM_DRAWS} ({', '.join(ops[:3])}), so eager PyTorch and ONNX "
            "Runtime cannot agree; call program.verify(...) on a model without them (eval mode)"
        )
    return _leaves_on(args, kwargs)


#: The tolerance of a half-precision export's check (``ExportOptions.dtype``).
_HALF_TOLERANCE = 1e-2


def check_parity(
    program: ONNXProgram,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    forced: bool,
    half: bool = False,
) -> ParityOutcome:
    """Run the check (``forced``: whatever the model), or say why it was skipped.

    ``half``: a half-precision export (``ExportOptions.dtype``), compared within float16's
    rounding over a whole model (1e-2), not one op's.

    Raises:
        InvalidGraphError: The graph fails the checker or ONNX Runtime's session build.
    """
    training = tuple(program._training())
    reason = "" if forced else skip_reason(program, args, kwargs)
    if reason:
        return ParityOutcome(None, reason, training)
    program._check(session=True)  # an invalid graph is our error, not ONNX Runtime's
    rtol, atol = (_VERIFY_RTOL, _VERIFY_ATOL) if forced else (PARITY_RTOL, PARITY_ATOL)
    if half:
        rtol, atol = _HALF_TOLERANCE, _HALF_TOLERANCE
    try:
        result = program._check_parity(args, kwargs, rtol, atol)
    except OnnxRuntimeRunError as e:
        if forced:
            raise VerificationError(_failed_message(str(e))) from e
        return ParityOutcome(None, "", training, str(e).strip().splitlines()[0])
    return ParityOutcome(result, "", training)


def _failed_message(error: str) -> str:
    return (
        f"ONNX Runtime could not run the exported model on the example inputs: "
        f"{error.strip().splitlines()[0]}. The file fails where eager PyTorch runs. Next "
        "steps: report it with the SARIF report attached; ExportOptions(verify=False) skips "
        "the check."
    )


def _outputs(result: VerificationResult) -> str:
    bad = [o for o in result.outputs if not o.ok]
    if not bad and result.structure:
        return "the output structure"
    return ", ".join(f"{o.name} (max abs error {o.max_abs_error:.3g})" for o in bad)


def mismatch_summary(result: VerificationResult) -> tuple[str, str]:
    """The differing outputs, and the cause: the first diverging node, or ``result.cause``."""
    culprit = result.culprit
    if culprit is not None:
        cause = (
            f"The first node that diverges is {culprit.node} ({culprit.op}, translated by "
            f"{culprit.function}) at {culprit.origin.where} (max abs error "
            f"{culprit.max_abs_error:.3g}). Next steps: check the ONNX function used for that "
            "op, or register a correct one with OnnxRegistry.register_op, and report it."
        )
    elif result.cause:
        cause = result.cause[0].upper() + result.cause[1:]
    else:
        cause = (
            "No single node diverges beyond tolerance: the difference accumulates over the "
            "graph. Next steps: compare at other tolerances with program.verify(...)."
        )
    return _outputs(result), cause


def verification_error(result: VerificationResult) -> VerificationError:
    """The error of ``ExportOptions(verify=True)`` for a mismatch."""
    outputs, cause = mismatch_summary(result)
    return VerificationError(
        f"ONNX Runtime's outputs differ from PyTorch's ({result.reference}): {outputs}. {cause}"
    )


def warn_parity(outcome: ParityOutcome) -> None:
    """A ``ParityWarning`` for a mismatch, at the model's line of the diverging node.

    Called by ``dynamo_export`` after its recording block, so that the user sees it; with
    no node to blame, at the user's call of ``dynamo_export``.
    """
    result = outcome.result
    if outcome.failed:
        warn_at_user_line(_failed_message(outcome.failed), ParityWarning)
    if result is None and outcome.skipped.startswith(_RANDOM_DRAWS) and not outcome.training:
        # In eval mode (training mode has its own warning): a user expecting eager's numbers
        # would get other ones, unannounced.
        message = (
            f"The export was not compared with eager PyTorch: {outcome.skipped}. In eval "
            "mode too, its outputs are draws of ONNX Runtime's random generator, not torch's."
        )
        warn_at_user_line(message, ParityWarning)
    if result is None or result.ok:
        return
    outputs, cause = mismatch_summary(result)
    message = (
        f"The exported model's outputs differ from eager PyTorch ({result.reference}) on the "
        f"example inputs: {outputs}. {cause} (ExportOptions(verify=True) makes this an error; "
        "verify=False skips the check.)"
    )
    origin = result.culprit.origin if result.culprit is not None else None
    if origin is not None and origin.file and origin.line:
        warnings.warn_explicit(message, ParityWarning, origin.file, origin.line)
    else:
        warn_at_user_line(message, ParityWarning)


def warn_training(training: tuple[TrainingComputation, ...]) -> None:
    """A ``TrainingModeWarning`` at the user's call when training mode is in the graph."""
    if training:
        warn_at_user_line(
            "The model is exported in training mode, so the ONNX file computes what "
            f"model.train() computes, not model.eval(): {'; '.join(map(str, training))}. "
            "Call model.eval() before exporting (or export in training mode on purpose and "
            "ignore this warning).",
            TrainingModeWarning,
        )


def record_training_mode(
    context: DiagnosticContext, training: tuple[TrainingComputation, ...]
) -> None:
    """An OXE0025 entry when training mode put training computations into the graph."""
    if training:
        context.emit(
            rules.TRAINING_MODE,
            message_args={"modules": "; ".join(map(str, training))},
            locations=call_site(),
        )


def record_parity_failed(context: DiagnosticContext, error: str) -> None:
    """An OXE0022 warning: ONNX Runtime raised on the example inputs."""
    context.emit(
        rules.PARITY_MISMATCH,
        message_args={
            "reference": DEPLOYED_MODE,
            "outputs": "all (ONNX Runtime raised)",
            "cause": _failed_message(error),
        },
        locations=call_site(),
    )


def record_parity_skipped(context: DiagnosticContext, reason: str) -> None:
    """An OXE0023 note: the default check did not run, and why."""
    context.emit(rules.PARITY_SKIPPED, message_args={"reason": reason})


def record_parity(context: DiagnosticContext, result: VerificationResult) -> None:
    """OXE0012 notes per agreeing output; an OXE0022 warning for a mismatch."""
    for output in result.outputs:
        if output.ok:
            context.emit(
                rules.VERIFICATION_RESULT,
                message_args={
                    "output": output.name,
                    "max_abs_error": f"{output.max_abs_error:.3g}",
                    "max_rel_error": f"{output.max_rel_error:.3g}",
                },
                properties={"dtype": output.dtype, "rtol": output.rtol, "atol": output.atol},
            )
    if result.ok:
        return
    outputs, cause = mismatch_summary(result)
    locations: tuple[Location, ...] = ()
    stacks: tuple[Any, ...] = ()
    if result.culprit is not None:
        locations, stacks = origin_locations(result.culprit.origin)
    context.emit(
        rules.PARITY_MISMATCH,
        message_args={"reference": result.reference, "outputs": outputs, "cause": cause},
        locations=locations or call_site(),
        stacks=stacks,
        properties={
            "outputs": {o.name: [o.max_abs_error, o.max_rel_error] for o in result.outputs},
            **({"node": result.culprit.node} if result.culprit is not None else {}),
        },
    )
