"""Every exported graph checked against eager transformers before the folder is written."""

from __future__ import annotations

from typing import Any

from onnx_export.hf._errors import ExportMismatchError

__all__ = ["check_against_eager", "tolerance", "RTOL", "ATOL"]

RTOL, ATOL = 1e-3, 1e-4

#: (rtol, atol) by the graphs' precision: a few units in the last place of that dtype, for
#: two computations that round at different points (ONNX Runtime's kernels, torch's).
_TOLERANCES = {"float32": (RTOL, ATOL), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}


def tolerance(dtype: str) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing outputs of graphs in ``dtype`` with eager ones.

    Example:
        >>> tolerance("float16")
        (0.01, 0.01)
    """
    return _TOLERANCES.get(dtype, (RTOL, ATOL))


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Tensors of a nest of dicts and lists, by dotted path (``present.0.key``)."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = list(enumerate(value))
    else:
        return {prefix: value}
    found: dict[str, Any] = {}
    for key, item in items:
        found.update(_leaves(item, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _problems(
    expected: dict[str, Any], actual: dict[str, Any], rtol: float, atol: float
) -> list[str]:
    import torch

    problems = []
    if set(expected) != set(actual):
        problems.append(f"outputs {sorted(actual)} instead of {sorted(expected)}")
    for name in sorted(set(expected) & set(actual)):
        want = expected[name].detach().float()
        got = torch.as_tensor(actual[name]).float()
        if want.shape != got.shape:
            problems.append(f"{name}: shape {tuple(got.shape)} instead of {tuple(want.shape)}")
        elif not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            error = (got - want).abs().max().item()
            problems.append(f"{name}: max abs error {error:.3g}")
    return problems


#: How much further from the float32 computation ONNX Runtime's half-precision outputs may
#: be than torch's own half-precision outputs (see :func:`_as_close_to_float32`).
HALF_SLACK = 1.5


def _as_close_to_float32(
    module: Any, args: tuple[Any, ...], expected: dict[str, Any], actual: dict[str, Any]
) -> list[str]:
    """Outputs ONNX Runtime computes further from the float32 model than torch does in half.

    Two half-precision computations that round at different points differ by a few units in
    the last place of their inputs; a layer with large weights turns that into more than the
    plain tolerance where values cancel (a tiny T5 with large random weights: 1 ulp of 128).
    The float32 model tells which is off: ONNX Runtime passes when its error from it is at
    most ``HALF_SLACK`` times torch's (plus the half tolerance's ``atol``).
    """
    import copy

    import torch
    from torch.utils import _pytree as pytree

    def widen(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.is_floating_point() else t

    with torch.no_grad():
        truth = _leaves(
            copy.deepcopy(module).float()(*pytree.tree_map_only(torch.Tensor, widen, args))
        )
    _, atol = tolerance("float16")
    problems = []
    for name in sorted(expected):
        if name not in truth or name not in actual:
            return [f"{name}: not in the float32 model's outputs"]
        exact = truth[name].detach().float()
        ours = (torch.as_tensor(actual[name]).float() - exact).abs().max().item()
        theirs = (expected[name].detach().float() - exact).abs().max().item()
        if ours > HALF_SLACK * theirs + atol:
            problems.append(
                f"{name}: max abs error {ours:.3g} from the float32 model, torch's {theirs:.3g}"
            )
    return problems


def check_against_eager(
    file_name: str, module: Any, program: Any, args: tuple[Any, ...], dtype: str = "float32"
) -> None:
    """``ExportMismatchError`` naming each output that ONNX Runtime computes differently.

    ``module`` runs eagerly and ``program`` (the :class:`ONNXProgram`) in ONNX Runtime on
    the example inputs; outputs are compared within ``atol + rtol * |expected|`` of
    :func:`tolerance` for the graphs' ``dtype``. In half precision an output outside that
    is compared with the float32 model's instead: it passes when ONNX Runtime is at most
    ``HALF_SLACK`` times as far from it as torch is in the same dtype.
    """
    import torch

    rtol, atol = tolerance(dtype)
    from onnx_export.adapters import MissingKernelError

    with torch.no_grad():
        expected = _leaves(module(*args))
    try:
        actual = _leaves(program(*args))
    except MissingKernelError:  # bfloat16 on ORT's CPU provider: computed in float32
        actual = _leaves(program._verification_module()[0](*args))
    problems = _problems(expected, actual, rtol, atol)
    if problems and dtype != "float32" and set(expected) == set(actual):
        problems = _as_close_to_float32(module, args, expected, actual)
    if problems:
        raise ExportMismatchError(
            f"{file_name} does not compute what transformers computes on the example inputs "
            f"({'; '.join(problems)}; tolerance {atol} + {rtol} * |expected|), so the folder "
            "was not written. Report it with the config.json."
        )
