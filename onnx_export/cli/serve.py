"""``onnx-export serve``: a saved model on Triton, or an LLM folder OpenAI's way (--openai).

Without ``--openai`` a real Triton server runs until Ctrl-C; with it, a folder that
``onnx-export hf`` wrote for text generation is served on an OpenAI-compatible endpoint
(``onnx_export.serving.openai``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from types import FrameType

from onnx_export.cli._common import CommandError, Subcommands, UsageError, add_command
from onnx_export.cli.triton import add_serving_options, serving_options

__all__ = ["register"]


def register(commands: Subcommands) -> None:
    """Add ``serve MODEL.onnx|FOLDER --port P``."""
    parser = add_command(
        commands,
        "serve",
        help="serve a saved model on Triton Inference Server (PyTriton's bundled server)",
        description="Write a model repository for Triton's Python backend (onnx_export.load "
        "with ONNX Runtime inside, dynamic batching on when the model has a batch axis), "
        "start the tritonserver that nvidia-pytriton installs, and serve until Ctrl-C "
        "(or SIGTERM), then stop it with its backend processes. Call it with "
        "onnx_export.serving.TritonModel('HOST:PORT', NAME). With --openai, a folder "
        "written by onnx-export hf for text-generation is served instead on an "
        "OpenAI-compatible endpoint (/v1/models, /v1/completions, /v1/chat/completions, "
        "/health; every request in one continuous-batching loop), until SIGINT/SIGTERM, "
        "which finish the requests in flight. Exits 2 when the model or an option cannot "
        "be used, 1 when the server cannot start.",
        handler=_run,
    )
    parser.add_argument(
        "model",
        type=pathlib.Path,
        metavar="MODEL.onnx|FOLDER",
        help="a saved .onnx file, or a folder written by onnx-export hf",
    )
    parser.add_argument("--port", type=int, default=8000, help="the HTTP port (8000)")
    parser.add_argument(
        "--grpc-port", type=int, default=None, help="the gRPC port (default: PORT + 1)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (127.0.0.1; 0.0.0.0 for every interface)",
    )
    parser.add_argument(
        "--repository",
        type=pathlib.Path,
        metavar="REPO",
        help="write the repository here and keep it (default: a temporary folder)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the server (120)"
    )
    add_serving_options(parser)
    openai = parser.add_argument_group("OpenAI-compatible server (--openai)")
    openai.add_argument(
        "--openai",
        action="store_true",
        help="serve a text-generation folder on an OpenAI-compatible endpoint (no Triton); "
        "--name is the model's name in requests, --max-batch-size the rows decoded together",
    )
    openai.add_argument(
        "--max-waiting",
        type=int,
        default=64,
        metavar="N",
        help="rows that may wait for a batch slot (64); past that a request gets 429",
    )
    openai.add_argument(
        "--threads", type=int, default=None, help="ONNX Runtime's intra-op threads (all cores)"
    )
    openai.add_argument(
        "--kserve",
        metavar="STORAGE_URI",
        help="write a KServe InferenceService that runs this server in a container on the "
        "folder uploaded to STORAGE_URI (s3://, gs://, pvc://...), to --manifest, and exit",
    )
    openai.add_argument(
        "--image",
        default="onnx-export-openai:latest",
        help="the container image of the --kserve manifest (docs/deployment.md builds one)",
    )
    openai.add_argument(
        "--manifest",
        type=pathlib.Path,
        default=None,
        help="where --kserve writes (default: NAME.inferenceservice.yaml here)",
    )


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
    if args.openai:
        return _run_openai(args, echo)
    if args.kserve is not None:
        raise UsageError(
            "serve --kserve writes the manifest of the OpenAI-compatible server: add --openai "
            "(for Triton, onnx-export triton --kserve writes one beside the repository)."
        )
    from onnx_export.serving import (
        RepositoryError,
        ServerError,
        ServingOptions,
        TritonServer,
        write_triton_repository,
    )

    if args.grpc_port is None:
        args.grpc_port = args.port + 1
    for option in ("port", "grpc_port"):
        value = getattr(args, option)
        if not 0 < value < 65536:
            raise UsageError(f"--{option.replace('_', '-')} must be a TCP port, got {value}.")
    options = serving_options(args)
    assert isinstance(options, ServingOptions)  # built by serving_options
    with tempfile.TemporaryDirectory(prefix="onnx-export-serve-") as scratch:
        folder = args.repository or pathlib.Path(scratch) / "repository"
        try:
            repository = write_triton_repository(
                args.model, folder, name=args.name, options=options, backend="python"
            )
        except RepositoryError as e:
            raise UsageError(str(e)) from e
        server = TritonServer(folder, http_port=args.port, grpc_port=args.grpc_port, host=args.host)
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, _set_on_signal(stop))
        try:
            server.start(timeout=args.timeout)
            names = ", ".join(repository.models)
            echo(
                f"serving {names} at http://{server.http_url} and {server.grpc_url} (Ctrl-C stops)",
            )
            _wait(stop)
        except ServerError as e:
            raise CommandError(str(e)) from e
        finally:
            server.stop()
            signal.signal(signal.SIGTERM, previous)
    echo("stopped")
    return 0


def _run_openai(args: argparse.Namespace, echo: Callable[[str], None]) -> int:
    from onnx_export.hf._errors import CheckpointError, GenerationError

    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be a TCP port (0 for a free one), got {args.port}.")
    if args.max_batch_size < 1 or args.max_waiting < 0:
        raise UsageError(
            f"--max-batch-size must be >= 1 and --max-waiting >= 0, got {args.max_batch_size} "
            f"and {args.max_waiting}."
        )
    _check_openai_folder(args.model)
    name = args.name or args.model.resolve().name
    if args.kserve is not None:
        from onnx_export.serving._kserve import openai_manifest_text

        path = args.manifest or pathlib.Path(f"{name}.inferenceservice.yaml")
        text = openai_manifest_text(
            name,
            args.kserve,
            image=args.image,
            device=args.device,
            max_batch=args.max_batch_size,
            max_waiting=args.max_waiting,
        )
        path.write_text(text, encoding="utf-8")
        echo(f"wrote {path}")
        return 0
    from onnx_export.serving.openai import serve

    try:
        serve(
            args.model,
            host=args.host,
            port=args.port,
            name=name,
            max_batch=args.max_batch_size,
            max_waiting=args.max_waiting,
            threads=args.threads,
            providers=[args.device],
            announce=_flushed(echo),
        )
    except (CheckpointError, GenerationError) as e:
        raise UsageError(str(e)) from e
    except OSError as e:
        raise CommandError(str(e)) from e
    echo("stopped")
    return 0


#: The folder tasks ``serve --openai`` serves.
_OPENAI_TASKS = ("text-generation", "image-text-to-text")


def _check_openai_folder(path: pathlib.Path) -> None:
    """A file, or a folder ``onnx-export hf`` wrote for another task, is refused (exit 2)."""
    if path.is_file():
        raise UsageError(
            f"--openai serves a folder that `onnx-export hf` wrote for text generation, got "
            f"the file {os.fspath(path)!r}: serve a model file on Triton with `onnx-export "
            f"serve {os.fspath(path)}` (without --openai)."
        )
    try:
        task = json.loads((path / "onnx_export.json").read_text(encoding="utf-8")).get("task")
    except (OSError, ValueError, AttributeError):
        return  # missing or unreadable: the server's own check says so
    if isinstance(task, str) and task not in _OPENAI_TASKS:
        raise UsageError(
            f"{os.fspath(path)!r} holds a {task!r} model; --openai serves "
            f"{' and '.join(_OPENAI_TASKS)} folders. Serve it on Triton with `onnx-export "
            f"serve {os.fspath(path)}` (without --openai), or run it with onnx_export.hf's "
            "OrtModelFor... class for its task."
        )


def _flushed(echo: Callable[[str], None]) -> Callable[[str], None]:
    """``echo``, then stdout flushed (a parent process waits for the address line)."""

    def announce(line: str) -> None:
        echo(line)
        sys.stdout.flush()

    return announce


def _set_on_signal(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    def handler(number: int, frame: FrameType | None) -> None:
        stop.set()

    return handler


def _wait(stop: threading.Event) -> None:
    """Until SIGTERM sets ``stop`` or Ctrl-C interrupts (which ends the wait, not the run)."""
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        return
