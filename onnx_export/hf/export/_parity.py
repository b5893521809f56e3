"""Every exported graph checked against eager transformers before the folder is written."""

from __future__ import annotations

from typing import Any

from onnx_export.hf._errors import ExportMismatchError

__all__ = ["check_against_eager", "RTOL", "ATOL"]

RTOL, ATOL = 1e-3, 1e-4


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


def check_against_eager(file_name: str, module: Any, program: Any, args: tuple[Any, ...]) -> None:
    """``ExportMismatchError`` naming each output that ONNX Runtime computes differently.

    ``module`` runs eagerly and ``program`` (the :class:`ONNXProgram`) in ONNX Runtime on
    the example inputs; outputs are compared within ``ATOL + RTOL * |expected|``.
    """
    import torch

    with torch.no_grad():
        expected = _leaves(module(*args))
    actual = _leaves(program(*args))
    problems = []
    if set(expected) != set(actual):
        problems.append(f"outputs {sorted(actual)} instead of {sorted(expected)}")
    for name in sorted(set(expected) & set(actual)):
        want = expected[name].detach().float()
        got = torch.as_tensor(actual[name]).float()
        if want.shape != got.shape:
            problems.append(f"{name}: shape {tuple(got.shape)} instead of {tuple(want.shape)}")
        elif not torch.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
            error = (got - want).abs().max().item()
            problems.append(f"{name}: max abs error {error:.3g}")
    if problems:
        raise ExportMismatchError(
            f"{file_name} does not compute what transformers computes on the example inputs "
            f"({'; '.join(problems)}; tolerance {ATOL} + {RTOL} * |expected|), so the folder "
            "was not written. Report it with the config.json."
        )
