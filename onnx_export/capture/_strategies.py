"""Capture: turn an ``nn.Module`` into an ``ExportedProgram`` with torch.export.

Strategies are tried in the configured order; every attempt is recorded, whether it
worked or not, so that a failure can be explained strategy by strategy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from onnx_export.capture._anyres import anyres_tensor_sizes
from onnx_export.capture._cdist import cdist_decided
from onnx_export.capture._distributions import distribution_checks_off
from onnx_export.capture._dynamo_caches import forget_compiled_code
from onnx_export.capture._experts import every_expert
from onnx_export.capture._finite_branches import finite_branches, has_float16_tensors
from onnx_export.capture._global_attention import global_attention_flag
from onnx_export.capture._mask_skip import bidirectional_skip_without_padding
from onnx_export.capture._module_casts import unchanged_module_casts
from onnx_export.capture._mrope import multimodal_rope
from onnx_export.capture._packed_attention import packed_attention
from onnx_export.capture._quant_frexp import torch_frexp
from onnx_export.capture._rnn import recurrent_ops
from onnx_export.capture._sdpa_causal import sdpa_causal_flag
from onnx_export.capture._shape_fixes import Repair, StaticDim
from onnx_export.capture._small_constants import small_constants_kept
from onnx_export.capture._specialized import RangeGuard, Specialization, recording_guards
from onnx_export.capture._sqrt import bounded_sqrt
from onnx_export.capture._stack_traces import every_user_frame
from onnx_export.capture._tensor_data import data_as_detach
from onnx_export.capture._torch_int import symbolic_torch_int
from onnx_export.capture._transformers_masks import masks_without_vmap
from onnx_export.capture._unfold import unfold_preconditions
from onnx_export.capture._vision_windows import vision_windows

__all__ = ["CaptureAttempt", "capture", "captured_call", "explanation", "EXPORT_LOCK"]

#: torch.export keeps its dispatch-mode stack in process-global state: parallel calls
#: corrupt each other. Every capture and decomposition runs under this lock.
EXPORT_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class CaptureAttempt:
    """One try of one capture strategy.

    Attributes:
        strategy: ``"non_strict"`` or ``"strict"``.
        succeeded: Whether it produced an ``ExportedProgram``.
        seconds: How long it took.
        exception: What it raised, when it failed.
        shape_fixes: How the dynamic shapes were changed before this attempt (input,
            axis, before -> after, and torch's reason), after torch.export reported
            a specialisation or a constraint violation.
        made_static: Dimensions the user asked to be dynamic that the model's code fixes
            to a constant. On a successful attempt, those this capture made static (only
            with ``ExportOptions(allow_static_fallback=True)``); on a failed one, those
            torch's fix would have made static, which were refused.
        specializations: Where the model's code fixed dimensions during this attempt, by
            torch's name of the dimension.
        range_guards: The guards of the model's code that bounded a dynamic size during
            this attempt (``if x.shape[0] > 2:``), one per torch symbol.

    Example:
        >>> import onnx_export
        >>> a = onnx_export.CaptureAttempt("strict", False, 0.5, ValueError("no"))
        >>> a.summary()
        'strict: failed after 0.50 s: ValueError: no'
    """

    strategy: str
    succeeded: bool
    seconds: float
    exception: BaseException | None = None
    shape_fixes: tuple[str, ...] = ()
    made_static: tuple[StaticDim, ...] = ()
    specializations: tuple[Specialization, ...] = ()
    range_guards: tuple[RangeGuard, ...] = ()

    def summary(self) -> str:
        """The strategy, the outcome, and torch's explanation of a failure."""
        if self.succeeded:
            return f"{self.strategy}: succeeded in {self.seconds:.2f} s"
        text = explanation(self.exception) if self.exception is not None else ""
        return (
            f"{self.strategy}: failed after {self.seconds:.2f} s: "
            f"{type(self.exception).__name__}: {text}"
        )


_NOISE = (
    "For more information, run with",
    "The error above occurred when calling torch.export.export",
    "If you're using mark_dynamic",
)
#: Lines of torch's messages that are debugging advice, not the explanation.
_ADVICE = (
    "For extended logs",
    "If you suspect the guard",
    "For more debugging help",
    "For C++ stack trace",
    "Developer debug context",
    "For more details about this graph break",
    "For more information about this error, see",
)


def explanation(error: BaseException) -> str:
    r"""Torch's message without its boilerplate: what failed, why, and the suggested fix.

    The first line ("Constraints violated (batch)!"), the lines that explain it ("You
    marked batch as dynamic but your code specialized it to be a constant (8)") and the
    ``Suggested fixes:`` block are kept; logging hints, user stacks (reported as
    locations) and the advice to call ``draft_export()`` are dropped.

    Example:
        >>> explanation(ValueError("Bad (x)! For more information, run with X\n  - why"))
        'Bad (x)!\n  - why'
    """
    kept: list[str] = []
    for line in str(error).strip().splitlines():
        if line.strip() in ("User stack:", "from user code:"):
            break
        text = line
        for noise in _NOISE:
            text = text.split(noise)[0].rstrip()
        if text.strip() and not text.strip().startswith(_ADVICE):
            kept.append(text)
    return "\n".join(kept[:40])


def _export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    strict: bool,
) -> ExportedProgram:
    """torch.export with deferred runtime asserts; with guards where torch's assert pass fails.

    Deferred runtime asserts: a guard on a dynamic size (``x.view(x.size(1), -1)`` holds
    for batch % 6 != 0) becomes an assert node, which translation drops, instead of a
    constraint violation. torch's pass that writes those nodes cannot express some guards
    (``math.ceil(n / 3)``: "symbolically traced variables cannot be used as inputs to
    control flow"); the capture is then redone with guards, as torch.export's default.
    """
    try:
        return _torch_export(model, args, kwargs, dynamic_shapes, strict, deferred=True)
    except Exception as e:
        if not _in_assert_pass(e):
            raise
        return _torch_export(model, args, kwargs, dynamic_shapes, strict, deferred=False)


