"""``onnx-export serve``: serve a saved model on a real Triton server until Ctrl-C."""

from __future__ import annotations

import argparse
import pathlib
import signal
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
        "onnx_export.serving.TritonModel('HOST:PORT', NAME). Exits 2 when the model or an "
        "option cannot be used, 1 when the server cannot start.",
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


def _run(args: argparse.Namespace, echo: Callable[[str], None] = print) -> int:
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
