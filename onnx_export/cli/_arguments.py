"""Arguments that several commands take: a model factory, tolerances, a provider, numbers."""

from __future__ import annotations

import argparse
import math
import pathlib

__all__ = [
    "add_factory_argument",
    "add_model_argument",
    "add_provider_option",
    "add_tolerance_options",
    "add_upcast_option",
    "load_hint",
    "non_negative_float",
]

FACTORY_HELP = (
    "a module name (imported from the current folder or sys.path) or a path "
    "to a .py file, and a function in it that takes no arguments and returns (model, args) "
    "or (model, args, kwargs)"
)


def add_factory_argument(parser: argparse.ArgumentParser) -> None:
    """The positional ``MODULE:FACTORY``."""
    parser.add_argument("factory", metavar="MODULE:FACTORY", help=FACTORY_HELP)


def add_model_argument(parser: argparse.ArgumentParser, help: str = "the model") -> None:
    """The positional ``MODEL.onnx``."""
    parser.add_argument("model", type=pathlib.Path, metavar="MODEL.onnx", help=help)


def add_provider_option(parser: argparse.ArgumentParser) -> None:
    """``--provider cpu|cuda``."""
    parser.add_argument(
        "--provider", choices=("cpu", "cuda"), default="cpu", help="execution provider (cpu)"
    )


def add_upcast_option(parser: argparse.ArgumentParser) -> None:
    """``--upcast bfloat16|float16`` (repeatable): compute that dtype in float32."""
    parser.add_argument(
        "--upcast",
        choices=("bfloat16", "float16"),
        action="append",
        default=[],
        metavar="DTYPE",
        help="compute DTYPE (bfloat16 or float16) in float32, keeping the inputs' and "
        "outputs' dtypes: ONNX Runtime's CPU provider lacks bfloat16 kernels for most ops",
    )


def load_hint(message: str) -> str:
    """``message`` of a failed load, with the command line's spelling of its advice."""
    if "upcast=" in message:
        return f"{message} On the command line: --upcast bfloat16 (or float16)."
    return message


def add_tolerance_options(
    parser: argparse.ArgumentParser, rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    """``--rtol R`` and ``--atol A``, finite numbers >= 0."""
    parser.add_argument(
        "--rtol",
        type=non_negative_float,
        default=rtol,
        metavar="R",
        help=f"relative tolerance, a number >= 0 ({rtol:g})",
    )
    parser.add_argument(
        "--atol",
        type=non_negative_float,
        default=atol,
        metavar="A",
        help=f"absolute tolerance, a number >= 0 ({atol:g})",
    )


def non_negative_float(text: str) -> float:
    """``text`` as a finite float >= 0; argparse reports the error otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value
