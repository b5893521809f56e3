"""``onnx-export triton``: write a Triton model repository for a saved model (no torch)."""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Callable

from onnx_export.cli._common import Subcommands, UsageError, add_command, writable_folder

__all__ = ["register", "add_serving_options", "serving_options"]


def register(commands: Subcommands) -> None:
    """Add ``triton MODEL.onnx|FOLDER -o REPO``."""
    parser = add_command(
        commands,
        "triton",
        help="write a Triton Inference Server model repository (config.pbtxt from the adapter)",
        description="Write REPO/NAME/config.pbtxt and REPO/NAME/1/model.onnx for Triton's ONNX "
        "Runtime backend: names, TYPE_* dtypes, dims (-1 for dynamic axes), max_batch_size and "
        "dynamic_batching when every input and output starts with one dynamic batch axis, "
        "instance_group, model_warmup, and the adapter spec (for onnx_export.serving."
        "TritonModel). A folder from `onnx-export hf` gives one model per ONNX file; a decoder "
        "with a key/value cache is left out (a LLaVA folder's vision encoder and token "
        "embedding are served; the output says what was not), and refused when nothing else "
        "is servable. Exits 2 when the input cannot be used.",
        handler=_run,
    )
    parser.add_argument(
        "model",
        type=pathlib.Path,
        metavar="MODEL.onnx|FOLDER",
        help="a saved .onnx file, or a folder written by onnx-export hf",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="REPO", help="the repository folder"
    )
    parser.add_argument(
        "--backend",
        choices=("onnxruntime", "python"),
        default="onnxruntime",
        help="Triton's ONNX Runtime backend (default), or its Python backend running "
        "onnx_export.load (what `onnx-export serve` uses)",
    )
    parser.add_argument(
        "--kserve",
        metavar="STORAGE_URI",
        help="also write REPO/NAME.inferenceservice.yaml, a KServe InferenceService that "
        "serves the repository uploaded to STORAGE_URI (s3://..., gs://..., pvc://...)",
    )
    add_serving_options(parser)


def add_serving_options(parser: argparse.ArgumentParser) -> None:
    """``--name``, ``--device``, ``--instances``, ``--max-batch-size``, ``--max-queue-delay-us``,
    ``--no-warmup``."""  # noqa: D205, D209 - a list of options
    parser.add_argument("--name", help="the model name (default: the file's or folder's name)")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="instance kind (cpu)"
    )
    parser.add_argument("--instances", type=int, default=1, metavar="N", help="model instances (1)")
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=16,
        metavar="N",
        help="the largest batch the dynamic batcher forms (16); models without a batch "
        "axis get max_batch_size 0",
    )
    parser.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=500,
        metavar="US",
        help="how long a request waits for others to join its batch (500)",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="leave out model_warmup (a request of zeros)"
    )


def serving_options(args: argparse.Namespace) -> object:
    """The :class:`~onnx_export.serving.ServingOptions` of the parsed options."""
    from onnx_export.serving import ServingOptions

    for option in ("instances", "max_batch_size"):
        if getattr(args, option) < 1:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} must be at least 1, got {getattr(args, option)}.")
    if args.max_queue_delay_us < 0:
        raise UsageError(f"--max-queue-delay-us must be >= 0, got {args.max_queue_delay_us}.")
    return ServingOptions(
        device=args.device,
        instances=args.instances,
        max_batch_size=args.max_batch_size,
        max_queue_delay_us=args.max_queue_delay_us,
        warmup=not args.no_warmup,
    )


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    from onnx_export.serving import RepositoryError, ServingOptions, write_triton_repository

    output = writable_folder(args.output, "--output")
    options = serving_options(args)
    assert isinstance(options, ServingOptions)  # built just above
    try:
        repository = write_triton_repository(
            args.model,
            output,
            name=args.name,
            options=options,
            backend=args.backend,
            kserve=args.kserve,
        )
    except RepositoryError as e:
        raise UsageError(str(e)) from e
    for name in repository.models:
        echo(f"wrote {repository.config_path(name)} ({args.backend} backend)")
    for file, why in repository.not_served:
        echo(f"not served: {file}: {why}")
    if repository.kserve_manifest is not None:
        echo(f"wrote {repository.kserve_manifest}")
    return 0