def _in_assert_pass(error: BaseException) -> bool:
    """Whether ``error`` was raised in torch's pass that inserts deferred runtime asserts."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(f.filename.endswith(_ASSERT_PASS) for f in frames)


_ASSERT_PASS = os.path.join("fx", "passes", "runtime_assert.py")


def _torch_export(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    strict: bool,
    *,
    deferred: bool,
) -> ExportedProgram:
    # Nodes located at their own line, not forward's; no compiled loop body reused later;
    # float16 overflow guards (BART's `if not isfinite(x).all(): clamp`) traced as selects.
    guards = not strict and has_float16_tensors(model, (args, kwargs))
    # a mixture of experts' loop over the experts that got tokens runs over every expert;
    # images packed in one sequence attend as one masked attention, not chunk by chunk;
    # multimodal rotary positions and vision windows computed with tensor ops, not loops;
    # a module cast in forward that converts nothing stays a no-op (NLLB-MoE's router);
    # transformers' masks with extra patterns built by indexing, not vmap (Gemma 3 and 4);
    # SDPA's is_causal, and cdist's mode, decided without a data-dependent length they
    # do not need; any-resolution image grids computed from image_sizes with tensor ops;
    # distributions built without their value checks; no bidirectional mask without padding;
    # small constant tensors (sizes in torch.tensor) keep their values; math.sqrt of
    # sizes read from data keeps their bounds; Longformer's "any global token?" flag as its
    # general branch; I-BERT's numpy frexp in torch ops, and its weights' `.data` as detach().
    # Python allows at most 20 context managers in one `with`: an ExitStack holds them.
    patches = (
        every_user_frame(not strict),
        forget_compiled_code(),
        recurrent_ops(),
        finite_branches(guards),
        every_expert(),
        packed_attention(model),
        multimodal_rope(model),
        vision_windows(),
        symbolic_torch_int(),
        unchanged_module_casts(),
        masks_without_vmap(),
        sdpa_causal_flag(),
        cdist_decided(),
        unfold_preconditions(),
        anyres_tensor_sizes(),
        distribution_checks_off(),
        bidirectional_skip_without_padding(),
        small_constants_kept(),
        bounded_sqrt(),
        global_attention_flag(model),
        torch_frexp(),
        data_as_detach(),
    )
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        return torch.export.export(
            model,
            args,
            kwargs,
            dynamic_shapes=dynamic_shapes,
            strict=strict,
            prefer_deferred_runtime_asserts_over_guards=deferred,
        )


@contextlib.contextmanager
def _size_oblivious(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    config = torch.fx.experimental._config
    with config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]  # no stubs
        yield


#: How many times a strategy is retried with repaired dynamic shapes.
MAX_REPAIRS = 4

#: Given the shapes, the failed attempt and whether tracing was size-oblivious: what to retry.
Repairer = Callable[[Any, CaptureAttempt, bool], Repair | None]


def capture(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    dynamic_shapes: Any,
    strategies: Sequence[str],
    size_oblivious: bool = False,
    repair: Repairer | None = None,
    allow_static: bool = False,
) -> tuple[ExportedProgram | None, list[CaptureAttempt]]:
    """Try each strategy in order; return the first program and every attempt.

    Args:
        model: The module to capture.
        args: Positional inputs, as the user calls the model.
        kwargs: Keyword inputs, as the user calls the model.
        dynamic_shapes: torch.export's ``dynamic_shapes``.
        strategies: Strategy names, in order.
        size_oblivious: Trace size-1 dynamic dimensions like any other size.
        repair: Given the shapes, the failed attempt and whether tracing was
            size-oblivious, returns the repair to retry with, or ``None``.
        allow_static: Retry with a repair that makes requested dynamic dimensions static;
            without it such a repair is refused and recorded on the failed attempt.
    """
    attempts: list[CaptureAttempt] = []

    def attempt(strategy: str, shapes: Any, oblivious: bool, fixes: Repair | None) -> Any:
        start = time.perf_counter()
        notes, static = (fixes.notes, fixes.made_static) if fixes else ((), ())
        with EXPORT_LOCK, _size_oblivious(oblivious), recording_guards() as (found, guards):
            try:
                program = _export(model, args, kwargs, shapes, strategy == "strict")
            except Exception as e:
                seconds = time.perf_counter() - start
                seen = tuple(found.values())
                attempts.append(CaptureAttempt(strategy, False, seconds, e, notes, (), seen))
                return e
        seconds = time.perf_counter() - start
        bounds = tuple(guards.values())
        attempts.append(CaptureAttempt(strategy, True, seconds, None, notes, static, (), bounds))
        return program

    # Every strategy as the user asked first: a specialisation one strategy reports (a
    # stale dynamo cache under torch.cond, say) may not happen with the next.
    failed: dict[str, int] = {}
    for strategy in strategies:
        result = attempt(strategy, dynamic_shapes, size_oblivious, None)
        if isinstance(result, ExportedProgram):
            return result, attempts
        failed[strategy] = len(attempts) - 1
    if repair is None or dynamic_shapes is None:
        return None, attempts
    for strategy in strategies:  # then with torch's suggested fixes, strategy by strategy
        start = (dynamic_shapes, size_oblivious)
        program = _repaired(attempt, attempts, failed[strategy], start, repair, allow_static)
        if program is not None:
            return program, attempts
    return None, attempts


def _repaired(
    attempt: Callable[[str, Any, bool, Repair | None], Any],
    attempts: list[CaptureAttempt],
    index: int,
    start: tuple[Any, bool],
    repair: Repairer,
    allow_static: bool,
) -> ExportedProgram | None:
    """Retry the strategy of ``attempts[index]`` with torch's fixes, up to MAX_REPAIRS times."""
    (shapes, oblivious), strategy = start, attempts[index].strategy
    notes: tuple[str, ...] = ()
    static: tuple[StaticDim, ...] = ()
    for _ in range(MAX_REPAIRS):
        failed = attempts[index]
        fixed = repair(shapes, failed, oblivious)
        if fixed is None:
            return None
        if fixed.made_static and not allow_static:  # a dynamic dim lost: refused
            attempts[index] = dataclasses.replace(failed, made_static=fixed.made_static)
            return None
        notes, static = (*notes, *fixed.notes), (*static, *fixed.made_static)
        shapes, oblivious = fixed.dynamic_shapes, fixed.size_oblivious
        result = attempt(strategy, shapes, oblivious, Repair(shapes, oblivious, notes, static))
        if isinstance(result, ExportedProgram):
            return result
        index = len(attempts) - 1
    return None


def captured_call(
    program: ExportedProgram,
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args``/``kwargs`` rearranged as ``program`` was captured (positional or keyword).

    ``program.module()`` takes exactly the call it was captured with; a call that binds
    the same way to ``forward`` is rearranged to that form.
    """
    children = list(program.call_spec.in_spec.children())
    if signature is None or len(children) != 2:
        return args, kwargs
    count, names = children[0].num_children, list(children[1].context or [])
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs
    bound.apply_defaults()
    positional: list[Any] = []
    by_name: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            by_name.update(value)
        else:
            by_name[name] = value
            if kind != inspect.Parameter.KEYWORD_ONLY:
                positional.append(value)
    if len(positional) < count or any(n not in by_name for n in names):
        return args, kwargs
    return tuple(positional[:count]), {n: by_name[n] for n in names}
