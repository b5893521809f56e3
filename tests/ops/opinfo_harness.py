"""Run one OpInfo sample through an ONNX exporter and ONNX Runtime; compare with eager.

Shared by the op tests (``tests/ops``) and the side-by-side sweep (``bench/bench_opinfo.py``).
Each sample's tensors (in ``input``, ``args`` and ``kwargs``, nested lists included) become
the positional inputs of a small ``nn.Module``; every other argument is a constant of the
module. The module is exported, the model run in ONNX Runtime on the same tensors, and
each tensor leaf of the output compared with eager PyTorch's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import re
import signal
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

__all__ = [
    "EXPORTERS",
    "Outcome",
    "Tolerance",
    "check_sample",
    "op_db_by_key",
    "op_key",
    "own_op_keys",
    "samples",
]

#: Tolerances of the comparison with eager, per dtype (per-op overrides in the test table).
DEFAULT_TOLERANCE = {
    torch.float32: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float64: (1e-5, 1e-7),
}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """``rtol``/``atol`` of the comparison; ``None`` takes the dtype's default."""

    rtol: float | None = None
    atol: float | None = None

    def for_dtype(self, dtype: torch.dtype) -> tuple[float, float]:
        rtol, atol = DEFAULT_TOLERANCE.get(dtype, (1e-3, 1e-4))
        return (rtol if self.rtol is None else self.rtol, atol if self.atol is None else self.atol)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What happened to one sample.

    Attributes:
        ok: Whether ONNX Runtime's outputs matched eager's.
        stage: Where it stopped: ``"eager"``, ``"export"``, ``"run"``, ``"compare"`` or
            ``"done"``.
        reason: One line on why it failed (empty when ``ok``).
        seconds: Export plus run time.
        own_ops: The keys the export translated with onnx-export's own functions
            (``"aten::foo"``; ``"aten::foo (complex)"`` for a complex variant).
    """

    ok: bool
    stage: str
    reason: str = ""
    seconds: float = 0.0
    own_ops: frozenset[str] = frozenset()


def op_key(opinfo: Any) -> str:
    """The table key of an OpInfo entry: ``name`` or ``name.variant``."""
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


@functools.cache
def op_db_by_key() -> dict[str, Any]:
    """Every entry of torch's ``op_db``, by :func:`op_key` (importing it takes ~10 s)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(o): o for o in op_db}


def samples(opinfo: Any, dtype: torch.dtype, count: int) -> list[Any]:
    """The first ``count`` CPU samples of ``opinfo`` in ``dtype`` (fixed seed)."""
    torch.manual_seed(0)
    found: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generator = iter(opinfo.sample_inputs("cpu", dtype, requires_grad=False))
        try:
            for sample in generator:
                found.append(sample)
                if len(found) >= count:
                    break
        finally:
            close = getattr(generator, "close", None)
            if close is not None:
                close()  # now, not later inside a traced region
    return found


_TENSOR = object()  # marks where a tensor input goes among a sample's leaves


class OpModule(torch.nn.Module):
    """Calls ``fn(input, *args, **kwargs)`` with the tensors given to ``forward``."""

    def __init__(self, fn: Callable[..., Any], spec: pytree.TreeSpec, leaves: list[Any]) -> None:
        super().__init__()
        self.fn = fn
        self.spec = spec
        self.leaves = leaves  # non-tensor leaves; tensors are _TENSOR and come from forward

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        leaves = [next(it) if leaf is _TENSOR else leaf for leaf in self.leaves]
        sample_input, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(sample_input, *args, **kwargs)


