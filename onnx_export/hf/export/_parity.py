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


def check_against_eager(
    file_name: str, module: Any, program: Any, args: tuple[Any, ...], dtype: str = "float32"
) -> None:
    """``ExportMismatchError`` naming each output that ONNX Runtime computes differently.

    ``module`` runs eagerly and ``program`` (the :class:`ONNXProgram`) in ONNX Runtime on
    the example inputs; outputs are compared within ``atol + rtol * |expected|`` of
    :func:`tolerance` for the graphs' ``dtype``.
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
    if problems:
        raise ExportMismatchError(
            f"{file_name} does not compute what transformers computes on the example inputs "
            f"({'; '.join(problems)}; tolerance {atol} + {rtol} * |expected|), so the folder "
            "was not written. Report it with the config.json."
        )