def wrap(fn: Callable[..., Any], sample: Any) -> tuple[OpModule, tuple[torch.Tensor, ...]]:
    """A module calling ``fn`` on ``sample``, and the tensors to call it with."""
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensors = tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))
    constants = [_TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    module = OpModule(fn, spec, constants)
    names = [f"x{i}" for i in range(len(tensors))]
    _set_forward_signature(module, names)
    return module, tensors


def _set_forward_signature(module: OpModule, names: Sequence[str]) -> None:
    # Named positional parameters, so that both exporters see an ordinary signature.
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    bound = module.forward

    def forward(*args: torch.Tensor, **kwargs: torch.Tensor) -> Any:
        return bound(*args, *(kwargs[n] for n in names[len(args) :]))

    forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    module.forward = forward  # type: ignore[method-assign]


def _clone(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone() for t in tensors)


def _leaves(outputs: Any) -> list[torch.Tensor]:
    leaves = []
    for leaf in pytree.tree_leaves(outputs):
        if isinstance(leaf, torch.Tensor):
            leaves.append(leaf.detach())
        elif isinstance(leaf, np.ndarray | np.generic):  # models without tensor inputs
            leaves.append(torch.from_numpy(np.asarray(leaf)))
        elif isinstance(leaf, (bool, int, float)):
            leaves.append(torch.tensor(leaf))
    return leaves


# -- the exporters ---------------------------------------------------------------------


#: The reason ``translation._symbolic.symbolic_dispatch`` gives (its functions are wrapped).
_SYMBOLIC_REASON = "onnx-export symbolic scalar function"


def own_op_keys(program: Any) -> frozenset[str]:
    """The op keys an ``onnx_export`` program's export dispatched to our own functions.

    An entry counts when it says it is ours (``is_own``) or when it carries the very
    function ``@onnx_op`` registered for its key (the SymInt functions are dispatched
    before the registry, by ``onnx_export.translation._symbolic``).
    """
    import onnx_export.ops  # noqa: F401  (importing the topic modules registers them)
    from onnx_export.ops._registration import registered_ops

    registered = {(r.target, r.is_complex): r.function for r in registered_ops()}
    decisions = getattr(program, "_decisions", None) or {}
    return frozenset(
        d.target + (" (complex)" if d.entry.is_complex else "")
        for d in decisions.values()
        if d.entry is not None
        and (
            d.entry.is_own
            or registered.get((d.target, d.entry.is_complex)) is d.entry.function
            or (d.reason == _SYMBOLIC_REASON and (d.target, False) in registered)
        )
    )


def _export_ours(
    module: torch.nn.Module, tensors: tuple[torch.Tensor, ...], opset: int | None = None
) -> Any:
    import onnx_export

    options = (
        onnx_export.ExportOptions()
        if opset is None
        else onnx_export.ExportOptions(opset_version=opset)
    )
    return onnx_export.dynamo_export(module, *tensors, export_options=options)


def _export_torch_onnx(
    module: torch.nn.Module, tensors: tuple[torch.Tensor, ...], opset: int | None = None
) -> Any:
    # Only the benchmark compares with torch.onnx; the product never calls it.
    extra = {} if opset is None else {"opset_version": opset}
    with contextlib.redirect_stdout(io.StringIO()):
        program = torch.onnx.export(module, tensors, dynamo=True, verbose=False, **extra)
    assert program is not None
    return program


#: Exporter name -> function(module, tensors, opset) -> callable running ONNX Runtime.
#: ``"ours@13"`` asks that exporter for opset 13.
EXPORTERS: dict[str, Callable[[torch.nn.Module, tuple[torch.Tensor, ...], int | None], Any]] = {
    "ours": _export_ours,
    "torch.onnx": _export_torch_onnx,
}


def _run_export(exporter: str, module: torch.nn.Module, tensors: tuple[torch.Tensor, ...]) -> Any:
    name, _, opset = exporter.partition("@")
    return EXPORTERS[name](module, tensors, int(opset) if opset else None)


# -- one sample ------------------------------------------------------------------------


class SampleTimeout(Exception):
    """A sample took longer than its time limit."""


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    if seconds <= 0:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise SampleTimeout(f"timed out after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    # Our errors put the cause after the stage's summary; torch.onnx's after a header.
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    return _ANSI.sub("", f"{type(error).__name__}: {first}")[:300]


def _root_cause(error: BaseException) -> BaseException:
    seen = set()
    while error.__cause__ is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.__cause__
    return error


def _reason(error: BaseException) -> str:
    root = _root_cause(error)
    if root is error:
        return _one_line(error)
    return f"{_one_line(error)[:120]} <- {_one_line(root)}"[:400]


def _as_real(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    if expected.is_complex() and not actual.is_complex() and actual.shape[-1:] == (2,):
        return torch.view_as_complex(actual.contiguous())
    return actual


def compare(
    expected: Sequence[torch.Tensor],
    actual: Sequence[torch.Tensor],
    rtol: float,
    atol: float,
    shape_only: bool = False,
) -> str:
    """Why ``actual`` differs from ``expected`` (empty when they match)."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, eager has {len(expected)}"
    for i, (raw, want) in enumerate(zip(actual, expected, strict=True)):
        got = _as_real(raw, want)
        if got.shape != want.shape:
            return f"output {i}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
        if got.dtype != want.dtype:
            return f"output {i}: dtype {got.dtype}, eager {want.dtype}"
        if shape_only:
            continue
        exact = not (want.is_floating_point() or want.is_complex())
        try:
            torch.testing.assert_close(
                got,
                want,
                rtol=0 if exact else rtol,
                atol=0 if exact else atol,
                equal_nan=True,
                check_dtype=False,
            )
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if "Greatest" in ln or "Mism" in ln]
            return f"output {i}: values differ ({'; '.join(lines)[:200]})"
    return ""


def check_sample(
    exporter: str,
    fn: Callable[..., Any],
    sample: Any,
    *,
    rtol: float,
    atol: float,
    timeout: int = 120,
    shape_only: bool = False,
) -> Outcome:
    """Export ``fn`` on ``sample`` with ``exporter``, run it in ORT and compare with eager."""
    module, tensors = wrap(fn, sample)
    try:
        with torch.no_grad():
            expected = _leaves(module(*_clone(tensors)))
    except Exception as e:
        return Outcome(False, "eager", _one_line(e))
    start = time.perf_counter()
    stage = "export"
    own: frozenset[str] = frozenset()
    try:
        with _time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = _run_export(exporter, module, _clone(tensors))
            own = own_op_keys(run)
            stage = "run"
            actual = _leaves(run(*_clone(tensors)))
    except (Exception, SampleTimeout) as e:
        seconds = time.perf_counter() - start
        return Outcome(False, stage, _reason(e), seconds, own)
    seconds = time.perf_counter() - start
    why = compare(expected, actual, rtol, atol, shape_only)
    return Outcome(not why, "compare" if why else "done", why, seconds, own)


@dataclasses.dataclass(frozen=True)
class OpResult:
    """What happened to one op in one dtype: the first failing sample decides.

    Attributes:
        status: ``"pass"``, ``"fail"`` or ``"skip"`` (no samples in this dtype).
        reason: Why it failed or was skipped, prefixed with the sample index.
        seconds: Total export plus run time of its samples.
        samples: How many samples ran.
        own_ops: The keys its samples' exports translated with our own functions.
    """

    status: str
    reason: str = ""
    seconds: float = 0.0
    samples: int = 0
    own_ops: frozenset[str] = frozenset()


def check_op(
    exporter: str,
    opinfo: Any,
    dtype: torch.dtype,
    *,
    count: int = 2,
    tolerance: Tolerance = Tolerance(),
    shape_only: bool = False,
    timeout: int = 120,
    skip_samples: Sequence[int] = (),
) -> OpResult:
    """Check the first ``count`` samples of ``opinfo`` in ``dtype`` with ``exporter``.

    Samples whose index is in ``skip_samples`` (e.g. random in an otherwise deterministic
    op) are passed over; the next ones take their place.
    """
    try:
        found = samples(opinfo, dtype, count + len(skip_samples))
    except Exception as e:
        return OpResult("skip", f"sample inputs failed: {_one_line(e)}")
    found = [s for i, s in enumerate(found) if i not in skip_samples][:count]
    if not found:
        return OpResult("skip", f"no {dtype} samples on CPU")
    rtol, atol = tolerance.for_dtype(dtype)
    total = 0.0
    own: frozenset[str] = frozenset()
    for index, sample in enumerate(found):
        outcome = check_sample(
            exporter,
            opinfo.op,
            sample,
            rtol=rtol,
            atol=atol,
            timeout=timeout,
            shape_only=shape_only,
        )
        total += outcome.seconds
        own |= outcome.own_ops
        if not outcome.ok:
            reason = f"[sample {index}, {outcome.stage}] {outcome.reason}"
            return OpResult("fail", reason, total, index + 1, own)
    return OpResult("pass", "", total, len(found), own)
